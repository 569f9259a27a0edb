"""`hpcshuffle tune-q`: the smallest exchange fraction q that keeps accuracy (Nguyen et al. §III-D)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcshuffle.cli.report import expand_runs, write_csv


def add_parser(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser(
        "tune-q",
        help="recommend the smallest exchange fraction q that keeps accuracy (paper §III-D)",
        description="Per worker count, the smallest q among the local (q=0) and partial runs under "
        "RESULTS_DIR whose final validation score is within --tolerance of global shuffling's. "
        "Writes one row per run to RESULTS_DIR/summary.csv.",
    )
    tune.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep's or job array's output directory")
    tune.add_argument("--tolerance", type=float, default=1.0,
                      help="points of top-1 %% (or 100·IoU) a candidate may lose (default: 1.0)")
    tune.add_argument("--reference", choices=["auto", "global", "best"], default="auto",
                      help="compare with global shuffling, the best run, or global where there is one (default)")
    tune.add_argument("--include-incomplete", action="store_true",
                      help="count runs that stopped early, at their last epoch")
    tune.add_argument("--csv", default=None, metavar="PATH", help="default: RESULTS_DIR/summary.csv")
    tune.set_defaults(run=cmd_tune_q)


def cmd_tune_q(args: argparse.Namespace) -> None:
    from hpcshuffle.analysis.report import collect
    from hpcshuffle.analysis.tune import tune_q, tune_table

    results_dir = Path(args.results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(
            f"{results_dir} does not exist or is not a directory; pass the directory a sweep or job array "
            "wrote, e.g. results/sweeps/<time>"
        )
    rows = collect(expand_runs([args.results_dir]))
    result = tune_q(rows, args.tolerance, args.reference, args.include_incomplete)
    csv_path = Path(args.csv) if args.csv else results_dir / "summary.csv"
    write_csv(rows, csv_path)
    print(tune_table(result))
    print(f"wrote {csv_path} ({len(rows)} runs)")
