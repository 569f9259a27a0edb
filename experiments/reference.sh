#!/usr/bin/env bash
# Regenerate results/reference/ (figures, tables, the runs' metrics) on a 2-core CPU box; `make install`
# first. Complete runs are reused, so on this repository it trains nothing and redraws every figure and
# table; delete a run directory under results/reference/ to train it again. From nothing it takes about
# 4¼ hours here: 17 minutes of figures, shuffle accuracy and epoch time, 55 the digits accuracy study
# and 24 its global-BatchNorm variant, 68 the synthetic study and 21 its variant, 66 the search's 10
# seeds; the Fashion-MNIST study adds about 10 hours more, and its global-BatchNorm variant 4–5 (its M = 32
# half took 2 hours here). The digits study's predictions (*_preregistered.json) are committed, made before its runs by
# the same commands with --preregister FILE in place of --preregistered FILE.
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
# the accuracy study: real digits, five first partitions, held against the predictions committed in
# *_preregistered.json before any of their cells was trained (made by --preregister); then the same
# with BatchNorm over the global batch, filed under accuracy_study.json's variants
study=(--dataset digits --workers 16 32 --strategies global local partial-0.1 partial-0.3 --seeds 5
       --global-batch 128)
python experiments/accuracy_study.py "${study[@]}" --out "$out/accuracy_study" --json "$out/accuracy_study.json" \
    --partitions contiguous random dirichlet-0.1 dirichlet-1.0 classes_per_worker-2 \
    --figures "$out/accuracy_study/figures" --preregistered "$out/accuracy_study_preregistered.json"
python experiments/accuracy_study.py "${study[@]}" --partitions contiguous dirichlet-0.1 \
    --out "$out/accuracy_study_norm_global" --json "$out/accuracy_study_norm_global.json" \
    --figures "$out/accuracy_study_norm_global/figures" --into "$out/accuracy_study.json" \
    --preregistered "$out/accuracy_study_norm_global_preregistered.json" model.norm=global
# the Fashion-MNIST study at the paper's regime (60,000 real images, b = 16, M = 32 and 256), the peers'
# shuffles (CorgiPile, Streaming py1e and py1br) on the same cells, 3 seeds and 5 where a paired gap's
# interval is wider than 2 points; held against accuracy_fashion_preregistered.json and
# accuracy_fashion_peers_preregistered.json, each committed before the runs it predicts; about 10 hours here
fashion=(--dataset fashion --partitions random contiguous --seeds 3 --seeds-where-wide 5 --epochs 10 --jobs 2
         --strategies global local partial-0.1 partial-0.3 corgipile streaming_py1e streaming_py1br
         --out "$out/accuracy_fashion" --json "$out/accuracy_fashion.json" --figures "$out/accuracy_fashion/figures"
         --preregistered "$out/accuracy_fashion_preregistered.json"
         --preregistered-peers "$out/accuracy_fashion_peers_preregistered.json")
recipe=(batch_size=16 model.width=16 optim.lr=0.1 optim.reference_batch=256 optim.schedule=cosine optim.warmup=2
        storage.shared_reads=cached)
python experiments/accuracy_study.py --workers 32 256 "${fashion[@]}" "${recipe[@]}"
# its contiguous cells again with BatchNorm over the global batch (3 seeds, 5 where wide, as above), filed
# under accuracy_fashion.json's variants; held against accuracy_fashion_norm_global_preregistered.json,
# committed before its runs
python experiments/accuracy_study.py --workers 32 256 --dataset fashion --partitions contiguous --seeds 3 \
    --seeds-where-wide 5 --epochs 10 --jobs 2 --strategies global local partial-0.1 partial-0.3 \
    --out "$out/accuracy_fashion_norm_global" --json "$out/accuracy_fashion_norm_global.json" \
    --figures "$out/accuracy_fashion_norm_global/figures" --into "$out/accuracy_fashion.json" \
    --preregistered "$out/accuracy_fashion_norm_global_preregistered.json" "${recipe[@]}" model.norm=global
# the synthetic study, kept as a secondary (its small-q gain does not hold on the digits), and its
# global-BatchNorm variant
python experiments/accuracy_study.py --out "$out/accuracy_synthetic" --json "$out/accuracy_synthetic.json" \
    --figures "$figures"
python experiments/accuracy_study.py --partitions contiguous --workers 16 --strategies global local partial-0.1 \
    partial-0.3 --into "$out/accuracy_synthetic.json" --out "$out/accuracy_synthetic_norm_global" \
    --json "$out/accuracy_synthetic_norm_global.json" --figures "$out/accuracy_synthetic_norm_global/figures" \
    model.norm=global
python -m hpcshuffle.studies.accuracy_readme README.md
# the search for local shuffling's loss under random partitions: more workers, smaller partitions
search=$out/accuracy_search
python experiments/accuracy_study.py --out "$search/M32" --json "$search/M32.json" --figures "$search/figures/M32" \
    --partitions random --workers 32 --strategies global local --seeds 10
python experiments/accuracy_study.py --partitions random --workers 128 --strategies global local --seeds 10 \
    --out "$search/M128_b4" --json "$search/M128_b4.json" --figures "$search/figures/M128_b4" batch_size=4
python experiments/epoch_time.py --out "$out/epoch_time" --figures "$figures"
