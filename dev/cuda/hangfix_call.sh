#!/usr/bin/env bash
# Device check of the latency executor's sampler barrier and slice-norm refusal (issue 17, 2026-12-04 19:2x UTC):
# test_fixtures' Kyutai and Moshi fixtures on every backend, hang_probe's c0-given and score requests on the
# latency executor with kyutai_tiny (V > D: the race the host flow check found), test_executors quick.
# Carry build-cuda/{cuobj,obj,tobj} and build-cuda/hang_probe.   OUT=$OUT bash dev/cuda/hangfix_call.sh
CALL=hangfix source "$(dirname "$0")/call_env.sh"
DD_TEST_ONLY='test_k*' timeout 60 $B/test_fixtures >"$R/fx_k.log" 2>&1
log "test_fixtures test_k* rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/fx_k.log" | tr '\n' ' ') ($(el))"
grep -E "mlx.* cuda |FAILED|LINE|ERROR" "$R/fx_k.log" | head -8 | tee -a "$S"
DD_TEST_ONLY='test_moshi*' timeout 40 $B/test_fixtures >"$R/fx_m.log" 2>&1
log "test_fixtures test_moshi* rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/fx_m.log" | tr '\n' ' ') ($(el))"
for op in score greedy_c0; do
    DD_CUDA_TIMEOUT_S=3 timeout 10 $B/hang_probe tests/fixtures/kyutai_tiny/model.safetensors lat $op 6 >>"$R/hang.log" 2>&1
    log "hang_probe kyutai_tiny lat $op n=6 rc $?: $(tail -1 "$R/hang.log" | cut -c1-120)"
done
DD_TEST_QUICK=1 DD_TEST_ONLY=test_executors timeout 40 $B/test_cuda >"$R/ex.log" 2>&1
log "test_executors (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/ex.log" | tr '\n' ' ') ($(el))"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done ($(el))"
