#!/usr/bin/env bash
# Ray Serve on the H200 (issue 18 point 3: the load test with the cuda backend), one device call.
# Ray is not installed on the GPU machine and a device call has no network: ray[serve] 2.60.0 and its dependencies
# that the machine lacks travel as one archive of the unpacked wheels, .raysite/raysite.tar.xz (~48 MB; made here by
# dev/cuda/raysite.sh, git-ignored through .git/info/exclude), named in the call's carry.
#   1. the package built with the cuda backend (DEPTHDEC_CUDA=1) into /tmp/ddsite, ray unpacked into /tmp/raysite
#   2. python -m depthdec.serve synthetic:gpt:bf16 --backend cuda, then scripts/serve_load.py --check at several
#      stream counts (10 s each), JSON lines into $OUT/serve_load.jsonl
#   3. the Serve tests (python/tests/test_serve.py: cpu replicas, the killed-replica case) with this machine's Ray
#   OUT=$OUT bash dev/cuda/serve_call.sh      (carry .raysite and build-cuda/{cuobj,obj,tobj}; ~5 min)
CALL=serve source "$(dirname "$0")/call_env.sh"
py_package || exit 1
ray_site
log "$(python3 -c 'import ray, ray.serve, websockets, depthdec; print("ray", ray.__version__, "backends", depthdec.available_backends())' 2>&1 | tail -1)"
for M in gpt csm; do
    python3 -m depthdec.serve synthetic:$M:bf16 --backend cuda --max-batch 512 --batch-wait-ms 5 --port 8000 \
        >"$R/server_$M.log" 2>&1 &
    SP=$!
    for i in $(seq 90); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/info', timeout=1)" 2>/dev/null && break
        kill -0 $SP 2>/dev/null || { log "server $M exited: $(tail -3 "$R/server_$M.log" | tr '\n' ' ')"; break; }
        sleep 1
    done
    log "server $M up after ~$i s ($(el)): $(python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/info').read().decode()[:160])" 2>&1 | tail -1)"
    if [ $M = gpt ]; then NS="16 64 128 256"; else NS="16 48"; fi
    for n in $NS; do
        timeout 60 python3 scripts/serve_load.py --model synthetic:$M:bf16 --streams $n --seconds 10 --check \
            >"$R/load_${M}_$n.json" 2>"$R/load_${M}_$n.err"
        rc=$?
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['model']=sys.argv[2]; print(json.dumps(d))" \
            "$R/load_${M}_$n.json" "synthetic:$M:bf16 cuda" >>"$OUT/serve_load.jsonl" 2>/dev/null
        log "$M streams $n rc $rc ($(el)): $(cat "$R/load_${M}_$n.json" 2>/dev/null | head -c 400)"
    done
    kill $SP 2>/dev/null
    wait $SP 2>/dev/null
    python3 -c "import ray; ray.init(address='auto', logging_level='ERROR'); from ray import serve; serve.shutdown()" \
        >/dev/null 2>&1
    ray_stop=$(python3 -c "import sys; sys.argv=['ray','stop','--force']; from ray.scripts.scripts import main; main()" 2>&1 | tail -1)
    log "ray stop: $ray_stop"
done
DD_TEST_ONLY= timeout 120 $B/test_fixtures >"$R/test_fixtures.log" 2>&1
log "test_fixtures (cuda included) rc $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/test_fixtures.log" | tr '\n' ' ')"
(cd /tmp && timeout 200 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/python/tests/test_serve.py") \
    >"$R/pytest_serve.log" 2>&1
log "pytest test_serve rc $? ($(el)): $(tail -1 "$R/pytest_serve.log")"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ)"
