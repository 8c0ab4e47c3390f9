#!/usr/bin/env bash
# Bit-identity check between two builds of depthdec (issue 12, point 7): decode a fixed set of streams with one
# `depthdec` CLI binary, keep every output's bytes, and compare two such runs file by file.
#
#   scripts/identity.sh run DEPTHDEC OUTDIR [--backend B] [--set tiny|full] [--threads N]
#       Exports the synthetic models with DEPTHDEC (tiny-gpt and tiny-llama in f32/f16/bf16/q8/q4; with --set full
#       also the full-size gpt in bf16/q4 and csm in bf16/q8), takes the fixture models of this checkout
#       (gpt_f16, gpt_bf16, gpt_q8, the HF-layout csm_tiny), writes fixed inputs (hidden states, c0 and codes from a
#       fixed integer generator: the same bytes on every machine) and runs, per model:
#         gen_sampled    c0 sampled, default T 0.9 / top-k 50, seed 1, frame 0, all rows in one call
#         gen_batch4     c0 sampled, seed 7, frame 1000, calls of 4 rows (a short last call)
#         gen_greedy     --greedy, one row per call
#         gen_c0         c0 given, seed 42, all rows in one call
#         gen_c0_t13k0   c0 given, T 1.3, no top-k, seed 2^64-59, frame 123456789, calls of 3 rows
#         score_l0       teacher-forced logits of levels 1..Q-1 and the level-0 logits (--logits0)
#         score          the same without --logits0 (the other plan kind)
#       Rows: 11 for the tiny and fixture models, 9 for the full-size ones (9 rows in one call = 18 tokens in
#       pass 1: the cuda frame kernel's large schedule; calls of 4, 3 or 1 rows: its small one). Writes
#       OUTDIR/{models,inputs,out}/ and OUTDIR/SHA256SUMS, prints a sha256 per file. --set defaults to full;
#       tiny is the set for the slow ref backend (the full-size models take it ~2-5 s per frame). --backend
#       defaults to auto. DD_CPU_ISA (generic|avx2|avx512) in the environment picks the cpu backend's kernels.
#
#   scripts/identity.sh compare DIR_A DIR_B
#       Hashes every file of two run folders and says equal / DIFFERENT / only in A|B per file; exit 0 only when
#       both hold the same files with the same bytes.
#
#   scripts/identity.sh build REV DESTDIR [MAKE ARGS...]
#       Builds the CLI of revision REV in a temporary detached worktree (removed afterwards) and copies it to
#       DESTDIR/depthdec (it needs this checkout's git repository: on a machine that gets a copy of the working
#       tree without it, build here into an ignored folder such as build-old/ and take the binary along), e.g. the
#       revision before issue 12 with the cuda backend:
#         scripts/identity.sh build e7f0beb build-old CUDA=1 CUDA_ARCH=sm_90
#         make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda build-cuda/depthdec
#         scripts/identity.sh run build-old/depthdec /tmp/id-old --backend cuda
#         scripts/identity.sh run build-cuda/depthdec /tmp/id-new --backend cuda
#         scripts/identity.sh compare /tmp/id-old /tmp/id-new
#
# Needs bash, python3 (standard library only: it writes the .npy inputs), sha256sum, cmp; git for `build`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "identity: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

# Writes a .npy file of fixed contents: float32 uniform in [-2, 2) on a 2^-22 grid (exact in float32) or int32
# in [0, hi). The generator is splitmix64 seeded from the file's name, so the bytes never depend on the machine.
npy_gen() { # PATH f32|i32 HI_OR_0 DIM...
    python3 - "$@" <<'EOF'
import hashlib, struct, sys
path, kind, hi, dims = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(d) for d in sys.argv[4:]]
M = (1 << 64) - 1
state = int.from_bytes(hashlib.sha256(path.rsplit("/", 1)[-1].encode()).digest()[:8], "little")
def nxt():
    global state
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
n = 1
for d in dims: n *= d
if kind == "f32":
    vals = struct.pack("<%df" % n, *[((nxt() >> 40) - (1 << 23)) / float(1 << 22) for _ in range(n)])
    descr = "<f4"
