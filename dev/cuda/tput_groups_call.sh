#!/usr/bin/env bash
# Token groups (dev/cuda/tput_groups.patch) in one device call: a side with the patch; test_tput unquick with
# DD_TP_GROUP=64 and =32 (bit for bit against the frame kernel, graph replays included), test_invariance and
# test_device_capture quick with groups of 32, test_tput quick 2 and memcheck on it with groups of 4; then exec_ab on the
# throughput executor, GPT dims bf16 at 8, 64, 256, 512 and CSM dims at 8, 256, with no groups (base and side) and
# groups of 32 / 64 / 128 streams (side), alternating. CAP_S (seconds, default 540) skips what would pass it.
#   OUT=$OUT bash dev/cuda/tput_groups_call.sh
CAP_S=${CAP_S:-540}
CALL=tput_groups source "$(dirname "$0")/call_env.sh"
C=/tmp/tp_groups
side_build $C dev/cuda/tput_groups.patch || exit 1
dev_prog exec_ab
SB=$C/build-cuda
unset DD_TEST_QUICK
cuda_test g32_test_tput_quick $SB/test_cuda test_tput 100 DD_TP_GROUP=32 DD_TEST_QUICK=1
grep -q '^\[  PASSED  \] 1 test' "$R/g32_test_tput_quick.log" || { log "groups of 32 failed test_tput quick: not timed"
    (cd "$OUT" && tar czf work.tgz work && rm -rf work); exit 1; }
cuda_test g4_test_tput_quick2 $SB/test_cuda test_tput 100 DD_TP_GROUP=4 DD_TEST_QUICK=2
for g in 64 32; do fits 150 "test_tput g$g" && cuda_test g${g}_test_tput $SB/test_cuda test_tput 150 DD_TP_GROUP=$g; done
for t in test_invariance test_device_capture; do cuda_test g32_$t $SB/test_cuda $t 100 DD_TP_GROUP=32 DD_TEST_QUICK=1; done
: >"$OUT/exec_ab.jsonl"
for spec in "gpt bf16 10 8 64 256 512" "csm bf16 6 8 256"; do
    fits 90 "exec_ab $spec" || break
    ab_side base build-cuda/exec_ab "$spec"
    ab_side none $SB/exec_ab "$spec"
    for g in 32 64 128; do ab_side g$g $SB/exec_ab "$spec" DD_TP_GROUP=$g; done
done
python3 dev/cuda/ab_table.py "$OUT/exec_ab.jsonl" | tee -a "$S"
fits 60 "memcheck" && cuda_memcheck g4_memcheck $SB/test_cuda DD_TP_GROUP=4 # quick 2: 9 streams, groups 4 4 1
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
