#!/usr/bin/env bash
# Regenerate results/reference/ (figures, tables, the runs' metrics) at the scale a 2-core CPU
# box manages in about two hours (80 minutes of it the accuracy study); `make install` first. Complete runs are reused: delete a run
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
# the search for local shuffling's loss under random partitions: more workers, smaller partitions
search=$out/accuracy_search
python experiments/accuracy_study.py --out "$search/M32" --json "$search/M32.json" --figures "$search/figures/M32" \
    --partitions random --workers 32 --strategies global local --seeds 5
python experiments/accuracy_study.py --partitions random --workers 128 --strategies global local --seeds 5 \
    --out "$search/M128_b4" --json "$search/M128_b4.json" --figures "$search/figures/M128_b4" batch_size=4
python experiments/epoch_time.py --out "$out/epoch_time" --figures "$figures"
