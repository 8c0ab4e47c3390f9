#!/usr/bin/env bash
# One device call while the latency executor (src/cuda/lat.cu) is being built up: build (reusing the carried
# build-cuda/cuobj when its sources.sha matches), the executor-vs-frame-kernel test, depthdec bench on the SPEC §6
# batch-1/8 points and a short batch curve, and the PyTorch graph loop in the same call. Logs under $OUT.
#   OUT=/tmp/x dev/cuda/lat_iter.sh [steps]      steps: any of build quick bench torch tests (default all);
#   tlbuild (no GPU: only the timeline tool, from an existing build-cuda/libdepthdec.a; lat_ab.sh prebuild)
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/lat_iter}
mkdir -p "$OUT"
STEPS=${*:-build quick timeline bench torch tests}
has() { [[ " $STEPS " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=build-cuda
# the device tool brings back at most 8 files: at exit, the logs go into one archive beside timeline.md and the rest
pack_logs() { (cd "$OUT" && ls *.log >/dev/null 2>&1 && tar czf logs.tgz --remove-files *.log); }
[ "${LT_PACK:-1}" = 1 ] && trap pack_logs EXIT # LT_PACK=0: a caller collects the files itself
if [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/jansson.h ]; then
    for f in .debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
has tlbuild || nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if has build; then # CUDA objects prebuilt from these sources (lat_ab.sh prebuild: dev/cuda/stamp.sh) are kept
    if bash dev/cuda/stamp.sh check $B; then touch $B/cuobj/*.o; echo "reusing CUDA objects"; fi
    t0=$(date +%s)
    make CUDA=1 CUDA_ARCH=sm_90 BUILD=$B -j"$(nproc)" tests >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
fi
export DD_CUDA_TIMEOUT_S=${DD_CUDA_TIMEOUT_S:-3}
if has quick; then
    DD_TEST_QUICK=2 DD_TEST_ONLY=test_executors timeout 150 $B/test_cuda >"$OUT/quick.log" 2>&1
    echo "quick test_executors rc $?"; grep -vE "^\[ (RUN|  *OK) " "$OUT/quick.log" | tail -25
fi
if has tests; then
    for tq in ${TESTS:-test_executors:0 test_invariance:1 test_e2e:1}; do # name:DD_TEST_QUICK
        t=${tq%%:*} q=${tq#*:}
        if [ "$q" = 0 ]; then qe="env -u DD_TEST_QUICK"; else qe="env DD_TEST_QUICK=$q"; fi # the test reads any value as quick
        oe=$([ "$t" = all ] && echo "env -u DD_TEST_ONLY" || echo "env DD_TEST_ONLY=$t") # all: every test
        $qe $oe timeout ${TT:-240} $B/test_cuda >"$OUT/$t.log" 2>&1
        echo "$t rc $?"; grep -vE "^\[ (RUN|  *OK) " "$OUT/$t.log" | tail -30
    done
fi
# the timeline tool of a variant, unless one built from the same sources is there (lat_ab.sh prebuild builds it
# ahead with this function: `lat_iter.sh tlbuild`); the sha covers the CUDA and C sources, the tool and the flags
tl_build() { # $1 name, $2 nvcc flags
    local name=$1 flags=$2 tl_sha
    tl_sha=$( (bash dev/cuda/stamp.sh sha; echo "$flags"; sha256sum dev/cuda/lat_timeline.cu; cat src/*.c src/*/*.c | sha256sum) | sha256sum | cut -d' ' -f1)
    if [ -x $B/lat_timeline_$name ] && [ "$(cat $B/lat_timeline_$name.sha 2>/dev/null)" = "$tl_sha" ]; then
        echo "reusing lat_timeline_$name"
        return 0
    fi
    rm -f $B/lat_timeline_$name.sha
    { nvcc -O3 -arch=sm_90 -fmad=false --std=c++17 -lineinfo -Iinclude -Isrc -DDD_WITH_CUDA=1 -DDD_WITH_CPU=1 \
        -Xcompiler -fPIC $flags dev/cuda/lat_timeline.cu $B/libdepthdec.a -ljansson -lm -lcudart \
        -o $B/lat_timeline_$name >"$OUT/tl_build_$name.log" 2>&1 && echo "$tl_sha" >$B/lat_timeline_$name.sha; } ||
        { tail -20 "$OUT/tl_build_$name.log"; return 1; }
}
has tlbuild && { tl_build base "" || exit 1; }
if has timeline; then
    # variants: TL_VARIANTS="name:-DFLAG=1 ..." (lab experiments compiled into the timeline tool only)
    for var in ${TL_VARIANTS:-base:}; do
        tl_build "${var%%:*}" "${var#*:}" &
    done
    wait
    for var in ${TL_VARIANTS:-base:}; do
        name=${var%%:*}
        for cfg in ${TL_CFGS:-gpt:bf16:1}; do
            IFS=: read -r m w b <<<"$cfg"
            echo "### variant $name"
            timeout 60 $B/lat_timeline_$name $m $w $b 2>&1 | tee -a "$OUT/timeline.md"
        done
    done
