#!/usr/bin/env bash
# Whether a change leaves the device code as it was: the SASS of every src/cuda/*.cu (the Makefile's nvcc flags;
# tput.cu for sm_90a) of the working tree against revision BASE (default HEAD), compared object by object with the
# addresses and the path hash of internal symbols stripped. A refactor of CUDA code whose SASS is identical needs no device test (the standing rule; used
# for cu_softmax2, 2026-12-06). No GPU needed; nvdisasm: $NVDISASM, else on PATH or in the CUDA toolkit (this
# machine's toolkit lacks it: `python3 -m venv /tmp/nv && /tmp/nv/bin/pip install nvidia-cuda-nvdisasm`, then
# NVDISASM=/tmp/nv/lib/python3.11/site-packages/nvidia/cu13/bin/nvdisasm).
#   bash dev/cuda/sass_same.sh [BASE]     (exit 0: all identical; 1: some object differs; 2: a build failed)
set -u -o pipefail
cd "$(dirname "$0")/../.."
BASE=${1:-HEAD}
ND=${NVDISASM:-$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)}
[ -x "$ND" ] || { echo "sass_same: no nvdisasm (set NVDISASM)" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/base" && git archive "$BASE" src include | tar xf - -C "$W/base" || exit 2
dump() { # dump TREE OUT
    local f b arch
    mkdir -p "$2"
    for f in "$1"/src/cuda/*.cu; do
        b=$(basename "$f" .cu)
        arch="-gencode=arch=compute_90,code=sm_90"
        [ "$b" = tput ] && arch="-gencode=arch=compute_90a,code=sm_90a"
        nvcc -O3 $arch -I"$1/include" -I"$1/src" -fmad=false --std=c++17 -cubin -o "$2/$b.cubin" "$f" || return 1
        "$ND" -c "$2/$b.cubin" | grep -v '^[[:space:]]*//' | sed -e 's#/\*[0-9a-f]*\*/##' -e 's#_INTERNAL_[0-9a-f]*_#_INTERNAL_#g' >"$2/$b.sass" || return 1
    done
}
dump "$W/base" "$W/a" && dump "$PWD" "$W/b" || { echo "sass_same: a build failed" >&2; exit 2; }
rc=0
for f in "$W"/a/*.sass; do
    b=$(basename "$f")
    if [ ! -f "$W/b/$b" ]; then
        echo "$b: only in $BASE"; rc=1
    elif cmp -s "$f" "$W/b/$b"; then
        echo "$b: identical"
    else
        echo "$b: DIFFERS ($(diff "$f" "$W/b/$b" | grep -c '^[<>]') lines)"; rc=1
    fi
done
for f in "$W"/b/*.sass; do [ -f "$W/a/$(basename "$f")" ] || { echo "$(basename "$f"): only in the tree"; rc=1; }; done
exit $rc
