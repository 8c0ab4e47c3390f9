#!/usr/bin/env bash
# Where a throughput-executor frame's time goes, measured on the real frame (graph replay, PDL overlap) rather than
# ncu's serialised kernels: a side built with LAND (patches, comma-separated) + dev/cuda/tput_probe.patch (env
# switches: DD_TP_SKIP=lin,epi,split,att,smp leaves those kernels out; DD_TP_EMPTY=1 launches an empty kernel of
# the same grid in place of every kernel; DD_TP_BN / DD_TP_S force the tile and the split), timed with
# dev/cuda/exec_ab.c: the frame time without a kind of kernel is the frame less that kind's share on the critical
# path. Results are garbage under the switches (only the times count). LAND's side is also tested (test_tput
# unquick, test_invariance / test_device_capture quick) and A/B'd against base.
#   LAND=dev/cuda/tp_land.patch OUT=$OUT bash dev/cuda/tp_ablate.sh
CALL=tp_ablate source "$(dirname "$0")/call_env.sh"
dev_prog exec_ab
side_build /tmp/tp_land ${LAND//,/ }
side_build /tmp/tp_probe ${LAND//,/ } dev/cuda/tput_probe.patch
LB=/tmp/tp_land/build-cuda
unset DD_TEST_QUICK
cuda_test land_test_tput $LB/test_cuda test_tput 150
for t in test_invariance test_device_capture test_executors; do cuda_test land_$t $LB/test_cuda $t 100 DD_TEST_QUICK=1; done
: >"$OUT/exec_ab.jsonl"
for spec in "gpt bf16 10 8 64 256 512" "csm bf16 6 8 256"; do
    ab_side base build-cuda/exec_ab "$spec"
    ab_side land $LB/exec_ab "$spec"
done
if [ -n "${EXTRA-}" ]; then # another candidate on top of LAND: quick test_tput and the same A/B
    side_build /tmp/tp_extra ${LAND//,/ } ${EXTRA//,/ }
    cuda_test extra_test_tput /tmp/tp_extra/build-cuda/test_cuda test_tput 100 DD_TEST_QUICK=1
    for spec in "csm bf16 6 8 256" "gpt bf16 10 8 256"; do ab_side extra /tmp/tp_extra/build-cuda/exec_ab "$spec"; done
fi
PB=/tmp/tp_probe/build-cuda/exec_ab
for m in "gpt bf16 10 256" "gpt bf16 6 512" "csm bf16 6 256"; do
    ab_side probe $PB "$m"
    for k in lin epi split att smp; do ab_side "skip_$k" $PB "$m" DD_TP_SKIP=$k; done
    ab_side skip_all $PB "$m" DD_TP_SKIP=lin,epi,split,att,smp
    ab_side empty $PB "$m" DD_TP_EMPTY=1
    ab_side bn128 $PB "$m" DD_TP_BN=128
    ab_side bn64 $PB "$m" DD_TP_BN=64
    ab_side s1 $PB "$m" DD_TP_S=1
    ab_side s2 $PB "$m" DD_TP_S=2
done
log "exec_ab done ($(el))"
# land / extra against base, then the ablations against probe
python3 dev/cuda/ab_table.py "$OUT/exec_ab.jsonl" | tee -a "$S"
python3 dev/cuda/ab_table.py "$OUT/exec_ab.jsonl" probe | tee -a "$S"
log "nsys: $(command -v nsys || ls /usr/local/cuda/bin 2>/dev/null | grep -i nsys || ls -d /opt/nvidia/nsight-systems* 2>/dev/null || echo none)"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