fi
if has sass; then # code size of each device function of the latency kernel (instruction-cache footprint)
    cuobjdump -sass $B/cuobj/lat.o | awk '/Function : /{n=$3} /^ +\/\*[0-9a-f]{4}\*\//{c[n]++} END{for (k in c) printf "%8d B  %s\n", c[k]*16, k}' |
        sort -n | tail -25 | c++filt | cut -c1-140
fi
if has lines; then # SASS with source lines of the timeline build: where the code bytes are
    (cd /tmp && rm -f *.cubin && cuobjdump -xelf all "$OLDPWD/$B/lat_timeline_base" >/dev/null 2>&1; ls *.cubin | head -3)
    for f in /tmp/*sm_90*.cubin; do nvdisasm -g -c "$f" > "$OUT/lines.sass" 2>&1; done
    ls -la "$OUT/lines.sass"
fi
if has ncu; then # warp stall reasons of one frame of the latency kernel ("No Instruction" = instruction fetch)
    timeout 240 ncu --clock-control none --kernel-name regex:lt_kernel --launch-skip 5 --launch-count 1 \
        --section WarpStateStats --section SchedulerStats --section LaunchStats \
        $B/lat_timeline_base gpt bf16 1 >"$OUT/ncu.txt" 2>&1
    echo "ncu rc $?"; grep -E "Stall|stall|Warp Cycles|Issued|No Eligible|Active Warps|Registers|Instruction" "$OUT/ncu.txt" | head -40
fi
if has ncusrc; then # per-SASS-instruction stall samples of one frame (pair with lines.sass for source lines)
    timeout 300 ncu --clock-control none --kernel-name regex:lt_kernel --launch-skip 5 --launch-count 1 \
        --section SourceCounters --page source --csv --print-source sass \
        $B/lat_timeline_base ${NCU_CFG:-gpt bf16 1} >"$OUT/src.csv" 2>"$OUT/ncusrc.err"
    echo "ncu source rc $?"; ls -la "$OUT/src.csv"; head -3 "$OUT/src.csv" | cut -c1-400; tail -3 "$OUT/ncusrc.err"
fi
if has san; then
    for cfg in ${SAN_CFGS:-csm:bf16:1}; do
        IFS=: read -r m w b <<<"$cfg"
        DD_CUDA_TIMEOUT_S=100 timeout 300 compute-sanitizer --tool memcheck --show-backtrace device $B/lat_timeline_base $m $w $b >"$OUT/san.log" 2>&1
        echo "sanitizer $cfg rc $?"; grep -vE "^=========     (Host|Device) Frame:.*(libcuda|libcudart)" "$OUT/san.log" | head -40
    done
fi
if has bench; then
    : >"$OUT/bench.jsonl"
    for cfg in ${BENCH_CFGS:-gpt:bf16:1 gpt:q8:1 gpt:q4:1 gpt:bf16:8 csm:bf16:1 csm:q8:1 gpt:bf16:2 gpt:bf16:4 gpt:bf16:16}; do
        IFS=: read -r m w b <<<"$cfg"
        if timeout 90 $B/depthdec bench --backend cuda --synthetic $m --weights $w --batch $b --frames ${FRAMES:-50} \
            --json /tmp/one.json >>"$OUT/bench.log" 2>&1; then
            cat /tmp/one.json >>"$OUT/bench.jsonl"; echo >>"$OUT/bench.jsonl"
            python3 -c "import json;r=json.load(open('/tmp/one.json'));print(f\"  {r['model']:4} {r['weights']:5} B={r['batch']:<4} {r['ms_per_frame']:8.3f} ms/frame  {r['stream_frames_per_s']:8.0f} stream-frames/s  floor {r['floor_ms_per_frame']:.3f}\")"
        else
            echo "  bench $cfg FAILED"; tail -3 "$OUT/bench.log"
        fi
    done
fi
if has torch; then
    for m in ${TORCH_MODELS:-gpt csm}; do
        $B/depthdec export --synthetic $m --weights bf16 --out /tmp/dd_$m.safetensors >/dev/null 2>&1 &&
            timeout 200 python3 scripts/bench_torch.py bench /tmp/dd_$m.safetensors --name $m --batch ${TORCH_BATCH:-1} \
                --frames 20 --json "$OUT/torch.json" 2>&1 | tail -4
    done
fi
