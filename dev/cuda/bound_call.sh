#!/usr/bin/env bash
# One device call for issue 14's practical bound: dev/cuda/gemm_bound.py (the frame's matrix products alone, as
# cuBLAS products in one CUDA graph, two-term and one-term rows; each shape's rate; the 8192^3 dense rate) beside the
# PyTorch graph loop of scripts/bench_torch.py and depthdec bench at the bars' batches, all in this call.
#   OUT=$OUT CAP_S=400 bash dev/cuda/bound_call.sh      (carry build-cuda/{cuobj,obj,tobj}, .debs)
# NCU_SHAPES="512,1024,3072 ..." (rows,K,N) adds ncu of cuBLAS's kernel for each shape (name, grid, cluster, rates);
# ONLY_NCU=1 with it: the exports and the ncu runs only.
# Writes $OUT/summary.txt, $OUT/gemm_{gpt,csm}.json, $OUT/torch_{gpt,csm}.json, $OUT/bench.jsonl, $OUT/work.tgz.
CALL=bound source "$(dirname "$0")/call_env.sh"
for m in gpt csm; do
    timeout 40 $B/depthdec export --synthetic $m --weights bf16 --out /tmp/dd_$m.safetensors >/dev/null 2>&1
done
if [ -n "${NCU_SHAPES:-}" ]; then # ROWS,K,N ...: ncu of cuBLAS's kernel for each (its name says the tile, cluster)
    for sh in $NCU_SHAPES; do
        fits 30 "ncu $sh" || continue
        timeout 60 ncu --kernel-name regex:"gemm|nvjet|xmma|cutlass|sm90" --launch-skip 1 --launch-count 1 \
            --section LaunchStats --section SpeedOfLight --section Occupancy \
            python3 dev/cuda/gemm_bound.py - --name x --json - --shape $sh >"$R/ncu_$sh.txt" 2>&1
        log "ncu $sh rc $?: $(grep -E '^  [a-zA-Z_].*\(' "$R/ncu_$sh.txt" | head -1 | cut -c1-200)"
        grep -E "Duration|Cluster Size|Grid Size|Block Size|Registers Per|Compute \(SM\) Throughput|Memory Throughput" \
            "$R/ncu_$sh.txt" | sed 's/   */ /g' | tee -a "$S"
    done
fi
[ -n "${ONLY_NCU:-}" ] && { (cd "$OUT" && tar czf work.tgz work && rm -rf work); exit 0; }
log "torch $(python3 -c 'import torch; print(torch.__version__)')"
fits 120 "gemm gpt" && timeout 150 python3 dev/cuda/gemm_bound.py /tmp/dd_gpt.safetensors --name gpt \
    --batch ${GB_GPT:-8 64 256 512} --json "$OUT/gemm_gpt.json" 2>&1 | tee -a "$S"
fits 60 "gemm csm" && timeout 80 python3 dev/cuda/gemm_bound.py /tmp/dd_csm.safetensors --name csm --batch 256 \
    --json "$OUT/gemm_csm.json" 2>&1 | tee -a "$S"
fits 40 "gemm gpt f32" && timeout 60 python3 dev/cuda/gemm_bound.py /tmp/dd_gpt.safetensors --name gpt --batch 256 \
    --f32-out --reps 20 --json "$OUT/gemm_gpt_f32.json" 2>&1 | grep -v "^  " | tee -a "$S"
fits 60 "torch gpt" && timeout 90 python3 scripts/bench_torch.py bench /tmp/dd_gpt.safetensors --name gpt \
    --batch 64 256 512 --frames 10 --json "$OUT/torch_gpt.json" 2>&1 | tail -3 | tee -a "$S"
fits 40 "torch csm" && timeout 60 python3 scripts/bench_torch.py bench /tmp/dd_csm.safetensors --name csm \
    --batch 256 --frames 10 --json "$OUT/torch_csm.json" 2>&1 | tail -1 | tee -a "$S"
: >"$OUT/bench.jsonl"
for b in 64 256 512; do cu_bench gpt bf16 $b 10; done
cu_bench csm bf16 256 10
cu_bench gpt q8 256 10
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
