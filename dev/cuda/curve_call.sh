#!/usr/bin/env bash
# One device call (2026-12-04): the batch curve of the cuda backend as it ships (latency executor up to 48 streams in
# groups of <= 8, the frame kernel above), depthdec bench medians, with the PyTorch graph loop of
# scripts/bench_torch.py in the same call, and bench --capacity for GPT and CSM dims bf16. Writes $OUT/bench.jsonl,
# $OUT/torch_{gpt,csm}.json, $OUT/capacity_{gpt,csm}.json, $OUT/summary.txt. Carry build-cuda/{cuobj,obj,tobj}, .debs/.
#   OUT=$OUT bash dev/cuda/curve_call.sh
MAKE_TARGET= CALL=curve source "$(dirname "$0")/call_env.sh"
bench() { # model weights batch frames
    timeout 120 $B/depthdec bench --backend cuda --synthetic $1 --weights $2 --batch $3 --frames $4 --json /tmp/b.json >/dev/null 2>>"$R/bench.err" &&
        cat /tmp/b.json >>"$OUT/bench.jsonl" && echo >>"$OUT/bench.jsonl" &&
        log "$1 $2 B$3: $(python3 -c "import json;r=json.load(open('/tmp/b.json'));print(r['ms_per_frame'],'ms/frame',round(r['stream_frames_per_s'],1),'stream-frames/s')")"
}
for w in bf16 q8 q4; do bench gpt $w 1 30; done
bench csm bf16 1 30
bench csm q8 1 30
for b in 2 4 8 16 32 48 64 128 256 512; do bench gpt bf16 $b 20; done
for b in 8 16 32 48 64 256; do bench csm bf16 $b 10; done
for m in gpt csm; do
    timeout 40 $B/depthdec export --synthetic $m --weights bf16 --out /tmp/dd_$m.safetensors >/dev/null 2>&1
done
timeout 200 python3 scripts/bench_torch.py bench /tmp/dd_gpt.safetensors --name gpt --batch 1 8 16 64 256 512 --frames 20 \
    --json "$OUT/torch_gpt.json" 2>&1 | tail -8 | tee -a "$S"
timeout 100 python3 scripts/bench_torch.py bench /tmp/dd_csm.safetensors --name csm --batch 1 256 --frames 20 \
    --json "$OUT/torch_csm.json" 2>&1 | tail -3 | tee -a "$S"
for m in gpt csm; do
    timeout 120 $B/depthdec bench --capacity --backend cuda --synthetic $m --json "$OUT/capacity_$m.json" 2>&1 | tee -a "$S"
done
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ)"
