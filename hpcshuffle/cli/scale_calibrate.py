"""`hpcshuffle scale calibrate RUN_DIR...` and `hpcshuffle scale validate RUN_DIR...`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from hpcshuffle.scale.calibrate import (
    fit_platform,
    gradient_bytes_of,
    mean_file_bytes,
    measured_storage,
    ping_pong,
    read_runs,
)
from hpcshuffle.scale.platform_yaml import load_platform, platform_from_dict
from hpcshuffle.scale.validate import validate, validation_table


def add_parsers(actions: argparse._SubParsersAction) -> None:
    """Add `scale calibrate` and `scale validate` to the `scale` command's `actions`."""
    calibrate = actions.add_parser("calibrate", help="fit a platform yaml from real runs of one workload")
    calibrate.add_argument("runs", nargs="+", metavar="RUN_DIR", help="directories with config.yaml and metrics.jsonl")
    calibrate.add_argument("--out", default="conf/platform/this_machine.yaml")
    calibrate.add_argument("--name", default="this_machine")
    calibrate.add_argument("--cores", type=int, default=os.cpu_count(), help="CPU cores of the machine that ran them")
    calibrate.add_argument("--ranks-per-node", type=int, default=None,
                           help="the most ranks the platform's one node holds (default: the runs' largest M); "
                                "raise it to predict runs with more ranks than these")
    calibrate.add_argument("--sample-bytes", type=float, default=None,
                           help="mean bytes per sample (default: measured under the runs' dataset.root)")
    calibrate.add_argument("--link", type=float, nargs=2, default=None, metavar=("LATENCY_S", "BANDWIDTH_BPS"),
                           help="the MPI link between two ranks, as an earlier ping-pong measured it "
                                "(default: measure it now with `mpiexec -n 2`)")
    calibrate.add_argument("--storage", default=None, metavar="LATENCY_JSON:TARGET",
                           help="the shared storage's per-file read times as experiments/storage_latency.py measured "
                                "them (e.g. results/reference/storage/latency.json:gluster-1node): GS's reads then "
                                "wait in its queue and only the rest is client CPU")
    calibrate.set_defaults(run=cmd_calibrate)
    check = actions.add_parser("validate", help="simulate real runs on a platform and print each phase's error")
    check.add_argument("runs", nargs="+", metavar="RUN_DIR")
    check.add_argument("--platform", default="this_machine")
    check.add_argument("--jobs", type=int, default=1)
    check.add_argument("--json", action="store_true")
    check.set_defaults(run=cmd_validate)


def cmd_calibrate(args: argparse.Namespace) -> None:
    """Fit a platform from the runs (measuring what the flags do not give: the mean sample size and,
    with `mpiexec -n 2`, the MPI link) and write it to --out once it loads as a platform."""
    runs = read_runs(args.runs)
    sample_bytes = args.sample_bytes or mean_file_bytes(dataset_root(runs[0].path, runs[0].dataset_root))
    if args.link:
        link = tuple(args.link)
    else:
        print("measuring the MPI link between two ranks ...", file=sys.stderr, flush=True)
        link = ping_pong()
    storage = None
    if args.storage:
        path, _, target = args.storage.rpartition(":")
        storage = measured_storage(Path(path), target)
    platform = fit_platform(runs, args.name, args.cores, sample_bytes, link, gradient_bytes_of(runs[0].model),
                            args.ranks_per_node, storage)
    if args.storage:
        platform["calibration"]["storage"] = args.storage
    platform_from_dict(platform, args.out)  # what is written must load
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    header = "# written by `hpcshuffle scale calibrate`; see hpcshuffle/scale/calibrate.py for what each number fits\n"
    Path(args.out).write_text(header + yaml.safe_dump(platform, sort_keys=False))
    print(f"wrote {args.out}: " + ", ".join(f"{key} {value:.3g}" for key, value in summary(platform).items()))


def dataset_root(run_dir: Path, root: str) -> Path:
    """Where the runs' dataset lies: as written, under the shared mount, or relative to the repository."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    shared = (config.get("storage") or {}).get("shared_dir")
    for candidate in (Path(root), Path(shared or "") / root, Path.cwd() / root):
        if candidate.is_dir():
            return candidate
    raise ValueError(f"the runs' dataset {root} is not on this machine (looked under {shared} too); "
                     "pass --sample-bytes with its mean bytes per sample")


def summary(platform: dict) -> dict[str, float]:
    """The fitted platform's headline numbers, by name with their units, for the line `calibrate` prints."""
    (model,) = platform["models"].values()
    return {"fwbw/sample s": model["fwbw_per_sample"], "loader cpu/file s": platform["loader"]["cpu_per_file"],
            "shared client cpu/file s": platform["shared"]["client_cpu_per_file"],
            "exchange cpu/sample s": platform["exchange"]["cpu_per_sample"],
            "exchange epoch overhead s": platform["exchange"]["epoch_overhead"],
            "allreduce alpha s": platform["allreduce"]["alpha"],
            "MPI bandwidth B/s": platform["network"]["link_bandwidth"]}


def cmd_validate(args: argparse.Namespace) -> None:
    """Simulate each run on --platform and print each phase's measured and simulated seconds (or JSON)."""
    rows = validate(load_platform(args.platform), read_runs(args.runs),
                    lambda line: print(line, file=sys.stderr, flush=True), args.jobs)
    print(json.dumps({"platform": args.platform, "rows": rows}) if args.json else validation_table(rows))
