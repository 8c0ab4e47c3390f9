#!/usr/bin/env bash
# The device tool counts a call's carry on disk (4 KB blocks, 64 MiB with the tracked tree); binaries built here
# compress ~14x with xz (2026-12-07: build-ab/{base,ao,pre0,pre1,pre2,tl} + build-cuda/{cuobj,obj,tobj}, 75 MB ->
# 5.4 MB). Here:   bash dev/cuda/pack.sh build-ab/base build-ab/ao ...     (-> build-pack/pack.txz, ignored)
# device, first:   python3 -c "import tarfile;tarfile.open('build-pack/pack.txz').extractall()"   (carry build-pack)
# The archive keeps mtimes, so carried build-cuda objects stay newer than the copied sources (call_env.sh).
set -eu -o pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: pack.sh PATH..." >&2; exit 2; }
mkdir -p build-pack
tar cf - "$@" | xz -9 -T2 >build-pack/pack.txz
ls -la build-pack/pack.txz
