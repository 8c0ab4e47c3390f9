#!/usr/bin/env bash
# Installs what building and testing depthdec needs on Debian/Ubuntu (the README's first command runs it):
#   build-essential   gcc, make, libc headers
#   libjansson-dev    JSON (model configs): the library needs it
#   libcmocka-dev     the unit-test framework: only `make test` needs it
#   pkg-config        `make test`'s install check builds an example with pkg-config
#   python3-venv      the Python package's virtual environment (README "Python")
#   python3-dev       Python.h: `pip install ./python` compiles the package's C extension (a bare Debian 12 has
#                     python3 without it; found by running the README's commands in a debootstrap'd bookworm)
# Packages already installed are left alone; when all are there nothing is run (no root needed). Otherwise it runs
# `apt-get update` and `apt-get install -y` as root; a user who is not root gets the command to run and exit 1.
# Usage: scripts/deps.sh [EXTRA_PACKAGE...]   (extra Debian packages to install too, e.g. CI's valgrind clang)
set -euo pipefail

pkgs=(build-essential libjansson-dev libcmocka-dev pkg-config python3-venv python3-dev "$@")

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "deps: no dpkg/apt-get here (not Debian/Ubuntu): install a C compiler, make, jansson (headers), cmocka" \
         "(headers, for the tests), pkg-config, python3-venv and python3-dev with your system's package manager" >&2
    exit 1
fi

missing=()
for p in "${pkgs[@]}"; do
    # dpkg-query prints "install ok installed" for a package that is fully installed
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$st" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all installed (${pkgs[*]})"
    exit 0
fi

echo "deps: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: installing them needs root; run this, then the command again:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]}"
