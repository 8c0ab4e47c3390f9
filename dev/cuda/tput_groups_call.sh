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
for g in 64 32; do cuda_test g${g}_test_tput $SB/test_cuda test_tput 150 DD_TP_GROUP=$g; done
for t in test_invariance test_device_capture; do cuda_test g32_$t $SB/test_cuda $t 100 DD_TP_GROUP=32 DD_TEST_QUICK=1; done
: >"$OUT/exec_ab.jsonl"
for spec in "gpt bf16 10 8 64 256 512" "csm bf16 6 8 256"; do
    ab_side base build-cuda/exec_ab "$spec"
    ab_side none $SB/exec_ab "$spec"
    for g in 32 64 128; do ab_side g$g $SB/exec_ab "$spec" DD_TP_GROUP=$g; done
done
python3 dev/cuda/ab_table.py "$OUT/exec_ab.jsonl" | tee -a "$S"
cuda_memcheck g32_memcheck $SB/test_cuda DD_TP_GROUP=32
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
