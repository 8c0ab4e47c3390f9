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
# land_bound ROOT: the parts "land" and "bound" of $P (pack_item1_call.sh, each under ROOT/PART; on an H200 only unless
# LAND_ANY=1), each skipped when what is left of CAP would not hold it (slot_call.sh, preld_call.sh)
land_bound() {
    local part need
    for part in land bound; do
        [[ $P == *$part* ]] || continue
        need=$([ $part = land ] && echo 230 || echo 130)
        [ "$(left)" -gt "$need" ] || { log "$part skipped"; continue; }
        mkdir -p "$1/$part"
        OUT=$1/$part PARTS=$part CAP_S=$need bash dev/cuda/pack_item1_call.sh >/tmp/${part}_run.log 2>&1
        log "$part rc $?: $(tail -3 "$1/$part/parts.txt" | tr '\n' ' ')"
    done
}
