#!/usr/bin/env bash
# The group-maximum sampler (dev/cuda/samp_gmax.patch) on the device without nvcc (carry build-ab/pre1 from
# `PRE_SIDE=dev/cuda/samp_gmax.patch prebuilt_ab.sh prebuild`, build-ab/stage, .debs): racecheck on test_sample
# (the block sampler under the CTA barrier: frame kernel, tp_sample) and on test_executors quick 3 (the latency
# executor's named barrier), the sampler alone on one SM (derisk/stage.cu built from the tree and from the patched
# tree: build-ab/stage/stage_{base,samp}), then memcheck on test_sample; $OUT/summary.txt and the logs.
#   OUT=$OUT bash dev/cuda/samp_san_call.sh
set -u
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=120
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
S=$OUT/summary.txt T0=$(date +%s)
log() { echo "$@ ($(($(date +%s) - T0)) s)" | tee -a "$S"; }
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
san() { # san TOOL TEST QUICK SECONDS
    DD_TEST_QUICK=$3 DD_TEST_ONLY=$2 timeout $4 compute-sanitizer --tool $1 build-ab/pre1/test_cuda >"$OUT/$1_$2.log" 2>&1
    log "$1 $2 (quick $3) rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/$1_$2.log" | tr '\n' ' ')"
}
san racecheck test_sample 1 80
san racecheck test_executors 3 150
for s in base samp; do
    timeout 30 build-ab/stage/stage_$s >"$OUT/stage_$s.txt" 2>&1
    log "stage $s rc $?: $(grep -E '\| (sample|sample_old|argmax) ' "$OUT/stage_$s.txt" | sed 's/   */ /g' | tr '\n' ' ')"
done
san memcheck test_sample 1 50
