#!/usr/bin/env bash
# The CuPy device path of the Python package (issue 15 point 2; docs/device_api.md "Python") and the torch path beside
# it after the per-library adapter rewrite of python/src/depthdec/_device.py, as one call on the H200, whose Python has
# cupy-cuda13x 14.2.0 beside torch 2.11:
#   build   build-cuda/libdepthdec.a (MAKE_TARGET=lib; call_env.sh), then the package with the cuda backend
#           (DEPTHDEC_CUDA=1, DEPTHDEC_LIB) pip-installed into /tmp/ddsite (fallback: build_ext --inplace), as
#           devapi_check.sh does
#   cupy    pytest -v python/tests/test_cupy_interop.py  (CuPy in/out == numpy, streams, Stream.begin_capture replay,
#           errors, mixed torch/CuPy refused, no torch import)
#   torch   pytest -v python/tests/test_cuda_interop.py  (unchanged behaviour; n=60 on the frame kernel; no cupy import)
# Carry build-cuda/{cuobj,obj} when built here (make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib; without them the
# library is compiled there) and the untracked .debs/ (jansson). Writes $OUT/summary.txt and $OUT/work.tgz (logs);
# ~2-4 min.   OUT=$OUT bash dev/cuda/cupy_call.sh
CALL=cupy MAKE_TARGET=lib source "$(dirname "$0")/call_env.sh"
if [ ! -f $B/libdepthdec.a ]; then
    log "no $B/libdepthdec.a: build failed"; tail -30 "$R/build.log" | tee -a "$S"; exit 1
fi
log "$(python3 -c 'import sys; print("python", sys.version.split()[0])' 2>&1 | tail -1) | $(python3 -c '
import cupy; print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount(), "kernel", (cupy.arange(3) + 1).tolist())' \
    2>&1 | tail -1) | $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
py_package || exit 1
for tl in cupy:150 cuda:100; do
    t=${tl%%:*} lim=${tl#*:}
    (cd /tmp && timeout $lim python3 -m pytest -v -rs --durations=5 -p no:cacheprovider \
        "$OLDPWD/python/tests/test_${t}_interop.py") >"$R/pytest_$t.log" 2>&1
    log "pytest test_${t}_interop.py rc $?: $(tail -1 "$R/pytest_$t.log") ($(el))"
    grep -E "^(FAILED|ERROR)|^SKIPPED|^E  " "$R/pytest_$t.log" | head -30 | tee -a "$S"
done
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
