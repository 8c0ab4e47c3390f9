#!/usr/bin/env bash
# The device check of branch plan-cuda (the cuda backend's frame programs translated from the frame plan, issue 12
# point 1), as one call on the H200 (~5 min):
#   1. dev/cuda/plan_check: every translated program byte-identical to the old builder's (host code; 23 models)
#   2. test_cuda (DD_TEST_QUICK=2), test_backends and test_fixtures (DD_TEST_QUICK=1)
#   3. scripts/identity.sh run --backend cuda --set full with the CLI of 66f3b0c (build-old/depthdec, built off the
#      device: scripts/identity.sh build 66f3b0c build-old CUDA=1 CUDA_ARCH=sm_90) and with this tree's, then
#      compare (bit identity of codes and logits, issue 12 point 7). The two runs go side by side, in the background
#      while 1 and 2 run, when the GPU's compute mode is Default (else one after the other, after 2).
# Carry build-cuda/{cuobj,obj,tobj} built here (make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda tests), build-old and the
# untracked .debs/. Writes $OUT/summary.txt and $OUT/work.tgz (the logs, the identity runs' sums and comparison; their
# models and outputs stay on the device).   OUT=$OUT bash dev/cuda/plan_call.sh
CALL=plan source "$(dirname "$0")/call_env.sh"
ID=/tmp/plan_id
rm -rf "$ID"
mkdir -p "$ID"
id_run() { # old|new: the identity run of that CLI into $ID/$1
    local dd=$B/depthdec
    [ "$1" = old ] && dd=build-old/depthdec
    DD_CUDA_TIMEOUT_S=60 timeout 300 scripts/identity.sh run "$dd" "$ID/$1" --backend cuda --set full \
        >"$R/id_$1.log" 2>&1
}
declare -A pid
mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>&1)
log "compute mode: $mode"
if [ ! -x build-old/depthdec ]; then
    log "build-old/depthdec not carried: no identity check"
elif [ "$mode" = Default ]; then
    for side in old new; do
        id_run $side &
        pid[$side]=$!
    done
fi
dev/cuda/plan_check/build.sh >"$R/plan_check.log" 2>&1 && timeout 60 build-cuda/plan_check >>"$R/plan_check.log" 2>&1
log "plan_check rc $?: $(tail -1 "$R/plan_check.log") ($(el))"
grep -E "DIFFERENT|FAILED|cannot" "$R/plan_check.log" | head -8 | tee -a "$S"
DD_TEST_QUICK=2 timeout 120 $B/test_cuda >"$R/test_cuda.log" 2>&1
log "test_cuda (quick 2) rc $?: $(grep -E 'PASSED|FAILED' "$R/test_cuda.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/test_cuda.log" | head -8 | tee -a "$S"
for t in test_backends test_fixtures; do
    DD_TEST_QUICK=1 timeout 120 $B/$t >"$R/$t.log" 2>&1
    log "$t (quick 1) rc $?: $(grep -E 'PASSED|FAILED' "$R/$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE" "$R/$t.log" | head -8 | tee -a "$S"
done
if [ -x build-old/depthdec ]; then
    for side in old new; do
        if [ -n "${pid[$side]-}" ]; then wait "${pid[$side]}"; else id_run $side; fi
        log "identity run $side rc $?: $(tail -1 "$R/id_$side.log") ($(el))"
        cp "$ID/$side/SHA256SUMS" "$R/id_$side.sha256" 2>/dev/null
        cp "$ID/$side/log/run.txt" "$R/id_${side}_run.txt" 2>/dev/null
    done
    scripts/identity.sh compare "$ID/old" "$ID/new" >"$R/id_compare.log" 2>&1
    log "identity compare rc $?: $(tail -1 "$R/id_compare.log")"
    grep -E "^(DIFFERENT|only in)" "$R/id_compare.log" | head -8 | tee -a "$S"
fi
rm -rf "$ID"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
