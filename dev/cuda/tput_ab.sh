#!/usr/bin/env bash
# A/B of patches to the throughput executor in one device call (issue 14): base = the tree as it is (build-cuda,
# by call_env.sh); sides = copies of the tree with patches applied: SIDES is a space-separated list of sides, each a
# comma-separated list of patches applied in order (patch -p1), e.g. SIDES="a.patch a.patch,b.patch"; PATCHES=...
# is one side. Every side: test_tput quick (bit for bit against the frame kernel, graph replays included); the
# last side that passed it also: test_tput unquick, test_invariance, test_device_capture quick, memcheck on test_tput
# quick 2 (the later steps say "last side" for it). A side that failed its quick test is not timed.
# Then dev/cuda/exec_ab.c on the throughput executor for base and every side alternating per model, AB_ROUNDS
# rounds (GPT dims bf16
# at 8, 64, 256, 512 streams; CSM dims at 8 and 256; AB_SPECS="model weights frames batches...|..." for others),
# and ncu's kernel durations of one frame on the last side (NCU_SPEC="model weights", default GPT bf16; B256);
# NCU_TILE="model weights batch": ncu's throughput sections of six tp_linear launches, base and last side. With
# CAP_S (seconds), the timings and profiles that would end past it are skipped (logged), so the archive is made.
# Carry build-cuda/{cuobj,obj,tobj} (sides reuse them: only the patched files are rebuilt).
# Writes $OUT/summary.txt, $OUT/exec_ab.jsonl, $OUT/work.tgz.   SIDES="..." OUT=$OUT bash dev/cuda/tput_ab.sh
CALL=tput_ab source "$(dirname "$0")/call_env.sh"
SIDES=${SIDES:-${PATCHES-}}
set -- $SIDES
NS=$#
k=0
LS=0 # the last side whose quick test passed: it gets the longer checks; a side that failed is not timed (a hang
     # would cost every timing's timeout)
ok=()
for side in $SIDES; do
    k=$((k + 1))
    C=/tmp/tput_side$k
    side_build $C ${side//,/ } || exit 1
    cuda_test side${k}_test_tput_quick $C/build-cuda/test_cuda test_tput 100 DD_TEST_QUICK=1
    ok[$k]=0
    grep -q '^\[  PASSED  \] 1 test' "$R/side${k}_test_tput_quick.log" && ok[$k]=1 LS=$k
    [ ${ok[$k]} = 1 ] || log "side $k failed its quick test: not timed"
done
dev_prog exec_ab
SB=/tmp/tput_side$LS/build-cuda
unset DD_TEST_QUICK
if [ $LS != 0 ]; then
    log "longer checks on side $LS"
    cuda_test side_test_tput $SB/test_cuda test_tput 150
    for t in test_invariance test_device_capture; do cuda_test side_$t $SB/test_cuda $t 100 DD_TEST_QUICK=1; done
fi
: >"$OUT/exec_ab.jsonl"
IFS='|' read -r -a specs <<<"${AB_SPECS:-gpt bf16 10 8 64 256 512|csm bf16 6 8 256}"
# AB_ROUNDS (default 2) rounds a spec, base and sides alternating: one process's median moves by several percent
# from run to run (2026-12-06 17:41: base CSM B256 median 21.182 ms, its fastest frame 19.493); ab_table.py prints
# the median over the rounds and their spread
for spec in "${specs[@]}"; do
    for r in $(seq 1 ${AB_ROUNDS:-2}); do
        fits 60 "exec_ab $spec round $r" || break 2
        ab_side base build-cuda/exec_ab "$spec"
        for k in $(seq 1 $NS); do [ ${ok[$k]} = 1 ] && ab_side side$k /tmp/tput_side$k/build-cuda/exec_ab "$spec"; done
    done
done
[ $LS = 0 ] && { log "no side passed its quick test"; (cd "$OUT" && tar czf work.tgz work && rm -rf work); exit 1; }
python3 dev/cuda/ab_table.py "$OUT/exec_ab.jsonl" | tee -a "$S"
if [ "${NCU_FRAME:-1}" = 1 ] && fits 100 "ncu of a frame"; then # NCU_FRAME=0: not profiled
    EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 120 ncu --metrics gpu__time_duration.sum --csv \
        --launch-count 3000 $SB/exec_ab ${NCU_SPEC:-gpt bf16} 1 256 >"$R/ncu_side_256.csv" 2>"$R/ncu.err"
    log "ncu last side rc $? ($(el))"
    python3 dev/cuda/ncu_by_kernel.py "$R/ncu_side_256.csv" "last side ${NCU_SPEC:-gpt bf16} B256 one frame" |
        tee -a "$S"
fi
# NCU_TILE="model weights batch": the tile's throughput sections (L2, memory, compute), base and last side; NCU_K
# names another kernel (regex, default tp_linear), NCU_SKIP / NCU_COUNT its launches (default 20 / 6), NCU_SECTIONS
# the sections (space-separated)
if [ -n "${NCU_TILE-}" ] && fits 200 "ncu of the tile"; then
    for b in base side; do
        exe=build-cuda/exec_ab
        [ $b = side ] && exe=$SB/exec_ab
        cu_ncu_sections ncu_tile_$b $exe ${NCU_K:-tp_linear} ${NCU_SKIP:-20} ${NCU_COUNT:-6} "$NCU_TILE" \
            ${NCU_SECTIONS:-SpeedOfLight MemoryWorkloadAnalysis ComputeWorkloadAnalysis}
    done
fi
[ -z "${AB_NOMEMCHECK-}" ] && fits 150 memcheck && cuda_memcheck side_memcheck $SB/test_cuda
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
