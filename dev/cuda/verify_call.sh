#!/usr/bin/env bash
# One device call that checks a merged tree on the H200 (2026-12-04 afternoon; final_call.sh's checks without its
# Qwen3-TTS bench and stage.cu, plus two looks at the latency kernel for the next session): test_cuda (all quick;
# executors and sampler unquick), compute-sanitizer memcheck (racecheck too when RACE_S=seconds) on test_executors,
# test_fixtures/test_backends with the cuda backend, the Python device-path tests, depthdec.hf's GPU tests,
# scripts/bench_hf.py at batches 1 and 8; with NCU=1 also lt_kernel's SASS (spills: where) and ncu's per-instruction stall
# samples of one GPT-dims frame (dev/cuda/lat_iter.sh ncusrc). Carry build-cuda/{cuobj,obj,tobj} and .debs/.
#   OUT=$OUT bash dev/cuda/verify_call.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/final}
R=$OUT/work
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5 PYTHONUNBUFFERED=1
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
S=$OUT/summary.txt
: >"$S"
log() { echo "$@" | tee -a "$S"; }
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 )) s"; }
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader)"
find build-cuda -type f -exec touch {} +
make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 tests >"$R/build.log" 2>&1
log "build rc $? ($(el))"
B=build-cuda
for tq in all:1 test_executors:0 test_sample:0; do
    t=${tq%%:*} q=${tq#*:}
    qe=$([ "$q" = 0 ] && echo "env -u DD_TEST_QUICK" || echo "env DD_TEST_QUICK=$q")
    oe=$([ "$t" = all ] && echo "env -u DD_TEST_ONLY" || echo "env DD_TEST_ONLY=$t")
    $qe $oe timeout 200 $B/test_cuda >"$R/cuda_$t.log" 2>&1
    log "test_cuda $tq rc $?: $(grep -E 'PASSED|FAILED' "$R/cuda_$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE|error" "$R/cuda_$t.log" | head -8 | tee -a "$S"
done
for tool in memcheck ${RACE_S:+racecheck}; do
    lim=$([ $tool = memcheck ] && echo 150 || echo "${RACE_S:-150}")
    DD_CUDA_TIMEOUT_S=$((lim - 20)) DD_TEST_QUICK=2 DD_TEST_ONLY=test_executors timeout $lim \
        compute-sanitizer --tool $tool $B/test_cuda >"$R/san_$tool.log" 2>&1
    log "compute-sanitizer $tool test_executors rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/san_$tool.log" | tr '\n' ' ') ($(el))"
done
for t in test_fixtures test_backends; do
    DD_TEST_QUICK=1 timeout 150 $B/$t >"$R/$t.log" 2>&1
    log "$t rc $?: $(grep -E 'PASSED|FAILED' "$R/$t.log" | tr '\n' ' ') ($(el))"
    grep -E "cuda" "$R/$t.log" | head -12 | tee -a "$S"
done
# the Python package with the cuda backend; the device-path tests, then depthdec.hf on the GPU
OUT=$R/devapi timeout 150 bash dev/cuda/devapi_check.sh python 2>&1 | tail -6 | tee -a "$S"
export PYTHONPATH=/tmp/ddsite:$PWD/python/src
(cd /tmp && timeout 200 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/python/tests/test_hf.py" >"$R/test_hf.log" 2>&1)
log "pytest test_hf.py rc $?: $(tail -1 "$R/test_hf.log") ($(el))"
grep -E "^(FAILED|ERROR|SKIPPED)" "$R/test_hf.log" | head -8 | tee -a "$S"
timeout 200 python3 scripts/bench_hf.py --device cuda --frames 50 --json "$OUT/hf.json" >"$R/bench_hf.log" 2>&1
log "bench_hf rc $? ($(el))"
tail -20 "$R/bench_hf.log" | tee -a "$S"
if [ "${NCU:-0}" = 1 ]; then
/usr/local/cuda/bin/cuobjdump -sass $B/cuobj/lat.o 2>/dev/null | gzip >"$OUT/lat_sass.gz"
log "sass: $(zcat "$OUT/lat_sass.gz" | grep -c . ) lines, $(zcat "$OUT/lat_sass.gz" | grep -cE 'STL|LDL') local-memory instructions ($(el))"
(OUT=$R/ncu TL_CFGS="gpt:bf16:1" LT_PACK=0 timeout 240 bash dev/cuda/lat_iter.sh timeline ncusrc >"$R/ncu_run.log" 2>&1)
[ -f "$R/ncu/src.csv" ] && gzip -c "$R/ncu/src.csv" >"$OUT/ncu_src.csv.gz"
log "ncu source: $(tail -3 "$R/ncu_run.log" | tr '\n' ' ' | cut -c1-200) ($(el))"
fi
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
