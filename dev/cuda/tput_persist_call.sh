#!/usr/bin/env bash
# The persistent throughput form (dev/cuda/tput_persist.patch, DD_TPP=1) in one device call (its host plan check,
# dev/cuda/tpp_check, needs no GPU: run it before): a side with the patch; test_tput unquick with DD_TPP=1 (GPT-dims
# cases on the persistent form, bit for bit against the frame kernel, graph replays included; CSM and tiny cases
# refused: the launches run them), then test_invariance and test_device_capture quick, memcheck on test_tput quick
# 2; then exec_ab on the throughput executor, GPT dims bf16 at 8, 64, 256 and 512 streams: base, side without and
# with DD_TPP=1 (and with DD_TPP_EPIPARTS=4: a many-plane epilogue in 4 token parts, tested quick first); the task
# trace of a frame at 64, 256 and 512 streams (dev/cuda/tpp_trace.cu: CTA time by task kind, beside tpp_check's
# model).
# In two parts that fit a call each (~5 min): PART=1 the tests and the task trace, PART=2 the timings and memcheck
# (default: both, ~10 min, over one call's limit).
#   OUT=$OUT PART=1 bash dev/cuda/tput_persist_call.sh
# Both parts in one call: PART="1 2" TPP_LEAN=1 (no EPIPARTS=4 runs, no memcheck, exec_ab base and tpp only) with
# CAP_S=540: a step is skipped when the seconds used plus its usual length would pass CAP_S.
CALL=tput_persist source "$(dirname "$0")/call_env.sh"
C=/tmp/tp_persist
side_build $C dev/cuda/tput_persist.patch || exit 1
dev_prog exec_ab
SB=$C/build-cuda
unset DD_TEST_QUICK
PART=${PART:-1 2}
LEAN=${TPP_LEAN:-}
if [[ $PART == *1* ]]; then
cuda_test tpp_test_tput $SB/test_cuda test_tput 200 DD_TPP=1
grep -E "persistent" "$R/tpp_test_tput.log" | head -2 | tee -a "$S"
[ -z "$LEAN" ] && cuda_test tpp_ep4_test_tput $SB/test_cuda test_tput 150 DD_TPP=1 DD_TPP_EPIPARTS=4 DD_TEST_QUICK=1
for t in test_invariance test_device_capture; do
    fits 40 $t && cuda_test tpp_$t $SB/test_cuda $t 100 DD_TPP=1 DD_TEST_QUICK=1
done
# the task trace (dev/cuda/tpp_trace.cu, in the patch): where a frame's CTA time goes, beside tpp_check's model
(cd $C && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -fmad=false --std=c++17 -Iinclude -Isrc -DDD_WITH_CUDA=1 \
    -DDD_WITH_CPU=1 dev/cuda/tpp_trace.cu build-cuda/libdepthdec.a -L/usr/local/cuda/lib64 -lcudart -ljansson -lm -lpthread \
    -o build-cuda/tpp_trace) >"$R/build_tpp_trace.log" 2>&1 || log "tpp_trace build failed"
for b in 64 256 512; do
    fits 20 "tpp_trace B$b" || continue
    timeout 60 $SB/tpp_trace gpt bf16 $b decode "$R/tpp_trace_$b.csv" >"$R/tpp_trace_$b.txt" 2>&1
    log "tpp_trace gpt B$b rc $? ($(el))"
    head -12 "$R/tpp_trace_$b.txt" | tee -a "$S"
done
gzip -f "$R"/tpp_trace_*.csv
fi
if [[ $PART == *2* ]]; then
: >"$OUT/exec_ab.jsonl"
fits 40 "exec_ab base" && ab_side base build-cuda/exec_ab "gpt bf16 10 8 64 256 512"
[ -z "$LEAN" ] && ab_side side $SB/exec_ab "gpt bf16 10 8 64 256 512"
fits 40 "exec_ab tpp" && ab_side tpp $SB/exec_ab "gpt bf16 10 8 64 256 512" DD_TPP=1
[ -z "$LEAN" ] && ab_side tpp_ep4 $SB/exec_ab "gpt bf16 10 8 64 256 512" DD_TPP=1 DD_TPP_EPIPARTS=4
python3 dev/cuda/ab_table.py "$OUT/exec_ab.jsonl" | tee -a "$S"
tail -3 "$R/exec_ab.err" | tee -a "$S"
[ -z "$LEAN" ] && cuda_memcheck tpp_memcheck $SB/test_cuda DD_TPP=1
fi
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
