"""`hpcshuffle tune-q`: the smallest exchange fraction q that keeps accuracy (Nguyen et al. §III-D)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hpcshuffle.analysis.labels import predict_q
from hpcshuffle.cli.plan import partition_arg, quality_labels
from hpcshuffle.cli.report import expand_runs, write_csv
from hpcshuffle.plan import PlanSpec


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle tune-q` to `commands`."""
    tune = commands.add_parser(
        "tune-q",
        help="recommend the smallest exchange fraction q that keeps accuracy (paper §III-D)",
        description="Per worker count, the smallest q among the local (q=0) and partial runs under "
        "RESULTS_DIR whose final validation score is within --tolerance of global shuffling's. "
        "Writes one row per run to RESULTS_DIR/summary.csv.",
    )
    tune.add_argument("results_dir", metavar="RESULTS_DIR", nargs="?", default=None,
                      help="a sweep's or job array's output directory (not with --predict)")
    tune.add_argument("--tolerance", type=float, default=1.0,
                      help="points of top-1 %% (or 100·IoU) a candidate may lose (default: 1.0)")
    tune.add_argument("--reference", choices=["auto", "global", "best"], default="auto",
                      help="compare with global shuffling, the best run, or global where there is one (default)")
    tune.add_argument("--include-incomplete", action="store_true",
                      help="count runs that stopped early, at their last epoch")
    tune.add_argument("--csv", default=None, metavar="PATH", help="default: RESULTS_DIR/summary.csv")
    predict = tune.add_argument_group(
        "--predict", "q without training: per worker count, the smallest q whose planned label skew "
        "(analysis/labels.py) at --by-epoch is within --skew-tolerance of global shuffling's")
    predict.add_argument("--predict", action="store_true", help="predict from the plan alone, train nothing")
    predict.add_argument("--samples", type=int, help="N, training samples")
    predict.add_argument("--classes", type=int, help="C balanced classes, listed class by class (or --label-counts)")
    predict.add_argument("--label-counts", metavar="FILE", help="a JSON list of per-class counts in class order")
    predict.add_argument("--workers", type=int, nargs="+", metavar="M", help="worker counts")
    predict.add_argument("--batch", type=int, default=32, help="b, samples per worker per step (default: 32)")
    predict.add_argument("--partition", type=partition_arg, default="random",
                         help="the first partition's cut: random (default), contiguous, dirichlet-α, classes_per_worker-k")
    predict.add_argument("--epochs", type=int, default=12, help="epochs planned (default: 12)")
    predict.add_argument("--by-epoch", type=int, default=None, help="the epoch judged (default: the last)")
    predict.add_argument("--qs", type=float, nargs="+", default=[0.0, 0.1, 0.3, 0.6, 1.0],
                         help="candidate q, 0 = local shuffling (default: 0 0.1 0.3 0.6 1)")
    predict.add_argument("--skew-tolerance", type=float, default=0.01,
                         help="label skew a candidate may exceed global shuffling's by (default: 0.01)")
    predict.add_argument("--seed", type=int, default=0)
    tune.set_defaults(run=cmd_tune_q)


def cmd_tune_q(args: argparse.Namespace) -> None:
    """Print the recommended q per group of the runs under RESULTS_DIR and write their summary CSV;
    with --predict, the q the plans' label skew predicts, training nothing."""
    if args.predict:
        print(predict_table(predictions(args)))
        print(track_record())
        return
    if args.results_dir is None:
        raise ValueError("give RESULTS_DIR (a sweep's output), or --predict with --samples, --classes and --workers")
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


def predictions(args: argparse.Namespace) -> list[dict]:
    """`predict_q` for every --workers, after the checks --predict needs."""
    if args.results_dir is not None:
        raise ValueError(f"--predict trains nothing and reads no runs; drop RESULTS_DIR {args.results_dir}")
    missing = [flag for flag, value in (("--samples", args.samples), ("--workers", args.workers)) if value is None]
    if args.classes is None and args.label_counts is None:
        missing.append("--classes or --label-counts")
    if missing:
        raise ValueError(f"--predict needs {', '.join(missing)}")
    labels = quality_labels(args)
    return [predict_q(PlanSpec(args.samples, workers, args.batch, 0.0, args.seed, partition=args.partition,
                               labels=labels),
                      args.epochs, labels, args.qs, args.skew_tolerance, args.by_epoch) for workers in args.workers]


def predict_table(found: list[dict]) -> str:
    """Per worker count, global shuffling's label skew, each candidate q's, and the smallest q within
    the tolerance."""
    qs = list(found[0]["skew"])
    lines = [f"label skew at epoch {found[0]['by_epoch']} (same-class excess of workers' batches; 0: as global "
             "shuffling), and the smallest q within the tolerance of global's",
             f"{'M':>6} {'global':>8} " + " ".join(f"{f'q={q:g}':>8}" for q in qs) + f" {'q':>6}"]
    for row in found:
        q = "none" if row["q"] is None else f"{row['q']:g}"
        lines.append(f"{row['workers']:>6} {row['global']:>8.4f} "
                     + " ".join(f"{row['skew'][q_]:>8.4f}" for q_ in qs) + f" {q:>6}")
    return "\n".join(lines)


STUDIES = Path(__file__).resolve().parents[2] / "results" / "reference"  # the stored accuracy studies


def track_record(studies: Path = STUDIES) -> str:
    """`predictor_record` of the accuracy studies stored under `studies` (results/reference in a checkout),
    or a line saying there are none to score it against."""
    from hpcshuffle.analysis.tune import predictor_record

    checks = {}  # by <dataset>/<norm>: a variant filed in its main study and in a file of its own counts once
    for path in sorted(studies.glob("accuracy_*.json")):
        study = json.loads(path.read_text())
        for found in [study, *study.get("variants", {}).values()]:
            if "preregistered" in found:
                checks[f"{found['rows'][0]['dataset']}/{found['rows'][0]['norm']}"] = found["preregistered"]
    if not checks:
        return f"(no stored pre-registered study under {studies} to score this prediction against)"
    return "\n".join(["its record where it was committed before training (results/reference):",
                      *(f"  {line}" for line in predictor_record(checks))])
