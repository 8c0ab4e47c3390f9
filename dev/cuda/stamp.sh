#!/usr/bin/env bash
# The sources the carried objects were built from: run here after `make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2
# tests` (it writes build-cuda/cuobj/SOURCES.sha); call_env.sh reuses carried objects on the device only when the
# copied tree's sources hash the same, and otherwise rebuilds them all (on 2026-12-06 18:10 UTC a call with lat.cu
# patched after the objects were built ran the old objects: call_env.sh touches the carried objects so that make
# keeps them).   bash dev/cuda/stamp.sh [check]   (check: exit 0 when the stamp matches, 1 otherwise)
set -u -o pipefail
cd "$(dirname "$0")/../.."
sha=$({ find src include tests tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) |
    LC_ALL=C sort | xargs sha256sum; sha256sum Makefile; } | sha256sum | cut -d' ' -f1)
if [ "${1:-}" = check ]; then
    [ "$sha" = "$(cat build-cuda/cuobj/SOURCES.sha 2>/dev/null)" ]
else
    mkdir -p build-cuda/cuobj && echo "$sha" >build-cuda/cuobj/SOURCES.sha
fi