else:
    vals = struct.pack("<%di" % n, *[(nxt() >> 11) % hi for _ in range(n)])
    descr = "<i4"
shape = "(%d,)" % dims[0] if len(dims) == 1 else "(" + ", ".join(map(str, dims)) + ")"
hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + vals)
EOF
}

# One CLI call (cli ARGS...); a failure stops the run with the command that failed.
cli() {
    if ! "$DD" "$@" >"$OUT/log/last.txt" 2>&1; then
        cat "$OUT/log/last.txt" >&2
        die "failed: $DD $*"
    fi
    cat "$OUT/log/last.txt" >>"$OUT/log/cli.txt"
}

info_field() { # MODEL FIELD: the first number after FIELD in `depthdec info`
    "$DD" info "$1" | awk -v f="$2" '$1 == f { print $2; exit }'
}

run_model() { # NAME MODEL_PATH ROWS
    local name=$1 model=$2 n=$3 th=()
    [ -n "$THREADS" ] && th=(--threads "$THREADS")
    local idim V Q
    idim=$(info_field "$model" input_dim)
    V=$(info_field "$model" codebook)
    Q=$(info_field "$model" levels)
    [ -n "$idim" ] && [ -n "$V" ] && [ -n "$Q" ] || die "$model: cannot read input_dim/codebook/levels from 'depthdec info'"
    local in=$OUT/inputs/$name o=$OUT/out/$name
    npy_gen "${in}_hidden.npy" f32 0 "$n" "$idim"
    npy_gen "${in}_c0.npy" i32 "$V" "$n"
    npy_gen "${in}_codes.npy" i32 "$V" "$n" "$Q"
    local g=(generate --model "$model" --hidden "${in}_hidden.npy" --backend "$BACKEND" "${th[@]}")
    cli "${g[@]}" --out "${o}_gen_sampled.npy" --seed 1 --frame 0 --batch "$n"
    cli "${g[@]}" --out "${o}_gen_batch4.npy" --seed 7 --frame 1000 --batch 4
    cli "${g[@]}" --out "${o}_gen_greedy.npy" --greedy --batch 1
    cli "${g[@]}" --out "${o}_gen_c0.npy" --c0 "${in}_c0.npy" --seed 42 --batch "$n"
    cli "${g[@]}" --out "${o}_gen_c0_t13k0.npy" --c0 "${in}_c0.npy" --temperature 1.3 --top-k 0 \
        --seed 18446744073709551557 --frame 123456789 --batch 3
    local s=(score --model "$model" --hidden "${in}_hidden.npy" --codes "${in}_codes.npy" --backend "$BACKEND" "${th[@]}")
    cli "${s[@]}" --out "${o}_score_l0_logits.npy" --logits0 "${o}_score_l0_logits0.npy"
    cli "${s[@]}" --out "${o}_score_logits.npy"
    echo "  $name: $n rows, input_dim $idim, V $V, Q $Q" >&2
}

