#!/usr/bin/env bash
# Fills .debs/ (gitignored) with the Debian packages a device call unpacks before it builds (call_env.sh, side_lib.sh:
# `dpkg -x` of each into /): jansson and cmocka, headers and libraries. Without the -dev packages the device's build
# stops at "jansson not found" (2026-12-06 23:45: one call lost).     bash dev/cuda/debs.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .debs
cd .debs
apt-get download libjansson-dev libjansson4 libcmocka-dev libcmocka0 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
for p in libjansson-dev libjansson4 libcmocka-dev libcmocka0; do
    ls ${p}_*.deb >/dev/null 2>&1 || { echo "debs: $p missing from .debs/" >&2; exit 1; }
done
echo "debs: $(ls | tr '\n' ' ')"
