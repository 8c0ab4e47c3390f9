#!/usr/bin/env bash
# Device calls for a landed revision (first used for the 2026-12-05 A/Bs' landing), on the tree as it is (carry
# build-cuda/{cuobj,obj,tobj}, .debs; CAP_S=540 skips a step that would pass the call's limit):
#   PART=check (or "check speed": both, in that order): test_cuda all (quick), test_executors / test_tput unquick,
#               compute-sanitizer memcheck (quick 2) and racecheck (quick 3) on test_executors, memcheck on test_tput (quick 2);
#               CHECK_MORE=test_sample: that test unquick too and initcheck on test_tput; INITCHECK=1: initcheck on
#               test_tput; EXEC_SAN=0: no sanitizer on test_executors (a throughput-kernel change: EXEC_SAN=0 INITCHECK=1)
#   PART=speed: the latency executor's per-op timeline (GPT bf16 / q8 B1, CSM bf16 B1, GPT bf16 B8), depthdec bench
#               over the batch curve (TL_CFGS picks the timelines), the PyTorch graph loop of scripts/bench_torch.py and bench --capacity
#   PART=prof:  where tp_attend3's and tp_linear's time goes at GPT bf16 B256 (ncu sections of four launches each,
#               one exec_ab frame: throughput, occupancy, warp states, memory, stall sources; the whole reports in
#               work.tgz); PROF_SPEC="gpt q8 256" and PROF_KERNELS="tp_linear:20" pick another frame and kernels
#   PART=attpass: ncu metrics (duration, DRAM throughput, achieved occupancy, grid) of every launch of the attention
#               kernels in one frame: tp_attend3 at GPT bf16 B256, tp_attend2 at CSM bf16 B256 (per pass and layer)
#   PART=attsrc: ncu source counters (SASS lines with their stall samples) of tp_attend3 at GPT bf16 B256, an early
#               pass's launch (pass 2) and a late one's (pass 29): $R/attsrc_*.csv, the top lines in the summary
#   PART=latsrc: ncu source counters of the latency kernel (lt_kernel, one frame after a warm one) at LATSRC_SPECS
#               (default "gpt q8 1|gpt bf16 1"): the SASS lines with the most stall samples in the summary
#   PART=icache: dev/cuda/derisk/icache.cu (instruction-cache sizes and the cost of cold code, ~20 s with its build);
#               put it first: PART="icache check speed"
#   PART=linchain: dev/cuda/derisk/linchain.cu, layerchain.cu and chain.cu (the lean linear step's chain and the
#               three-hop layer's beside the bare chain's, ~90 s with their builds); with speed after it, the
#               executor's timeline of the same call
# Writes $OUT/summary.txt, $OUT/work.tgz (logs); speed also $OUT/bench.jsonl, $OUT/torch_gpt.json,
# $OUT/torch_csm.json, $OUT/timeline.md.     OUT=$OUT PART=check bash dev/cuda/land_call.sh
CALL=land source "$(dirname "$0")/call_env.sh"
unset DD_TEST_QUICK
PART=${PART:-check}
if [[ $PART == *icache* ]] && fits 40 "icache"; then
    OUT=$R/derisk BUILD=$R/derisk/build BUDGET_S=40 bash dev/cuda/derisk/run.sh icache >"$R/icache_run.log" 2>&1
    log "icache rc $? ($(el))"
    grep -E "^(SUMMARY|FAIL)|warps  4 blocks +[0-9]{3}" "$R/derisk/derisk.txt" | tee -a "$S"
fi
if [[ $PART == *linchain* ]] && fits 150 "linchain"; then
    OUT=$R/derisk BUILD=$R/derisk/build BUDGET_S=150 bash dev/cuda/derisk/run.sh linchain layerchain chain \
        >"$R/linchain_run.log" 2>&1
    log "linchain rc $? ($(el))"
    grep -E "^(RESULT|SUMMARY|FAIL|check|phases)" "$R/derisk/derisk.txt" | sed -e 's/   */ /g' | tee -a "$S"
