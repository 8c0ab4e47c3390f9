#!/usr/bin/env bash
# Token groups (dev/cuda/tput_groups.patch) in one device call: a side with the patch; test_tput unquick with
# DD_TP_GROUP=64 and =32 (bit for bit against the frame kernel, graph replays included), test_invariance and
# test_device_capture quick with groups of 32, memcheck on test_tput quick 2 with groups of 32; then exec_ab on the
# throughput executor, GPT dims bf16 at 8, 64, 256, 512 and CSM dims at 8, 256, with no groups (base and side) and
# groups of 32 / 64 / 128 streams (side), alternating.   OUT=$OUT bash dev/cuda/tput_groups_call.sh
CALL=tput_groups source "$(dirname "$0")/call_env.sh"
C=/tmp/tp_groups
side_build $C dev/cuda/tput_groups.patch || exit 1
dev_prog exec_ab
SB=$C/build-cuda
unset DD_TEST_QUICK
for g in 64 32; do
    DD_TP_GROUP=$g DD_TEST_ONLY=test_tput timeout 150 $SB/test_cuda >"$R/test_tput_g$g.log" 2>&1
    log "groups of $g: test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/test_tput_g$g.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE" "$R/test_tput_g$g.log" | head -4 | tee -a "$S"
done
for t in test_invariance test_device_capture; do
    DD_TP_GROUP=32 DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 100 $SB/test_cuda >"$R/$t.log" 2>&1
    log "groups of 32: $t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/$t.log" | tr '\n' ' ') ($(el))"
done
: >"$OUT/exec_ab.jsonl"
for spec in "gpt bf16 10 8 64 256 512" "csm bf16 6 8 256"; do
    for side in base none g32 g64 g128; do
        bin=$SB/exec_ab
        [ $side = base ] && bin=build-cuda/exec_ab
        g=${side#g}
        case $side in base | none) g= ;; esac
        env ${g:+DD_TP_GROUP=$g} EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 100 $bin $spec 2>>"$R/exec_ab.err" |
            sed "s/^{/{\"side\": \"$side\", /" >>"$OUT/exec_ab.jsonl"
    done
done
python3 - "$OUT/exec_ab.jsonl" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = {(r["side"], r["model"], r["batch"]): r["ms_per_frame"] for r in rows}
for m, b in sorted({(r["model"], r["batch"]) for r in rows}):
    print(f"{m} B{b:<4} " + "  ".join(f"{s} {d[(s, m, b)]:8.3f}" for s in ("base", "none", "g32", "g64", "g128") if (s, m, b) in d))
PY
DD_TP_GROUP=32 DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_tput timeout 120 \
    compute-sanitizer --tool memcheck $SB/test_cuda >"$R/memcheck.log" 2>&1
log "groups of 32: memcheck test_tput (quick 2) rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$R/memcheck.log" | tr '\n' ' ') ($(el))"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
