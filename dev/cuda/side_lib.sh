# Sourced by call_env.sh (device calls) and prebuilt_ab.sh (here): building a program of dev/cuda and a patched side.
# Needs R (the log folder), B (the default build folder) and the functions log and el from the caller.

# dev/cuda/$1.c linked against the library of the build folder $2 (default $B) into $2/$1; log in $R/build_$1.log.
# Returns 1 when it does not build (the folder's older program is removed, so it is never run in its place).
dev_prog() {
    local d=${2:-$B}
    cc -O2 -Iinclude "dev/cuda/$1.c" "$d/libdepthdec.a" -L/usr/local/cuda/lib64 -lcudart -lstdc++ -ljansson -lm \
        -lpthread -o "$d/$1" >>"$R/build_$1.log" 2>&1 || { rm -f "$d/$1"; log "$1 build failed ($d)"; return 1; }
}

# A side for an A/B: a copy of the tree at $1 with the patches $2... applied in order (patch -p1), built like $B
# (the carried objects reused: only the patched files are rebuilt), with exec_ab linked against it. Returns 1 when a
# patch does not apply or the side does not build (its copied programs would be the base's); log in
# $R/build_<folder>.log.
side_build() {
    local C=$1 root=$PWD rc
    shift
    rm -rf "$C" && mkdir -p "$C"
    tar cf - --exclude=./.git --exclude=./.raysite --exclude=./build-ab . | (cd "$C" && tar xf -)
    for p in "$@"; do
        (cd "$C" && patch -p1 --forward --quiet <"$root/$p") || { log "side $C: $p does not apply"; return 1; }
    done
    (cd "$C" && make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j"$(nproc)" ${MAKE_TARGET-tests}) \
        >"$R/build_$(basename "$C").log" 2>&1
    rc=$?
    log "side $C build ($*) rc $rc ($(el))"
    [ $rc = 0 ] && dev_prog exec_ab "$C/build-cuda"
}
