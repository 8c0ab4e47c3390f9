#!/usr/bin/env bash
# Runs every test program (keeps going after a failure), streaming each one's output as it runs, with a header
# "[k/n] program" before and "[k/n] program: N passed, N failed, N skipped, S s" after it, and prints the cmocka
# totals as one closing line:
#   "tests: N passed, N failed, N skipped (T s)"
# A program that crashes or exits non-zero without a cmocka summary counts as one failed test.
# DD_TEST_QUICK=1 in the environment is passed on to the programs (see README "The two commands").
shift # build dir (unused)
pass=0; fail=0; skip=0; bad=()
n=$#; k=0; t_all=$(date +%s.%N)
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in "$@"; do
    k=$((k + 1))
    echo "=== [$k/$n] $t"
    t0=$(date +%s.%N)
    "$t" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    [ $rc -ne 0 ] && bad+=("$t (exit $rc)")
    echo "=== [$k/$n] $t: $p passed, $f failed, $s skipped, $secs s"
done
echo
[ ${#bad[@]} -gt 0 ] && printf 'failed programs: %s\n' "${bad[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped ($(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN {printf "%.0f", b - a}') s)"
[ ${#bad[@]} -eq 0 ]
