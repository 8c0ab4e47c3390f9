#!/usr/bin/env bash
# The device checks the session of 2026-12-04 afternoon left open (its closing note), as one call on the H200:
#   1. compute-sanitizer racecheck on test_executors at DD_TEST_QUICK=3 (two latency-executor cases; quick 2 outlasted
#      400 s) and on the device-API tests (issue 15)
#   2. Moshi depformer dims on cuda beside the PyTorch loop of scripts/bench_torch.py, same call (issue 17 point 5)
#   3. scripts/bench_hf.py at batches 1 and 8 (issue 15: B8 was last measured on the frame kernel)
# Carry build-cuda/{cuobj,obj,tobj} built here (make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda tests) and the
# untracked .debs/. Writes $OUT/summary.txt and $OUT/work.tgz (~8 min).   OUT=$OUT bash dev/cuda/next_call.sh
CALL=next source "$(dirname "$0")/call_env.sh"
DD_CUDA_TIMEOUT_S=250 DD_TEST_QUICK=3 DD_TEST_ONLY=test_executors timeout 280 \
    compute-sanitizer --tool racecheck $B/test_cuda >"$R/race_exec.log" 2>&1
log "racecheck test_executors (quick 3) rc $?: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' "$R/race_exec.log" | tr '\n' ' ')"
DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_device_api timeout 120 \
    compute-sanitizer --tool racecheck $B/test_cuda >"$R/race_dev.log" 2>&1
log "racecheck test_device_api (quick 2) rc $?: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' "$R/race_dev.log" | tr '\n' ' ')"
for w in bf16 q8; do
    timeout 60 $B/depthdec bench --backend cuda --synthetic moshi --weights $w --batch 1 --frames 30 --json /tmp/m.json \
        >/dev/null 2>&1 && cat /tmp/m.json >>"$OUT/moshi_bench.jsonl" && echo >>"$OUT/moshi_bench.jsonl"
    log "moshi $w B1: $(python3 -c "import json;print(json.load(open('/tmp/m.json'))['ms_per_frame'])" 2>&1) ms/frame"
done
timeout 60 $B/depthdec export --synthetic moshi --weights bf16 --out /tmp/dd_moshi.safetensors >/dev/null 2>&1
timeout 150 python3 scripts/bench_torch.py bench /tmp/dd_moshi.safetensors --name moshi --batch 1 8 --frames 20 \
    --json "$OUT/moshi_torch.json" >"$R/moshi_torch.log" 2>&1
log "moshi torch rc $?: $(tail -2 "$R/moshi_torch.log" | tr '\n' ' ')"
OUT=$R/devapi timeout 150 bash dev/cuda/devapi_check.sh python 2>&1 | tail -3 | tee -a "$S"
export PYTHONPATH=/tmp/ddsite:$PWD/python/src
timeout 200 python3 scripts/bench_hf.py --device cuda --frames 50 --json "$OUT/hf.json" >"$R/bench_hf.log" 2>&1
log "bench_hf rc $?"
tail -12 "$R/bench_hf.log" | tee -a "$S"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ)"
