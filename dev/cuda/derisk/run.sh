#!/usr/bin/env bash
# De-risk microbenchmarks of CUDA_V2.md ("Still open for your first call"), one device call:
#   ring.cu     per-SM cp.async.bulk weight ring: HBM and L2-resident rates, plain-load and memcpy references,
#               latency of one piece
#   cluster.cu  clusters of 2..16 at 200 KB: occupancy, DSMEM hop, global-memory hop, cluster barrier
#   wgmma.cu    two-term bf16 wgmma tile rate at (3072, 256, 1024) and full chip
#   mma_swap.cu mma.sync m16n8k16 with the operands in swapped roles (weights as B): bit-identical outputs?
#   wgmma_bits.cu  wgmma m64nNk16 hi/lo chains (weights or activations as A, A from smem or registers, N 64..256)
#               vs the engine's mma.sync m16n8k16 chain: bit-identical chunk partials?
#   tput_linear.cu  one exact linear for many tokens on wgmma (A = weights from registers) + TMA (hi/lo, 128B
#               swizzle), 128x128 tiles, GPT and CSM dims at T 128..1024: bit-identical to the engine's mma.sync
#               schedule (cu_gemm_big)? time and TFLOP/s beside it (uses the library's headers, like stage.cu)
#   chain.cu    a chain of ~680 dependent ops through every SM without weights (hop, + statistics, + normalise):
#               the latency executor design's per-op floor
#   linchain.cu a chain of complete, lean linear steps (GPT fc1 / fc2 alternating, the engine's arithmetic) through
#               every SM: the latency executor's step at its floor, weights resident or from L2
#   layerchain.cu  GPT B1 passes of four three-hop layers (attention and the out chunk's partial on clusters of 8
#               sharing q/k/v through DSMEM; the out sum in fc1's step), the head and the exact sampler, lean, through
#               every SM: the fused design's frame floor; variants with the sampler on the attention SMs (cl+rs) and
#               with the FFN in one step on clusters that own fc2 chunks (cl+rs+f2: two hops a layer), the sampler on
#               8 warps (cl+rs+s256), each SM's qkv / fc1 tiles staged in shared memory (cl+rs+st), weights from
#               HBM (hbm modes)
#   stage.cu    the phases of a latency-executor step (poll, norm statistics, normalise, mma items) on one SM
#               in isolation, with the library's device functions (hence -I ../../../src -I ../../../include)
#   icache.cu   instruction fetch: how much code an SM keeps hot (straight-line and jumping), what a cold KB costs
# Builds for sm_90a into $BUILD (default dev/cuda/derisk/build, git-ignored by the lead), runs each program under
# a timeout (at most 120 s each, and all of it within a ~170 s budget), writes everything to $OUT/derisk.txt
# (default OUT=/tmp/derisk; per-program logs and build logs beside it) and prints a compact summary last.
#   OUT=/tmp/x dev/cuda/derisk/run.sh [ring] [cluster] [wgmma] [mma_swap] [wgmma_bits] [tput_linear] [stage] [chain] [linchain] [layerchain] [icache]
#   (default: all)
set -u -o pipefail
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/derisk}
BUILD=${BUILD:-build}
PROGS=${*:-ring cluster wgmma mma_swap wgmma_bits tput_linear stage chain linchain layerchain icache}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
FLAGS="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I ../../../src -I ../../../include"
BUDGET_S=${BUDGET_S:-170}
mkdir -p "$OUT" "$BUILD"
BUILD=$(cd "$BUILD" && pwd) # absolute: the programs run from here
T0=$(date +%s)
R="$OUT/derisk.txt"
: >"$R"
{
    echo "# derisk run $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${HOSTNAME:-?}"
    command -v nvidia-smi >/dev/null &&
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
            --format=csv,noheader | sed 's/^/# nvidia-smi: /'
    echo "# nvcc: $("$NVCC" --version | tail -1)"
} | tee -a "$R"

# build (in parallel; each log kept)
for p in $PROGS; do
    rm -f "$BUILD/$p" # a failed build must not leave an older binary to run
    extra= # the programs that run the library's arithmetic build as the library does (Makefile: -fmad=false)
    case $p in linchain | layerchain | stage) extra=-fmad=false ;; esac
    "$NVCC" $FLAGS $extra "$p.cu" -o "$BUILD/$p" >"$OUT/build_$p.log" 2>&1 &
done
wait
for p in $PROGS; do
    if [ -x "$BUILD/$p" ] && ! grep -q "error" "$OUT/build_$p.log"; then
        nk=$(grep -c "spill stores" "$OUT/build_$p.log")
        ns=$(grep -cE "[1-9][0-9]* bytes spill" "$OUT/build_$p.log")
        echo "# build $p: ok ($nk kernels, $ns with spills)" | tee -a "$R"
    else
        echo "FAIL build $p (log: $OUT/build_$p.log)" | tee -a "$R"
        tail -20 "$OUT/build_$p.log"
    fi
done
echo "# build: $(($(date +%s) - T0)) s" | tee -a "$R"

# run
for p in $PROGS; do
    [ -x "$BUILD/$p" ] || continue
    left=$((BUDGET_S - ($(date +%s) - T0)))
    lim=$((left < 120 ? left : 120))
    if [ "$lim" -lt 10 ]; then
        echo "SKIP $p: time budget used up" | tee -a "$R"
        continue
    fi
    t=$(date +%s)
    timeout -k 5 "$lim" "$BUILD/$p" >"$OUT/$p.txt" 2>&1
    rc=$?
    cat "$OUT/$p.txt" >>"$R"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "FAIL $p: TIMEOUT after $lim s (rc $rc)" | tee -a "$R"
    elif [ $rc -ne 0 ]; then
        echo "FAIL $p: exit code $rc" | tee -a "$R"
    fi
    echo "# $p: rc $rc, $(($(date +%s) - t)) s" | tee -a "$R"
done

# summary: the device lines, every result row (spaces squeezed), the one-line summaries, and every FAIL/SKIP
echo
echo "==== derisk summary (full output: $R)"
grep -E "^# (ring|cluster|wgmma|mma_swap|wgmma_bits|tput_linear|stage|chain|linchain|layerchain|icache)( on |: SM clock)" "$R" | head -2
grep -E "^RESULT " "$R" | sed -e 's/^RESULT //' -e 's/   */ /g'
grep -E "^(check|phases) (linchain|layerchain)" "$R" | sed -e 's/   */ /g'
grep -E "^SUMMARY " "$R"
nf=$(grep -cE "^FAIL" "$R")
grep -E "^(FAIL|SKIP)" "$R" | head -20
echo "==== $nf FAIL lines; total $(($(date +%s) - T0)) s"
[ "$nf" -eq 0 ]
