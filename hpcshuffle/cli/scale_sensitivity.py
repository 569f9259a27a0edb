"""`hpcshuffle scale --sensitivity [--plot PATH.png]`: each knob of the platform's `ranges:` at its
low and high, and how GS/LS and PLS/LS move (hpcshuffle/scale/sensitivity.py, its output
sensitivity_report.py)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.sensitivity import sensitivity
from hpcshuffle.scale.sensitivity_report import (
    plot_tornado,
    sensitivity_json,
    sensitivity_table,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --sensitivity and --plot to `scale`'s parser."""
    parser.add_argument("--sensitivity", action="store_true",
                        help="vary each knob of the platform's ranges: (low, high) at one --workers count and "
                             "print how GS/LS and PLS/LS (at one --q, default 0.1) move, largest swing first; with "
                             "--seeds N, their medians over the seeds beside the base's own p10-p90 over them")
    parser.add_argument("--plot", type=Path, default=None, metavar="PATH.png",
                        help="with --sensitivity: draw the tornado figure (GS/LS and PLS/LS per knob, and with "
                             "--seeds N the seed's spread as a bar of its own) there")


def cmd_sensitivity(args: argparse.Namespace, platform: Platform, progress: Callable[[str], None]) -> None:
    """Check the flags, then run the study and print its table (or --json) and draw --plot."""
    if not args.sensitivity:
        raise ValueError("--plot draws the tornado of --sensitivity; add --sensitivity")
    if args.recommend:
        raise ValueError("--sensitivity and --recommend are separate studies; pass one of them")
    for flag, values in (("--workers", args.workers), ("--q", args.q or [0.1]), ("--scope", args.scope)):
        if len(values) != 1:
            raise ValueError(f"--sensitivity compares ratios at one {flag[2:]}, got {flag} "
                             f"{' '.join(map(str, values))}; pass one value (run once per value to compare)")
    if args.plot is not None and not args.plot.parent.is_dir():  # before the simulations, not after
        raise ValueError(f"--plot {args.plot}: the directory {args.plot.parent} does not exist; create it first")
    study = sensitivity(platform, args.workers[0], (args.q or [0.1])[0], args.model, args.dataset, args.batch,
                        args.seed, args.scope[0], args.jobs, progress, seeds=args.seeds)
    if args.plot is not None:
        plot_tornado(study, args.plot)
    print(json.dumps(sensitivity_json(study)) if args.json else sensitivity_table(study))
