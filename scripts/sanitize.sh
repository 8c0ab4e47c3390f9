#!/usr/bin/env bash
# Hardening checks (issue 7). Each stage builds what it needs from scratch-able build dirs and fails the script on
# any error report:
#   asan      build-asan: the library, CLI and every test with -fsanitize=address,undefined (gcc), then the whole
#             test suite (tests/run_all.sh). LeakSanitizer is on: a leak fails the test that leaked.
#   tsan      build-tsan: test_threads with -fsanitize=thread; any data race fails (exit 66).
#   valgrind  the CLI's end-to-end commands (info / generate / score / export / bench on the fixtures and tiny
#             models, plus error cases) under valgrind memcheck, with build/ (plain -O2 -g): zero errors, zero
#             definite or indirect leaks. scripts/valgrind.supp holds suppressions for system libraries only.
#   fuzz      `make fuzz` (clang libFuzzer + ASan/UBSan) and each harness for FUZZ_SECONDS (default 60) on a
#             scratch copy of its seed corpus (fuzz/corpus/ is not modified). Crash inputs go to
#             build-fuzz/artifacts/.
# Usage: scripts/sanitize.sh [STAGE...]   (default: asan tsan valgrind fuzz)
#        FUZZ_SECONDS=600 scripts/sanitize.sh fuzz
# Needs: gcc with libasan/libubsan/libtsan, valgrind, clang + libclang-rt-dev (libFuzzer), python3 for make_corpus.
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(asan tsan valgrind fuzz)
failed=()

say() { printf '\n=== sanitize: %s\n' "$*"; }

SAN_FLAGS="-O1 -g -fno-omit-frame-pointer"

stage_asan() {
    say "ASan + UBSan: build-asan, full test suite"
    CFLAGS="$SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all" \
        LDFLAGS="-fsanitize=address,undefined" make -s -j"$JOBS" BUILD=build-asan tests || return 1
    # halt on the first UBSan report with a stack; ASan's leak check runs at each test program's exit
    # DD_TEST_QUICK: skip test_backends' full-size (GPT/CSM dims) frames on ref, minutes under ASan; the plain
    # `make test` runs them
    DD_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        bash tests/run_all.sh build-asan build-asan/test_*
}

stage_tsan() {
    say "TSan: build-tsan/test_threads"
    CFLAGS="$SAN_FLAGS -fsanitize=thread" LDFLAGS="-fsanitize=thread" \
        make -s -j"$JOBS" BUILD=build-tsan build-tsan/test_threads || return 1
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/test_threads
}

# One CLI command under memcheck. want: the exit status the command itself must give (0, 1 or 2); valgrind's
# own error exit is 99, so an error report can never pass for an expected failure.
vg_run() {
    local want=$1; shift
    local log="$vgdir/vg.$((++vg_n)).log"
    valgrind -q --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect --track-origins=yes --suppressions=scripts/valgrind.supp \
        --log-file="$log" "$cli" "$@" >"$vgdir/out.txt" 2>"$vgdir/err.txt"
    local rc=$?
    if [ $rc -ne "$want" ] || [ -s "$log" ]; then
        echo "FAIL (exit $rc, want $want): depthdec $*"
        sed 's/^/    /' "$log" "$vgdir/err.txt" | head -60
        vg_bad=$((vg_bad + 1))
    else
        echo "ok   (exit $rc): depthdec $*"
    fi
}