fi
if [[ $PART == *check* ]]; then
    fits 60 "test_cuda all" && cuda_test all_quick $B/test_cuda "" 150 DD_TEST_QUICK=1 DD_TEST_ONLY=
    for t in test_executors test_tput ${CHECK_MORE-}; do fits 60 "$t" && cuda_test ${t}_full $B/test_cuda $t 150; done
    for tq in memcheck:2 racecheck:3; do # quick 3: racecheck's cases (quick 2 outlasts 400 s under racecheck)
        [ "${EXEC_SAN:-1}" = 1 ] || break
        tool=${tq%:*} q=${tq#*:}
        fits 90 "$tool test_executors" && exec_san $tool $q
    done
    fits 60 "memcheck test_tput" && cuda_memcheck memcheck_tput $B/test_cuda
    if [ -n "${CHECK_MORE-}${INITCHECK-}" ] && fits 60 "initcheck test_tput"; then
        SAN_TOOL=initcheck cuda_memcheck initcheck_tput $B/test_cuda
    fi
fi
if [[ $PART == *speed* ]]; then
    OUT=$R TL_CFGS="${TL_CFGS:-gpt:bf16:1 gpt:q8:1 csm:bf16:1 gpt:bf16:8}" LT_PACK=0 bash dev/cuda/lat_iter.sh timeline \
        >"$R/timeline_run.log" 2>&1
    cp "$R/timeline.md" "$OUT/" 2>/dev/null && grep -E "ms/frame|decode: one frame" "$OUT/timeline.md" | tee -a "$S"
    : >"$OUT/bench.jsonl"
    for w in bf16 q8 q4; do cu_bench gpt $w 1 30; done
    for w in bf16 q8; do cu_bench csm $w 1 30; done
    for b in 2 4 8 16 32 64 128 256 512; do cu_bench gpt bf16 $b 20; done
    cu_bench gpt q8 256 10
    for b in 8 16 64 256; do cu_bench csm bf16 $b 10; done
    cu_torch_capacity
fi
if [[ $PART == *prof* ]]; then
    dev_prog exec_ab
    for kn in ${PROF_KERNELS:-tp_attend3:80 tp_linear:20}; do # (launches skipped: tp_attend3 4 a pass: pass 21)
        k=${kn%:*} skip=${kn#*:}
        fits 150 "ncu $k" || continue
        cu_ncu_sections prof_$k $B/exec_ab $k $skip 4 "${PROF_SPEC:-gpt bf16 256}" SpeedOfLight Occupancy \
            WarpStateStats MemoryWorkloadAnalysis LaunchStats SourceCounters
    done
fi
if [[ $PART == *attpass* ]]; then
    dev_prog exec_ab
    for ks in "tp_attend3:gpt bf16 256" "tp_attend2:csm bf16 256"; do
        k=${ks%%:*} spec=${ks#*:}
        fits 120 "ncu $k by launch" || continue
        EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 150 ncu --csv --kernel-name regex:$k --metrics \
            gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size \
            $B/exec_ab ${spec% *} 1 ${spec##* } >"$R/attpass_$k.csv" 2>"$R/attpass_$k.err"
        log "ncu $k by launch rc $? ($(el))"
        python3 dev/cuda/ncu_by_launch.py "$R/attpass_$k.csv" 4 | tee -a "$S"
    done
fi
if [[ $PART == *attsrc* ]]; then
    dev_prog exec_ab
    for skip in 8 116; do
        fits 90 "ncu tp_attend3 source $skip" || continue
        EXEC_AB_WARM=0 EXEC_AB_NOFRAME=1 EXEC_AB_NOLAT=1 timeout 120 ncu -f -o "$R/attsrc_$skip" --kernel-name \
            regex:tp_attend3 --launch-skip $skip --launch-count 1 --section WarpStateStats --section SourceCounters \
            --import-source yes $B/exec_ab gpt bf16 1 256 >"$R/attsrc_$skip.log" 2>&1
        log "ncu tp_attend3 source (skip $skip) rc $? ($(el))"
        ncu -i "$R/attsrc_$skip.ncu-rep" --page details >"$R/attsrc_$skip.txt" 2>&1
        grep -E "Duration|Warp Cycles|Stall|Issued" "$R/attsrc_$skip.txt" | head -30 | tee -a "$S"
        ncu -i "$R/attsrc_$skip.ncu-rep" --page source --csv --print-source sass >"$R/attsrc_$skip.csv" 2>"$R/attsrc_$skip.err"
        log "source page rc $? ($(wc -l <"$R/attsrc_$skip.csv") lines)"
        python3 dev/cuda/ncu_src_top.py "$R/attsrc_$skip.csv" 40 2>&1 | tee -a "$S"
    done
fi
if [[ $PART == *latsrc* ]]; then # the latency kernel's SASS lines by stall samples, one frame each of LATSRC_SPECS
    dev_prog exec_ab
    IFS='|' read -r -a lspecs <<<"${LATSRC_SPECS:-gpt q8 1|gpt bf16 1}"
    for spec in "${lspecs[@]}"; do
        nm=$(echo "$spec" | tr ' ' '_')
        fits 80 "ncu lt_kernel source $spec" || continue
        EXEC_AB_WARM=1 EXEC_AB_NOFRAME=1 timeout 100 ncu -f -o "$R/latsrc_$nm" --kernel-name regex:lt_kernel \
            --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters --import-source yes \
            $B/exec_ab ${spec% *} 1 ${spec##* } >"$R/latsrc_$nm.log" 2>&1
        log "ncu lt_kernel source ($spec) rc $? ($(el))"
        ncu -i "$R/latsrc_$nm.ncu-rep" --page details >"$R/latsrc_$nm.txt" 2>&1
        grep -E "Duration|Warp Cycles|Issued" "$R/latsrc_$nm.txt" | head -12 | tee -a "$S"
        ncu -i "$R/latsrc_$nm.ncu-rep" --page source --csv --print-source sass >"$R/latsrc_$nm.csv" 2>"$R/latsrc_$nm.err"
        python3 dev/cuda/ncu_src_top.py "$R/latsrc_$nm.csv" 40 >"$R/latsrc_$nm.top" 2>&1
        head -60 "$R/latsrc_$nm.top" >>"$S"
    done
fi
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
