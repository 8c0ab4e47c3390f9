#!/usr/bin/env bash
# A/B of a patch to the CUDA sources in one device call: the tree as it is, then with PATCH applied (patch -p1, the
# device's copy of the tree need not be a git checkout), each side built and run through lat_iter.sh (tests, per-op
# timeline); the patch is reverted at the end. Per side, under $OUT/base and $OUT/patch: summary.txt, timeline.md,
# logs.tgz (within the device tool's 8 returned files).
#   OUT=/tmp/x dev/cuda/lat_ab.sh dev/cuda/lat_sampler_fast.patch
#   env: TESTS (default "test_executors:2 test_e2e:1"), TL_CFGS (default "gpt:bf16:1 csm:bf16:1 gpt:bf16:8")
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/lat_ab}
PATCH=${1:?usage: lat_ab.sh PATCH}
mkdir -p "$OUT"
for side in base patch; do
    if [ "$side" = patch ]; then
        patch -p1 --forward --quiet <"$PATCH" || { echo "lat_ab: $PATCH does not apply"; exit 1; }
    fi
    mkdir -p "$OUT/$side"
    OUT="$OUT/$side" TESTS="${TESTS:-test_executors:2 test_e2e:1}" TL_CFGS="${TL_CFGS:-gpt:bf16:1 csm:bf16:1 gpt:bf16:8}" \
        bash dev/cuda/lat_iter.sh build tests timeline >"$OUT/$side/summary.txt" 2>&1
    echo "== $side"
    grep -E "rc [0-9]|PASSED|FAILED|ms/frame|^\| (sample|attention|qkv|fc2)" "$OUT/$side/summary.txt" | head -40
done
patch -p1 -R --quiet <"$PATCH"
