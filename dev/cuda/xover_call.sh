#!/usr/bin/env bash
# The crossover by model (backend.cu, 2026-12-06 20:4x UTC): test_tput (its crossover_is checks) and test_executors
# quick, then depthdec bench at 1-4 and 8 streams on the default route (GPT bf16 / q8, CSM bf16), then (NSYS) a
# GPT B256 kernel timeline from Nsight Systems where the device has it. Carry
# build-cuda/{cuobj,obj,tobj}, .debs.     OUT=$OUT bash dev/cuda/xover_call.sh
CALL=xover source "$(dirname "$0")/call_env.sh"
cuda_test tput_quick $B/test_cuda test_tput 200 DD_TEST_QUICK=1
cuda_test executors_quick $B/test_cuda test_executors 150 DD_TEST_QUICK=1
: >"$OUT/bench.jsonl"
for b in 1 2 3 4 8; do cu_bench gpt bf16 $b 20; done
for b in 1 2 4; do cu_bench csm bf16 $b 12; done
for b in 1 2; do cu_bench gpt q8 $b 12; done
# NSYS=1: where the device has Nsight Systems, the real (unserialised) kernel timeline of GPT bf16 B256 frames on the
# throughput executor (the frame's graph traced by node): $OUT/nsys_trace.csv for dev/cuda/nsys_gaps.py
NS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
log "nsys: ${NS:-none}"
if [ "${NSYS:-1}" = 1 ] && [ -n "$NS" ] && fits 90 "nsys"; then
    dev_prog exec_ab
    EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 EXEC_AB_WARM=2 timeout 120 "$NS" profile -o "$R/tl" -f true --trace=cuda \
        --cuda-graph-trace=node $B/exec_ab gpt bf16 3 256 >"$R/nsys.log" 2>&1
    log "nsys profile rc $? ($(el))"
    timeout 120 "$NS" stats --report cuda_gpu_trace --format csv -o "$OUT/nsys" "$R/tl.nsys-rep" >>"$R/nsys.log" 2>&1
    log "nsys stats rc $?: $(ls "$OUT"/nsys* 2>/dev/null | tr '\n' ' ') ($(el))"
    tail -5 "$R/nsys.log" >>"$S"
fi
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
