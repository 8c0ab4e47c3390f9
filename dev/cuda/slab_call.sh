#!/usr/bin/env bash
# The slab contract (dev/cuda/slab.patch, README Order item 2d; 2026-12-07) on the device from a packed carry:
#   here:   bash dev/cuda/lat_ab.sh prebuild "slab:dev/cuda/slab.patch"; PRE_SIDE=dev/cuda/slab.patch
#           bash dev/cuda/prebuilt_ab.sh prebuild; make CUDA=1 ... tests && bash dev/cuda/stamp.sh (the tree);
#           bash dev/cuda/pack.sh build-ab/base build-ab/slab build-ab/pre0 build-ab/pre1 build-cuda/cuobj
#           build-cuda/obj build-cuda/tobj
#   device: OUT=$OUT PARTS="test tab lab" bash dev/cuda/slab_call.sh   (carry build-pack, .debs)
# Parts in this order, each skipped when what is left of CAP_S (default 570) would not hold it:
#   test  the side's test_cuda (build-ab/pre1): test_executors and test_tput unquick, then all tests quick
#   tab   the throughput A/B, exec_ab base (pre0) / slab (pre1), SLAB_SPECS
#   lab   the latency A/B (lat_hot_call.sh SIDES=LAB_SIDES, default slab: the sides' tests, per-op timelines of
#         TL_CFGS); 2026-12-07 10:5x also with the fold variants slab_v1 / slab_v2 (prebuilt as build-ab/v1, v2, v4)
#   san   compute-sanitizer on the side: racecheck test_executors (quick 3), memcheck / initcheck test_tput (quick 2),
#         memcheck test_executors (quick 2)
# Every part's folder comes back as one archive; $OUT/parts.txt says what ran.
set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh" 570 "test tab lab"
export DD_CUDA_TIMEOUT_S=20
mkdir -p /tmp/test /tmp/san
res() { grep -E '^\[  (PASSED|FAILED) |^tests:|FAIL' "$1" | head -5 | tr '\n' ' '; }
if [[ $P == *test* ]]; then
    for t in ${SLAB_TESTS:-test_executors test_tput}; do
        [ "$(left)" -gt 150 ] || break
        env -u DD_TEST_QUICK DD_TEST_ONLY=$t timeout 140 build-ab/pre1/test_cuda >/tmp/test/$t.log 2>&1
        log "test $t unquick rc $?: $(res /tmp/test/$t.log)"
    done
    if [ -z "${SLAB_NOALL:-}" ] && [ "$(left)" -gt 150 ]; then
        DD_TEST_QUICK=1 timeout 140 build-ab/pre1/test_cuda >/tmp/test/all_quick.log 2>&1
        log "test all quick rc $?: $(res /tmp/test/all_quick.log)"
    fi
fi
if [[ $P == *tab* ]] && [ "$(left)" -gt 120 ]; then
    OUT=/tmp/tab PRE_SPECS="${SLAB_SPECS:-gpt bf16 10 256|gpt bf16 10 512|csm bf16 6 256|gpt bf16 10 64}" PRE_ROUNDS=2 \
        timeout $(($(left) > 260 ? 200 : $(left) - 40)) bash dev/cuda/prebuilt_ab.sh run >/tmp/tab_run.log 2>&1
    log "tab rc $?: $(grep -E 'side 0' /tmp/tab/summary.txt | tr '\n' ' ')"
fi
if [[ $P == *lab* ]] && [ "$(left)" -gt 120 ]; then
    OUT=/tmp/lab SIDES="${LAB_SIDES:-slab:dev/cuda/slab.patch}" TL_CFGS="${TL_CFGS:-gpt:bf16:1 csm:bf16:1 gpt:bf16:8}" \
        AB_CUT_S=$(($(left) - 30)) bash dev/cuda/lat_hot_call.sh >/tmp/lab_run.log 2>&1
    log "lab rc $?: $(grep -E 'latency executor' /tmp/lab/summary.txt | tr '\n' ' ')"
fi
if [[ $P == *san* ]]; then
    san() { # san TOOL TEST QUICK SECONDS
        [ "$(left)" -gt $(($4 + 10)) ] || { log "san $1 $2: skipped"; return; }
        DD_TEST_QUICK=$3 DD_TEST_ONLY=$2 timeout $4 compute-sanitizer --tool $1 build-ab/pre1/test_cuda >"/tmp/san/$1_$2.log" 2>&1
        log "san $1 $2 (quick $3) rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "/tmp/san/$1_$2.log" | tr '\n' ' ')"
    }
    san racecheck test_executors 3 170
    san memcheck test_tput 2 120
    san initcheck test_tput 2 120
    san memcheck test_executors 2 120
fi
for d in test tab lab san; do [ -n "$(ls -A /tmp/$d 2>/dev/null)" ] && tar czf "$O/$d.tgz" -C /tmp $d; done
cp /tmp/tab_run.log /tmp/lab_run.log "$O/" 2>/dev/null
log "# $(date -u +%FT%TZ) done"
