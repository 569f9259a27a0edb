#!/usr/bin/env bash
# The demo behind `make demo`: the same synthetic dataset trained with GS, LS and PLS q=0.3.
#
# The dataset lives on shared storage: the GlusterFS mount of scripts/shared_fs.sh, used if it is
# up, else started here when we are root (and stopped at the end). The package's shared_volume does
# both: this script runs again under `python -m hpcshuffle.storage.shared_io`, which says what it
# found in HPCSHUFFLE_SHARED_MOUNT and HPCSHUFFLE_SHARED_HOW. Without it the demo says so and GS
# reads this node's disk, which makes GS look cheaper than on a cluster's parallel file system.
set -euo pipefail
if [ -z "${HPCSHUFFLE_SHARED_HOW+set}" ]; then
  exec python -m hpcshuffle.storage.shared_io bash "$0" "$@"
fi
ranks=${1:-4}; epochs=${2:-4}; out=${3:-results/demo}
export OMP_NUM_THREADS=1
store=$(mktemp -d "${TMPDIR:-/tmp}/hpcshuffle-demo-store.XXXXXX")
trap 'rm -rf "$store"' EXIT

shared=$HPCSHUFFLE_SHARED_MOUNT
case $HPCSHUFFLE_SHARED_HOW in
  mounted) echo "== shared storage: GlusterFS at $shared (already mounted) ==" ;;
  "started now") echo "== shared storage: GlusterFS at $shared (started for the demo, stopped after it) ==" ;;
  *) echo "== shared storage: none ($HPCSHUFFLE_SHARED_HOW); GS reads data/synthetic from this node's disk ==" ;;
esac
shared_overrides=()
if [ -n "$shared" ]; then shared_overrides=("storage.shared_dir=$shared"); fi

# rank scope: on one machine node scope (storage.scope=node) would make every rank one node's,
# so LS, PLS and GS would all mix the whole dataset and look alike
for shuffle in global local "partial shuffle.q=0.3"; do
  name=${shuffle%% *}
  echo "== $name shuffling on $ranks ranks, storage.scope=rank (each rank its own partition) =="
  # shellcheck disable=SC2086 # $shuffle holds two overrides for partial
  timeout 900 mpiexec -n "$ranks" python -m hpcshuffle.train shuffle=$shuffle epochs="$epochs" \
    storage.scope=rank storage.local_dir="$store" hydra.run.dir="$out/$name" "${shared_overrides[@]}"
done
echo
echo "== breakdown (make demo) =="
hpcshuffle report "$out/global" "$out/local" "$out/partial"
