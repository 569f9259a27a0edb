"""The simulation against measured runs: each phase side by side, with the error."""

from __future__ import annotations

from collections.abc import Callable

from hpcshuffle.plan import run_label
from hpcshuffle.scale.calibrate import PHASE_KEYS, MeasuredRun, workload_names
from hpcshuffle.scale.engine import Scenario
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.recommend import simulate_all

TOLERANCE = 0.25  # a phase agrees when within 25 % of the measured one ...
NEGLIGIBLE = 0.05  # ... or when the difference is under 5 % of the measured epoch (phases that barely exist)


def scenario_of(run: MeasuredRun) -> Scenario:
    """The simulated twin of a measured run (a steady epoch: the measured means leave epoch 0 out)."""
    model, dataset = workload_names(run)
    return Scenario(run.workers, run.shuffle, run.q, model, dataset, run.batch_size, run.seed, epoch=1,
                    samples=run.samples)


def validate(platform: Platform, runs: list[MeasuredRun], progress: Callable[[str], None], jobs: int = 1) -> list[dict]:
    """One row per run and phase: measured and simulated seconds per epoch, relative error, agreement."""
    results = simulate_all(platform, [scenario_of(run) for run in runs], progress, jobs)
    rows = []
    for run, result in zip(runs, results):
        simulated = {"epoch": result.epoch_s, **result.phases()}
        for phase in PHASE_KEYS:
            measured = run.phases[phase]
            difference = simulated[phase] - measured
            rows.append({
                "run": f"M{run.workers}/{run_label(run.shuffle, run.q)}", "phase": phase, "measured_s": measured,
                "simulated_s": simulated[phase], "error": difference / measured if measured > 0 else None,
                "agrees": abs(difference) <= max(TOLERANCE * measured, NEGLIGIBLE * run.phases["epoch"]),
            })
    return rows


def validation_table(rows: list[dict]) -> str:
    lines = [f"{'run':<16} {'phase':<10} {'measured s':>11} {'simulated s':>12} {'error':>8}  agrees",
             *(f"{row['run']:<16} {row['phase']:<10} {row['measured_s']:>11.3f} {row['simulated_s']:>12.3f} "
               f"{'-' if row['error'] is None else format(row['error'], '+.0%'):>8}  {'yes' if row['agrees'] else 'NO'}"
               for row in rows)]
    agreeing = sum(row["agrees"] for row in rows)
    lines.append(f"{agreeing}/{len(rows)} phases agree (within {TOLERANCE:.0%}, or under {NEGLIGIBLE:.0%} of the "
                 "measured epoch apart)")
    return "\n".join(lines)
