#!/usr/bin/env bash
# `make install` and pkg-config, as an installed user sees them (run by `make test`, from the repository root):
#   install     make install PREFIX=<tmp> installs the header, libdepthdec.a, libdepthdec.so.1 (SONAME
#               libdepthdec.so.1) + the libdepthdec.so link, bin/depthdec and lib/pkgconfig/depthdec.pc;
#               DESTDIR prefixes every path
#   shared      examples/decode.c built with `pkg-config --cflags --libs depthdec` against that copy, run on a
#               fixture model: it loads the installed libdepthdec.so.1 and prints the codes
#   static      the same with libdepthdec.a and `pkg-config --static --libs depthdec` (no libdepthdec.so needed)
# Prints cmocka-style summary lines, which tests/run_all.sh counts. Uses the make variables of the calling make
# (BUILD, CUDA ...) through MAKEFLAGS.
set -uo pipefail
B=${DD_BUILD:-build}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0; skip=0
ok()   { echo "[       OK ] $1"; pass=$((pass + 1)); }
bad()  { echo "[  FAILED  ] $1: $2"; fail=$((fail + 1)); }
run()  { echo "[ RUN      ] $1"; }

run install
P=$tmp/prefix
if ! ${MAKE:-make} -s install PREFIX="$P" >"$tmp/install.log" 2>&1; then
    bad install "make install PREFIX=$P failed: $(tail -3 "$tmp/install.log")"
else
    missing=""
    for f in include/depthdec.h lib/libdepthdec.a lib/libdepthdec.so.1 lib/libdepthdec.so bin/depthdec \
             lib/pkgconfig/depthdec.pc; do
        [ -e "$P/$f" ] || missing="$missing $f"
    done
    soname=$(objdump -p "$P/lib/libdepthdec.so.1" 2>/dev/null | awk '/SONAME/ {print $2}')
    if [ -n "$missing" ]; then bad install "not installed:$missing"
    elif [ "$soname" != libdepthdec.so.1 ]; then bad install "SONAME is '$soname', want libdepthdec.so.1"
    elif [ "$(readlink "$P/lib/libdepthdec.so")" != libdepthdec.so.1 ]; then bad install "libdepthdec.so is not a link to libdepthdec.so.1"
    elif ! "$P/bin/depthdec" --version | grep -q '^depthdec '; then bad install "installed CLI does not run"
    elif ! ${MAKE:-make} -s install PREFIX=/usr/local DESTDIR="$tmp/dest" >"$tmp/dest.log" 2>&1 ||
         [ ! -e "$tmp/dest/usr/local/lib/pkgconfig/depthdec.pc" ] ||
         ! grep -qx 'prefix=/usr/local' "$tmp/dest/usr/local/lib/pkgconfig/depthdec.pc"; then
        bad install "make install DESTDIR=... PREFIX=/usr/local did not put depthdec.pc (prefix=/usr/local) under DESTDIR"
    else ok install; fi
fi

model=tests/fixtures/csm_tiny/model.safetensors
check_run() { # name, binary
    local out
    if ! out=$(LD_LIBRARY_PATH="$P/lib" "$2" "$model" 2>&1); then bad "$1" "example failed: $out"; return; fi
    # "MODEL (cpu backend): c0 ... c7": 8 codes
    if [ "$(echo "$out" | sed 's/.*://' | wc -w)" -ne 8 ]; then bad "$1" "want 8 codes, got: $out"; return; fi
    echo "  $out"
    ok "$1"
}
for mode in shared static; do
    run "$mode"
    if ! command -v pkg-config >/dev/null 2>&1; then
        echo "[  SKIPPED ] $mode: pkg-config not installed (Debian: apt-get install pkg-config)"; skip=$((skip + 1))
        continue
    fi
    [ -e "$P/lib/pkgconfig/depthdec.pc" ] || { bad "$mode" "nothing installed"; continue; }
    export PKG_CONFIG_PATH="$P/lib/pkgconfig"
    if [ $mode = shared ]; then
        flags=$(pkg-config --cflags --libs depthdec)
    else # the archive by name, then what it needs
        flags="$(pkg-config --cflags depthdec) $(pkg-config --static --libs depthdec | sed 's/-ldepthdec\b/-l:libdepthdec.a/')"
    fi
    echo "  cc examples/decode.c $flags"
    if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/decode_$mode" examples/decode.c $flags 2>"$tmp/cc.log"; then
        bad "$mode" "build failed: $(head -5 "$tmp/cc.log")"; continue
    fi
    # ldd's whole output first: with pipefail, `ldd | grep -q` fails when grep exits early and ldd gets SIGPIPE
    if [ $mode = shared ] && ! grep -qF "$P/lib/libdepthdec.so.1" <<<"$(LD_LIBRARY_PATH="$P/lib" ldd "$tmp/decode_$mode")"; then
        bad "$mode" "does not load $P/lib/libdepthdec.so.1"; continue
    fi
    if [ $mode = static ] && ldd "$tmp/decode_$mode" | grep -q libdepthdec; then
        bad "$mode" "links libdepthdec.so"; continue
    fi
    check_run "$mode" "$tmp/decode_$mode"
done

echo "[==========] $((pass + fail + skip)) test(s) run."
[ $pass -gt 0 ] && echo "[  PASSED  ] $pass test(s)."
[ $skip -gt 0 ] && echo "[  SKIPPED ] $skip test(s)."
[ $fail -gt 0 ] && echo "[  FAILED  ] $fail test(s)."
[ $fail -eq 0 ]
