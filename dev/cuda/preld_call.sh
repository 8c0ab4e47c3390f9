#!/usr/bin/env bash
# One call from a packed carry (ran 2026-12-07 18:14 and, with PARTS="unq san ab", 18:28 UTC on H200s; docs that date:
# tput_splitld landed, tput_epild and lat_qnld not kept; the splitld patch is in git history before 23c15be): the
# loads-first sides of both executors, each part skipped when
# what is left of CAP_S (default 560 s) would not hold it; PARTS picks them (default "ab lab latsrc land bound"):
#   ab     the throughput A/B (prebuilt_ab.sh run): base pre0 against pre1 (tput_epild: tp_epi issues its bias,
#          residual and added-row loads before the planes' sum) and pre2 (tput_epild + tput_splitld: tp_split loads
#          its norm weights before the statistics), each side's test_tput quick first; PRE_SPECS
#   unq    (not in the default PARTS) test_tput unquick of SAN_BIN (default build-ab/pre2/test_cuda)
#   san    (not in the default PARTS) SAN_BIN's memcheck / initcheck of test_tput quick 2, racecheck of tp_epi and
#          tp_split (quick 3), in parallel, each within SAN_S (default 150) seconds
#   lab    the latency A/B of lat_qnld (lat_hot_call.sh: the side's test_executors unquick, per-op timelines of TL_CFGS)
#   latsrc ncu source counters of the latency kernel (land_call.sh PART=latsrc; LATSRC_SPECS)
#   land   the tree's bench curve with the PyTorch graph loop and capacity (pack_item1_call.sh; H200 only unless
#          LAND_ANY=1)
#   bound  the vendor products' bound (pack_item1_call.sh; H200 only unless LAND_ANY=1)
# Here first (a clean tree: the prebuilt sides copy it):
#   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2 tests && bash dev/cuda/stamp.sh
#   bash dev/cuda/lat_ab.sh prebuild "qnld:dev/cuda/lat_qnld.patch"
#   PRE_SIDE=dev/cuda/tput_epild.patch PRE_SIDE2=dev/cuda/tput_epild.patch,dev/cuda/tput_splitld.patch \
#       bash dev/cuda/prebuilt_ab.sh prebuild
#   strip -p --strip-debug build-ab/base/lat_timeline_base build-ab/qnld/lat_timeline_base
#   bash dev/cuda/pack.sh build-ab/base build-ab/qnld build-ab/pre0 build-ab/pre1 build-ab/pre2 build-cuda/cuobj \
#       build-cuda/obj build-cuda/tobj
# Device:  OUT=$OUT bash dev/cuda/preld_call.sh   (carry build-pack, .debs); $OUT/parts.txt says what ran, the parts'
# folders come back as archives in $OUT.
set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh" 560 "ab lab latsrc land bound"
SB=${SAN_BIN:-build-ab/pre2/test_cuda} # the side whose checks unq / san run
if [[ $P == *unq* ]] && [ "$(left)" -gt 150 ]; then
    env -u DD_TEST_QUICK DD_CUDA_TIMEOUT_S=20 DD_TEST_ONLY=test_tput timeout 140 "$SB" >"$O/side_tput_unquick.log" 2>&1
    log "side test_tput unquick rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/side_tput_unquick.log" | tr '\n' ' ')"
fi
if [[ $P == *san* ]] && [ "$(left)" -gt 120 ]; then # the side's sanitizers on the changed kernels, in parallel
    san() { # name quick test tool options...
        local n=$1 q=$2 t=$3 tool=$4
        shift 4
        DD_CUDA_TIMEOUT_S=200 DD_TEST_QUICK=$q DD_TEST_ONLY=$t timeout -k 5 $((${SAN_S:-150})) compute-sanitizer \
            --tool $tool --print-limit 6 "$@" "$SB" >"$O/san_$n.log" 2>&1
        echo "rc $?" >>"$O/san_$n.log"
    }
    san tp_mem 2 test_tput memcheck & san tp_init 2 test_tput initcheck &
    san epi 3 test_tput racecheck --kernel-name kns=tp_epi --launch-count 1500 &
    san split 3 test_tput racecheck --kernel-name kns=tp_split --launch-count 600 &
    wait
    for f in "$O"/san_*.log; do
        log "$(basename "$f"): $(grep -E 'SUMMARY|^\[  (PASSED|FAILED) |^rc ' "$f" | tr '\n' ' ')"
    done
fi
if [[ $P == *ab* ]] && [ "$(left)" -gt 120 ]; then
    OUT=/tmp/ab PRE_SPECS="${PRE_SPECS:-gpt bf16 10 64|gpt bf16 10 256|csm bf16 6 256|gpt bf16 10 8}" PRE_ROUNDS=3 \
        timeout $(($(left) - 20 < ${AB_CAP_S:-170} ? $(left) - 20 : ${AB_CAP_S:-170})) bash dev/cuda/prebuilt_ab.sh run >/tmp/ab_run.log 2>&1
    log "ab rc $?: $(grep -E 'median|side [12]' /tmp/ab/summary.txt 2>/dev/null | tr '\n' ' ' | cut -c1-600)"
fi
if [[ $P == *lab* ]] && [ "$(left)" -gt 120 ]; then
    OUT=/tmp/lab SIDES="${LAB_SIDES:-qnld:dev/cuda/lat_qnld.patch}" TESTS="test_executors:0" BASE_TESTS="test_executors:3" \
        TL_CFGS="${TL_CFGS:-gpt:q8:1 gpt:q4:1 csm:q8:1 gpt:bf16:1}" \
        AB_CUT_S=$(($(left) > ${LAB_CAP_S:-220} + 100 ? ${LAB_CAP_S:-220} : $(left) - 40)) \
        bash dev/cuda/lat_hot_call.sh >/tmp/lab_run.log 2>&1
    log "lab rc $?: $(grep -E 'latency executor|rc [0-9]' /tmp/lab/summary.txt 2>/dev/null | tr '\n' ' ' | cut -c1-600)"
fi
if [[ $P == *latsrc* ]] && [ "$(left)" -gt 130 ]; then
    mkdir -p /tmp/latsrc
    OUT=/tmp/latsrc PART=latsrc CAP_S=$(($(left) - 20)) bash dev/cuda/land_call.sh >/tmp/latsrc_run.log 2>&1
    log "latsrc rc $?"
fi
land_bound /tmp
log "# $(date -u +%FT%TZ) done"
for d in ab lab latsrc land bound; do [ -n "$(ls -A /tmp/$d 2>/dev/null)" ] && tar czf "$O/$d.tgz" -C /tmp $d; done
cp /tmp/ab_run.log /tmp/lab_run.log "$O/" 2>/dev/null
true
