#!/usr/bin/env bash
# One device call (2026-12-04): batches over 8 on the latency executor in groups (cu_launch_frame): the tests that
# cover it (quick), then depthdec bench --capacity for GPT and CSM dims bf16 (the batch curve, frame kernel above
# 32 streams). Carry build-cuda/{cuobj,obj,tobj} and .debs/.   OUT=$OUT bash dev/cuda/groups_call.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/groups}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
S=$OUT/summary.txt
log() { echo "$@" | tee -a "$S"; }
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
find build-cuda -type f -exec touch {} +
make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 tests >"$OUT/build.log" 2>&1
log "build rc $?"
B=build-cuda
for t in test_executors test_invariance test_e2e; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 200 $B/test_cuda >"$OUT/$t.log" 2>&1
    log "$t (quick) rc $?: $(grep -E 'PASSED|FAILED|n=20|n=11|batch of 12' "$OUT/$t.log" | tr '\n' ' ' | cut -c1-600)"
done
for m in gpt csm; do
    timeout 150 $B/depthdec bench --capacity --backend cuda --synthetic $m --max-batch 128 --json "$OUT/capacity_$m.json" 2>&1 |
        tee -a "$S"
done
log "# done $(date -u +%FT%TZ)"
