#!/usr/bin/env bash
# One device call for the device API (issue 15 points 1-2, docs/device_api.md), on one H200:
#   build      make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda tests (cmocka/jansson unpacked from the carried .debs/)
#   devtests   test_cuda's device-API cases (DD_TEST_ONLY='test_device_*'): device == host path bit for bit,
#              graph capture + 3 replays, device-detected errors, host backends
#   example    build-cuda/examples/device_api and test_examples
#   quick      the whole test_cuda suite with DD_TEST_QUICK=1 (the existing cases still pass)
#   san        compute-sanitizer --tool memcheck on test_device_api (DD_TEST_QUICK=2); works on Firecracker
#              machines only (gVisor: "Device not supported", reported as such)
#   python     the package built against build-cuda/libdepthdec.a (DEPTHDEC_CUDA=1), pip --target /tmp/ddsite
#              (fallback: build_ext --inplace), then pytest python/tests/test_cuda_interop.py test_interop.py
# Logs go to $OUT (one archive, logs.tgz, plus summary.txt); a compact summary is printed. ~5-8 min.
#   OUT=/tmp/x bash dev/cuda/devapi_check.sh [steps]     (default: all of the above, in that order)
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/devapi_check}
mkdir -p "$OUT"
STEPS=${*:-build devtests example quick san python}
has() { [[ " $STEPS " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=build-cuda
SUM="$OUT/summary.txt"
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
pack_logs() { (cd "$OUT" && ls *.log >/dev/null 2>&1 && tar czf logs.tgz --remove-files *.log); }
trap pack_logs EXIT
# cmocka's counts of one log: "passed P failed F skipped S"
counts() {
    local p f s
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    echo "passed ${p:-0} failed ${f:-0} skipped ${s:-0}"
}
if [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/jansson.h ]; then
    for f in .debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) | $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
t_start=$(date +%s)
if has build; then
    t0=$(date +%s)
    if ! make CUDA=1 CUDA_ARCH=sm_90 BUILD=$B -j16 tests >"$OUT/build.log" 2>&1; then
        say "build FAILED"; tail -40 "$OUT/build.log"; exit 1
    fi
    say "build ok ($(( $(date +%s) - t0 )) s)"
fi
export DD_CUDA_TIMEOUT_S=${DD_CUDA_TIMEOUT_S:-5}
if has devtests; then
    t0=$(date +%s)
    DD_TEST_ONLY='test_device_*' timeout 200 $B/test_cuda >"$OUT/devtests.log" 2>&1
    rc=$?
    say "device-API tests rc $rc: $(counts "$OUT/devtests.log") ($(( $(date +%s) - t0 )) s)"
    grep -E "^\[  (FAILED|ERROR) |^\[   LINE|device API ==|captured frames|device errors|error:|skipped:" "$OUT/devtests.log" | head -40
fi
if has example; then
    timeout 60 $B/examples/device_api >"$OUT/example.log" 2>&1
    say "examples/device_api rc $?"
    cat "$OUT/example.log" | tail -12
    timeout 60 $B/test_examples >"$OUT/test_examples.log" 2>&1
    say "test_examples rc $?: $(counts "$OUT/test_examples.log")"
fi
if has quick; then
    t0=$(date +%s)
    DD_TEST_QUICK=1 timeout 180 $B/test_cuda >"$OUT/quick.log" 2>&1
    rc=$?
    say "test_cuda quick (all cases) rc $rc: $(counts "$OUT/quick.log") ($(( $(date +%s) - t0 )) s)"
    grep -E "^\[  (FAILED|ERROR) |^\[   LINE|error:" "$OUT/quick.log" | head -20
fi
if has san; then
    t0=$(date +%s)
    DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_device_api timeout 120 \
        compute-sanitizer --tool memcheck --show-backtrace device $B/test_cuda >"$OUT/san.log" 2>&1
    rc=$?
    say "compute-sanitizer memcheck test_device_api rc $rc: $(grep -E "ERROR SUMMARY" "$OUT/san.log" | tail -1) $(counts "$OUT/san.log") ($(( $(date +%s) - t0 )) s)"
    grep -E "Device not supported|Invalid|out of bounds|Address .* is|^=========  +at " "$OUT/san.log" | head -20
fi
if has python; then
    t0=$(date +%s)
    export DEPTHDEC_CUDA=1 DEPTHDEC_LIB=$PWD/$B/libdepthdec.a
    rm -rf /tmp/ddsite python/build
    if python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/ddsite ./python \
        >"$OUT/pip.log" 2>&1; then
        export PYTHONPATH=/tmp/ddsite how=pip
    elif (cd python && python3 setup.py build_ext --inplace) >>"$OUT/pip.log" 2>&1; then
        export PYTHONPATH=$PWD/python/src how=build_ext
    else
        say "python package build FAILED"; tail -30 "$OUT/pip.log"; exit 1
    fi
    say "python package ($how): $(python3 -c 'import depthdec; print(depthdec.__file__, depthdec.available_backends())' 2>&1 | tail -1)"
    (cd /tmp && timeout 240 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/python/tests/test_cuda_interop.py" \
        "$OLDPWD/python/tests/test_interop.py") >"$OUT/pytest.log" 2>&1
    rc=$?
    say "pytest rc $rc: $(tail -1 "$OUT/pytest.log") ($(( $(date +%s) - t0 )) s)"
    grep -E "^FAILED|^ERROR|Error|assert|SKIPPED" "$OUT/pytest.log" | head -30
fi
say "total $(( $(date +%s) - t_start )) s"
