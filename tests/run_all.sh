#!/usr/bin/env bash
# Runs every test program (keeps going after a failure) and prints the cmocka totals as one closing line:
#   "tests: N passed, N failed, N skipped"
# A program that crashes or exits non-zero without a cmocka summary counts as one failed test.
shift # build dir (unused)
pass=0; fail=0; skip=0; bad=()
for t in "$@"; do
    echo "=== $t"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    [ $rc -ne 0 ] && bad+=("$t (exit $rc)")
done
echo
[ ${#bad[@]} -gt 0 ] && printf 'failed programs: %s\n' "${bad[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ ${#bad[@]} -eq 0 ]
