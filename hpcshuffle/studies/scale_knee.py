"""The knee, swept (issue 46; experiments/scale_knee.py, results/reference/scale/knee.txt).

PLS-0.1/LS and PLS-1.0/LS under both exchange schedulers at 512, 1,024 and 2,048 workers (ResNet-50,
b = 32, whole ImageNet-1K epochs) over a grid of per-rank noise, on the fast path of scale/knee.py,
with its agreement with SimGrid: the study's cached knee rows (scale_study.json) and a few small
simulations of its own (`CHECKS`, cached under results/reference/scale/cache/).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from hpcshuffle.scale import knee
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.platform_yaml import load_platform, with_values
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.scale.seeds import Spread
from hpcshuffle.studies.scale_fit import with_fenced_block
from hpcshuffle.studies.scale_jobs import Job, Setup, run_jobs

WORKERS = (512, 1024, 2048)
QS = (0.1, 1.0)
SCHEDULERS = ("hpcshuffle", "kakurenbo")
MEANS_MS = (0.03, 0.1, 0.3)  # the study's one assumption (0.1 ms) and a half decade either side
TAILS = (("pareto", "shape", 1.5), ("pareto", "shape", 2.5), ("lognormal", "cv", 1.0), ("lognormal", "cv", 4.0))
PAPER_RATIO = 1.37  # Nguyen et al. Fig. 10: PLS q = 1.0 / LS at 512 workers (abci's slot_cpu is fitted to it)
KNEE_POINTS = 0.05  # a knee: the median PLS/LS rises by more than this from 512 to 2,048 workers (pls_knee.txt's)
CHECK_ITERATIONS = 3
CHECKS = (  # (scheduler, noise, workers, qs, seeds): small SimGrid runs beside the fast path
    ("kakurenbo", {"dist": "pareto", "mean": 3.0e-4, "shape": 2.5}, 512, (0.1, 1.0), (0, 1, 2)),
    ("kakurenbo", {"dist": "lognormal", "mean": 1.0e-4, "cv": 4.0}, 512, (0.1, 1.0), (0, 1, 2)),
    ("kakurenbo", {"dist": "pareto", "mean": 1.0e-4, "shape": 1.5}, 2048, (0.1,), (1, 2, 3)),
)
FRONTIER_TAILS = (("pareto", "shape", (1.1, 1.2, 1.3, 1.5, 2.0, 2.5)), ("lognormal", "cv", (1.0, 2.0, 4.0, 8.0)))


def noises() -> list[tuple[str, dict]]:
    """(label, exchange.noise) of every swept setting: none, then each tail at each mean."""
    grid = [("none", {"dist": "fixed", "mean": 0.0})]
    for dist, parameter, value in TAILS:
        short = "a" if parameter == "shape" else "cv"
        grid += [(f"{dist} {mean:g} ms {short}={value:g}", {"dist": dist, "mean": mean / 1000, parameter: value})
                 for mean in MEANS_MS]
    return grid


def label_of(noise: dict) -> str:
    """A noise's label as `noises` writes it."""
    if noise["dist"] == "fixed":
        return "none"
    short, value = ("a", noise["shape"]) if noise["dist"] == "pareto" else ("cv", noise["cv"])
    return f"{noise['dist']} {noise['mean'] * 1000:g} ms {short}={value:g}"


def sweep(platform: Platform, seeds: int) -> list[dict]:
    """One row per (scheduler, noise): PLS/LS Spreads per (q, workers), the knee, ≤ 1.37 at 512, and the
    refitted slot_cpu (authors' scheduler) with PLS-0.1/LS at it."""
    rows = []
    for scheduler in SCHEDULERS:
        for label, noise in noises():
            setting = with_values(platform, {"exchange.scheduler": scheduler, "exchange.noise": noise})
            ratios = {(q, m): knee.ratio(setting, Scenario(m, "partial", q), seeds) for q in QS for m in WORKERS}
            row = {"scheduler": scheduler, "noise": label, "ratios": ratios,
                   "knee": ratios[(0.1, WORKERS[-1])].median - ratios[(0.1, WORKERS[0])].median > KNEE_POINTS,
                   "within": ratios[(1.0, WORKERS[0])].median <= PAPER_RATIO}
            if scheduler == "kakurenbo":
                refit = knee.refit_slot_cpu(setting, Scenario(WORKERS[0], "partial", 1.0), PAPER_RATIO, seeds)
                row["refit"] = refit
                if refit is not None:
                    refitted = with_values(setting, {"exchange.slot_cpu": refit})
                    row["refit_ratios"] = {m: knee.ratio(refitted, Scenario(m, "partial", 0.1), seeds) for m in WORKERS}
            rows.append(row)
    return rows


def cell(spread) -> str:
    """`median [p10, p90]`."""
    return f"{spread.median:.3f} [{spread.p10:.3f}, {spread.p90:.3f}]"


