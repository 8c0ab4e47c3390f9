#!/usr/bin/env bash
# A/B of patches to the throughput executor in one device call (issue 14): base = the tree as it is (build-cuda,
# by call_env.sh); sides = copies of the tree with patches applied: SIDES is a space-separated list of sides, each a
# comma-separated list of patches applied in order (patch -p1), e.g. SIDES="a.patch a.patch,b.patch"; PATCHES=...
# is one side. Every side: test_tput quick (bit for bit against the frame kernel, graph replays included); the
# last side also: test_tput unquick, test_invariance, test_device_capture quick, memcheck on test_tput quick 2.
# Then dev/cuda/exec_ab.c on the throughput executor for base and every side alternating per model (GPT dims bf16
# at 8, 64, 256, 512 streams; CSM dims at 8 and 256), and ncu's kernel durations of one GPT B256 frame on the last
# side. Carry build-cuda/{cuobj,obj,tobj} (sides reuse them: only the patched files are rebuilt).
# Writes $OUT/summary.txt, $OUT/exec_ab.jsonl, $OUT/work.tgz.   SIDES="..." OUT=$OUT bash dev/cuda/tput_ab.sh
CALL=tput_ab source "$(dirname "$0")/call_env.sh"
SIDES=${SIDES:-${PATCHES-}}
set -- $SIDES
NS=$#
k=0
for side in $SIDES; do
    k=$((k + 1))
    C=/tmp/tput_side$k
    side_build $C ${side//,/ } || exit 1
    DD_TEST_QUICK=1 DD_TEST_ONLY=test_tput timeout 100 $C/build-cuda/test_cuda >"$R/side${k}_test_tput_quick.log" 2>&1
    log "side $k test_tput (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/side${k}_test_tput_quick.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE|differ|mismatch" "$R/side${k}_test_tput_quick.log" | head -4 | tee -a "$S"
done
dev_prog exec_ab
SB=/tmp/tput_side$NS/build-cuda
unset DD_TEST_QUICK
DD_TEST_ONLY=test_tput timeout 150 $SB/test_cuda >"$R/side_test_tput.log" 2>&1
log "last side test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/side_test_tput.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/side_test_tput.log" | head -4 | tee -a "$S"
for t in test_invariance test_device_capture; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 100 $SB/test_cuda >"$R/side_$t.log" 2>&1
    log "last side $t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/side_$t.log" | tr '\n' ' ') ($(el))"
done
: >"$OUT/exec_ab.jsonl"
for spec in "gpt 10 8 64 256 512" "csm 6 8 256"; do
    set -- $spec
    m=$1 fr=$2
    shift 2
    for side in base $(seq 1 $NS); do
        bin=build-cuda/exec_ab
        [ $side != base ] && bin=/tmp/tput_side$side/build-cuda/exec_ab
        EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 100 $bin $m bf16 $fr "$@" 2>>"$R/exec_ab.err" |
            sed "s/^{/{\"side\": \"$side\", /" >>"$OUT/exec_ab.jsonl"
    done
done
python3 - "$OUT/exec_ab.jsonl" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = {(r["side"], r["model"], r["batch"]): r["ms_per_frame"] for r in rows}
sides = sorted({r["side"] for r in rows if r["side"] != "base"})
for m, b in sorted({(r["model"], r["batch"]) for r in rows}):
    base = d.get(("base", m, b))
    cols = " ".join(f"side{s} {d[(s, m, b)]:8.3f} ({d[(s, m, b)] / base:.3f}x)" for s in sides if (s, m, b) in d and base)
    print(f"{m} B{b:<4} base {base:8.3f} ms  {cols}")
PY
EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 120 ncu --metrics gpu__time_duration.sum --csv \
    --launch-count 3000 $SB/exec_ab gpt bf16 1 256 >"$R/ncu_side_gpt256.csv" 2>"$R/ncu.err"
log "ncu last side rc $? ($(el))"
python3 dev/cuda/ncu_by_kernel.py "$R/ncu_side_gpt256.csv" "last side gpt bf16 B256 one frame" | tee -a "$S"
if [ -z "${AB_NOMEMCHECK-}" ]; then
    DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_tput timeout 120 \
        compute-sanitizer --tool memcheck $SB/test_cuda >"$R/side_memcheck.log" 2>&1
    log "last side memcheck test_tput (quick 2) rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$R/side_memcheck.log" | tr '\n' ' ') ($(el))"
fi
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
