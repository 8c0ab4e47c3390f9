#!/usr/bin/env bash
# Makes .raysite/raysite.tar.xz for dev/cuda/serve_call.sh: ray[serve]==2.60.0 and the dependencies the GPU machine
# lacks (its package list: /work/.library/device/KINDS.md), as cp312 manylinux wheels unpacked into one tree (no
# entry-point scripts), without Ray's Java jar, dashboard web client and RLlib (not used by Serve; 271 -> 221 MB),
# compressed with xz (~48 MB: under the 64 MiB a device call carries, the whole ray wheel alone is 79.3 MB); and
# .raysite/extra.tar.xz (~8 MB): newer copies of packages the machine has in versions too old for Ray 2.60 (its
# grpcio 1.84.0 against grpcio-reflection 1.85's >= 1.85.1, seen on the first run) with their neighbours.
# Needs pip (a venv) and network to PyPI; ~5 min on 2 cores.      bash dev/cuda/raysite.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
W=$(mktemp -d) T=$(mktemp -d)
python3 -m venv "$W/venv" && "$W/venv/bin/pip" -q install -U pip
"$W/venv/bin/pip" download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any -d "$W/whl" "ray[serve]==2.60.0"
X=$(mktemp -d)
python3 - "$W/whl" "$T" "$X" <<'PY'
import os, re, sys, zipfile
extra = set("""aiohttp aiosignal aiohappyeyeballs frozenlist multidict propcache yarl grpcio protobuf attrs anyio h11 click
typing-extensions""".split())
# already on the GPU machine (KINDS.md); everything else is carried
have = set("""aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi charset-normalizer click filelock
frozenlist grpcio h11 idna jinja2 markupsafe msgpack multidict numpy packaging prometheus-client propcache protobuf
pyyaml requests six typing-extensions urllib3 uvloop wrapt yarl""".split())
for f in sorted(os.listdir(sys.argv[1])):
    n = re.split(r"-\d", f)[0].lower().replace("_", "-")
    if n not in have or n in extra:
        z, dest = zipfile.ZipFile(os.path.join(sys.argv[1], f)), sys.argv[2] if n not in have else sys.argv[3]
        for i in z.infolist():  # extractall drops the file modes: Ray's gcs_server and raylet must stay executable
            path = z.extract(i, dest)
            if i.external_attr >> 16:
                os.chmod(path, (i.external_attr >> 16) & 0o777)
PY
rm -rf "$T/ray/jars" "$T/ray/dashboard/client/build" "$T/ray/rllib"
mkdir -p "$T/ray/dashboard/client/build/static" # the dashboard starts without its web client only with this folder
mkdir -p .raysite
grep -qx '/.raysite/' .git/info/exclude 2>/dev/null || echo '/.raysite/' >>.git/info/exclude
(cd "$T" && tar cf - .) | xz -T0 -6 >.raysite/raysite.tar.xz
(cd "$X" && tar cf - .) | xz -T0 -6 >.raysite/extra.tar.xz
rm -rf "$W" "$T" "$X"
ls -l .raysite/*.tar.xz
