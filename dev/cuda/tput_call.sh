#!/usr/bin/env bash
# Device call (2026-12-04, issue 14): the throughput executor (src/cuda/tput.cu) on the H200. test_tput unquick (bit
# for bit against the frame kernel, graph replays included), test_invariance / test_device_api / test_device_capture
# quick, dev/cuda/exec_ab.c (the executors per batch in one process: GPT dims bf16 with the latency executor up to 48
# streams and the frame kernel at 16/64/256, CSM dims; AB_GPT / AB_CSM override the batches), ncu's kernel durations
# of one GPT B256 frame by kernel, the PyTorch graph loop (scripts/bench_torch.py) and bench --capacity in the same
# call, memcheck on test_tput quick 2, ncu sections of one tp_attend launch; with HANG_PROBE=1 first which executor
# stalls on the Kyutai MLX q8 fixture (dev/cuda/hang_probe.c, each case its own process under timeout).
# Carry build-cuda/{cuobj,obj,tobj}.   OUT=$OUT bash dev/cuda/tput_call.sh
CALL=tput source "$(dirname "$0")/call_env.sh"
dev_prog exec_ab
dev_prog hang_probe
if [ -n "${HANG_PROBE-}" ]; then # the Kyutai MLX q8 stall on the latency executor (issue 17)
    for ex in frame lat tput; do
        for op in score greedy greedy_c0; do
            DD_CUDA_TIMEOUT_S=3 timeout 12 $B/hang_probe tests/fixtures/kyutai_mlx_q8/model.q8.safetensors $ex $op 6 \
                >>"$R/hang.log" 2>&1
            log "hang_probe kyutai_mlx_q8 $ex $op n=6 rc $?: $(tail -1 "$R/hang.log" | cut -c1-160)"
        done
    done
fi
unset DD_TEST_QUICK
DD_TEST_ONLY=test_tput timeout 200 $B/test_cuda >"$R/test_tput.log" 2>&1
log "test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_tput.log" | tr '\n' ' ') ($(el))"
grep -E "n=|^\[  FAILED|^\[   LINE|error" "$R/test_tput.log" | head -14 | tee -a "$S"
for t in test_invariance test_device_api test_device_capture; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 100 $B/test_cuda >"$R/$t.log" 2>&1
    log "$t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE" "$R/$t.log" | head -4 | tee -a "$S"
done
timeout 120 $B/exec_ab gpt bf16 10 ${AB_GPT:-1 2 3 4 5 6 8 16 32 64 128 256 512} >"$OUT/exec_ab.jsonl" 2>"$R/exec_ab_gpt.err"
log "exec_ab gpt rc $? ($(el))"
EXEC_AB_NOFRAME=1 timeout 100 $B/exec_ab csm bf16 6 ${AB_CSM:-1 2 4 6 8 16 32 64 128 256} >>"$OUT/exec_ab.jsonl" 2>"$R/exec_ab_csm.err"
log "exec_ab csm rc $? ($(el))"
python3 - "$OUT/exec_ab.jsonl" <<'PY' | tee -a "$S"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['model']} B{r['batch']:<4} {r['executor']:<6} {r['ms_per_frame']:8.3f} ms  {r['stream_frames_per_s']:7.0f} sf/s  codes_equal {r['codes_equal_first']}")
PY
cat "$R"/exec_ab_*.err | head -5 | tee -a "$S"
EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 120 ncu --metrics gpu__time_duration.sum --csv \
    --launch-count 3000 $B/exec_ab gpt bf16 1 256 >"$R/ncu_gpt256.csv" 2>"$R/ncu.err"
log "ncu rc $? ($(el))"
python3 dev/cuda/ncu_by_kernel.py "$R/ncu_gpt256.csv" "gpt bf16 B256 one frame on the throughput executor" | tee -a "$S"
for m in gpt csm; do
    timeout 40 $B/depthdec export --synthetic $m --weights bf16 --out /tmp/dd_$m.safetensors >/dev/null 2>&1
done
timeout 100 python3 scripts/bench_torch.py bench /tmp/dd_gpt.safetensors --name gpt --batch 8 16 64 256 512 --frames 10 \
    --json "$OUT/torch_gpt.json" 2>&1 | tail -5 | tee -a "$S"
timeout 60 python3 scripts/bench_torch.py bench /tmp/dd_csm.safetensors --name csm --batch 8 256 --frames 10 \
    --json "$OUT/torch_csm.json" 2>&1 | tail -2 | tee -a "$S"
for m in gpt csm; do
    timeout 100 $B/depthdec bench --capacity --backend cuda --synthetic $m --json "$R/capacity_$m.json" 2>&1 | tail -3 | tee -a "$S"
done
DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_tput timeout 120 \
    compute-sanitizer --tool memcheck $B/test_cuda >"$R/memcheck_tput.log" 2>&1
log "memcheck test_tput (quick 2) rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$R/memcheck_tput.log" | tr '\n' ' ') ($(el))"
EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 90 ncu --kernel-name tp_attend --launch-skip 60 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section LaunchStats $B/exec_ab gpt bf16 1 256 >"$R/ncu_attend.txt" 2>&1
log "ncu tp_attend rc $? ($(el))"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
