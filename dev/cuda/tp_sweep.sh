#!/usr/bin/env bash
# Every tile and split of each linear of a frame, timed in the frame (issue 14): which (BN, S) the throughput
# executor should pick, measured instead of modelled (tp_shape's cost model picked the 32-token tile at most shapes
# and was 7-33 % slower there, 2026-12-06 12:2x). One device call:
#   SWEEP_SPECS="gpt bf16 256|csm bf16 256" CAP_S=540 OUT=$OUT bash dev/cuda/tp_sweep.sh
# (carry build-cuda/{cuobj,obj,tobj}, .debs). A side built with dev/cuda/tput_force.patch (DD_TP_FORCE="Nr,K,bn,S"
# overrides tp_shape for one kind of linear: rows Nr, K, every pass); for each spec and each kind of linear of the
# model (qkv, out, fc1, fc2, the head), exec_ab (throughput executor only, SWEEP_FRAMES frames, default 8) with the
# model's choice (no override) and with each valid (BN, S). Every run's codes must hash the same (the numerics
# contract: the tile and split do not change a bit); a run that differs is flagged. Writes $OUT/sweep.jsonl (one
# line a run: spec, linear, bn, S, ms, codes hash), $OUT/summary.txt (a table a spec: ms a frame by linear and
# choice, the model's choice first), $OUT/work.tgz.
CALL=tp_sweep source "$(dirname "$0")/call_env.sh"
# SWEEP_EXE: an exec_ab of the tree with tput_force.patch built here (`dev/cuda/prebuilt_ab.sh prebuild-force`:
# build-ab/pref/exec_ab; with CALL_NOBUILD=1 the call builds nothing)
if [ -n "${SWEEP_EXE:-}" ]; then
    X=$SWEEP_EXE
else
    side_build /tmp/tp_force dev/cuda/tput_force.patch || exit 1
    X=/tmp/tp_force/build-cuda/exec_ab
fi
FR=${SWEEP_FRAMES:-8}
: >"$OUT/sweep.jsonl"
# the linears of a model: name Nr K (tput.cu's rows: MT 16, so the head's 2051 rows are 2064)
kinds() {
    case $1 in
    gpt) echo "qkv 3072 1024|out 1024 1024|fc1 4096 1024|fc2 1024 4096|head 2048 1024" ;;
    csm) echo "qkv 1536 1024|out 1024 1024|fc1 16384 1024|fc2 1024 8192|head 2064 1024" ;;
    esac
}
run() { # run SPEC NAME BN S FORCE
    local spec=$1 name=$2 bn=$3 sp=$4 force=$5 line
    line=$(env EXEC_AB_NOLAT=1 EXEC_AB_NOFRAME=1 ${force:+DD_TP_FORCE=$force} timeout 60 $X ${spec% *} $FR \
        ${spec##* } 2>>"$R/sweep.err" | tail -1)
    [ -n "$line" ] || { log "$spec $name bn $bn S $sp: no result"; return; }
    echo "$line" | python3 -c "import json,sys
r=json.loads(sys.stdin.read()); print(json.dumps({'spec': '$spec', 'linear': '$name', 'bn': '$bn', 'S': '$sp',
 'ms': r['ms_per_frame'], 'hash': r.get('codes_hash', '')}))" >>"$OUT/sweep.jsonl"
}
IFS='|' read -r -a specs <<<"${SWEEP_SPECS:-gpt bf16 256|csm bf16 256|gpt bf16 64|gpt bf16 512}"
for spec in "${specs[@]}"; do
    m=${spec%% *} T=${spec##* }
    IFS='|' read -r -a ks <<<"$(kinds "$m")"
    for kd in "${ks[@]}"; do
        read -r name Nr K <<<"$kd"
        fits 40 "$spec $name" || break 2
        run "$spec" "$name" model model ""
        NC=$((K / 128))
        for bn in 32 64 128; do
            for sp in 1 2 4 8 16; do
                ((sp <= NC && NC % sp == 0)) || continue
                ((sp == 1 || (NC - NC / sp + 1) * T * Nr * 4 <= 64 << 20)) || continue
                fits 8 "$spec $name $bn $sp" || break 4
                run "$spec" "$name" $bn $sp "$Nr,$K,$bn,$sp"
            done
        done
    done
done
python3 - "$OUT/sweep.jsonl" <<'EOF' | tee -a "$S"
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.OrderedDict()
for r in rows:
    by.setdefault(r["spec"], collections.OrderedDict()).setdefault(r["linear"], []).append(r)
for spec, lins in by.items():
    hashes = {r["hash"] for rs in lins.values() for r in rs}
    print(f"## {spec}: {sum(len(v) for v in lins.values())} runs, codes hashes {len(hashes)}"
          + ("" if len(hashes) == 1 else " -- DIFFERENT CODES: " + ", ".join(sorted(hashes))))
    for lin, rs in lins.items():
        base = next((r["ms"] for r in rs if r["bn"] == "model"), None)
        best = min(rs, key=lambda r: r["ms"])
        cells = " ".join(f"{r['bn']}/{r['S']} {r['ms']:.3f}" for r in rs)
        print(f"{lin}: model {base} best {best['bn']}/{best['S']} {best['ms']:.3f} | {cells}")
EOF
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
