#!/usr/bin/env bash
# The device check of branch ltplan (the latency executor's op list translated from the frame plan, issue 12 point
# 1), as one call on the H200 (~5 min):
#   1. dev/cuda/ltplan_check: every latency plan (ops, steps, pieces, SM lists) byte-identical to the old builder's
#      (host code: 39 models x 2 device shapes x kind x n 1..8 x role), and its --mutate op run must differ
#   2. test_cuda at DD_TEST_QUICK=2 (every test), then test_executors unquick (DD_TEST_ONLY=test_executors: the
#      latency executor against the frame kernel, every family and weight type)
#   3. scripts/identity.sh run --backend cuda --set full with the CLI of 0bf2d7c (build-old/depthdec, built off the
#      device: scripts/identity.sh build 0bf2d7c build-old CUDA=1 CUDA_ARCH=sm_90) and with this tree's, then
#      compare (its calls of 1, 3 and 4 rows run on the latency executor). The two runs go side by side, in the
#      background while 1 and 2 run, when the GPU's compute mode is Default (else one after the other, after 2).
# Carry build-cuda/{cuobj,obj,tobj} built here (make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda tests) and build-old
# (~14 MB), or only build-old/src.tgz (git archive of the old revision: its CLI is then built there, ~1 min); the
# untracked .debs/ travels with the tree. Then, in the same call (the checks the previous session left open):
#   4. test_fixtures on cuda (the Kyutai MLX fixtures of issue 17), compute-sanitizer racecheck on test_device_api
#      at DD_TEST_QUICK=3, dev/cuda/derisk/run.sh tput_linear (the us_pdl and tput_linear64 columns, issue 14)
# Writes $OUT/summary.txt and $OUT/work.tgz (the logs, the
# identity runs' sums and comparison; their models and outputs stay on the device).
#   OUT=$OUT bash dev/cuda/ltplan_call.sh
CALL=ltplan source "$(dirname "$0")/call_env.sh"
ID=/tmp/ltplan_id
if [ ! -x build-old/depthdec ] && [ -f build-old/src.tgz ]; then
    rm -rf /tmp/old_tree && mkdir -p /tmp/old_tree && tar xzf build-old/src.tgz -C /tmp/old_tree &&
        (cd /tmp/old_tree && make CUDA=1 CUDA_ARCH=sm_90 BUILD=build -j16 build/depthdec) >"$R/build_old.log" 2>&1 &&
        cp /tmp/old_tree/build/depthdec build-old/depthdec
    log "old CLI built from build-old/src.tgz rc $? ($(el))"
fi
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
dev/cuda/ltplan_check/build.sh >"$R/ltplan_check_build.log" 2>&1 &
cpid=$!
DD_TEST_QUICK=2 timeout 150 $B/test_cuda >"$R/test_cuda.log" 2>&1
log "test_cuda (quick 2) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_cuda.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/test_cuda.log" | head -8 | tee -a "$S"
wait $cpid
log "ltplan_check build rc $? ($(el))"
timeout 120 build-cuda/ltplan_check >"$R/ltplan_check.log" 2>&1
log "ltplan_check rc $?: $(tail -1 "$R/ltplan_check.log") ($(el))"
grep -E "DIFFERENT|first difference|cannot" "$R/ltplan_check.log" | head -8 | tee -a "$S"
timeout 120 build-cuda/ltplan_check --mutate op >"$R/ltplan_check_mutate.log" 2>&1
log "ltplan_check --mutate op rc $? (1 expected): $(tail -1 "$R/ltplan_check_mutate.log")"
DD_TEST_ONLY=test_executors timeout 200 $B/test_cuda >"$R/test_executors.log" 2>&1
log "test_executors (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_executors.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/test_executors.log" | head -8 | tee -a "$S"
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
timeout 150 $B/test_fixtures >"$R/test_fixtures.log" 2>&1
log "test_fixtures rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_fixtures.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/test_fixtures.log" | head -6 | tee -a "$S"
DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=3 DD_TEST_ONLY=test_device_api timeout 150 \
    compute-sanitizer --tool racecheck $B/test_cuda >"$R/race_dev.log" 2>&1
log "racecheck test_device_api (quick 3) rc $?: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' "$R/race_dev.log" | tr '\n' ' ') ($(el))"
OUT=$R/derisk BUDGET_S=120 dev/cuda/derisk/run.sh tput_linear >"$R/derisk.log" 2>&1
log "derisk tput_linear rc $? ($(el))"
grep -E "^RESULT|^SUMMARY|^FAIL" "$R/derisk/derisk.txt" | tee -a "$S" >/dev/null
grep -E "^SUMMARY|^FAIL" "$R/derisk/derisk.txt" | head -5
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
