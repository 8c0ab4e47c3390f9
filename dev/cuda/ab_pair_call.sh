#!/usr/bin/env bash
# One device call for both executors' A/Bs when machines are scarce (one start instead of two): lat_hot_call.sh
# (SIDES_LAT, prebuilt build-ab/<sides>) into $OUT/lat, cut at LAT_S seconds, then tput_ab.sh (SIDES_TPUT) into
# $OUT/tput with CAP_S set to what is left of CALL_S. Carry build-ab/{base,<sides>}, build-cuda/{obj,cuobj,tobj}, .debs.
#   SIDES_LAT=... TL_CFGS=... SIDES_TPUT=... AB_SPECS=... NCU_TILE=... OUT=$OUT bash dev/cuda/ab_pair_call.sh
# ICACHE=1 runs dev/cuda/derisk/icache.cu first (~20 s with its build; summary in $OUT/icache.txt): for a session
# that gets one call only.
set -u
cd "$(dirname "$0")/../.."
S=$(date +%s)
mkdir -p "$OUT/lat" "$OUT/tput"
if [ -n "${ICACHE:-}" ]; then
    T=$(mktemp -d) # one file back (the device tool returns 8 at most): the run's summary, then its full output
    OUT=$T BUILD=$T/build BUDGET_S=40 bash dev/cuda/derisk/run.sh icache >"$OUT/icache.txt" 2>&1
    cat "$T/derisk.txt" "$T/build_icache.log" >>"$OUT/icache.txt" 2>/dev/null
    rm -rf "$T"
fi
SIDES="$SIDES_LAT" AB_CUT_S=${LAT_S:-240} OUT=$OUT/lat timeout $((${LAT_S:-240} + 30)) bash dev/cuda/lat_hot_call.sh \
    >"$OUT/lat_console.log" 2>&1
C=$((${CALL_S:-565} - $(date +%s) + S))
echo "lat part: $(($(date +%s) - S)) s; tput part capped at $C s" >>"$OUT/lat_console.log"
SIDES="$SIDES_TPUT" CAP_S=$C OUT=$OUT/tput timeout $((C + 15)) bash dev/cuda/tput_ab.sh >"$OUT/tput_console.log" 2>&1
cd "$OUT/tput" && [ -d work ] && tar czf work.tgz work && rm -rf work
exit 0
