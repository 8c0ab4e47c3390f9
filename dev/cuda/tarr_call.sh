#!/usr/bin/env bash
# tput_arrive.patch (landed 2026-12-07; in git history) on the device in one call from a packed carry (a record):
#   race  compute-sanitizer racecheck of tp_linear on one GPT bf16 B64 and one GPT q8 B64 frame (40 tile launches,
#         exec_ab with the throughput executor alone), the tree (build-ab/pre0) and the side (build-ab/pre1) in
#         parallel: the tree should still report (17 / 34 hazards on 2026-12-06), the side 0
#   ab    prebuilt_ab.sh run: the side's test_tput quick, then exec_ab tree / side alternating (TARR_SPECS)
#   test  the side's test_tput unquick (bit for bit against the frame kernel at the real dims)
#   san   (not in the default PARTS) the side's memcheck / initcheck of test_executors quick 2, racecheck of the tile's
#         first and later launches and of tp_epi (race_call.sh's jobs), memcheck of test_tput quick 2, in parallel
# Here first: make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2 tests && bash dev/cuda/stamp.sh
#             PRE_SIDE=dev/cuda/tput_arrive.patch bash dev/cuda/prebuilt_ab.sh prebuild
#             bash dev/cuda/pack.sh build-ab/pre0 build-ab/pre1
# Device:     OUT=$OUT bash dev/cuda/tarr_call.sh   (carry build-pack, .debs); $OUT/parts.txt, race logs, ab/
set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh" 540 "race ab test"
if [[ $P == *race* ]]; then
    for side in pre0 pre1; do
        for w in bf16 q8; do
            EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 EXEC_AB_WARM=0 DD_CUDA_TIMEOUT_S=150 timeout -k 5 ${RACE_S:-170} \
                compute-sanitizer --tool racecheck --print-limit 6 --kernel-name kns=tp_linear --launch-count 40 \
                build-ab/$side/exec_ab gpt $w 1 64 >"$O/race_${side}_$w.log" 2>&1 &
        done
    done
    wait
    for f in "$O"/race_*.log; do log "$(basename "$f"): $(grep -E 'RACECHECK SUMMARY' "$f" | tr '\n' ' ')"; done
fi
if [[ $P == *ab* ]] && [ "$(left)" -gt 100 ]; then
    OUT=$O/ab PRE_SPECS="${TARR_SPECS:-gpt bf16 10 64|gpt bf16 10 256|csm bf16 6 256|gpt q8 10 256}" \
        timeout $(($(left) - 60)) bash dev/cuda/prebuilt_ab.sh run >/tmp/ab_run.log 2>&1
    log "ab rc $?: $(tail -6 "$O/ab/summary.txt" | tr '\n' ' ')"
fi
if [[ $P == *test* ]] && [ "$(left)" -gt 60 ]; then
    env -u DD_TEST_QUICK DD_CUDA_TIMEOUT_S=20 DD_TEST_ONLY=test_tput timeout $(($(left) - 15)) build-ab/pre1/test_cuda \
        >"$O/side_tput_unquick.log" 2>&1
    log "side test_tput unquick rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/side_tput_unquick.log" | tr '\n' ' ')"
fi
if [[ $P == *san* ]] && [ "$(left)" -gt 120 ]; then # the side's sanitizers: the latency tests, then the tile's kernels
    san() { # name quick test tool options...
        local n=$1 q=$2 t=$3 tool=$4
        shift 4
        DD_CUDA_TIMEOUT_S=200 DD_TEST_QUICK=$q DD_TEST_ONLY=$t timeout -k 5 $(($(left) - 20)) compute-sanitizer \
            --tool $tool --print-limit 6 "$@" build-ab/pre1/test_cuda >"$O/san_$n.log" 2>&1
        echo "rc $?" >>"$O/san_$n.log"
    }
    san ex_mem 2 test_executors memcheck & san ex_init 2 test_executors initcheck &
    san lin_first 3 test_tput racecheck --kernel-name kns=tp_linear --launch-count 24 &
    san lin_later 2 test_tput racecheck --kernel-name kns=tp_linear --launch-skip 9000 --launch-count 24 &
    san epi 3 test_tput racecheck --kernel-name kns=tp_epi --launch-count 1500 &
    san tp_mem 2 test_tput memcheck &
    wait
    for f in "$O"/san_*.log; do
        log "$(basename "$f"): $(grep -E 'SUMMARY|^\[  (PASSED|FAILED) |^rc ' "$f" | tr '\n' ' ')"
    done
fi
log "# $(date -u +%FT%TZ) done"
