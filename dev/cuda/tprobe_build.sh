#!/usr/bin/env bash
# The tile probe's sides (dev/cuda/tput_tprobe.patch), built here for a call without nvcc:
#   bash dev/cuda/tprobe_build.sh 1 8 2 4     -> build-ab/tp<bits>/exec_ab, one side a TP_PROBE value
# then on the device (carry build-ab/pre0 and the build-ab/tp* folders, .debs):
#   TP_SIDES="1 8 2 4" OUT=$OUT bash dev/cuda/tprobe_build.sh run   (exec_ab GPT bf16 B256 / B64 base and sides
#   alternating, medians in $OUT/summary.txt; TP_XOVER first: the crossover from pre0; TP_NCU=1 (TP_NCU_SIDES):
#   ncu of tp_linear / tp_attend / tp_sample durations a side, by linear kind, dev/cuda/ncu_roles.py)
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source dev/cuda/side_lib.sh
if [ "${1:-}" != run ]; then
    root=$PWD
    for bits in "$@"; do # the probe patch, then a patch of its define to the side's bits
        t=/tmp/tprobe_bits_$bits
        rm -rf "$t" && mkdir -p "$t/a/src/cuda" "$t/b/src/cuda" && cp src/cuda/tput.cu "$t/a/src/cuda/" &&
            (cd "$t/a" && patch -p1 --quiet <"$root/dev/cuda/tput_tprobe.patch") &&
            sed "s/^#define TP_PROBE 0 /#define TP_PROBE $bits /" "$t/a/src/cuda/tput.cu" >"$t/b/src/cuda/tput.cu" || exit 1
        (cd "$t" && diff -u a/src/cuda/tput.cu b/src/cuda/tput.cu >bits.patch)
        [ -s "$t/bits.patch" ] || { echo "side $bits: no TP_PROBE define to set"; exit 1; }
        MAKE_TARGET=lib pre_side "tp$bits" exec_ab dev/cuda/tput_tprobe.patch "$t/bits.patch" || exit 1
    done
    exit 0
fi
device_run tprobe
sides="0 ${TP_SIDES:-1 8 2 4}"
exe() { [ "$1" = 0 ] && echo build-ab/pre0/exec_ab || echo "build-ab/tp$1/exec_ab"; }
# TP_XOVER ("model weights frames batches...|..."): first both executors a batch from pre0 (the crossover)
[ -n "${TP_XOVER:-}" ] && xover_run build-ab/pre0/exec_ab "$TP_XOVER" "$OUT/xover.jsonl" | tee -a "$S"
: >"$OUT/exec_ab.jsonl"
pairs=()
for s in $sides; do pairs+=("$s=$(exe $s)"); done
ab_time "$OUT/exec_ab.jsonl" 2 "${TP_SPECS:-gpt bf16 10 256|gpt bf16 10 64}" "${pairs[@]}"
python3 dev/cuda/side_medians.py "$OUT/exec_ab.jsonl" | tee -a "$S"
if [ "${TP_NCU:-1}" = 1 ]; then
    for s in ${TP_NCU_SIDES:-$sides}; do
        [ $(($(date +%s) - T0)) -lt ${TP_CAP_S:-480} ] || { log "ncu side $s: skipped (time)"; continue; }
        EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 120 ncu --csv --kernel-name \
            'regex:tp_linear|tp_attend|tp_sample' --metrics gpu__time_duration.sum,launch__grid_size $(exe $s) gpt bf16 1 256 \
            >"$OUT/ncu_$s.csv" 2>"$OUT/ncu_$s.err"
        log "ncu side $s rc $?"
        python3 dev/cuda/ncu_roles.py "$OUT/ncu_$s.csv" 2>&1 | grep -E "ncu one|tp_linear" | tee -a "$S"
    done
fi
log "# done $(date -u +%FT%TZ)"
