#!/usr/bin/env bash
# Issue 13: the latency kernel's hot path, one device call per SIDES set, each against the tree (base): tests per
# side, then the per-op timeline (host-timed medians: the A/B figures) at GPT bf16 B1, GPT q8 B1 (the first q8
# timeline: q8 is 2.3 ms slower than bf16 at B1), GPT f32 B1 (lat_wsel's generic instance, which has more spills
# than before: 168-616 bytes), CSM bf16 B1, GPT bf16 B8. The A/B is cut at 500 s so its files are packed in time.
#   pin:  attn_pin.patch (the softmax weights' division out of the value loop; every executor's attention)
#   wsel: lat_wsel.patch (one kernel instance per linear weight mode)
#   call 2, SIDES="$(bash dev/cuda/lat_hot_call.sh --call2)":
#   wdiv: wsel + lat_polldiv.patch (the poll's addresses without a division per element)
#   wall: wdiv + pin + lat_pollnoinl.patch (the poll out of line)
# here first (each side's CUDA objects and timeline tool; the C objects come from build-cuda/obj):
#   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j2 tests
#   dev/cuda/lat_ab.sh prebuild "$(bash dev/cuda/lat_hot_call.sh --all)"
# device: OUT=$OUT bash dev/cuda/lat_hot_call.sh   carrying build-ab/{base,pin,wsel} (call 2: base,wdiv,wall),
#         build-cuda/obj, .debs (about 45 MB); then (call 1 only, ~1 min) derisk/chain.cu: the per-op floor of
#         the chain itself (hop, statistics, normalise through every SM, no weights)
set -u
cd "$(dirname "$0")/../.."
P=dev/cuda
CALL1="pin:$P/attn_pin.patch wsel:$P/lat_wsel.patch"
CALL2="wdiv:$P/lat_wsel.patch,$P/lat_polldiv.patch wall:$P/lat_wsel.patch,$P/lat_polldiv.patch,$P/attn_pin.patch,$P/lat_pollnoinl.patch"
case "${1:-}" in
--all) echo "$CALL1 $CALL2"; exit 0 ;;
--call2) echo "$CALL2"; exit 0 ;;
esac
R=${OUT:-/tmp/lat_hot}
W=$R/work # the device tool brings back 8 files at most: the sides' files go into one archive, summaries beside it
mkdir -p "$W"
BASE_TESTS=${BASE_TESTS:-test_executors:2} TESTS=${TESTS:-"test_executors:2 test_e2e:1"} \
    TL_CFGS=${TL_CFGS:-"gpt:bf16:1 gpt:q8:1 gpt:f32:1 csm:bf16:1 gpt:bf16:8"} OUT=$W timeout ${AB_CUT_S:-500} bash $P/lat_ab.sh "${SIDES:-$CALL1}" |
    tee "$R/summary.txt"
[ -z "${SIDES:-}" ] && OUT=$W/chain BUDGET_S=90 bash $P/derisk/run.sh chain 2>&1 | tail -15 | tee -a "$R/summary.txt"
for d in "$W"/*/; do [ -f "$d/timeline.md" ] && { echo "## side $(basename "$d")"; cat "$d/timeline.md"; }; done >"$R/timeline.md"
(cd "$W" && tar czf "$R/lat_hot.tgz" .) && rm -rf "$W"
