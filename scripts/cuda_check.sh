#!/usr/bin/env bash
# The one script run on the GPU machine (NVIDIA H200): build with CUDA, run every test, compute-sanitizer memcheck,
# initcheck and racecheck on test_cuda, `depthdec bench` on the cuda backend (SPEC §6 configurations and a latency-vs-batch
# curve), the PyTorch comparison on the same safetensors files, and the plot. Everything is logged under $OUT
# (default /tmp/cuda_check): check.log, bench.jsonl, torch.json, latency.png, summary.txt.
#
#   OUT=/tmp/x scripts/cuda_check.sh [steps]     steps: any of build tests sanitize bench torch plot (default all)
#
# Dependencies the machine may lack (jansson, cmocka) are unpacked from .debs/*.deb when present (carry .debs).
# A prebuilt build-cuda/cuobj (made here with the same nvcc) is reused when build-cuda/cuobj/sources.sha matches the sources;
# otherwise make recompiles it (frame.cu takes ~2 minutes).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cuda_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
STEPS=${*:-build tests sanitize bench torch plot}
LOG=$OUT/check.log
B=build-cuda
has() { [[ " $STEPS " == *" $1 "* ]]; }
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
has build && : >"$OUT/summary.txt"

if [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/jansson.h ]; then
    if ls .debs/*.deb >/dev/null 2>&1; then
        for f in .debs/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
fi
say "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1;
  uname -r; nproc; } 2>&1 | tee -a "$LOG"

src_sha() { # what the CUDA objects are made of
    { cat src/cuda/*.cu src/cuda/*.cuh src/backend.h src/kernels.h src/model/model.h src/sample.h src/util.h \
        include/depthdec.h; grep -E "NVFLAGS|NVCC|CUDA_ARCH" Makefile; } | sha256sum | cut -d' ' -f1
}
if has build; then
    say "build"
    if [ -f $B/cuobj/sources.sha ] && [ "$(cat $B/cuobj/sources.sha)" = "$(src_sha)" ]; then
        touch $B/cuobj/*.o
        echo "reusing prebuilt CUDA objects" | tee -a "$LOG"
    fi
    if ! make CUDA=1 CUDA_ARCH=sm_90 BUILD=$B -j"$(nproc)" tests >>"$LOG" 2>&1; then
        summary "BUILD FAILED"; tail -30 "$LOG"; exit 1
    fi
    grep -E "warning|error" "$LOG" | grep -v "^make" | head -20
    make -j"$(nproc)" >>"$LOG" 2>&1 && summary "plain make (no CUDA) builds" || summary "plain make FAILED"
fi

if has tests; then
    export DD_CUDA_TIMEOUT_S=5
    say "test_cuda"
    timeout ${CUDA_TEST_TIMEOUT:-420} $B/test_cuda >"$OUT/test_cuda.log" 2>&1
    rc=$?
    cat "$OUT/test_cuda.log" >>"$LOG"
    grep -vE "^\[ (RUN|  *OK) " "$OUT/test_cuda.log" | tail -40
    summary "test_cuda: rc $rc, $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test_cuda.log" | tr '\n' ' ')"
    say "the other suites (DD_TEST_QUICK=1: their GPT/CSM-dims ref runs take minutes)"
    others=${OTHER_TESTS:-$(ls $B/test_* | grep -v test_cuda)}
    (DD_TEST_QUICK=1 timeout ${OTHER_TIMEOUT:-300} bash tests/run_all.sh $B $others) \
        >"$OUT/tests.log" 2>&1
    grep -E "FAIL|cuda|^tests:|^programs" "$OUT/tests.log" | tail -40 | tee -a "$LOG"
    summary "other suites: $(tail -1 "$OUT/tests.log")"
    cat "$OUT/tests.log" >>"$LOG"
    rm -f "$OUT/tests.log" "$OUT/test_cuda.log"
fi

if has sanitize; then
    # memcheck and initcheck: every quick test; racecheck (far slower): the linear schedules, and whole frames of
    # the end-to-end test at DD_TEST_QUICK=2 (one weight type per block kind, 2 streams). Runs: tool:test[:quick]
    for run in ${SAN_RUNS:-memcheck:all initcheck:all racecheck:test_linear racecheck:test_e2e:2}; do
        tool=${run%%:*} rest=${run#*:}
        only=${rest%%:*} quick=1
        [ "$rest" != "$only" ] && quick=${rest#*:}
        say "compute-sanitizer $tool on test_cuda (DD_TEST_QUICK=$quick cases: $only)"
        [ "$only" = all ] && only=
        DD_TEST_QUICK=$quick DD_TEST_ONLY="$only" DD_CUDA_TIMEOUT_S=600 timeout ${SAN_TIMEOUT:-200} compute-sanitizer \
            --tool $tool --error-exitcode 9 $B/test_cuda >"$OUT/san.log" 2>&1
        rc=$?
        tail -12 "$OUT/san.log" | tee -a "$LOG"
        summary "compute-sanitizer $tool ($only): rc $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/san.log" | tr '\n' ' ')"
        cat "$OUT/san.log" >>"$LOG"
        rm -f "$OUT/san.log"
    done
fi

if has bench; then
    say "bench"
    : >"$OUT/bench.jsonl"
    bench() { # model weights batch frames
        if timeout 120 $B/depthdec bench --backend cuda --synthetic $1 --weights $2 --batch $3 --frames $4 \
            --json /tmp/dd_one.json >>"$LOG" 2>&1; then
            cat /tmp/dd_one.json >>"$OUT/bench.jsonl"
            python3 -c "import json;r=json.load(open('/tmp/dd_one.json'));print(f\"  {r['model']:4} {r['weights']:5} B={r['batch']:<4} {r['ms_per_frame']:8.3f} ms/frame  floor {r['floor_ms_per_frame']:.3f}  ratio {r['ratio_to_floor']:.2f}  read {r['read_GBps']:.0f} GB/s\")" | tee -a "$LOG"
        else
            echo "  bench $* FAILED" | tee -a "$LOG"
        fi
    }
    curve="1 2 4 8 16 32 64 128 256 512"
    [ "${BENCH_SET:-full}" = short ] && curve="1 4 16 64 256 512"
    curve=${BENCH_CURVE:-$curve}
    for b in $curve; do bench gpt bf16 $b $([ $b -le 64 ] && echo 100 || echo 30); done
    bench gpt q8 1 100
    bench gpt q4 1 100
    bench csm bf16 1 100
    bench csm bf16 256 20
    if [ "${BENCH_SET:-full}" = full ]; then
        bench gpt f16 1 50
        bench gpt q8 256 20
        bench csm q8 1 50
    fi
fi

if has torch; then
    say "PyTorch (same safetensors files)"
    rm -f "$OUT/torch.json"
    for m in gpt csm; do
        $B/depthdec export --synthetic $m --weights bf16 --out /tmp/dd_$m.safetensors >>"$LOG" 2>&1 &&
            timeout 200 python3 scripts/bench_torch.py bench /tmp/dd_$m.safetensors --name $m --batch 1 256 \
                --frames 20 --json "$OUT/torch.json" 2>&1 | tee -a "$LOG"
    done
fi

if has plot; then
    python3 scripts/bench_torch.py plot "$OUT/bench.jsonl" "$OUT/torch.json" "$OUT/latency.png" 2>&1 | tee -a "$LOG"
    python3 scripts/bench_torch.py table "$OUT/bench.jsonl" "$OUT/torch.json" | tee "$OUT/table.md"
fi
say "done"
cat "$OUT/summary.txt"
