#!/usr/bin/env bash
# One device call from a packed carry (2026-12-07, second session; carry build-pack, .debs), its parts in this order,
# each skipped when what is left of CAP_S (default 570 s) would not hold it; PARTS picks them:
#   samp   a sampler side (build-ab/pre1/test_cuda): its test_sample unquick and test_tput quick, then the latency
#          A/B of SAMP_SIDES (lat_hot_call.sh: the sides' tests, the per-op timelines of TL_CFGS); first run
#          2026-12-07 with samp_gmax (landed), then with SAMP_SIDES="s2:... cmp:..." (lat_samp2, samp_compact)
#   ab     the throughput A/B, exec_ab base (pre0) / PRE sides (pre1: samp, pre2: tput_ydead) (prebuilt_ab.sh)
#   tl     the throughput kernel timeline (tp_tl_run.sh, build-ab/tl)
#   land   the landed tree's bench curve with the PyTorch graph loop and capacity (land_call.sh PART=speed); on an
#          H200 only unless LAND_ANY=1 (the bars are the H200's)
#   bound  the vendor products' bound (gemm_bound.py)
# Every part's folder comes back as one archive in $OUT.      OUT=$OUT PARTS="samp ab tl" bash dev/cuda/pack_item1_call.sh
set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh" 570 "samp ab tl land bound"
mkdir -p /tmp/samp /tmp/land /tmp/bound
export DD_CUDA_TIMEOUT_S=5
if [[ $P == *samp* ]] && [ "$(left)" -gt 200 ]; then
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >/tmp/samp/gpu.txt
    env -u DD_TEST_QUICK DD_TEST_ONLY=test_sample timeout 100 build-ab/pre1/test_cuda >/tmp/samp/test_sample.log 2>&1
    echo "samp test_sample unquick rc $? left $(left)" >>"$O/parts.txt"
    DD_TEST_QUICK=1 DD_TEST_ONLY=test_tput timeout 100 build-ab/pre1/test_cuda >/tmp/samp/test_tput.log 2>&1
    echo "samp test_tput quick rc $? left $(left)" >>"$O/parts.txt"
    OUT=/tmp/samp/lat SIDES="${SAMP_SIDES:?SAMP_SIDES}" TL_CFGS="${TL_CFGS:-gpt:bf16:1 csm:bf16:1 gpt:bf16:8}" \
        AB_CUT_S=$(($(left) > 260 ? 200 : $(left) - 60)) bash dev/cuda/lat_hot_call.sh >/tmp/samp/lat_run.log 2>&1
    echo "samp lat A/B rc $? left $(left)" >>"$O/parts.txt"
fi
if [[ $P == *ab* ]] && [ "$(left)" -gt 90 ]; then
    OUT=/tmp/ab PRE_SPECS="${PRE_SPECS:-gpt bf16 10 64|gpt bf16 10 256|csm bf16 6 256}" PRE_ROUNDS=2 \
        timeout $(($(left) > 200 ? 150 : $(left) - 30)) bash dev/cuda/prebuilt_ab.sh run >/tmp/ab_run.log 2>&1
    echo "ab rc $? left $(left)" >>"$O/parts.txt"
fi
if [[ $P == *tl* ]] && [ "$(left)" -gt 80 ]; then
    OUT=/tmp/tl TL_SPECS="${TL_SPECS:-gpt bf16 256|gpt bf16 64}" timeout $(($(left) - 40)) bash dev/cuda/tp_tl_run.sh run \
        >/tmp/tl_run.log 2>&1
    echo "tp_tl rc $? left $(left)" >>"$O/parts.txt"
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu $GPU" >>"$O/parts.txt"
[[ $GPU == *H200* || -n ${LAND_ANY:-} ]] || P=${P//land/} P=${P//bound/}
if [[ $P == *land* ]] && [ "$(left)" -gt 200 ]; then
    OUT=/tmp/land PART=speed TL_CFGS="gpt:bf16:1 csm:bf16:1" CAP_S=$(($(left) - 20)) \
        bash dev/cuda/land_call.sh >/tmp/land/run.log 2>&1
    echo "land rc $? left $(left)" >>"$O/parts.txt"
fi
if [[ $P == *bound* ]] && [ "$(left)" -gt 100 ]; then
    for m in gpt csm; do
        [ -f /tmp/dd_$m.safetensors ] || timeout 40 build-cuda/depthdec export --synthetic $m --weights bf16 \
            --out /tmp/dd_$m.safetensors >/dev/null 2>&1
    done
    timeout $(($(left) - 20)) python3 dev/cuda/gemm_bound.py /tmp/dd_gpt.safetensors --name gpt --batch 64 256 512 \
        --json /tmp/bound/gemm_gpt.json >/tmp/bound/gemm_gpt.log 2>&1
    echo "gemm gpt rc $? left $(left)" >>"$O/parts.txt"
fi
for d in samp ab tl land bound; do [ -n "$(ls -A /tmp/$d 2>/dev/null)" ] && tar czf "$O/$d.tgz" -C /tmp $d; done
cp /tmp/tl_run.log /tmp/ab_run.log "$O/" 2>/dev/null
echo "# $(date -u +%FT%TZ) done" >>"$O/parts.txt"
