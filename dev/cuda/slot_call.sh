#!/usr/bin/env bash
# README Order item 000 (written 2026-12-07 after the racecheck report on the latency kernel's ring slots): one call
# from a packed carry, its parts in this order, each skipped when what is left of CAP_S (default 560 s) would not
# hold it; PARTS picks them (default "race lab land bound sweep"):
#   race   compute-sanitizer racecheck of test_executors quick 3 on build-ab/kft/test_cuda (the tree with
#          lat_keep.patch + lat_slotoff.patch: expect 0 hazards where the landed tree reports 416 on slot_off), then
#          that binary's test_executors unquick
#   lab    the latency A/B, the tree against kf (lat_hot_call.sh through slab_call.sh PARTS=lab)
#   land   the landed tree's bench curve with the PyTorch graph loop and capacity (pack_item1_call.sh PARTS=land; on
#          an H200 only unless LAND_ANY=1)
#   bound  the vendor products' bound (pack_item1_call.sh PARTS=bound; H200 only unless LAND_ANY=1)
#   latsrc ncu source counters of the latency kernel (land_call.sh PART=latsrc; LATSRC_SPECS)
#   sweep  tp_sweep.sh at GPT bf16 B64 from build-ab/pref (SWEEP_SPECS)
# Its default sides are records: lat_keep.patch landed 2026-12-07 15:3x (with lat_arrive; both in git history).
# RACE_BIN (default build-ab/kft/test_cuda) and LAB_SIDES (default the kf side) pick other sides: 2026-12-07 15:3x
# the second call raced build-ab/kat/test_cuda (lat_keep + lat_arrive) and A/B-ed sides kf and ka.
# Here first (the carried objects must match the tree: dev/cuda/stamp.sh):
#   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2 tests && bash dev/cuda/stamp.sh
#   bash dev/cuda/lat_ab.sh prebuild "kf:dev/cuda/lat_keep.patch,dev/cuda/lat_slotoff.patch"
#   bash dev/cuda/prebuilt_ab.sh prebuild-force
#   kft: a copy of the tree with both patches, build-ab/kf/cuobj + build-cuda/obj + build-cuda/tobj copied into its
#        build-cuda and touched, `make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda build-cuda/test_cuda`, the binary to
#        build-ab/kft/test_cuda
#   strip -p --strip-debug build-ab/base/lat_timeline_base build-ab/kf/lat_timeline_base
#   bash dev/cuda/pack.sh build-ab/base build-ab/kf build-ab/kft build-ab/pref build-cuda/cuobj build-cuda/obj \
#        build-cuda/tobj build-cuda/test_cuda
# Device:  OUT=$OUT bash dev/cuda/slot_call.sh   (carry build-pack, .debs); $OUT/parts.txt says what ran, the parts'
# folders come back in $OUT/parts.tgz.
set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh" 560 "race lab land bound sweep"
RB=${RACE_BIN:-build-ab/kft/test_cuda}
if [[ $P == *race* ]] && [ "$(left)" -gt 200 ]; then
    DD_CUDA_TIMEOUT_S=60 DD_TEST_QUICK=3 DD_TEST_ONLY=test_executors timeout 170 compute-sanitizer --tool racecheck \
        --print-limit 20 "$RB" >/tmp/race_kf.log 2>&1
    log "race kf rc $?: $(grep -E 'PASSED|FAILED|RACECHECK SUMMARY' /tmp/race_kf.log | tr '\n' ' ')"
    head -c 60000 /tmp/race_kf.log >"$O/race_kf.log"
    env -u DD_TEST_QUICK DD_CUDA_TIMEOUT_S=20 DD_TEST_ONLY=test_executors timeout 90 "$RB" \
        >/tmp/kf_unquick.log 2>&1
    log "kf test_executors unquick rc $?: $(grep -E '^\[  (PASSED|FAILED) |FAIL' /tmp/kf_unquick.log | head -3 | tr '\n' ' ')"
fi
if [[ $P == *lab* ]] && [ "$(left)" -gt 120 ]; then
    mkdir -p "$O/lab"
    TESTS="test_executors:0" BASE_TESTS="test_executors:3" OUT=$O/lab PARTS=lab \
        LAB_SIDES="${LAB_SIDES:-kf:dev/cuda/lat_keep.patch,dev/cuda/lat_slotoff.patch}" TL_CFGS="${TL_CFGS:-gpt:bf16:1 csm:bf16:1}" \
        CAP_S=$(($(left) > ${LAB_CAP_S:-130} + 110 ? ${LAB_CAP_S:-130} : $(left) - 60)) bash dev/cuda/slab_call.sh >/tmp/lab_run.log 2>&1
    log "lab rc $?"
fi
land_bound "$O"
if [[ $P == *latsrc* ]] && [ "$(left)" -gt 150 ]; then
    mkdir -p "$O/latsrc"
    OUT=$O/latsrc PART=latsrc CAP_S=$(($(left) > 260 ? 230 : $(left) - 30)) bash dev/cuda/land_call.sh >/tmp/latsrc_run.log 2>&1
    log "latsrc rc $?"
fi
if [[ $P == *sweep* ]] && [ "$(left)" -gt 90 ]; then
    CALL_NOBUILD=1 SWEEP_EXE=build-ab/pref/exec_ab SWEEP_SPECS="${SWEEP_SPECS:-gpt bf16 64}" OUT=$O/sweep \
        CAP_S=$(($(left) - 20)) bash dev/cuda/tp_sweep.sh >/tmp/sweep_run.log 2>&1
    log "sweep rc $?"
fi
log "# $(date -u +%FT%TZ) done"
# the device tool brings back 8 files: the parts' folders as one archive beside parts.txt and race_kf.log
cd "$O" || exit 1
dirs=$(ls -d lab land bound latsrc sweep 2>/dev/null || true)
[ -z "$dirs" ] || { tar czf parts.tgz $dirs && rm -rf $dirs; }
