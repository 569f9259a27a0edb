"""Epoch time against workers and its breakdown against the exchange rate: Nguyen et al. Fig. 9
(epoch time of GS / LS / PLS vs workers) and Fig. 10 (I/O · exchange · FW+BW · allreduce per q).

Real ranks (`mpiexec -n M python -m hpcshuffle.train`), global shuffling reading the shared
dataset, LS and PLS their node-local stores (under the temporary directory, $TMPDIR). The dataset
lives on the GlusterFS mount of scripts/shared_fs.sh when it is up or can be started (root), so
GS pays a network file system's reads; otherwise the script says so and GS reads this node's
disk. Writes `<figures>/nguyen_fig9_epoch_time.png`, `nguyen_fig10_breakdown.png` (the runs at
the largest M) and `epoch_time.txt`.

    python experiments/epoch_time.py [--workers 2 4] [--q 0 0.1 0.3 0.5] [--epochs 3]
        [--out results/experiments/epoch_time] [--figures DIR] [override ...]

On a cluster, launch the same runs with jobs/sweep_workers_q.sbatch and point `hpcshuffle report
--plot` at the sweep for Fig. 10.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from hpcshuffle.analysis.plots import plot_breakdown, plot_curves
from hpcshuffle.analysis.report import steady_means
from hpcshuffle.studies.runs import shared_storage, strategy_overrides, train

DEFAULT_OVERRIDES = ["dataset.root=data/experiments/synthetic-4096x20", "dataset.synthesize.samples=4096",
                     "dataset.synthesize.classes=20"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4], metavar="M")
    parser.add_argument("--q", type=float, nargs="+", default=[0.0, 0.1, 0.3, 0.5],
                        help="exchange rates (0 is local shuffling); global shuffling is added")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="results/experiments/epoch_time")
    parser.add_argument("--figures", default=None, help="default: <out>/figures")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (default: a synthetic set)")
    args = parser.parse_args()
    out = Path(args.out)
    figures = Path(args.figures) if args.figures else out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    strategies = ["local" if q == 0 else f"partial-{q:g}" for q in args.q] + ["global"]

    means: dict[str, dict[int, dict[str, float]]] = {s: {} for s in strategies}
    common = args.overrides or DEFAULT_OVERRIDES
    with shared_storage(common) as shared:
        for workers in args.workers:
            for strategy in strategies:
                run_dir = out / f"M{workers}" / strategy
                local_dir = Path(tempfile.gettempdir()) / "hpcshuffle-experiments" / f"M{workers}"
                overrides = [*common, *strategy_overrides(strategy), *shared,
                             f"storage.local_dir={local_dir}"]
                records = train(run_dir, overrides, args.epochs, ranks=workers)
                means[strategy][workers] = steady_means(records, skip_first=True)

    largest = max(args.workers)
    epoch_times = {s: {m: means[s][m]["epoch"] for m in args.workers} for s in strategies}
    plot_curves(epoch_times, "seconds per epoch (slowest rank)", figures / "nguyen_fig9_epoch_time.png",
                xlabel="workers M (MPI ranks)", title="epoch time against workers", log_x=True)
    plot_breakdown({s: means[s][largest] for s in strategies}, figures / "nguyen_fig10_breakdown.png")
    lines = ["seconds per epoch after the first (io, exchange, fwbw, allreduce: mean over ranks; epoch: slowest; "
             "util: (fwbw + allreduce) / epoch)",
             f"{'M':>3} {'strategy':<12} {'io':>7} {'exchange':>8} {'fwbw':>7} {'allreduce':>9} {'epoch':>7} "
             f"{'util':>5} {'vs LS':>6}"]
    for workers in args.workers:
        local = means["local"][workers]["epoch"] if "local" in means else None
        for strategy in strategies:
            m = means[strategy][workers]
            ratio = f"{m['epoch'] / local:.2f}" if local else "-"
            lines.append(f"{workers:>3} {strategy:<12} {m['io']:>7.2f} {m['exchange']:>8.2f} {m['fwbw']:>7.2f} "
                         f"{m['allreduce']:>9.2f} {m['epoch']:>7.2f} {m['util']:>5.0%} {ratio:>6}")
    table = "\n".join(lines)
    print(table)
    (figures / "epoch_time.txt").write_text(table + "\n")
    print(f"wrote figures and tables under {figures}")


if __name__ == "__main__":
    main()
