#!/usr/bin/env bash
# The checks left open by the session of 2026-12-04 (its closing note), as one device call on the H200:
#   1. test_cuda test_read_bandwidth (0c86fae: bench's working-set floor on cuda, issue 16) and one cuda bench line
#   2. CSM dims bf16 at batches 1/2/4/8 (09b941f: B2-B8 back on the latency executor instead of the frame kernel)
#   3. bench --capacity on cuda for GPT and CSM dims bf16 (issue 14 point 4; docs/serving.md)
#   4. (RACE=1, the default) compute-sanitizer racecheck on test_executors (quick) with a long limit (it did not finish in 230 s)
# Carry build-cuda/{cuobj,obj,tobj} built here (make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda tests) and the
# untracked .debs/. Writes $OUT/summary.txt and $OUT/work.tgz.   OUT=$OUT bash dev/cuda/next_call.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/next}
R=$OUT/work
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
S=$OUT/summary.txt
: >"$S"
log() { echo "$@" | tee -a "$S"; }
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
find build-cuda -type f -exec touch {} +
make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 tests >"$R/build.log" 2>&1
log "build rc $?"
B=build-cuda
DD_TEST_ONLY=test_read_bandwidth timeout 60 $B/test_cuda >"$R/bw.log" 2>&1
log "test_read_bandwidth rc $?: $(grep -E 'read bandwidth|PASSED|FAILED' "$R/bw.log" | tr '\n' ' ')"
timeout 60 $B/depthdec bench --backend cuda --synthetic gpt --frames 20 2>&1 | grep -E "ms/frame|read bandwidth" | tee -a "$S"
for b in 1 2 4 8; do
    timeout 60 $B/depthdec bench --backend cuda --synthetic csm --batch $b --frames 20 --json /tmp/c.json >/dev/null 2>&1
    log "csm bf16 B$b: $(python3 -c "import json;print(json.load(open('/tmp/c.json'))['ms_per_frame'])" 2>&1) ms/frame"
done
for b in 2 4 16 32 64; do # the batch curve around the latency executor's limit (8)
    timeout 60 $B/depthdec bench --backend cuda --synthetic gpt --batch $b --frames 10 --json /tmp/g.json >/dev/null 2>&1
    log "gpt bf16 B$b: $(python3 -c "import json;print(json.load(open('/tmp/g.json'))['ms_per_frame'])" 2>&1) ms/frame"
done
for m in gpt csm; do
    timeout 150 $B/depthdec bench --capacity --backend cuda --synthetic $m --json "$OUT/capacity_$m.json" 2>"$R/cap_$m.err" |
        tee -a "$S"
done
[ "${RACE:-1}" = 1 ] && DD_CUDA_TIMEOUT_S=300 DD_TEST_QUICK=2 DD_TEST_ONLY=test_executors timeout 420 \
    compute-sanitizer --tool racecheck $B/test_cuda >"$R/race.log" 2>&1
[ "${RACE:-1}" = 1 ] && log "racecheck test_executors rc $?: $(grep -E 'RACECHECK SUMMARY' "$R/race.log")"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ)"
