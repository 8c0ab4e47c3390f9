#!/usr/bin/env bash
# Builds dev/cuda/ltplan_check/check.cu into build-cuda/ltplan_check, flow.cu into build-cuda/ltplan_flow and dump.cu
# into build-cuda/ltplan_dump (host code only is exercised; no GPU needed to run them). Needs the CUDA build's
# library: make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib. Run from anywhere; the programs run from the repository
# root (they load tests/fixtures/...):
#   dev/cuda/ltplan_check/build.sh && build-cuda/ltplan_check && build-cuda/ltplan_flow && build-cuda/ltplan_dump
set -euo pipefail
cd "$(dirname "$0")/../../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
for prog in check:ltplan_check flow:ltplan_flow dump:ltplan_dump; do
    "${NVCC:-$CUDA_HOME/bin/nvcc}" -O1 -arch="${CUDA_ARCH:-sm_90}" -Iinclude -Isrc -fmad=false --std=c++17 \
        -o "build-cuda/${prog#*:}" "dev/cuda/ltplan_check/${prog%%:*}.cu" build-cuda/libdepthdec.a -ljansson -lm -lpthread
done
