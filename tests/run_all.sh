#!/usr/bin/env bash
# Runs every test binary, keeps going after a failure, prints one closing line "N passed, N failed".
build=$1; shift
pass=0; fail=0; failed=()
for t in "$@"; do
    echo "=== $t"
    if "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$t"); fi
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failed test programs: ${failed[*]}"
echo "programs: $pass passed, $fail failed"
[ $fail -eq 0 ]
