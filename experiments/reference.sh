#!/usr/bin/env bash
# Regenerate results/reference/ (figures, tables, the runs' metrics) at the scale a 2-core CPU
# box manages in about half an hour; `make install` first. Complete runs are reused: delete a run
# directory under results/reference/ to train it again.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
out=results/reference
figures=$out/figures
mkdir -p "$figures"

hpcshuffle imbalance --batch 32 64 128 --nodes 16 64 256 --plot "$figures/yang_fig6_imbalance.png" \
    | tee "$figures/yang_fig6_imbalance.txt"
hpcshuffle model --plot "$figures/yang_fig8_model.png" | tee "$figures/yang_fig8_model.txt"
python experiments/cache_hit_ratio.py --figures "$figures"
python experiments/shuffle_accuracy.py --out "$out/shuffle_accuracy" --figures "$figures"
python experiments/accuracy_study.py --out "$out/accuracy_study" --json "$out/accuracy_study.json" \
    --figures "$figures"
python experiments/epoch_time.py --out "$out/epoch_time" --figures "$figures"
