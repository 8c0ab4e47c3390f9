# The common start of the call scripts that run from a packed carry (sourced after `set -u -o pipefail` by
# slab_call.sh, slot_call.sh, tarr_call.sh and pack_item1_call.sh; carry build-pack and .debs):
#   source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh" CAP_DEFAULT "PARTS_DEFAULT"
# From the repository root: unpacks build-pack/pack.txz (dev/cuda/pack.sh) and the .debs, puts the CUDA runtime on
# the library path; sets T0, CAP (CAP_S, else CAP_DEFAULT seconds), P (PARTS, else PARTS_DEFAULT) and O ($OUT);
# left prints the seconds of CAP left, log appends a line (and what is left) to $O/parts.txt; the first line names
# the GPU and the parts.
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
python3 -c "import tarfile;tarfile.open('build-pack/pack.txz').extractall()" || exit 1
T0=$(date +%s) CAP=${CAP_S:-$1} P=${PARTS:-$2} O=$OUT
left() { echo $((CAP - ($(date +%s) - T0))); }
log() { echo "$* (left $(left))" | tee -a "$O/parts.txt"; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in .debs/*.deb; do dpkg -x "$f" /; done
ldconfig
log "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader): $P"
