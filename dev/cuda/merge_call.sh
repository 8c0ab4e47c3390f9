#!/usr/bin/env bash
# One device call after merging the Moshi-on-CUDA branch (2026-12-04): everything under a deadline (DEADLINE_S,
# default 540 s) in order of importance — build, test_cuda (all, quick), test_fixtures and test_backends (quick,
# Moshi/Kyutai on cuda included), bench lines (Moshi, GPT, CSM B1 and GPT B16), test_executors unquick, memcheck on
# test_executors (quick 2), the Python device path. Carry build-cuda/{cuobj,obj,tobj} and .debs/.
#   OUT=$OUT bash dev/cuda/merge_call.sh
CALL=merge source "$(dirname "$0")/call_env.sh"
left() { echo $(( ${DEADLINE_S:-540} - ($(date +%s) - T0) )); }
lim() { local l; l=$(left); [ "$l" -gt "$1" ] && echo "$1" || echo $(( l > 5 ? l : 5 )); }
run_t() { # name program env... : one test program under the deadline
    local name=$1 prog=$2; shift 2
    env "$@" timeout "$(lim 200)" $B/$prog >"$R/$name.log" 2>&1
    log "$name rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$R/$name.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE|moshi|kyutai" "$R/$name.log" | head -12 | tee -a "$S"
}
run_t cuda_all test_cuda DD_TEST_QUICK=1
run_t fixtures test_fixtures DD_TEST_QUICK=1
run_t backends test_backends DD_TEST_QUICK=1
for c in moshi:bf16:1 gpt:bf16:1 csm:bf16:1 gpt:bf16:16 moshi:bf16:8; do
    IFS=: read -r m w b <<<"$c"
    timeout "$(lim 60)" $B/depthdec bench --backend cuda --synthetic $m --weights $w --batch $b --frames 20 --json /tmp/b.json >"$R/bench_$m$b.log" 2>&1 &&
        log "bench $m $w B$b: $(python3 -c "import json;r=json.load(open('/tmp/b.json'));print(r['ms_per_frame'],'ms/frame')")" ||
        { log "bench $m $w B$b failed"; tail -3 "$R/bench_$m$b.log" | tee -a "$S"; }
done
run_t executors_full test_cuda DD_TEST_ONLY=test_executors
env DD_CUDA_TIMEOUT_S=120 DD_TEST_QUICK=2 DD_TEST_ONLY=test_executors timeout "$(lim 150)" \
    compute-sanitizer --tool memcheck $B/test_cuda >"$R/memcheck.log" 2>&1
log "memcheck test_executors rc $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck.log") ($(el))"
OUT=$R/devapi timeout "$(lim 150)" bash dev/cuda/devapi_check.sh python 2>&1 | tail -4 | tee -a "$S"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
