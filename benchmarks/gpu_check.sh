#!/usr/bin/env bash
# The GPU check in one command (docs/gpu.md): how much of one GPU's ResNet-50 rate the CPU and the
# GPU JPEG decoding feed, with LS from a staged store and GS from a directory, audited.
#
#   bash benchmarks/gpu_check.sh --prepare       # here, once: the wheels the lent machine lacks, into .gpu_wheels/
#   bash benchmarks/gpu_check.sh                 # on the GPU machine (the device tool, carry .gpu_wheels): sized to ~5 min (not yet run)
#   bash benchmarks/gpu_check.sh --cpu-dry-run   # the same steps at toy sizes on the CPU (a test runs it)
#
# Writes gpu.json and the runs' logs under $OUT (the device tool's folder), or
# benchmarks/results/gpu-<date>/ when OUT is unset. Needs nothing from outside: the GPU machine's
# image has torch, torchvision, mpi4py, h5py, scipy, pillow, ... but not Hydra or submitit, which
# come as the carried wheels, installed into a folder on PYTHONPATH over the image's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu_wheels
# the versions `make install` gives the project's own venv
PINNED=(hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 submitit==1.5.4 hydra-submitit-launcher==1.2.0)

case "${1:-}" in
  --prepare)
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    # antlr4's 4.9.3 is a source distribution on the registry: build its (pure Python) wheel here
    python3 -m pip wheel --quiet --no-deps -w "$WHEELS" "${PINNED[@]}"
    # PyYAML has compiled wheels: one per Python the image may have, used only if it lacks PyYAML
    for version in 3.10 3.11 3.12 3.13; do
      python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$version" \
        --platform manylinux2014_x86_64 -d "$WHEELS" PyYAML==6.0.3
    done
    du -sh "$WHEELS" && ls "$WHEELS"
    exit 0 ;;
  --cpu-dry-run) DRY=(--cpu-dry-run) ;;
  "") DRY=() ;;
  *) echo "usage: bash benchmarks/gpu_check.sh [--prepare | --cpu-dry-run]" >&2; exit 2 ;;
esac

OUT=${OUT:-benchmarks/results/gpu-$(date -u +%Y-%m-%d)}
mkdir -p "$OUT"
if [ ${#DRY[@]} -gt 0 ]; then
  PYTHON=${PYTHON:-python3}  # the dry run uses the interpreter it is given: the project's venv in the tests
else
  if [ ! -d "$WHEELS" ]; then
    echo "gpu_check: no $WHEELS/ here: run 'bash benchmarks/gpu_check.sh --prepare' where the registries" \
         "are reachable, and carry $WHEELS to this machine" >&2
    exit 2
  fi
  # the image's python3 is itself a venv (/opt/torch/.venv): a --system-site-packages venv made from it
  # would see the base interpreter's packages, not torch, so the wheels go into a folder on PYTHONPATH
  PYTHON=python3
  SITE=${TMPDIR:-/tmp}/hpcshuffle-gpu-site
  rm -rf "$SITE"
  INSTALL=(python3 -m pip install --quiet --no-index --no-compile --find-links "$WHEELS" --no-deps --target "$SITE")
  export PYTHONPATH=$SITE
  "${INSTALL[@]}" "${PINNED[@]}"
  "$PYTHON" -c "import yaml" 2>/dev/null || "${INSTALL[@]}" PyYAML
  # one rank, no mpiexec: Open MPI's singleton start, as root on the lent machine
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
# the repository itself, not installed: `python -m hpcshuffle.train` runs from the working tree
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -c "from mpi4py import MPI; import hydra, torch, torchvision; print('torch', torch.__version__, \
'torchvision', torchvision.__version__, 'MPI', MPI.Get_library_version().splitlines()[0])"
exec "$PYTHON" benchmarks/gpu_check.py --out "$OUT" "${DRY[@]}"
