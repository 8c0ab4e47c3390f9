#!/usr/bin/env bash
# A/B of patches to the throughput executor in one device call (issue 14): base = the tree as it is (build-cuda,
# by call_env.sh), side = a copy of the tree with PATCHES applied (comma-separated, patch -p1; e.g.
# PATCHES=dev/cuda/tput_attend2.patch,dev/cuda/tput_epi.patch). The side's tests (test_tput unquick: bit for bit
# against the frame kernel, graph replays included; test_invariance, test_device_capture quick; memcheck on test_tput
# quick 2), then dev/cuda/exec_ab.c on the throughput executor for base and side alternating per model (GPT dims bf16
# at 8, 64, 256, 512 streams; CSM dims at 8 and 256), and ncu's kernel durations of one GPT B256 frame on the side.
# Carry build-cuda/{cuobj,obj,tobj} (the side reuses them: only the patched files are rebuilt).
# Writes $OUT/summary.txt, $OUT/exec_ab.jsonl, $OUT/work.tgz.   PATCHES=... OUT=$OUT bash dev/cuda/tput_ab.sh
CALL=tput_ab source "$(dirname "$0")/call_env.sh"
C=/tmp/tput_side
rm -rf "$C" && mkdir -p "$C"
tar cf - --exclude=./.git --exclude=./.raysite . | (cd "$C" && tar xf -)
for p in ${PATCHES//,/ }; do
    (cd "$C" && patch -p1 --forward --quiet <"$OLDPWD/$p") || { log "$p does not apply"; exit 1; }
done
(cd "$C" && make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 tests) >"$R/build_side.log" 2>&1
log "side build (${PATCHES-}) rc $? ($(el))"
for d in "$PWD" "$C"; do
    cc -O2 -Iinclude dev/cuda/exec_ab.c "$d/build-cuda/libdepthdec.a" -L/usr/local/cuda/lib64 -lcudart -lstdc++ \
        -ljansson -lm -lpthread -o "$d/build-cuda/exec_ab" >>"$R/build_ab.log" 2>&1 || log "exec_ab build failed ($d)"
done
SB=$C/build-cuda
unset DD_TEST_QUICK
DD_TEST_ONLY=test_tput timeout 150 $SB/test_cuda >"$R/side_test_tput.log" 2>&1
log "side test_tput (unquick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/side_test_tput.log" | tr '\n' ' ') ($(el))"
grep -E "^\[  FAILED|^\[   LINE" "$R/side_test_tput.log" | head -4 | tee -a "$S"
for t in test_invariance test_device_capture; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 100 $SB/test_cuda >"$R/side_$t.log" 2>&1
    log "side $t (quick) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/side_$t.log" | tr '\n' ' ') ($(el))"
done
: >"$OUT/exec_ab.jsonl"
for spec in "gpt 10 8 64 256 512" "csm 6 8 256"; do
    set -- $spec
    m=$1 fr=$2
    shift 2
    for side in base side; do
        bin=build-cuda/exec_ab
        [ $side = side ] && bin=$SB/exec_ab
        EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 timeout 100 $bin $m bf16 $fr "$@" 2>>"$R/exec_ab.err" |
            sed "s/^{/{\"side\": \"$side\", /" >>"$OUT/exec_ab.jsonl"
    done
done
python3 - "$OUT/exec_ab.jsonl" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = {(r["side"], r["model"], r["batch"]): r["ms_per_frame"] for r in rows}
for (side, m, b), ms in sorted(d.items(), key=lambda x: (x[0][1], x[0][2], x[0][0])):
    if side == "side":
        base = d.get(("base", m, b))
        print(f"{m} B{b:<4} base {base:8.3f} ms  side {ms:8.3f} ms  ({ms / base:.3f}x)" if base else f"{m} B{b} side {ms}")
PY
EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 120 ncu --metrics gpu__time_duration.sum --csv \
    --launch-count 3000 $SB/exec_ab gpt bf16 1 256 >"$R/ncu_side_gpt256.csv" 2>"$R/ncu.err"
log "ncu side rc $? ($(el))"
python3 dev/cuda/ncu_by_kernel.py "$R/ncu_side_gpt256.csv" "side gpt bf16 B256 one frame" | tee -a "$S"
DD_CUDA_TIMEOUT_S=100 DD_TEST_QUICK=2 DD_TEST_ONLY=test_tput timeout 120 \
    compute-sanitizer --tool memcheck $SB/test_cuda >"$R/side_memcheck.log" 2>&1
log "side memcheck test_tput (quick 2) rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$R/side_memcheck.log" | tr '\n' ' ') ($(el))"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