def sweep_table(rows: list[dict], platform: Platform, seeds: int) -> list[str]:
    """The swept grid and the settings consistent with both the knee and ≤ 1.37 at q = 1.0."""
    lines = [f"PLS/LS over {seeds} seeded draws, median [p10, p90], on abci (ResNet-50, b=32, whole epochs) with "
             f"exchange.noise replaced; slot_cpu {platform.exchange.slot_cpu * 1000:g} ms (fitted with no noise); "
             f"knee: median PLS-0.1/LS rises by > {KNEE_POINTS * 100:.0f} points from {WORKERS[0]} to {WORKERS[-1]}; "
             f"<=1.37: median PLS-1.0/LS at {WORKERS[0]} <= {PAPER_RATIO} (the paper's Fig. 10 number)"]
    for q in QS:
        lines += ["", f"PLS-{q:g}/LS", f"{'scheduler':<11} {'noise':<24} "
                  + " ".join(f"{'M=' + str(m):>24}" for m in WORKERS) + "  knee  <=1.37"]
        for row in rows:
            lines.append(f"{row['scheduler']:<11} {row['noise']:<24} "
                         + " ".join(f"{cell(row['ratios'][(q, m)]):>24}" for m in WORKERS)
                         + f"  {'yes' if row['knee'] else 'no':>4}  {'yes' if row['within'] else 'no':>5}")
    both = [f"{row['scheduler']} {row['noise']}" for row in rows if row["knee"] and row["within"]]
    lines += ["", f"consistent with both the knee and PLS-1.0/LS <= {PAPER_RATIO} at {WORKERS[0]} (slot_cpu as fitted): "
              + (", ".join(both) if both else "none")]
    lines += ["", f"the authors' scheduler with slot_cpu refitted per noise setting (median PLS-1.0/LS at "
              f"{WORKERS[0]} = {PAPER_RATIO}), PLS-0.1/LS:",
              f"{'noise':<24} {'slot_cpu ms':>11} " + " ".join(f"{'M=' + str(m):>24}" for m in WORKERS) + "  knee"]
    refit_both = []
    for row in rows:
        if row["scheduler"] != "kakurenbo":
            continue
        if row["refit"] is None:
            lines.append(f"{row['noise']:<24} {'none':>11}  (the noise alone puts PLS-1.0/LS above {PAPER_RATIO})")
            continue
        spreads = row["refit_ratios"]
        kneed = spreads[WORKERS[-1]].median - spreads[WORKERS[0]].median > KNEE_POINTS
        refit_both += [row["noise"]] if kneed else []
        lines.append(f"{row['noise']:<24} {row['refit'] * 1000:>11.3f} "
                     + " ".join(f"{cell(spreads[m]):>24}" for m in WORKERS) + f"  {'yes' if kneed else 'no':>4}")
    lines.append("with slot_cpu refitted, consistent with both: " + (", ".join(refit_both) if refit_both else "none"))
    return lines


def readme_with(readme: str, lines: list[str]) -> str:
    """`readme` with knee.txt's key lines (the headers, the authors' scheduler's rows, the conclusions) in its
    knee.txt block (unchanged where it has none)."""
    keep = [line for line in lines if line.startswith(("PLS-", "scheduler", "kakurenbo", "noise", "consistent",
                                                      "with slot_cpu", "the authors'", "pareto", "lognormal"))]
    return with_fenced_block(readme, "knee.txt", "experiments/scale_knee.py", "\n".join(keep))


def cached_rows(study: Path) -> list[dict]:
    """The knee rows of scale_study.json (seed 0, 10 iterations, SimGrid)."""
    return [row for row in json.loads(study.read_text())["rows"] if row["figure"] == "knee"]


def agreement_table(platform: Platform, study: Path, out: Path, jobs: int, seeds: int) -> list[str]:
    """SimGrid against the fast path: the cached knee rows (PLS/LS at seed 0; alpha as measured) and
    `CHECKS` at `CHECK_SEEDS` (simulated here unless cached)."""
    rows = [row for row in cached_rows(study) if row["setup"].endswith("|1x")]
    lines = ["SimGrid against the fast path (scale/knee.py), PLS/LS: SimGrid's seed(s) / the fast path's median "
             f"[p10, p90] over {seeds} draws (noise-free: the same deterministic number) / where each SimGrid "
             "value falls among the fast path's draws (the share of draws below it)",
             f"{'scheduler':<11} {'noise':<24} {'q':>4} {'M':>5} {'iter':>4} {'SimGrid':>22} {'fast path':>24}  rank"]
    local = {(row["setup"].split("|")[1], row["scenario"]["workers"]): row["result"]["epoch_s"]
             for row in rows if row["label"] == "local"}
    for row in rows:
        if row["label"] == "local":
            continue
        scheduler, noise_label, _ = row["setup"].split("|")
        sc = Scenario(**row["scenario"])
        setting = with_values(platform, row["changes"])
        simulated = row["result"]["epoch_s"] / local[(noise_label, sc.workers)]
        lines.append(f"{scheduler:<11} {label_of(row['changes']['exchange.noise']):<24} {sc.q:>4g} {sc.workers:>5} "
                     f"{sc.samples // sc.workers // sc.batch_size:>4} {simulated:>22.4f} "
                     + _against(setting, sc, [simulated], seeds))
    for scheduler, noise, workers, qs, check_seeds in CHECKS:
        setup = Setup(f"knee-check|{scheduler}|{label_of(noise)}", "abci",
                      {"exchange.scheduler": scheduler, "exchange.noise": noise})
        setting = with_values(platform, setup.values)
        for q in qs:
            base = Scenario(workers, "partial", q, samples=CHECK_ITERATIONS * workers * 32)
            pairs = [Job("knee", name, setup, replace(base, shuffle=shuffle, q=qq, seed=seed))
                     for seed in check_seeds for name, shuffle, qq in (("local", "local", None), ("pls", "partial", q))]
            results = run_jobs(pairs, out, jobs)
            simulated = [results[i + 1][0].epoch_s / results[i][0].epoch_s for i in range(0, len(pairs), 2)]
            lines.append(f"{scheduler:<11} {label_of(noise):<24} {q:>4g} {base.workers:>5} {CHECK_ITERATIONS:>4} "
                         f"{' '.join(f'{s:.3f}' for s in simulated):>22} " + _against(setting, base, simulated, seeds))
    return lines


