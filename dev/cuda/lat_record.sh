#!/usr/bin/env bash
# One device call that records a revision of the latency executor: build, the CUDA tests, compute-sanitizer on the
# executor test, the per-op timeline, depthdec bench with the PyTorch graph loop in the same call, and (when
# build-idcu/depthdec-old, an older revision's CLI, was carried) the byte identity of decoded outputs against it.
# Keeps at most 8 files under $OUT (the device tool's limit): summary.txt, tests.log, san.log, timeline.md,
# bench.jsonl, torch.json, identity.txt, build.log.
#   OUT=/tmp/x dev/cuda/lat_record.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/lat_record}
W=$(mktemp -d)
export LT_PACK=0 # this script picks the files it keeps
mkdir -p "$OUT"
{
    OUT=$W bash dev/cuda/lat_iter.sh build 2>&1
    cp "$W/build.log" "$OUT/" 2>/dev/null
    B=build-cuda
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5
    for tq in ${TESTS:-all:1 test_executors:0}; do # name:DD_TEST_QUICK (0 = full; the test reads any value as quick)
        t=${tq%%:*} q=${tq#*:}
        qe=$([ "$q" = 0 ] && echo "env -u DD_TEST_QUICK" || echo "env DD_TEST_QUICK=$q")
        oe=$([ "$t" = all ] && echo "env -u DD_TEST_ONLY" || echo "env DD_TEST_ONLY=$t")
        $qe $oe timeout 300 $B/test_cuda >>"$OUT/tests.log" 2>&1
        echo "test_cuda $tq rc $?"
    done
    grep -E "PASSED|FAILED|codes identical|rc [0-9]" "$OUT/tests.log" | tail -12
    for tool in memcheck racecheck; do
        DD_CUDA_TIMEOUT_S=120 DD_TEST_QUICK=2 DD_TEST_ONLY=test_executors timeout 240 \
            compute-sanitizer --tool $tool $B/test_cuda >>"$OUT/san.log" 2>&1
        echo "compute-sanitizer $tool (test_executors quick) rc $?"
    done
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/san.log" | tail -6
    OUT=$W TL_CFGS="${TL_CFGS:-gpt:bf16:1 csm:bf16:1 gpt:bf16:8}" bash dev/cuda/lat_iter.sh timeline >/dev/null 2>&1
    cp "$W/timeline.md" "$OUT/"; grep -E "ms/frame" "$OUT/timeline.md"
    OUT=$W FRAMES=${FRAMES:-50} bash dev/cuda/lat_iter.sh bench 2>&1 | grep -v "^$"
    cp "$W/bench.jsonl" "$OUT/"
    OUT=$OUT bash dev/cuda/lat_iter.sh torch 2>&1 | tail -8
    if [ -x build-idcu/depthdec-old ]; then
        export LD_LIBRARY_PATH=$PWD/build-idcu:$LD_LIBRARY_PATH
        { scripts/identity.sh run build-idcu/depthdec-old $W/id-old --backend cuda --set ${ID_SET:-tiny} >/dev/null &&
            scripts/identity.sh run $B/depthdec $W/id-new --backend cuda --set ${ID_SET:-tiny} >/dev/null &&
            scripts/identity.sh compare $W/id-old $W/id-new; echo "identity rc $?"; } >"$OUT/identity.txt" 2>&1
        tail -3 "$OUT/identity.txt"; grep -c "equal" "$OUT/identity.txt"
    fi
} 2>&1 | tee "$OUT/summary.txt"
