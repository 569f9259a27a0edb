#!/usr/bin/env bash
# Regenerate results/reference/ (figures, tables, the runs' metrics) on a 2-core CPU box; `make install`
# first. Complete runs are reused, so on this repository it trains nothing and redraws every figure and
# table; delete a run directory under results/reference/ to train it again. From nothing it takes about
# 3 hours here: 17 minutes of figures, shuffle accuracy and epoch time, 68 the accuracy study, 28 its two
# variants, 66 the search's 10 seeds.
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
# its variants at contiguous M = 16, filed under accuracy_study.json's variants: BatchNorm over the
# global batch (is the loss the per-worker statistics'?) and real handwritten digits (the toy data's?)
variant=(--partitions contiguous --workers 16 --strategies global local partial-0.1 partial-0.3
         --into "$out/accuracy_study.json")
python experiments/accuracy_study.py "${variant[@]}" --out "$out/accuracy_norm_global" \
    --json "$out/accuracy_norm_global.json" --figures "$out/accuracy_norm_global/figures" model.norm=global
python experiments/accuracy_study.py "${variant[@]}" --dataset digits --out "$out/accuracy_digits" \
    --json "$out/accuracy_digits.json" --figures "$out/accuracy_digits/figures"
# the search for local shuffling's loss under random partitions: more workers, smaller partitions
search=$out/accuracy_search
python experiments/accuracy_study.py --out "$search/M32" --json "$search/M32.json" --figures "$search/figures/M32" \
    --partitions random --workers 32 --strategies global local --seeds 10
python experiments/accuracy_study.py --partitions random --workers 128 --strategies global local --seeds 10 \
    --out "$search/M128_b4" --json "$search/M128_b4.json" --figures "$search/figures/M128_b4" batch_size=4
python experiments/epoch_time.py --out "$out/epoch_time" --figures "$figures"
