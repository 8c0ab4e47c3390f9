#!/usr/bin/env bash
# The persistent throughput form (dev/cuda/tput_persist.patch, DD_TPP=1) in one device call (its host plan check,
# dev/cuda/tpp_check, needs no GPU: run it before): a side with the patch; test_tput unquick with DD_TPP=1 (GPT-dims
# cases on the persistent form, bit for bit against the frame kernel, graph replays included; CSM and tiny cases
# refused: the launches run them), then test_invariance and test_device_capture quick, memcheck on test_tput quick 2; then exec_ab on the throughput
# executor, GPT dims bf16 at 8, 64, 256 and 512 streams: base, side without and with DD_TPP=1 (and with
# DD_TPP_EPIPARTS=4: a many-plane epilogue in 4 token parts, tested quick first); the task trace of a
# frame at 64, 256 and 512 streams (dev/cuda/tpp_trace.cu: CTA time by task kind, to set beside tpp_check's model).
# In two parts that fit a call each (~5 min): PART=1 the tests and the task trace, PART=2 the timings and memcheck
# (default: both, ~10 min, over one call's limit).
#   OUT=$OUT PART=1 bash dev/cuda/tput_persist_call.sh
CALL=tput_persist source "$(dirname "$0")/call_env.sh"
C=/tmp/tp_persist
side_build $C dev/cuda/tput_persist.patch || exit 1
dev_prog exec_ab
SB=$C/build-cuda
unset DD_TEST_QUICK
PART=${PART:-1 2}
if [[ $PART == *1* ]]; then
DD_TPP=1 DD_TEST_ONLY=test_tput timeout 200 stdbuf -oL $SB/test_cuda >"$R/test_tput.log" 2>&1
log "DD_TPP=1 test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_tput.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE|persistent" "$R/test_tput.log" | head -6 | tee -a "$S"
DD_TPP=1 DD_TPP_EPIPARTS=4 DD_TEST_QUICK=1 DD_TEST_ONLY=test_tput timeout 150 stdbuf -oL $SB/test_cuda >"$R/test_tput_ep4.log" 2>&1
log "DD_TPP=1 DD_TPP_EPIPARTS=4 test_tput (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_tput_ep4.log" | tr '\n' ' ') ($(el))"
for t in test_invariance test_device_capture; do
    DD_TPP=1 DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 100 stdbuf -oL $SB/test_cuda >"$R/$t.log" 2>&1
    log "DD_TPP=1 $t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/$t.log" | tr '\n' ' ') ($(el))"
done
# the task trace (dev/cuda/tpp_trace.cu, in the patch): where a frame's CTA time goes, beside tpp_check's model
(cd $C && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -fmad=false --std=c++17 -Iinclude -Isrc -DDD_WITH_CUDA=1 \
    -DDD_WITH_CPU=1 dev/cuda/tpp_trace.cu build-cuda/libdepthdec.a -L/usr/local/cuda/lib64 -lcudart -ljansson -lm -lpthread \
    -o build-cuda/tpp_trace) >"$R/build_tpp_trace.log" 2>&1 || log "tpp_trace build failed"
for b in 64 256 512; do
    timeout 60 $SB/tpp_trace gpt bf16 $b decode "$R/tpp_trace_$b.csv" >"$R/tpp_trace_$b.txt" 2>&1
    log "tpp_trace gpt B$b rc $? ($(el))"
    head -12 "$R/tpp_trace_$b.txt" | tee -a "$S"
done
gzip -f "$R"/tpp_trace_*.csv
fi
if [[ $PART == *2* ]]; then
: >"$OUT/exec_ab.jsonl"
for side in base side tpp tpp_ep4; do
    bin=$SB/exec_ab
    [ $side = base ] && bin=build-cuda/exec_ab
    e=
    [ $side = tpp ] && e=DD_TPP=1
    [ $side = tpp_ep4 ] && e="DD_TPP=1 DD_TPP_EPIPARTS=4"
    env $e EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 100 $bin gpt bf16 10 8 64 256 512 \
        2>>"$R/exec_ab.err" | sed "s/^{/{\"side\": \"$side\", /" >>"$OUT/exec_ab.jsonl"
done
python3 - "$OUT/exec_ab.jsonl" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = {(r["side"], r["batch"]): (r["ms_per_frame"], r["codes_equal_first"]) for r in rows}
for b in sorted({r["batch"] for r in rows}):
    print(f"gpt B{b:<4} " + "  ".join(f"{s} {d[(s, b)][0]:8.3f}" for s in ("base", "side", "tpp", "tpp_ep4") if (s, b) in d))
PY
tail -3 "$R/exec_ab.err" | tee -a "$S"
DD_TPP=1 DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_tput timeout 150 \
    compute-sanitizer --tool memcheck $SB/test_cuda >"$R/memcheck.log" 2>&1
log "DD_TPP=1 memcheck test_tput (quick 2) rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$R/memcheck.log" | tr '\n' ' ') ($(el))"
fi
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
