"""`hpcshuffle report`: the breakdown table and validation curves (and their figures) across runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle report` to `commands`."""
    report = commands.add_parser(
        "report",
        help="breakdown table and validation curves across run directories",
        description="Seconds per epoch in each phase per run (Fig. 10), then the validation score per epoch "
        "per run (Fig. 5), and the shuffle quality per epoch where runs record it (mixing.quality).",
    )
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run directory, or a directory of runs")
    report.add_argument("--csv", default=None, metavar="PATH", help="also write one summary row per run here")
    report.add_argument("--plot", default=None, metavar="DIR",
                        help="also write breakdown.png, accuracy.png (and quality.png) into DIR")
    report.set_defaults(run=cmd_report)


def cmd_report(args: argparse.Namespace) -> None:
    """Print the breakdown table and the per-epoch curves of the runs that finished an epoch (others
    are named on stderr and left out); with --plot and --csv also write the figures and summary rows."""
    from hpcshuffle.analysis.report import (
        breakdown_table,
        collect,
        curve_tables,
        write_plots,
    )
    from hpcshuffle.files import read_jsonl

    run_dirs = expand_runs(args.run_dirs)
    named = {Path(d) for d in args.run_dirs}
    # a run found under a directory that has not finished an epoch yet is left out, not an error
    started = [d for d in run_dirs if d in named or read_jsonl(d / "metrics.jsonl", partial_last=True)]
    for run_dir in sorted(set(run_dirs) - set(started)):
        print(f"hpcshuffle report: {run_dir} has no epochs yet; left out", file=sys.stderr)
    if not started:
        raise ValueError("none of the runs has finished an epoch yet")
    # figures first: a --plot that cannot be written fails before any table is printed
    plots = write_plots(started, Path(args.plot)) if args.plot else []
    print(breakdown_table(started))
    print()
    print(curve_tables(started))
    for path in plots:
        print(f"wrote {path}")
    if args.csv:
        write_csv(collect(started), Path(args.csv))
        print(f"wrote {args.csv} ({len(started)} runs)")


def expand_runs(paths: list[str]) -> list[Path]:
    """Run directories as given; a directory without a metrics.jsonl of its own stands for the runs under it."""
    from hpcshuffle.analysis.report import find_runs

    run_dirs = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(
                f"{path} does not exist or is not a directory; pass a run directory or a directory of runs"
            )
        if (path / "metrics.jsonl").exists():
            run_dirs.append(path)
            continue
        found = find_runs(path)
        if not found:
            raise FileNotFoundError(
                f"no run directories under {path} (none holds a metrics.jsonl); pass the directory a run, "
                "sweep or job array wrote, e.g. results/sweeps/<time>"
            )
        run_dirs.extend(found)
    return run_dirs


def write_csv(rows: list[dict], path: Path) -> None:
    """The summary rows as CSV; a path that cannot be written is bad input, named with the flag to change."""
    from hpcshuffle.analysis.report import write_summary_csv

    try:
        write_summary_csv(rows, path)
    except OSError as err:
        raise ValueError(f"cannot write {path} ({err.strerror}); pass --csv with a writable path") from err
