# Sourced by the dev/cuda/*_call.sh device calls (CALL=name source .../call_env.sh): the repository root as the
# working directory, $OUT (default /tmp/$CALL) with logs under $R = $OUT/work, the CUDA runtime on the library path,
# the carried .debs/ (cmocka, jansson) unpacked, $S the summary with log() appending to it and el() the seconds since
# the start; then build-cuda is built (the carried objects reused; MAKE_TARGET, default tests) and named $B.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/${CALL:-call}}
R=$OUT/work
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} DD_CUDA_TIMEOUT_S=5 PYTHONUNBUFFERED=1
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
S=$OUT/summary.txt
: >"$S"
log() { echo "$@" | tee -a "$S"; }
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0)) s"; }
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader)"
find build-cuda -type f -exec touch {} +
make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 ${MAKE_TARGET-tests} >"$R/build.log" 2>&1
log "build rc $? ($(el))"
B=build-cuda
