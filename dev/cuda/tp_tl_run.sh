#!/usr/bin/env bash
# The throughput executor's real kernel timeline on the device without nvcc (dev/cuda/tput_tl.patch):
#   here:   bash dev/cuda/tp_tl_run.sh prebuild   (build-ab/tl: tp_tl and test_cuda of the patched tree, stripped)
#   device: OUT=$OUT bash dev/cuda/tp_tl_run.sh run   (carry build-ab/tl, .debs): the side's test_tput quick, then
#           one frame's timeline at TL_SPECS ("model weights batch|...", default GPT bf16 B256 / B64 / B8, CSM bf16
#           B256) into $OUT/tl_*.csv, reported by dev/cuda/tp_tl_report.py in $OUT/summary.txt
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source dev/cuda/side_lib.sh
case ${1:-} in
prebuild)
    pre_side tl "tp_tl test_cuda" dev/cuda/tput_tl.patch || exit 1
    ;;
run)
    device_run tp_tl
    DD_TEST_QUICK=1 DD_TEST_ONLY=test_tput timeout 120 build-ab/tl/test_cuda >"$OUT/side_test_tput.log" 2>&1
    log "side test_tput quick rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/side_test_tput.log" | tr '\n' ' ')"
    IFS='|' read -r -a specs <<<"${TL_SPECS:-gpt bf16 256|gpt bf16 64|gpt bf16 8|csm bf16 256}"
    for spec in "${specs[@]}"; do
        f="$OUT/tl_${spec// /_}.csv"
        timeout 90 build-ab/tl/tp_tl $spec >"$f" 2>>"$OUT/tp_tl.err"
        log "tp_tl $spec rc $?"
        python3 dev/cuda/tp_tl_report.py "$f" 2>&1 | tee -a "$S"
    done
    log "# done $(date -u +%FT%TZ)"
    ;;
*) echo "usage: tp_tl_run.sh prebuild | run" >&2; exit 2 ;;
esac
