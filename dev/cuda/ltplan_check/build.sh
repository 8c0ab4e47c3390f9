#!/usr/bin/env bash
# Builds dev/cuda/ltplan_check/check.cu into build-cuda/ltplan_check (host code only is exercised; no GPU needed to
# run it). Needs the CUDA build's library: make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib. Run from anywhere; the
# program runs from the repository root (it loads tests/fixtures/...):
#   dev/cuda/ltplan_check/build.sh && build-cuda/ltplan_check
set -euo pipefail
cd "$(dirname "$0")/../../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
"${NVCC:-$CUDA_HOME/bin/nvcc}" -O1 -arch="${CUDA_ARCH:-sm_90}" -Iinclude -Isrc -fmad=false --std=c++17 \
    -o build-cuda/ltplan_check dev/cuda/ltplan_check/check.cu build-cuda/libdepthdec.a -ljansson -lm -lpthread
