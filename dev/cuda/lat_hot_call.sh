#!/usr/bin/env bash
# Issue 13: an A/B of patches to the latency kernel's hot path in one device call, each side against the tree (base):
# tests per side, then the per-op timeline (host-timed medians: the A/B figures) at GPT bf16 / q8 / f32 B1, CSM bf16
# B1, GPT bf16 B8; the A/B is cut at AB_CUT_S (default 500) so its files are packed in time. SIDES is a space-separated
# list of name:patch[,patch...] (lat_ab.sh's form); CHAIN=1 also runs derisk/chain.cu (the per-op floor of the
# dataflow chain, ~1 min).
# Record: 2026-12-05 (docs/cuda_results.md) it measured pin (attn_pin), wsel (lat_wsel) and, in a second call, wdiv
# (wsel + lat_polldiv) and wall (wdiv + pin + lat_pollnoinl); all of them landed that day (the patch files are in git
# history before that commit).
# here first (each side's CUDA objects and timeline tool; the C objects come from build-cuda/obj):
#   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2 tests
#   dev/cuda/lat_ab.sh prebuild "$SIDES"
# device: SIDES=... OUT=$OUT bash dev/cuda/lat_hot_call.sh   carrying build-ab/{base,<sides>}, build-cuda/obj, .debs
set -u
cd "$(dirname "$0")/../.."
P=dev/cuda
[ -n "${SIDES:-}" ] || { echo "lat_hot_call.sh: SIDES (name:patch[,patch...] ...) is required" >&2; exit 2; }
R=${OUT:-/tmp/lat_hot}
W=$R/work # the device tool brings back 8 files at most: the sides' files go into one archive, summaries beside it
mkdir -p "$W"
BASE_TESTS=${BASE_TESTS:-test_executors:2} TESTS=${TESTS:-"test_executors:2 test_e2e:1"} \
    TL_CFGS=${TL_CFGS:-"gpt:bf16:1 gpt:q8:1 gpt:f32:1 csm:bf16:1 gpt:bf16:8"} OUT=$W timeout ${AB_CUT_S:-500} bash $P/lat_ab.sh "$SIDES" |
    tee "$R/summary.txt"
[ -n "${CHAIN:-}" ] && OUT=$W/chain BUDGET_S=90 bash $P/derisk/run.sh chain 2>&1 | tail -15 | tee -a "$R/summary.txt"
for d in "$W"/*/; do [ -f "$d/timeline.md" ] && { echo "## side $(basename "$d")"; cat "$d/timeline.md"; }; done >"$R/timeline.md"
(cd "$W" && tar czf "$R/lat_hot.tgz" .) && rm -rf "$W"
