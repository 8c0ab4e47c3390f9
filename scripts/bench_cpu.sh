#!/usr/bin/env bash
# CPU result table: `depthdec bench` for GPT and CSM dims, bf16 / q8 / q4, batches 1, 4, 16, 64, on the cpu
# backend; every run measures the read bandwidth itself. Writes one JSON object per line to $1 (default
# docs/cpu_bench.jsonl) and the markdown table to docs/cpu_results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/cpu_bench.jsonl}
frames=${FRAMES:-10}
: >"$out"
for model in gpt csm; do
    for w in bf16 q8 q4; do
        for b in 1 4 16 64; do
            ./build/depthdec bench --synthetic $model --weights $w --batch $b --frames "$frames" --backend cpu \
                --json /tmp/dd_bench_one.json >&2
            cat /tmp/dd_bench_one.json >>"$out"
        done
    done
done
python3 scripts/bench_table.py "$out" --title "CPU backend, $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" >docs/cpu_results.md
cat docs/cpu_results.md
