"""Accuracy of each shuffling strategy as the worker count grows: Nguyen et al. Fig. 5 (validation
accuracy per epoch, GS / LS / partial-q), Fig. 6 (accuracy against workers) and Yang & Cong
Table I (regular = global vs locality-aware loading).

Each (M, strategy) is one run of M virtual workers in one process (`hpcshuffle simulate M`,
exactly synchronous SGD over M workers with per-worker BatchNorm), or of M real ranks with
`--mpi`. Runs already complete in `--out` are reused, so a sweep can be extended. Writes
`<figures>/nguyen_fig5_accuracy_M<M>.png`, `nguyen_fig6_scaling.png`, `shuffle_quality.png` and
`yang_table1.txt`, and prints the table of final numbers.

    python experiments/shuffle_accuracy.py [--workers 4 16 64] [--strategies global local partial-0.1 ...]
        [--epochs 10] [--out results/experiments/shuffle_accuracy] [--figures DIR] [--mpi] [override ...]

Trailing Hydra overrides go to every run, e.g. `dataset=cifar100 dataset.root=... model=wrn16_2
device=cuda shuffle.virtual_chunk=64` for the GPU study.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcshuffle.analysis.plots import plot_curves
from hpcshuffle.studies.runs import strategy_overrides, train
from hpcshuffle.training.metrics import validation_score

# a learnable dataset small enough that 64 workers hold 64 images each, 20 close classes
DEFAULT_OVERRIDES = ["dataset.root=data/experiments/synthetic-4096x20", "dataset.synthesize.samples=4096",
                     "dataset.synthesize.classes=20", "batch_size=8", "loader.workers=1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 16, 64], metavar="M")
    parser.add_argument("--strategies", nargs="+", default=["global", "local", "partial-0.1", "partial-0.5", "locality"])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default="results/experiments/shuffle_accuracy", help="run directories go here")
    parser.add_argument("--figures", default=None, help="figures and tables (default: <out>/figures)")
    parser.add_argument("--mpi", action="store_true", help="real ranks (mpiexec -n M) instead of virtual workers")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (default: a synthetic set)")
    args = parser.parse_args()
    for strategy in args.strategies:
        strategy_overrides(strategy)  # fail on a typo before hours of training
    out = Path(args.out)
    figures = Path(args.figures) if args.figures else out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    overrides = args.overrides or DEFAULT_OVERRIDES

    results: dict[int, dict[str, list[dict]]] = {}
    for workers in args.workers:
        results[workers] = {}
        for strategy in args.strategies:
            run_dir = out / f"M{workers}" / strategy
            launch = {"ranks": workers} if args.mpi else {"virtual_workers": workers}
            results[workers][strategy] = train(run_dir, [*overrides, *strategy_overrides(strategy)], args.epochs,
                                               **launch)

    kind = "ranks" if args.mpi else "virtual workers"
    lines = [f"validation top-1 % after the last epoch (val) and at the best epoch (best), shuffle quality after "
             f"{args.epochs} epochs",
             f"{'M':>5} {'strategy':<12} {'val':>7} {'best':>7} {'loss':>7} {'quality':>8}"]
    for workers, runs in results.items():
        curves = {s: {r["epoch"]: validation_score(r) for r in records} for s, records in runs.items()}
        plot_curves(curves, "validation top-1 (%)", figures / f"nguyen_fig5_accuracy_M{workers}.png",
                    title=f"accuracy per epoch, M = {workers} {kind}")
        for strategy, records in runs.items():
            last = records[-1]
            lines.append(f"{workers:>5} {strategy:<12} {validation_score(last):>7.2f} "
                         f"{max(map(validation_score, records)):>7.2f} {last['train_loss']:>7.3f} "
                         f"{last['mixing']['quality']:>8.3f}")
    final = {s: {m: validation_score(results[m][s][-1]) for m in results} for s in args.strategies}
    quality = {s: {m: results[m][s][-1]["mixing"]["quality"] for m in results} for s in args.strategies}
    plot_curves(final, "final validation top-1 (%)", figures / "nguyen_fig6_scaling.png", xlabel=f"workers M ({kind})",
                title=f"accuracy after {args.epochs} epochs against workers", log_x=True)
    plot_curves(quality, "shuffle quality (pair mixing / GS)", figures / "shuffle_quality.png",
                xlabel=f"workers M ({kind})", title=f"shuffle quality after {args.epochs} epochs", log_x=True)
    table = "\n".join(lines)
    print(table)
    if {"global", "locality"} <= set(args.strategies):
        rows = [f"{'M':>5} {'regular (GS)':>13} {'locality':>9}"]
        rows += [f"{m:>5} {final['global'][m]:>13.2f} {final['locality'][m]:>9.2f}" for m in results]
        (figures / "yang_table1.txt").write_text(
            f"Yang & Cong Table I: final validation top-1 %, regular vs locality-aware loading ({kind})\n"
            + "\n".join(rows) + "\n")
    (figures / "shuffle_accuracy.txt").write_text(table + "\n")
    print(f"wrote figures and tables under {figures}")


if __name__ == "__main__":
    main()
