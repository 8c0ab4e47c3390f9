# Sourced by call_env.sh (device calls) and the prebuilt-side scripts (prebuilt_ab.sh, tprobe_build.sh, tp_tl_run.sh):
# building a program of dev/cuda and a patched side, and the start of a call that runs binaries built here. Uses R
# (the log folder), B (the default build folder) and the functions log and el where the caller set them; else here:
# /tmp/prebuilt_logs, build-cuda, echo, "-".
: "${R:=/tmp/prebuilt_logs}" "${B:=build-cuda}"
mkdir -p "$R"
declare -F log >/dev/null || log() { echo "$@"; }
declare -F el >/dev/null || el() { echo "-"; }

# dev/cuda/$1.c linked against the library of the build folder $2 (default $B) into $2/$1; log in $R/build_$1.log.
# Returns 1 when it does not build (the folder's older program is removed, so it is never run in its place).
dev_prog() {
    local d=${2:-$B}
    cc -O2 -Iinclude "dev/cuda/$1.c" "$d/libdepthdec.a" -L/usr/local/cuda/lib64 -lcudart -lstdc++ -ljansson -lm \
        -lpthread -o "$d/$1" >>"$R/build_$1.log" 2>&1 || { rm -f "$d/$1"; log "$1 build failed ($d)"; return 1; }
}

# A side for an A/B: a copy of the tree at $1 with the patches $2... applied in order (patch -p1; a path relative to
# the tree or absolute), built like $B (the carried objects reused: only the patched files are rebuilt), with exec_ab
# linked against it. Returns 1 when a patch does not apply or the side does not build (its copied programs would be
# the base's); log in $R/build_<folder>.log, where ptxas serialising wgmma (C7518) is also said.
side_build() {
    local C=$1 root=$PWD rc f
    shift
    rm -rf "$C" && mkdir -p "$C"
    tar cf - --exclude=./.git --exclude=./.raysite --exclude=./build-ab . | (cd "$C" && tar xf -)
    for p in "$@"; do
        case $p in /*) f=$p ;; *) f=$root/$p ;; esac
        (cd "$C" && patch -p1 --forward --quiet <"$f") || { log "side $C: $p does not apply"; return 1; }
    done
    (cd "$C" && make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j"$(nproc)" ${MAKE_TARGET-tests}) \
        >"$R/build_$(basename "$C").log" 2>&1
    rc=$?
    log "side $C build ($*) rc $rc ($(el))"
    grep -q C7518 "$R/build_$(basename "$C").log" && log "side $C: ptxas serialises wgmma (C7518): not comparable"
    [ $rc = 0 ] && dev_prog exec_ab "$C/build-cuda"
}

# A side built here for a call without nvcc: side_build's copy of the tree (patches $3...) at /tmp/prebuilt_$1, its
# programs $2 (a list; dev/cuda/<name>.c ones linked against it first) stripped into build-ab/$1, the patches named
# in build-ab/$1/SIDE:   pre_side DIR "PROGRAMS" PATCH...
pre_side() {
    local dir=build-ab/$1 progs=$2 C=/tmp/prebuilt_$1 p
    shift 2
    rm -rf "$dir" && mkdir -p "$dir" && side_build "$C" "$@" || return 1
    for p in $progs; do
        if [ "$p" != exec_ab ] && [ -f "dev/cuda/$p.c" ]; then dev_prog "$p" "$C/build-cuda" || return 1; fi
        cp "$C/build-cuda/$p" "$dir/" || return 1
    done
    strip --strip-debug "$dir"/*
    echo "$*" >"$dir/SIDE"
    du -sh "$dir"
}

# On the device, for a call that runs binaries built here (no build): the CUDA runtime on the library path, the
# decoder's timeout, the carried .debs/ (cmocka, jansson) unpacked.
device_env() {
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5
    for f in .debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
}

# The start of such a call, `device_run NAME`: OUT (default /tmp/NAME) made, device_env, S = $OUT/summary.txt, T0 now,
# log() appending to S, and a first line with the date and the GPU.
device_run() {
    OUT=${OUT:-/tmp/$1}
    mkdir -p "$OUT"
    device_env
    S=$OUT/summary.txt T0=$(date +%s)
    log() { echo "$@" | tee -a "$S"; }
    log "# $1 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader)"
}

# The latency / throughput crossover: `xover_run EXE "model weights frames batches...|..." JSONL`: exec_ab EXE with
# both executors a batch (no frame kernel), its lines appended to JSONL, the faster executor a batch printed.
xover_run() {
    local exe=$1 x xs
    IFS='|' read -r -a xs <<<"$2"
    for x in "${xs[@]}"; do
        EXEC_AB_NOFRAME=1 timeout 120 "$exe" $x 2>>"$3.err" >>"$3" || echo "xover $x: exec_ab rc $?"
    done
    python3 dev/cuda/side_medians.py --xover "$3"
}

# Sides timed alternating: `ab_time JSONL ROUNDS "model weights frames batch|..." SIDE=EXE...`: ROUNDS rounds of each
# spec, each side's exec_ab (throughput executor only) in turn, its line tagged with the side and the spec.
ab_time() {
    local out=$1 rounds=$2 spec specs r se
    IFS='|' read -r -a specs <<<"$3"
    shift 3
    for spec in "${specs[@]}"; do
        for r in $(seq "$rounds"); do
            for se in "$@"; do
                EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 60 "${se#*=}" $spec 2>/dev/null | tail -1 |
                    sed "s/^{/{\"side\": ${se%%=*}, \"spec\": \"$spec\", /" >>"$out"
            done
        done
    done
}
