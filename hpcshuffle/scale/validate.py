"""The simulation against measured runs: each phase side by side, with the error, in two parts.

In sample: the runs the platform was calibrated from (its `calibration.runs`); out of sample:
every other run, which the platform never saw — other worker counts, other q, other loader
settings, other machines. Each run is simulated with its own loader settings (its DataLoader
processes and the files each reads at once), so one platform predicts runs made with any.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable

from hpcshuffle.plan import run_label
from hpcshuffle.scale.calibrate import PHASE_KEYS, MeasuredRun, workload_names
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.recommend import simulate_all
from hpcshuffle.scale.scenario import Scenario

TOLERANCE = 0.25  # a phase agrees when within 25 % of the measured one ...
NEGLIGIBLE = 0.05  # ... or when the difference is under 5 % of the measured epoch (phases that barely exist)
PREFETCH_FACTOR = 2  # batches each DataLoader process reads ahead (PyTorch's default, which hpcshuffle keeps)
PARTS = {True: "in sample: the runs the platform was calibrated from",
         False: "out of sample: runs the platform was not calibrated from"}


def scenario_of(run: MeasuredRun) -> Scenario:
    """The simulated twin of a measured run (a steady epoch: the measured means leave epoch 0 out)."""
    model, dataset = workload_names(run)
    return Scenario(run.workers, run.shuffle, run.q, model, dataset, run.batch_size, run.seed, epoch=1,
                    samples=run.samples)


def platform_for(platform: Platform, run: MeasuredRun) -> Platform:
    """`platform` with `run`'s loader: each DataLoader process reads its own batch with `io_threads`
    files in flight, and PREFETCH_FACTOR batches ahead; without any, the rank reads in the loop."""
    loader = dataclasses.replace(platform.loader, workers=run.io_threads * max(1, run.loader_workers),
                                 prefetch=PREFETCH_FACTOR * run.loader_workers)
    return dataclasses.replace(platform, loader=loader)


def in_sample(platform: Platform, run: MeasuredRun) -> bool:
    """Whether `run` is one the platform was calibrated from."""
    calibrated = (platform.extra.get("calibration") or {}).get("runs") or []
    return os.path.realpath(run.path) in {os.path.realpath(path) for path in calibrated}


def validate(platform: Platform, runs: list[MeasuredRun], progress: Callable[[str], None], jobs: int = 1) -> list[dict]:
    """One row per run and phase: measured and simulated seconds per epoch, relative error, agreement,
    and whether the run is in the platform's calibration sample."""
    results = {}
    for loader in dict.fromkeys((run.loader_workers, run.io_threads) for run in runs):  # one platform per loader
        chosen = [run for run in runs if (run.loader_workers, run.io_threads) == loader]
        simulated = simulate_all(platform_for(platform, chosen[0]), [scenario_of(run) for run in chosen], progress, jobs)
        results.update({id(run): result for run, result in zip(chosen, simulated)})
    rows = []
    for run in runs:
        result = results[id(run)]
        simulated = {"epoch": result.epoch_s, **result.phases()}
        loader = f" w{run.loader_workers}io{run.io_threads}" if (run.loader_workers, run.io_threads) != (0, 1) else ""
        sample = in_sample(platform, run)
        for phase in PHASE_KEYS:
            measured = run.phases[phase]
            difference = simulated[phase] - measured
            rows.append({
                "run": f"M{run.workers}/{run_label(run.shuffle, run.q)}{loader}", "phase": phase,
                "in_sample": sample, "measured_s": measured, "simulated_s": simulated[phase],
                "error": difference / measured if measured > 0 else None,
                "agrees": abs(difference) <= max(TOLERANCE * measured, NEGLIGIBLE * run.phases["epoch"]),
            })
    return rows


def validation_table(rows: list[dict]) -> str:
    """The measured and simulated seconds of every phase of `rows` (`validate`'s), in-sample runs first,
    with how many phases agree and the median and largest epoch error."""
    lines = []
    for sample in (True, False):
        part = [row for row in rows if row["in_sample"] is sample]
        if not part:
            continue
        epochs = [abs(row["error"]) for row in part if row["phase"] == "epoch" and row["error"] is not None]
        lines += [f"{PARTS[sample]} ({len(epochs)} runs)",
                  f"{'run':<24} {'phase':<10} {'measured s':>11} {'simulated s':>12} {'error':>8}  agrees",
                  *(f"{row['run']:<24} {row['phase']:<10} {row['measured_s']:>11.3f} {row['simulated_s']:>12.3f} "
                    f"{'-' if row['error'] is None else format(row['error'], '+.0%'):>8}  {'yes' if row['agrees'] else 'NO'}"
                    for row in part)]
        agreeing = sum(row["agrees"] for row in part)
        lines.append(f"{agreeing}/{len(part)} phases agree (within {TOLERANCE:.0%}, or under {NEGLIGIBLE:.0%} of the "
                     f"measured epoch apart); epoch error: median {statistics.median(epochs):.0%}, "
                     f"largest {max(epochs):.0%}")
        lines.append("")
    return "\n".join(lines).rstrip()