stage_valgrind() {
    say "valgrind memcheck: CLI end-to-end"
    command -v valgrind >/dev/null || { echo "valgrind not installed"; return 1; }
    make -s -j"$JOBS" BUILD=build build/depthdec || return 1
    cli=build/depthdec
    vgdir=$(mktemp -d)
    vg_n=0 vg_bad=0
    local F=tests/fixtures o=$vgdir
    # info
    vg_run 0 info $F/gpt_q8.safetensors
    vg_run 0 info $F/csm_tiny
    # export, then use the exported file
    vg_run 0 export --synthetic tiny-llama --weights q4 --out $o/tl.safetensors
    vg_run 0 info $o/tl.safetensors
    # generate / score on the fixtures, both CPU backends, sampled and greedy, c0 given and sampled from head0
    for b in ref cpu; do
        vg_run 0 generate --model $F/gpt_q8.safetensors --hidden $F/gpt_q8_hidden.npy --out $o/c.npy --greedy \
            --backend $b --threads 2
        vg_run 0 generate --model $F/csm_tiny --hidden $F/csm_tiny_hidden.npy --out $o/c.npy --seed 7 --frame 3 \
            --backend $b --threads 2
        vg_run 0 score --model $F/csm_tiny --hidden $F/csm_tiny_hidden.npy --codes $F/csm_tiny_codes.npy \
            --out $o/l.npy --logits0 $o/l0.npy --backend $b --threads 2
        vg_run 0 score --model $F/gpt_bf16.safetensors --hidden $F/gpt_bf16_hidden.npy --codes $F/gpt_bf16_codes.npy \
            --out $o/l.npy --backend $b
        # Moshi's depformer (sharded HF directory; text tokens; c0 sampled from position 0)
        vg_run 0 generate --model $F/moshi_tiny --hidden $F/moshi_tiny_hidden.npy --text $F/moshi_tiny_text.npy \
            --out $o/c.npy --backend $b --threads 2
        vg_run 0 score --model $F/moshi_q12 --hidden $F/moshi_q12_hidden.npy --codes $F/moshi_q12_codes.npy \
            --text $F/moshi_q12_text.npy --out $o/l.npy --logits0 $o/l0.npy --backend $b
        # the whole Qwen3-Omni (sharded; only the predictor's shards opened) and an MLX-quantized predictor
        vg_run 0 score --model $F/qwen3omni_full --hidden $F/qwen3omni_tiny_hidden.npy \
            --codes $F/qwen3omni_tiny_codes.npy --out $o/l.npy --backend $b
        vg_run 0 score --model $F/qwen3omni_mlx_q4 --hidden $F/qwen3omni_mlx_q4_hidden.npy \
            --codes $F/qwen3omni_mlx_q4_codes.npy --out $o/l.npy --backend $b --threads 2
    done
    vg_run 0 info $F/qwen3omni_full
    vg_run 0 info $F/qwen3omni_mlx_q8
    vg_run 1 generate --model $F/moshi_tiny --hidden $F/moshi_tiny_hidden.npy --out $o/c.npy
    vg_run 0 generate --model $F/gpt_f16.safetensors --hidden $F/gpt_f16_hidden.npy --out $o/c.npy --top-k 5 \
        --temperature 1.2 --batch 3 --backend cpu
    # bench on a tiny model (it also measures read bandwidth over a 1 GiB buffer: the slowest command here)
    vg_run 0 bench --model $o/tl.safetensors --frames 2 --batch 2 --backend cpu --threads 2 --json $o/b.json
    # error cases: each must fail cleanly (exit 1 or 2), and leak nothing
    vg_run 1 info $o/does-not-exist.safetensors
    vg_run 1 info $F/gpt_q8_hidden.npy
    vg_run 1 info tests/fixtures
    head -c 100000 $F/gpt_q8.safetensors >$o/truncated.safetensors
    vg_run 1 info $o/truncated.safetensors
    vg_run 1 generate --model $o/truncated.safetensors --hidden $F/gpt_q8_hidden.npy --out $o/c.npy
    vg_run 1 generate --model $F/gpt_q8.safetensors --hidden $F/csm_tiny_codes.npy --out $o/c.npy
    vg_run 1 generate --model $F/gpt_q8.safetensors --hidden $o/missing.npy --out $o/c.npy
    vg_run 1 generate --model $F/gpt_q8.safetensors --hidden $F/gpt_q8_hidden.npy --out $o/no/such/dir/c.npy
    vg_run 1 score --model $F/csm_tiny --hidden $F/csm_tiny_hidden.npy --codes $F/csm_tiny_hidden.npy --out $o/l.npy
    for f in fuzz/regressions/npy-*; do
        vg_run 1 generate --model $F/gpt_q8.safetensors --hidden "$f" --out $o/c.npy
    done
    vg_run 2 generate --model $F/gpt_q8.safetensors
    vg_run 2 generate --model $F/gpt_q8.safetensors --hidden $F/gpt_q8_hidden.npy --out $o/c.npy --top-k -3
    vg_run 2 frobnicate
    vg_run 2 bench --backend nonsense
    rm -rf "$vgdir"
    echo "valgrind: $vg_n commands, $vg_bad failed"
    [ $vg_bad -eq 0 ]
}

stage_fuzz() {
    say "libFuzzer: ${FUZZ_SECONDS}s per harness"
    make -s fuzz || return 1
    mkdir -p build-fuzz/artifacts
    local bad=0
    for h in fuzz_model fuzz_npy; do
        local work
        work=$(mktemp -d)
        echo "--- $h"
        build-fuzz/$h -max_total_time="$FUZZ_SECONDS" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix=build-fuzz/artifacts/$h- "$work" fuzz/corpus/$h 2>&1 |
            grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==[0-9]+==|SUMMARY|fuzz: check failed|artifact_prefix|Test unit)' ||
            true
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$h: FINDING (see build-fuzz/artifacts/)"; bad=1; }
        rm -rf "$work"
    done
    return $bad
}

for s in "${stages[@]}"; do
    case $s in
    asan | tsan | valgrind | fuzz) "stage_$s" || failed+=("$s") ;;
    *) echo "sanitize: unknown stage '$s' (asan tsan valgrind fuzz)"; exit 2 ;;
    esac
done
echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "sanitize: FAILED: ${failed[*]}"
    exit 1
fi
echo "sanitize: all clean (${stages[*]})"
