#!/usr/bin/env bash
# Device call (2026-12-04 evening, issue 14): the batch curve of the cuda backend as it ships with the throughput
# executor (latency executor up to 4 streams where the throughput executor covers the model, which takes the
# larger batches), checked first: test_tput unquick, test_invariance / test_device_api / test_device_capture /
# test_executors quick, test_fixtures' Kyutai MLX fixtures (issue 17). Then depthdec bench medians, the PyTorch
# graph loop of scripts/bench_torch.py and bench --capacity in the same call.
# Writes $OUT/summary.txt, $OUT/bench.jsonl, $OUT/torch_gpt.json, $OUT/torch_csm.json, $OUT/work.tgz (logs,
# capacity JSON). Carry build-cuda/{cuobj,obj,tobj}.   OUT=$OUT bash dev/cuda/tput_curve_call.sh
CALL=curve source "$(dirname "$0")/call_env.sh"
unset DD_TEST_QUICK
DD_TEST_ONLY=test_tput timeout 150 $B/test_cuda >"$R/test_tput.log" 2>&1
log "test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_tput.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/test_tput.log" | head -4 | tee -a "$S"
for t in test_invariance test_device_api test_device_capture test_executors; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 120 $B/test_cuda >"$R/$t.log" 2>&1
    log "$t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE" "$R/$t.log" | head -4 | tee -a "$S"
done
DD_TEST_ONLY='test_kyutai_mlx*' timeout 60 $B/test_fixtures >"$R/kyutai_mlx.log" 2>&1
log "test_fixtures test_kyutai_mlx* rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/kyutai_mlx.log" | tr '\n' ' ') ($(el))"
grep -E " cuda |FAILED|LINE" "$R/kyutai_mlx.log" | head -6 | tee -a "$S"
for w in bf16 q8; do cu_bench gpt $w 1 30; done
cu_bench csm bf16 1 30
for b in 2 4 8 16 32 64 128 256 512; do cu_bench gpt bf16 $b 20; done
for b in 8 16 64 256; do cu_bench csm bf16 $b 10; done
cu_torch_capacity
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
