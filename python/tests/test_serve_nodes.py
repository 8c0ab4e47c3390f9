"""depthdec.serve across two Ray nodes (scripts/serve_two_nodes.py, short form): a head and a second node on this host
(ray.cluster_utils.Cluster), one replica on each, streams through the Serve proxy compared frame by frame with the
library's own decode."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="ray[serve] not installed (pip install 'ray[serve]==2.60.0')")
pytest.importorskip("websockets", reason="websockets not installed")

REPO = Path(__file__).resolve().parents[2]


def test_two_nodes():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "serve_two_nodes.py"), "--streams", "4", "--seconds",
                        "3"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(json.dumps(out))
    assert out["nodes"] == 2 and out["replicas"] == 2 and out["replicas_on_distinct_nodes"] == 2
    load = out["load"]
    # every stream round at least twice: how many frames depends on the host's load, not a speed check
    assert load["lost"] == 0 and load["errors"] == 0 and load["wrong"] == 0 and load["frames"] >= 8
