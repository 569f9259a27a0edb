#!/usr/bin/env bash
# The demo behind `make demo`: the same synthetic dataset trained with GS, LS and PLS q=0.3.
#
# The dataset lives on shared storage: the GlusterFS mount of scripts/shared_fs.sh, used if it is
# up, else started here when we are root (and stopped at the end). Without it the demo says so and
# GS reads this node's disk, which makes GS look cheaper than on a cluster's parallel file system.
set -euo pipefail
ranks=${1:-4}; epochs=${2:-4}; out=${3:-results/demo}
export OMP_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd)
store=$(mktemp -d "${TMPDIR:-/tmp}/hpcshuffle-demo-store.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/hpcshuffle-demo-shared.XXXXXX")
started_shared=0
cleanup() {
  rm -rf "$store" "$log"
  if [ "$started_shared" = 1 ]; then bash "$here/shared_fs.sh" stop 2>/dev/null || true; fi
}
trap cleanup EXIT

shared_overrides=()
if shared=$(bash "$here/shared_fs.sh" status 2>/dev/null); then
  echo "== shared storage: GlusterFS at $shared (already mounted) =="
elif [ "$(id -u)" = 0 ] && shared=$(bash "$here/shared_fs.sh" start 2>"$log"); then
  started_shared=1
  echo "== shared storage: GlusterFS at $shared (started for the demo, stopped after it) =="
else
  shared=""
  reason=$(tail -1 "$log" 2>/dev/null || true)
  echo "== shared storage: none (${reason:-scripts/shared_fs.sh start needs root}); GS reads data/synthetic from this node's disk =="
fi
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
