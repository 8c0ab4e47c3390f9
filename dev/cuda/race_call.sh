#!/usr/bin/env bash
# compute-sanitizer on the throughput executor's kernels, one kernel kind a process, all in parallel (README Order
# item 1: racecheck of the whole test_tput, and of tp_linear alone, was killed by the host's OOM killer at 130.8 GB).
# Each job instruments only the kernels whose name holds its substring (--kernel-name kns=...); the tile's jobs also
# cap the launches checked (--launch-skip / --launch-count count only the launches that match the filter), to tell a
# per-launch cost from an accumulating one. Each job runs in its own session under `timeout RACE_S` (default 240) and
# a memory guard that kills it past GUARD_GB (default 14) resident, so one job cannot take the host down.
#   OUT=$OUT bash dev/cuda/race_call.sh     (carry build-cuda/{cuobj,obj,tobj}, .debs)
# RACE_JOBS="name quick tool options...;..." replaces the job list below; RACE_BIN another test_cuda (a side's), or
# $B/exec_ab (built here) with RACE_ARGS, e.g. the q8 tile alone: RACE_BIN=build-cuda/exec_ab RACE_ARGS="gpt q8 1 64"
# EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 EXEC_AB_WARM=0 RACE_JOBS="q8 3 racecheck --kernel-name kns=tp_linear
# --launch-count 40" (exported: every launch of that frame is a q8 tile).
# Writes $OUT/summary.txt (a line a job: rc, the tool's summary, peak resident GB, seconds) and $OUT/race.tgz (logs).
CALL=${CALL:-race} source "$(dirname "$0")/call_env.sh"
RACE_S=${RACE_S:-240}
[[ ${RACE_BIN:-} == */exec_ab ]] && dev_prog exec_ab
GUARD_KB=$((${GUARD_GB:-14} * 1024 * 1024))
log "$(compute-sanitizer --version | tail -1)"
# name  quick  tool and filter
IFS=';' read -r -a JOBS <<<"${RACE_JOBS:-}"
# (the set that gave every kernel a result on 2026-12-06: without a launch cap, tp_epi / tp_split / tp_sample at quick
# 2 ran past 240 s)
((${#JOBS[@]})) || JOBS=(
    "lin_first 3 racecheck --kernel-name kns=tp_linear --launch-count 24"
    "lin_later 2 racecheck --kernel-name kns=tp_linear --launch-skip 9000 --launch-count 24"
    "lin_sync 3 synccheck --kernel-name kns=tp_linear --launch-count 300"
    "att_a 3 racecheck --kernel-name kns=tp_attend --launch-count 300"
    "att_b 3 racecheck --kernel-name kns=tp_attend --launch-skip 1000 --launch-count 300"
    "epi 3 racecheck --kernel-name kns=tp_epi --launch-count 1500"
    "split 3 racecheck --kernel-name kns=tp_split --launch-count 1500"
    "sample 3 racecheck --kernel-name kns=tp_sample"
)
# guard NAME: kill the job's session (its id in $R/NAME.sid) once its processes hold more than GUARD_KB; the peak (KB)
# into $R/NAME.peak
guard() {
    local name=$1 sid= peak=0 rss
    for _ in $(seq 50); do [ -s "$R/$name.sid" ] && break; sleep 0.1; done
    sid=$(cat "$R/$name.sid" 2>/dev/null) || return
    while pgrep -s "$sid" >/dev/null; do
        rss=$(ps -o rss= -s "$sid" | awk '{s += $1} END {print s + 0}')
        ((rss > peak)) && peak=$rss
        if ((rss > GUARD_KB)); then
            echo "killed by the guard at $rss KB" >>"$R/$name.log"
            pkill -9 -s "$sid"
        fi
        echo $peak >"$R/$name.peak"
        sleep 1
    done
}
# initcheck with --kernel-name sees no write by the kernels it does not instrument, so it reports every read of what
# they wrote (2026-12-06 18:02: 325,282 reports, the first the host's copy of tp_probe's output): such a job is refused
ok_jobs=()
for j in "${JOBS[@]}"; do
    read -r name q tool rest <<<"$j"
    if [ "$tool" = initcheck ] && [[ " $rest " == *" --kernel-name "* ]]; then
        log "$name: initcheck with a kernel filter says nothing (other kernels' writes unseen): not run"
        continue
    fi
    ok_jobs+=("$j")
done
JOBS=("${ok_jobs[@]}")
for j in "${JOBS[@]}"; do
    read -r name q tool rest <<<"$j"
    setsid bash -c "echo \$\$ >'$R/$name.sid'; t0=\$(date +%s); DD_CUDA_TIMEOUT_S=200 DD_TEST_QUICK=$q DD_TEST_ONLY=test_tput timeout -k 5 $RACE_S \
        compute-sanitizer --tool $tool $rest ${RACE_BIN:-$B/test_cuda} ${RACE_ARGS:-} >'$R/$name.log' 2>&1; \
        echo \"rc \$? after \$((\$(date +%s) - t0)) s\" >'$R/$name.rc'" &
    guard "$name" &
done
wait
for j in "${JOBS[@]}"; do
    read -r name q tool rest <<<"$j"
    log "$name (quick $q, $tool $rest): $(cat "$R/$name.rc" 2>/dev/null) peak $(awk '{printf "%.1f", $1 / 1048576}' \
        "$R/$name.peak" 2>/dev/null) GB: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|killed by' \
        "$R/$name.log" | tr '\n' ' ')"
done
(cd "$OUT" && tar czf race.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