cmd_run() {
    [ $# -ge 2 ] || usage
    DD=$1 OUT=$2
    shift 2
    BACKEND=auto SET=full THREADS=
    while [ $# -gt 0 ]; do
        case $1 in
        --backend) BACKEND=${2:?--backend needs a value}; shift 2 ;;
        --set) SET=${2:?--set needs a value}; shift 2 ;;
        --threads) THREADS=${2:?--threads needs a value}; shift 2 ;;
        *) die "run: unknown option '$1'" ;;
        esac
    done
    [ "$SET" = tiny ] || [ "$SET" = full ] || die "--set '$SET': want tiny or full"
    [ -x "$DD" ] || die "$DD: not an executable"
    case $DD in /*) ;; *) DD=$PWD/$DD ;; esac
    [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && die "$OUT: exists and is not empty (the run writes a fresh folder)"
    mkdir -p "$OUT/models" "$OUT/inputs" "$OUT/out" "$OUT/log"
    OUT=$(cd "$OUT" && pwd)
    local fx=$ROOT/tests/fixtures
    {
        echo "binary:   $DD"
        echo "version:  $("$DD" --version 2>&1 | head -1)"
        echo "backend:  $BACKEND   set: $SET   threads: ${THREADS:-default}   DD_CPU_ISA: ${DD_CPU_ISA:-unset}"
        echo "fixtures: $fx"
        echo "host:     $(uname -n) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$OUT/log/run.txt"
    echo "identity: $DD, backend $BACKEND, set $SET -> $OUT" >&2

    local k w
    for k in tiny-gpt tiny-llama; do
        for w in f32 f16 bf16 q8 q4; do
            cli export --synthetic "$k" --weights "$w" --out "$OUT/models/$k-$w.safetensors"
            run_model "$k-$w" "$OUT/models/$k-$w.safetensors" 11
        done
    done
    for k in gpt_f16 gpt_bf16 gpt_q8; do run_model "fixture-$k" "$fx/$k.safetensors" 11; done
    run_model fixture-csm_tiny "$fx/csm_tiny" 11
    if [ "$SET" = full ]; then
        for kw in gpt-bf16 gpt-q4 csm-bf16 csm-q8; do
            cli export --synthetic "${kw%-*}" --weights "${kw#*-}" --out "$OUT/models/$kw.safetensors"
            run_model "$kw" "$OUT/models/$kw.safetensors" 9
        done
    fi
    rm -f "$OUT/log/last.txt"
    (cd "$OUT" && find models inputs out -type f | LC_ALL=C sort | xargs sha256sum) >"$OUT/SHA256SUMS"
    cat "$OUT/SHA256SUMS"
    echo "identity: $(wc -l <"$OUT/SHA256SUMS") files, sums in $OUT/SHA256SUMS" >&2
}

cmd_compare() {
    [ $# -eq 2 ] || usage
    local a=$1 b=$2 f eq=0 ne=0 only=0
    [ -d "$a" ] && [ -d "$b" ] || die "compare needs two run folders"
    local files
    files=$( (cd "$a" && find models inputs out -type f 2>/dev/null; cd "$b" && find models inputs out -type f 2>/dev/null) |
        LC_ALL=C sort -u)
    [ -n "$files" ] || die "no run outputs in $a or $b"
    while IFS= read -r f; do
        if [ ! -f "$a/$f" ]; then echo "only in B  $f"; only=$((only + 1))
        elif [ ! -f "$b/$f" ]; then echo "only in A  $f"; only=$((only + 1))
        elif cmp -s "$a/$f" "$b/$f"; then echo "equal      $f"; eq=$((eq + 1))
        else echo "DIFFERENT  $f ($(cmp "$a/$f" "$b/$f" 2>&1 | sed 's/.* differ: //; s/, line [0-9]*//'))"; ne=$((ne + 1))
        fi
    done <<<"$files"
    echo "identity: $eq equal, $ne different, $only in one folder only ($a vs $b)"
    [ $ne -eq 0 ] && [ $only -eq 0 ]
}

cmd_build() {
    [ $# -ge 2 ] || usage
    local rev=$1 dest=$2
    shift 2
    command -v git >/dev/null || die "build needs git"
    local wt
    wt=$(mktemp -d /tmp/depthdec-identity.XXXXXX)
    rmdir "$wt"
    git -C "$ROOT" worktree add --detach "$wt" "$rev" >/dev/null || die "git worktree add $rev failed"
    local rc=0
    make -C "$wt" -j"$(nproc)" BUILD=build "$@" build/depthdec >"$wt.build.log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then
        mkdir -p "$dest"
        cp "$wt/build/depthdec" "$dest/depthdec"
    fi
    git -C "$ROOT" worktree remove --force "$wt"
    [ $rc -eq 0 ] || { tail -30 "$wt.build.log" >&2; die "build of $rev failed (log: $wt.build.log)"; }
    rm -f "$wt.build.log"
    echo "identity: $rev ($(git -C "$ROOT" rev-parse --short "$rev")) built with '$*' -> $dest/depthdec" >&2
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
run) cmd_run "$@" ;;
compare) cmd_compare "$@" ;;
build) cmd_build "$@" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
