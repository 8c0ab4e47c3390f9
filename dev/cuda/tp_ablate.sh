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
DD_TEST_ONLY=test_tput timeout 150 $LB/test_cuda >"$R/land_test_tput.log" 2>&1
log "land test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/land_test_tput.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/land_test_tput.log" | head -4 | tee -a "$S"
for t in test_invariance test_device_capture test_executors; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 100 $LB/test_cuda >"$R/land_$t.log" 2>&1
    log "land $t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/land_$t.log" | tr '\n' ' ') ($(el))"
done
: >"$OUT/exec_ab.jsonl"
ab() { # label env... -- exec_ab args
    local label=$1 bin=$2
    shift 2
    env "$@" EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 60 $bin 2>>"$R/exec_ab.err" | sed "s/^{/{\"side\": \"$label\", /" >>"$OUT/exec_ab.jsonl"
}
for spec in "gpt bf16 10 8 64 256 512" "csm bf16 6 8 256"; do
    for side in base land; do
        bin=build-cuda/exec_ab
        [ $side = land ] && bin=$LB/exec_ab
        ab $side "$bin $spec"
    done
done
if [ -n "${EXTRA-}" ]; then # another candidate on top of LAND: quick test_tput and the same A/B
    side_build /tmp/tp_extra ${LAND//,/ } ${EXTRA//,/ }
    DD_TEST_QUICK=1 DD_TEST_ONLY=test_tput timeout 100 /tmp/tp_extra/build-cuda/test_cuda >"$R/extra_test_tput.log" 2>&1
    log "extra test_tput (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/extra_test_tput.log" | tr '\n' ' ') ($(el))"
    for spec in "csm bf16 6 8 256" "gpt bf16 10 8 256"; do
        ab land "$LB/exec_ab $spec"
        ab extra "/tmp/tp_extra/build-cuda/exec_ab $spec"
    done
fi
PB="/tmp/tp_probe/build-cuda/exec_ab"
for m in "gpt bf16 10 256" "gpt bf16 6 512" "csm bf16 6 256"; do
    ab probe "$PB $m"
    for k in lin epi split att smp; do ab "skip_$k" "$PB $m" DD_TP_SKIP=$k; done
    ab "skip_all" "$PB $m" DD_TP_SKIP=lin,epi,split,att,smp
    ab empty "$PB $m" DD_TP_EMPTY=1
    ab bn128 "$PB $m" DD_TP_BN=128
    ab bn64 "$PB $m" DD_TP_BN=64
    ab s1 "$PB $m" DD_TP_S=1
    ab s2 "$PB $m" DD_TP_S=2
done
log "exec_ab done ($(el))"
python3 - "$OUT/exec_ab.jsonl" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    print(f'{r["side"]:10} {r["model"]} B{r["batch"]:<4} {r["ms_per_frame"]:9.3f} ms')
PY
log "nsys: $(command -v nsys || ls /usr/local/cuda/bin 2>/dev/null | grep -i nsys || ls -d /opt/nvidia/nsight-systems* 2>/dev/null || echo none)"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
