#!/usr/bin/env bash
# One device call that checks a merged tree on the H200 (used 2026-12-04 10:30 UTC, docs/cuda_results.md and
# docs/device_api.md): test_cuda (all quick; executors and sampler unquick), compute-sanitizer memcheck/racecheck on
# test_executors, test_fixtures/test_backends with the cuda backend, the Python device-path tests and depthdec.hf's
# GPU tests (dev/cuda/devapi_check.sh python), scripts/bench_hf.py, Qwen3-TTS dims bench beside the PyTorch graph,
# stage.cu. Carry build-cuda/{cuobj,obj,tobj} built here (make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda tests) and
# the untracked .debs/ (cmocka, jansson). ~6 min; racecheck on test_executors needs more than its 150 s here.
#   OUT=$OUT bash dev/cuda/final_call.sh
CALL=final source "$(dirname "$0")/call_env.sh"
for tq in all:1 test_executors:0 test_sample:0; do
    t=${tq%%:*} q=${tq#*:}
    qe=$([ "$q" = 0 ] && echo "env -u DD_TEST_QUICK" || echo "env DD_TEST_QUICK=$q")
    oe=$([ "$t" = all ] && echo "env -u DD_TEST_ONLY" || echo "env DD_TEST_ONLY=$t")
    $qe $oe timeout 200 $B/test_cuda >"$R/cuda_$t.log" 2>&1
    log "test_cuda $tq rc $?: $(grep -E 'PASSED|FAILED' "$R/cuda_$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE|error" "$R/cuda_$t.log" | head -8 | tee -a "$S"
done
for tool in memcheck racecheck; do
    DD_CUDA_TIMEOUT_S=120 DD_TEST_QUICK=2 DD_TEST_ONLY=test_executors timeout 150 \
        compute-sanitizer --tool $tool $B/test_cuda >"$R/san_$tool.log" 2>&1
    log "compute-sanitizer $tool test_executors rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/san_$tool.log" | tr '\n' ' ') ($(el))"
done
for t in test_fixtures test_backends; do
    DD_TEST_QUICK=1 timeout 150 $B/$t >"$R/$t.log" 2>&1
    log "$t rc $?: $(grep -E 'PASSED|FAILED' "$R/$t.log" | tr '\n' ' ') ($(el))"
    grep -E "cuda" "$R/$t.log" | head -12 | tee -a "$S"
done
# the Python package with the cuda backend; the device-path tests, then depthdec.hf on the GPU
OUT=$R/devapi timeout 150 bash dev/cuda/devapi_check.sh python 2>&1 | tail -6 | tee -a "$S"
export PYTHONPATH=/tmp/ddsite:$PWD/python/src
(cd /tmp && timeout 200 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/python/tests/test_hf.py" >"$R/test_hf.log" 2>&1)
log "pytest test_hf.py rc $?: $(tail -1 "$R/test_hf.log") ($(el))"
grep -E "^(FAILED|ERROR|SKIPPED)" "$R/test_hf.log" | head -8 | tee -a "$S"
timeout 200 python3 scripts/bench_hf.py --device cuda --frames 50 --json "$OUT/hf.json" >"$R/bench_hf.log" 2>&1
log "bench_hf rc $? ($(el))"
tail -20 "$R/bench_hf.log" | tee -a "$S"
# Qwen3-TTS dims on the cuda backend beside the PyTorch graph loop (issue 17 point 5)
for w in bf16 q8; do
    timeout 60 $B/depthdec bench --backend cuda --synthetic qwen3tts --weights $w --batch 1 --frames 30 \
        --json /tmp/q_$w.json >>"$R/qbench.log" 2>&1 && cat /tmp/q_$w.json >>"$OUT/qwen_bench.jsonl" && echo >>"$OUT/qwen_bench.jsonl"
    log "qwen3tts $w B1: $(python3 -c "import json;r=json.load(open('/tmp/q_$w.json'));print(r['ms_per_frame'],'ms/frame')" 2>&1)"
done
timeout 40 $B/depthdec export --synthetic qwen3tts --weights bf16 --out /tmp/dd_qwen3tts.safetensors >>"$R/qbench.log" 2>&1
timeout 120 python3 scripts/bench_torch.py bench /tmp/dd_qwen3tts.safetensors --name qwen3tts --batch 1 --frames 20 \
    --json "$OUT/qwen_torch.json" >>"$R/qbench.log" 2>&1
log "qwen3tts torch rc $?: $(tail -2 "$R/qbench.log" | tr '\n' ' ') ($(el))"
nvcc -O3 -std=c++17 -fmad=false -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/derisk/stage.cu \
    -o /tmp/stage >"$R/stage_build.log" 2>&1 && timeout 60 /tmp/stage >"$R/stage.txt" 2>&1
log "stage rc $? ($(el))"
grep -E "RESULT.*(sample|hist|argmax).*idle|codes" "$R/stage.txt" | tee -a "$S"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
