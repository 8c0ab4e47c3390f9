#!/usr/bin/env python3
"""depthdec.serve on a Ray cluster of two nodes, on one host: the multi-node path without a second machine.

Ray's own test helper (ray.cluster_utils.Cluster) starts a head node and a second node (each its own raylet, object
store and resources) on this host; `python -m depthdec.serve MODEL --address CLUSTER --replicas 2` then runs the app
with one replica per node (each node offers one CPU and a replica takes one), the replicas' nodes are read back from
Ray's state API, and `scripts/serve_load.py --check` drives streams through the Serve proxy and compares every answer
with a decode in its own process. One JSON object is printed: the nodes, where the replicas run, and the load test.

    python3 scripts/serve_two_nodes.py [--model synthetic:tiny-gpt:bf16] [--streams 8] [--seconds 10]

On real machines the same application runs after `ray start --head` on one and `ray start --address HEAD:6379` on
the others, with `--address auto` (docs/serving.md, "Beyond one machine").
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="synthetic:tiny-gpt:bf16")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--port", type=int, default=0, help="the Serve proxy's port (default: a free one)")
    a = ap.parse_args()
    if not a.port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            a.port = s.getsockname()[1]
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.state import list_actors

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=0)
    cluster.wait_for_nodes()
    server = None
    try:
        env = dict(os.environ, RAY_ADDRESS=cluster.address)
        server = subprocess.Popen([sys.executable, "-m", "depthdec.serve", a.model, "--address", cluster.address,
                                   "--replicas", "2", "--port", str(a.port),
                                   # both nodes are on this host: a proxy on each would bind the same port
                                   "--proxy-location", "HeadOnly"], env=env)
        info, t0 = None, time.time()
        while time.time() - t0 < 180:
            if server.poll() is not None:
                sys.exit("serve_two_nodes: the server exited with %d" % server.returncode)
            try:
                info = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/info" % a.port, timeout=5).read())
                break
            except Exception:
                time.sleep(1)
        if info is None:
            sys.exit("serve_two_nodes: no answer from /info within 180 s")
        ray.init(address=cluster.address, logging_level="ERROR")
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        replicas, t0 = [], time.time()
        while time.time() - t0 < 60:  # Ray's state API can lag the app's readiness on a loaded host
            replicas = [x.node_id for x in list_actors(filters=[("state", "=", "ALIVE")], detail=True)
                        if "DepthDecoder" in (x.class_name or "")]
            if len(replicas) >= 2:
                break
            time.sleep(1)
        load = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "serve_load.py"),
                               "--model", a.model, "--url", "ws://127.0.0.1:%d/stream" % a.port,
                               "--streams", str(a.streams), "--seconds", str(a.seconds), "--check"],
                              capture_output=True, text=True, timeout=a.seconds + 240)
        if load.returncode != 0:
            sys.exit("serve_two_nodes: the load test failed (%d): %s" % (load.returncode, load.stderr[-2000:]))
        out = {"nodes": len(nodes), "replica_nodes": sorted(set(replicas)), "replicas": len(replicas),
               "replicas_on_distinct_nodes": len(set(replicas)), "backend": info["backend"],
               "load": json.loads(load.stdout.strip().splitlines()[-1])}
        print(json.dumps(out))
        return 0 if len(set(replicas)) == 2 else 1
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        try:
            ray.shutdown()
        except Exception:
            pass
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
