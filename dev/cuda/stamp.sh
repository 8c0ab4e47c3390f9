#!/usr/bin/env bash
# The sources a build's objects were made from (the C and CUDA sources of src, include, tests and tools, and the
# Makefile), one hash: the device reuses carried objects only when it matches the copied tree (call_env.sh for
# build-cuda, lat_iter.sh for a latency side's CUDA objects prebuilt by lat_ab.sh). On 2026-12-06 18:10 UTC a call
# with lat.cu patched after the objects were built ran the old objects: call_env.sh touches the carried objects so
# that make keeps them.
#   bash dev/cuda/stamp.sh [write] [BUILD]   after `make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2 tests` here:
#                                            BUILD/cuobj/sources.sha (BUILD default build-cuda)
#   bash dev/cuda/stamp.sh check [BUILD]     exit 0 when BUILD's stamp is of these sources
#   bash dev/cuda/stamp.sh sha               the hash alone
set -u -o pipefail
cd "$(dirname "$0")/../.."
sha=$({ find src include tests tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) |
    LC_ALL=C sort | xargs sha256sum; sha256sum Makefile; } | sha256sum | cut -d' ' -f1)
f=${2:-build-cuda}/cuobj/sources.sha
case ${1:-write} in
sha) echo "$sha" ;;
check) [ "$sha" = "$(cat "$f" 2>/dev/null)" ] ;;
write) mkdir -p "$(dirname "$f")" && echo "$sha" >"$f" ;;
*) echo "usage: stamp.sh [write|check|sha] [BUILD]" >&2; exit 2 ;;
esac
