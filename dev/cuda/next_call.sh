#!/usr/bin/env bash
# The device checks the session of 2026-12-04 evening left open (its closing note), as one call on the H200:
#   1. test_cuda's device-API tests with the new cases (n = 60 on the frame kernel: the crossover moved to 48, so
#      n = 20 no longer reached it) and compute-sanitizer racecheck on test_device_api at DD_TEST_QUICK=3 (the
#      latency executor only, n = 3; quick 2 did not finish in 120 s)
#   2. test_fixtures with cuda (the Kyutai MLX fixtures of issue 17 have not run on cuda yet)
#   3. Ray Serve on the H200: python/tests/test_serve.py (the killed-replica case included) with the carried Ray, and
#      CSM dims through the server with --check on the server's backend, per-frame messages and list messages
#      (serve_load.py --mux: 16-32 streams per connection, past the ~450 frames/s of per-frame messages)
# Carry .raysite (dev/cuda/raysite.sh; ~56 MB, so no build objects: the library is built there, ~50 s) and the
# untracked .debs/. Writes $OUT/summary.txt and $OUT/work.tgz (~6 min).   OUT=$OUT bash dev/cuda/next_call.sh
CALL=next source "$(dirname "$0")/call_env.sh"
for t in test_device_api test_device_capture; do
    DD_CUDA_TIMEOUT_S=60 DD_TEST_ONLY=$t timeout 120 $B/test_cuda >"$R/$t.log" 2>&1
    log "$t rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE|n=60" "$R/$t.log" | head -6 | tee -a "$S"
done
timeout 120 $B/test_fixtures >"$R/test_fixtures.log" 2>&1 # the Kyutai MLX fixtures (issue 17) on cuda too
log "test_fixtures rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_fixtures.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/test_fixtures.log" | head -6 | tee -a "$S"
DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=3 DD_TEST_ONLY=test_device_api timeout 200 \
    compute-sanitizer --tool racecheck $B/test_cuda >"$R/race_dev.log" 2>&1
log "racecheck test_device_api (quick 3) rc $?: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' "$R/race_dev.log" | tr '\n' ' ') ($(el))"
py_package || exit 1
ray_site
(cd /tmp && timeout 200 python3 -m pytest -v -rs -p no:cacheprovider "$OLDPWD/python/tests/test_serve.py") \
    >"$R/pytest_serve.log" 2>&1
log "pytest test_serve rc $? ($(el)): $(tail -1 "$R/pytest_serve.log")"
grep -E "PASSED|FAILED|ERROR|killed" "$R/pytest_serve.log" | head -12 | tee -a "$S"
python3 -m depthdec.serve synthetic:csm:bf16 --backend cuda --max-batch 512 --batch-wait-ms 5 --port 8000 \
    >"$R/server_csm.log" 2>&1 &
SP=$!
for i in $(seq 120); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/info', timeout=1)" 2>/dev/null && break
    kill -0 $SP 2>/dev/null || break
    sleep 1
done
for nm in "16 1" "32 1" "64 16" "256 32"; do # streams, streams per connection (list messages: --mux)
    set -- $nm
    timeout 60 python3 scripts/serve_load.py --model synthetic:csm:bf16 --streams $1 --mux $2 --seconds 10 --check \
        >"$R/load_csm_$1_$2.json" 2>"$R/load_csm_$1_$2.err"
    log "csm streams $1 mux $2 rc $? ($(el)): $(head -c 400 "$R/load_csm_$1_$2.json")"
done
kill $SP 2>/dev/null
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ)"
