#!/usr/bin/env bash
# A/B of patches to the CUDA sources in one device call: the tree as it is ("base"), then each side in SIDES with
# its patches applied (patch -p1, comma-separated, applied to a fresh copy of the tree: the device's copy need not
# be a git checkout); each side built and run through lat_iter.sh (tests, per-op timeline). CUDA objects built
# here ahead of the call are reused when carried as build-ab/SIDE/cuobj (with sources.sha; scripts below). Per
# side, under $OUT/SIDE: summary.txt, timeline.md, logs.tgz (keep sides x 3 within the device tool's 8 files).
#   OUT=/tmp/x dev/cuda/lat_ab.sh "s:dev/cuda/a.patch n:dev/cuda/a.patch,dev/cuda/b.patch"
#   dev/cuda/lat_ab.sh prebuild "s:..."     (here: build-ab/SIDE/cuobj for base and each side, nvcc only; AB_BASE=0:
#                                           the sides without base)
#   env: TESTS (default "test_executors:2 test_e2e:1"), BASE_TESTS (default "all:1"),
#        TL_CFGS (default "gpt:bf16:1 csm:bf16:1 gpt:bf16:8")
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/lat_ab}
mode=run
[ "${1:-}" = prebuild ] && { mode=prebuild; shift; }
SIDES="base: ${1:-}"
[ $mode = prebuild ] && [ "${AB_BASE:-1}" = 0 ] && SIDES=${1:-} # prebuild the named sides only
tree_for() { # $1 side, $2 patches: a copy of the tree under $W/$1 with the patches applied
    local d=$W/$1
    rm -rf "$d"; mkdir -p "$d"
    tar cf - --exclude=./build-ab --exclude='./build-*' --exclude=./.git --exclude=./.venv . | (cd "$d" && tar xf -)
    [ -d build-idcu ] && ln -s "$ROOT/build-idcu" "$d/build-idcu"
    local p
    for p in ${2//,/ }; do (cd "$d" && patch -p1 --forward --quiet <"$ROOT/$p") || { echo "lat_ab: $p does not apply"; return 1; }; done
}
W=$(mktemp -d)
if [ $mode = prebuild ]; then
    for sp in $SIDES; do
        side=${sp%%:*} pats=${sp#*:}
        tree_for "$side" "$pats" || exit 1
        # the CUDA objects, then (the C objects taken from build-cuda/obj) the library and the timeline tool, by
        # lat_iter.sh's own build step (its sha says on the device whether the tool is still current)
        (cd "$W/$side" && make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda $(ls src/cuda/*.cu | sed 's|src/cuda/\(.*\)\.cu|build-cuda/cuobj/\1.o|') >build.log 2>&1 &&
            bash dev/cuda/stamp.sh write && mkdir -p "$ROOT/build-ab/$side" && rm -rf "$ROOT/build-ab/$side/cuobj" &&
            cp -r build-cuda/cuobj "$ROOT/build-ab/$side/" && echo "prebuilt $side" &&
            { [ ! -d "$ROOT/build-cuda/obj" ] || cp -rp "$ROOT/build-cuda/obj" build-cuda/; } &&
            make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda build-cuda/libdepthdec.a >>build.log 2>&1 &&
            OUT="$W/$side/tl" LT_PACK=0 bash dev/cuda/lat_iter.sh tlbuild >>build.log 2>&1 &&
            cp -p build-cuda/lat_timeline_base build-cuda/lat_timeline_base.sha "$ROOT/build-ab/$side/" &&
            echo "prebuilt $side: lat_timeline") || { echo "prebuild $side failed"; tail -20 "$W/$side/build.log"; } &
    done
    wait
    rm -rf "$W"
    exit 0
fi
mkdir -p "$OUT"
for sp in $SIDES; do
    side=${sp%%:*} pats=${sp#*:}
    tree_for "$side" "$pats" || continue
    mkdir -p "$OUT/$side" "$W/$side/build-cuda"
    [ -d "build-ab/$side/cuobj" ] && cp -r "build-ab/$side/cuobj" "$W/$side/build-cuda/"
    cp build-ab/"$side"/lat_timeline_base* "$W/$side/build-cuda/" 2>/dev/null # its sha decides whether it is reused
    [ -d build-cuda/obj ] && cp -r build-cuda/obj "$W/$side/build-cuda/" # C objects: the same for every side
    tests=$([ "$side" = base ] && echo "${BASE_TESTS:-all:1}" || echo "${TESTS:-test_executors:2 test_e2e:1}")
    (cd "$W/$side" && OUT="$OUT/$side" TESTS="$tests" TL_CFGS="${TL_CFGS:-gpt:bf16:1 csm:bf16:1 gpt:bf16:8}" \
        bash dev/cuda/lat_iter.sh build tests timeline >"$OUT/$side/summary.txt" 2>&1)
    echo "== $side ($pats)"
    grep -E "reusing|build:|rc [0-9]|PASSED|FAILED|ms/frame|^\| (sample|attention|qkv|out|fc1|fc2|head)" "$OUT/$side/summary.txt" | head -40
done
rm -rf "$W"
