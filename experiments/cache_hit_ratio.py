"""Lobster's cache comparison: hit ratio of LRU, NoPFS-style prefetching and Lobster's reuse-count
and reuse-distance eviction against the cache size, on one rank's global-shuffling reads (the
known future of the plan). Writes `<figures>/lobster_hit_ratio.png` and `cache_hit_ratio.txt`.

    python experiments/cache_hit_ratio.py [--samples 50000] [--ranks 4] [--epochs 10]
        [--fractions 0.05 0.1 0.25 0.5] [--figures results/experiments/cache/figures]

`benchmarks/cache.py` is the single-size version with its ratio; this sweeps the size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcshuffle.analysis.plots import plot_curves
from hpcshuffle.plan import PlanSpec
from hpcshuffle.storage.cache import POLICIES
from hpcshuffle.storage.cache_sim import rank_trace, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.25, 0.5],
                        help="cache sizes as fractions of what a rank reads per epoch, ⌈N/M⌉")
    parser.add_argument("--figures", default="results/experiments/cache/figures")
    args = parser.parse_args()
    figures = Path(args.figures)
    figures.mkdir(parents=True, exist_ok=True)

    spec = PlanSpec(num_samples=args.samples, num_ranks=args.ranks, batch_size=args.batch)
    trace, epoch_lengths = rank_trace(spec, "global", args.epochs, rank=0)
    ratios = {policy: {} for policy in POLICIES}
    for fraction in args.fractions:
        capacity = int(fraction * spec.max_share)
        for policy in POLICIES:
            ratios[policy][fraction] = simulate(trace, capacity, policy, epoch_lengths).hit_ratio
    lines = [f"hit ratio of rank 0's GS reads (N={args.samples}, M={args.ranks}, {args.epochs} epochs) "
             "by cache size as a fraction of ⌈N/M⌉",
             f"{'policy':<16}" + "".join(f"{f:>8g}" for f in args.fractions)]
    lines += [f"{policy:<16}" + "".join(f"{ratios[policy][f]:>8.4f}" for f in args.fractions) for policy in POLICIES]
    table = "\n".join(lines)
    print(table)
    plot_curves({policy: dict(by_size) for policy, by_size in ratios.items()}, "hit ratio",
                figures / "lobster_hit_ratio.png", xlabel="cache size / samples a rank reads per epoch",
                title="cache policies on a global-shuffling trace")
    (figures / "cache_hit_ratio.txt").write_text(table + "\n")
    print(f"wrote figures and tables under {figures}")


if __name__ == "__main__":
    main()