def _against(setting: Platform, scenario: Scenario, simulated: list[float], seeds: int) -> str:
    """The fast path's cell, and the share of its draws below each simulated ratio ('-' where it draws nothing)."""
    local, partial = knee.epochs(setting, scenario, seeds)
    draws = partial / local
    ranks = " ".join("-" if draws.min() == draws.max() else f"{float((draws < value).mean()):.2f}"
                     for value in simulated)  # '-': nothing drawn, one number
    return f"{cell(Spread.of(draws)):>24}  {ranks}"


def frontier(platform: Platform, seeds: int) -> list[str]:
    """The largest knee any noise of each tail leaves room for: with slot_cpu 0, the mean at which noise alone
    makes the median PLS-1.0/LS at 512 = 1.37 (bisected: every seed's ratio rises with the mean, the draws
    scaling with it), and PLS-0.1/LS's rise from 512 to 2,048 there (a smaller mean, with the slot_cpu it
    leaves room for, rises less: `sweep_table`'s refitted rows)."""
    lines = [f"the authors' scheduler at the frontier: slot_cpu 0 and the noise mean at which noise alone gives median "
             f"PLS-1.0/LS = {PAPER_RATIO} at {WORKERS[0]} (any larger mean is above {PAPER_RATIO}); PLS-0.1/LS there, "
             f"and its rise from {WORKERS[0]} to {WORKERS[-1]} (points)",
             f"{'noise':<24} {'mean ms':>8} " + " ".join(f"{'M=' + str(m):>24}" for m in WORKERS) + "   rise  knee"]
    both = []
    for dist, parameter, values in FRONTIER_TAILS:
        for value in values:
            def noisy(mean: float) -> Platform:
                return with_values(platform, {"exchange.scheduler": "kakurenbo", "exchange.slot_cpu": 0.0,
                                              "exchange.noise": {"dist": dist, "mean": mean, parameter: value}})
            low, high = -9.0, -2.0  # log10 of the mean, seconds
            for _ in range(40):
                middle = (low + high) / 2
                above = knee.ratio(noisy(10 ** middle), Scenario(WORKERS[0], "partial", 1.0), seeds).median > PAPER_RATIO
                low, high = (low, middle) if above else (middle, high)
            mean = 10 ** low
            spreads = {m: knee.ratio(noisy(mean), Scenario(m, "partial", 0.1), seeds) for m in WORKERS}
            rise = 100 * (spreads[WORKERS[-1]].median - spreads[WORKERS[0]].median)
            label = label_of({"dist": dist, "mean": mean, parameter: value}).split(" ms ")[1]
            both += [f"{dist} {label} at {mean * 1000:.3g} ms"] if rise > 100 * KNEE_POINTS else []
            lines.append(f"{dist + ' ' + label:<24} {mean * 1000:>8.4f} " + " ".join(f"{cell(spreads[m]):>24}" for m in WORKERS)
                         + f" {rise:>6.1f}  {'yes' if rise > 100 * KNEE_POINTS else 'no':>4}")
    return lines + ["consistent with both at the frontier: " + (", ".join(both) if both else "none")]


def agreement_case(platform: Platform) -> tuple[Scenario, Platform]:
    """The pinned agreement case: the authors' scheduler, no noise, q = 1.0 at 512 workers, 10 iterations,
    whose SimGrid epoch is 2.6731864 s against LS's 1.9412684 s (seed 0, since the loader decodes while its
    bytes flow)."""
    setting = with_values(platform, {"exchange.scheduler": "kakurenbo"})
    return Scenario(512, "partial", 1.0, samples=10 * 512 * 32), setting


def default_platform() -> Platform:
    """abci as in conf/platform."""
    return load_platform("abci")

