#!/usr/bin/env bash
# A throughput A/B from binaries built here, for a device call with little time left (no nvcc on the device):
#   here:   PRE_SIDE="dev/cuda/a.patch,dev/cuda/b.patch" bash dev/cuda/prebuilt_ab.sh prebuild
#           (build-ab/pre0: exec_ab of the tree as it is; build-ab/pre1: exec_ab and test_cuda of a patched copy;
#           debug info stripped, ~16 MB together)
#           with PRE_SIDE2 also build-ab/pre2 (exec_ab and test_cuda of a second patched copy)
#   device: OUT=$OUT bash dev/cuda/prebuilt_ab.sh run   (carry build-ab/pre0, build-ab/pre1 [, pre2], .debs)
#   here:   bash dev/cuda/prebuilt_ab.sh prebuild-force   (build-ab/pref/exec_ab: the tree with tput_force.patch, for
#           `CALL_NOBUILD=1 SWEEP_EXE=build-ab/pref/exec_ab ... bash dev/cuda/tp_sweep.sh`; carry build-ab/pref, .debs)
# run: the side's test_tput quick first (not timed if it fails), then exec_ab (throughput executor only) base and
# side alternating, PRE_ROUNDS rounds (default 3) of each PRE_SPECS spec ("model weights frames batch|...", default
# GPT bf16 B256 and CSM bf16 B256); a line a run in $OUT/exec_ab.jsonl, medians of the rounds in $OUT/summary.txt;
# with PRE_SWEEP_SPECS (e.g. "gpt bf16 256|csm bf16 256") also the (BN, S) sweep from build-ab/pref in what is left;
# with PRE_XOVER first the latency / throughput crossover from pre0 (both executors a batch); with PRE_NCU last ncu
# of one frame by kernel and linear (ncu_roles.py). A PRE_SPECS spec names one batch.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source dev/cuda/side_lib.sh
case ${1:-} in
prebuild)
    pre_side pre0 exec_ab && pre_side pre1 "exec_ab test_cuda" ${PRE_SIDE//,/ } || exit 1
    rm -rf build-ab/pre2
    [ -z "${PRE_SIDE2:-}" ] || pre_side pre2 "exec_ab test_cuda" ${PRE_SIDE2//,/ } || exit 1
    ;;
prebuild-force)
    pre_side pref exec_ab dev/cuda/tput_force.patch || exit 1
    ;;
run)
    device_run prebuilt_ab
    # PRE_XOVER ("model weights frames batches...|..."): first the crossover, both executors a batch from pre0's
    # exec_ab
    [ -n "${PRE_XOVER:-}" ] && xover_run build-ab/pre0/exec_ab "$PRE_XOVER" "$OUT/xover.jsonl" | tee -a "$S"
    : >"$OUT/exec_ab.jsonl"
    IFS='|' read -r -a specs <<<"${PRE_SPECS:-gpt bf16 10 256|csm bf16 6 256}"
    sides=(0=build-ab/pre0/exec_ab)
    for i in 1 2; do # each side's test_tput quick first; a side that fails it is not timed
        [ -d build-ab/pre$i ] || continue
        log "side $i: $(cat build-ab/pre$i/SIDE)"
        DD_TEST_QUICK=1 DD_TEST_ONLY=test_tput timeout 100 build-ab/pre$i/test_cuda >"$OUT/side${i}_test_tput.log" 2>&1
        log "side $i test_tput quick rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/side${i}_test_tput.log" | tr '\n' ' ')"
        if grep -q '^\[  PASSED  \] 1 test' "$OUT/side${i}_test_tput.log"; then sides+=($i=build-ab/pre$i/exec_ab)
        else log "side $i failed its test: not timed"; fi
    done
    [ ${#sides[@]} -gt 1 ] && ab_time "$OUT/exec_ab.jsonl" "${PRE_ROUNDS:-3}" "$(IFS='|'; echo "${specs[*]}")" "${sides[@]}"
    python3 dev/cuda/side_medians.py "$OUT/exec_ab.jsonl" | tee -a "$S"
    # PRE_NCU ("model weights batch|..."): then ncu metrics of every tp_ kernel of one frame from pre0's exec_ab, by
    # kernel and by the linear a launch serves (dev/cuda/ncu_roles.py); within PRE_CAP_S of the call's start
    if [ -n "${PRE_NCU:-}" ]; then
        IFS='|' read -r -a ns <<<"$PRE_NCU"
        for n in "${ns[@]}"; do
            read -r m w b <<<"$n"
            left=$((${PRE_CAP_S:-560} - $(date +%s) + T0))
            [ $left -gt 60 ] || { log "ncu $n: skipped ($left s left)"; continue; }
            f="$OUT/ncu_${m}_${w}_$b"
            for met in gpu__time_duration.sum,launch__grid_size,lts__t_bytes.sum,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed \
                gpu__time_duration.sum,launch__grid_size; do
                EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout $((left - 20)) ncu --csv --kernel-name regex:tp_ \
                    --metrics $met build-ab/pre0/exec_ab $m $w 1 $b >"$f.csv" 2>"$f.err" && break
            done
            log "ncu $n rc $? ($(grep -c . "$f.csv") lines)"
            python3 dev/cuda/ncu_roles.py "$f.csv" 2>&1 | tee -a "$S"
        done
    fi
    # PRE_SWEEP_SPECS: then tp_sweep.sh on build-ab/pref/exec_ab (prebuild-force; carry build-ab/pref too) within
    # PRE_CAP_S seconds of the call's start (default 560)
    if [ -n "${PRE_SWEEP_SPECS:-}" ]; then
        CALL_NOBUILD=1 SWEEP_EXE=build-ab/pref/exec_ab SWEEP_SPECS="$PRE_SWEEP_SPECS" OUT=$OUT/sweep \
            CAP_S=$((${PRE_CAP_S:-560} - $(date +%s) + T0)) bash dev/cuda/tp_sweep.sh | tail -20 | tee -a "$S"
    fi
    ;;
*) echo "usage: prebuilt_ab.sh prebuild | prebuild-force | run" >&2; exit 2 ;;
esac
