#!/usr/bin/env bash
# The demo behind `make demo`: the same synthetic dataset trained with GS, LS and PLS q=0.3.
set -euo pipefail
ranks=${1:-4}; epochs=${2:-4}; out=${3:-results/demo}
export OMP_NUM_THREADS=1
store=$(mktemp -d "${TMPDIR:-/tmp}/hpcshuffle-demo-store.XXXXXX")
trap 'rm -rf "$store"' EXIT
for shuffle in global local "partial shuffle.q=0.3"; do
  name=${shuffle%% *}
  echo "== $name shuffling on $ranks ranks =="
  # shellcheck disable=SC2086 # $shuffle holds two overrides for partial
  timeout 900 mpiexec -n "$ranks" python -m hpcshuffle.train shuffle=$shuffle epochs="$epochs" \
    storage.local_dir="$store" hydra.run.dir="$out/$name"
done
echo
echo "== breakdown (make demo) =="
hpcshuffle report "$out/global" "$out/local" "$out/partial"
