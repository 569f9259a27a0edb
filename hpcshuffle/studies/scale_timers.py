"""Nguyen et al.'s five DenseNet-161 numbers under the engine's booking and the authors' own timers
(hpcshuffle/scale/timers.py): experiments/scale_timers.py's logic, which writes results/reference/scale/timers.txt.

Each booking is fitted to the five numbers: per loader depth, a differential evolution over the read
times (the loader's CPU per batch, the shared storage's extra, its per-rank and per-batch lognormal
spread), the GPU's time, the ring's and (the script only) the loader's start, minimising the largest
relative error of the medians over the fit's seeds (the same draws for every candidate). The third
fit reads 11.9 / 142 as each rank's loader read time rather than its wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import differential_evolution, minimize

from hpcshuffle.scale.timers import Step, allreduce_floor, book, epoch, read_times

PAPER = {"io": 19.6, "io_min": 11.9, "io_max": 142.0, "allreduce": 70.0, "ls_io": 8.0}
RANKS, BATCH, SAMPLES = 512, 32, 1_281_167  # b = 32: the script's default; 40 and 20 iterations at 1,024 / 2,048 (Sec. V-F) agree
PER_RANK = math.ceil(SAMPLES / RANKS)  # DistributedSampler pads to 2,503 samples a rank
ITERATIONS = math.ceil(PER_RANK / BATCH)  # 79, the last batch 7 files (drop_last off)
FILES = np.minimum(BATCH, PER_RANK - BATCH * np.arange(ITERATIONS)) / BATCH  # each batch's share of 32 files
# (name, bounds) of the searched inputs, seconds per batch of 32 files for one loader worker
SEARCH = [("base", (0.005, 2.0)), ("spread", (0.0, 4.0)), ("rank_cv", (0.0, 12.0)), ("batch_cv", (0.0, 3.0)),
          ("gpu", (0.10, 0.30)), ("ring", (0.005, 0.05)), ("startup", (0.0, 10.0))]


@dataclass(frozen=True)
class Setup:
    """One booking's loader and fixed costs: the engine's (one batch read at a time, no copy, no
    update, no loader start) or the script's (4 DataLoader workers; copy and update ~2 ms each and
    launches 30 % of the GPU's time: ASSUMPTIONS, no figure of the authors' gives them)."""

    label: str
    how: str
    workers: int
    depths: tuple[int, ...]
    script: bool
    read_extremes: bool = False  # io min / max as the rank's loader read time, not its wait

    def step(self, x: dict[str, float], depth: int) -> Step:
        """The iteration's costs at the fit's inputs `x` and a loader `depth` batches ahead."""
        if not self.script:
            return Step(gpu=x["gpu"], ring=x["ring"], workers=self.workers, depth=depth)
        return Step(gpu=x["gpu"], ring=x["ring"], launch=0.3 * x["gpu"], copy=2e-3, update=2e-3,
                    workers=self.workers, depth=depth, startup=x["startup"])


SETUPS = [
    Setup("simulator booking (engine's loader)", "simulator", 1, (0, 1, 8), script=False),
    Setup("paper booking (script's timers)", "paper", 4, (4, 8, 16), script=True),
    Setup("paper booking, min/max = read time", "paper", 4, (4, 8, 16), script=True, read_extremes=True),
]


def over_seeds(setup: Setup, x: dict[str, float], depth: int, seeds: range) -> dict[str, np.ndarray]:
    """Each of the five numbers at each seed: GS's epoch at that seed's draws, and the LS epoch (no draws)."""
    step = setup.step(x, depth)
    ls = book(epoch(np.full((RANKS, ITERATIONS), x["base"]) * FILES, step), setup.how)
    runs = []
    for seed in seeds:
        reads = read_times(np.random.default_rng(seed), RANKS, ITERATIONS, x["base"], x["spread"], x["rank_cv"],
                           x["batch_cv"]) * FILES
        gs = book(epoch(reads, step), setup.how)
        extremes = reads.sum(axis=1) if setup.read_extremes else gs["io"]
        runs.append({"io": gs["io"].mean(), "io_min": extremes.min(), "io_max": extremes.max(),
                     "allreduce": gs["allreduce"].mean(), "ls_io": ls["io"].mean()})
    return {name: np.array([run[name] for run in runs]) for name in PAPER}


def error(values: dict[str, float]) -> float:
    """The largest relative error against the paper."""
    return max(abs(values[name] / PAPER[name] - 1) for name in PAPER)


def fit(setup: Setup, fit_seeds: int) -> tuple[dict[str, float], int, float]:
    """The inputs and depth whose medians over the fit seeds come closest to all five numbers."""
    search = [(name, bounds) for name, bounds in SEARCH if setup.script or name != "startup"]
    best = None
    for depth in setup.depths:
        def objective(vector: np.ndarray, depth: int = depth) -> float:
            x = dict(zip((name for name, _ in search), vector, strict=True)) | ({} if setup.script else {"startup": 0.0})
            return error({k: float(np.median(v)) for k, v in over_seeds(setup, x, depth, range(fit_seeds)).items()})
        bounds = [bounds for _, bounds in search]
        found = differential_evolution(objective, bounds, seed=0, maxiter=40, popsize=10, tol=1e-6, polish=False)
        polished = minimize(objective, found.x, method="Nelder-Mead", bounds=bounds, options={"maxfev": 600})
        found = polished if polished.fun < found.fun else found
        if best is None or found.fun < best[2]:
            x = dict(zip((name for name, _ in search), found.x, strict=True)) | ({} if setup.script else {"startup": 0.0})
            best = (x, depth, float(found.fun))
    return best


def least_error(setup: Setup) -> float:
    """The smallest largest-error any inputs can reach, from the floor mean allreduce >= io_max - io_mean + c."""
    low_gpu, low_ring = SEARCH[4][1][0], SEARCH[5][1][0]
    step = setup.step({"gpu": low_gpu, "ring": low_ring, "startup": 0.0}, 1)
    c = allreduce_floor(np.zeros(1), step, ITERATIONS, setup.how)  # the per-iteration part alone
    # allreduce (1 + e) >= io_max (1 - e) - io (1 + e) + c
    p = PAPER
    return (p["io_max"] - p["io"] - p["allreduce"] + c) / (p["allreduce"] + p["io_max"] + p["io"])


def conclusion(fits: list[tuple[Setup, dict[str, np.ndarray]]]) -> list[str]:
    """What the floor and the fits say about the five numbers, and which one does not fit."""
    p, tol = PAPER, 0.2
    floor = p["io_max"] - p["io"]
    floor_tol = p["io_max"] * (1 - tol) - p["io"] * (1 + tol)
    worst = [error({k: float(np.median(v[k])) for k in PAPER}) for setup, v in fits if not setup.read_extremes]
    lines = [
        f"Conclusion. Under both bookings io + allreduce is one number K for every rank of an epoch: every rank "
        f"leaves Horovod's optimizer.step() at the same moment, and its other timers cost every rank the same "
        f"(tests/unit/test_scale_timers.py). So mean allreduce >= io_max - io_mean + {ITERATIONS} x (ring + the "
        f"GPU's lag), and with the paper's I/O numbers >= {p['io_max']:g} - {p['io']:g} = {floor:.1f} s, against "
        f"{p['allreduce']:g} s reported. Within +-{100 * tol:.0f} % the floor still asks "
        f"{p['io_max'] * (1 - tol):.1f} - {p['io'] * (1 + tol):.1f} = {floor_tol:.1f} s > "
        f"{p['allreduce'] * (1 + tol):.0f} s: the five are not jointly reachable under either booking (the best "
        f"fits' medians miss by up to {100 * worst[0]:.0f} % and {100 * worst[1]:.0f} %). The authors' timers make it "
        f"no easier: their FW+BW is the CPU's kernel launches, so the GPU's remaining work lands in step() too.",
        "",
        "Which number: the slowest rank's 142 s. Any one of 19.6 / 142 / 70 could carry the contradiction "
        f"(70 would have to be >= {floor:.0f} s, 19.6 >= {p['io_max'] - p['allreduce']:.0f} s, or 142 <= "
        f"{p['io'] + p['allreduce']:.1f} s - {ITERATIONS} rings), but 19.6 and 70 are, by the paper's account, "
        "Fig. 10's averages over five epochs, and the script prints rank 0's sums only (lines 308-320, `if rank "
        "== 0`; its TimeEstimation sums are never reduced over ranks), so they are most likely rank 0's, while "
        "11.9 and 142 come from a separate 'measuring the I/O time of all workers'. Since K is the same on every "
        f"rank, rank 0's io + allreduce, {p['io'] + p['allreduce']:.1f} s, bounds every rank's io in those "
        "epochs: a 142 s rank would belong to another epoch or run (a colder cache, a busier file system), or "
        "be another quantity than the wait the script times. Reading 11.9 / 142 as each rank's loader read time (its four workers overlap it) does not "
        "reconcile them either: the search found no better than the third column.",
    ]
    return lines


def report(command: str, fit_seeds: int, seeds: int) -> str:
    """timers.txt: each booking fitted to the medians over seeds 0..`fit_seeds`-1, the best fits over seeds
    0..`seeds`-1 beside the paper's five numbers, and the conclusion (which number is out, and why)."""
    lines = [command, "", f"DenseNet-161, ImageNet-1K, {RANKS} ranks, b = {BATCH}: {ITERATIONS} iterations an epoch "
             f"(the last {PER_RANK - BATCH * (ITERATIONS - 1)} files). Fitted to the medians over seeds 0-{fit_seeds - 1}; "
             f"reported as median [min-max] over seeds 0-{seeds - 1}.", ""]
    fits = []
    for setup in SETUPS:
        x, depth, err = fit(setup, fit_seeds)
        values = over_seeds(setup, x, depth, range(seeds))
        fits.append((setup, values))
        inputs = ", ".join(f"{name} {x[name]:.3g}" for name, _ in SEARCH if setup.script or name != "startup")
        lines.append(f"{setup.label}: depth {depth} (workers {setup.workers}), {inputs}; fit error {100 * err:.1f} %"
                     + ("; no floor applies (min / max are not waits)" if setup.read_extremes else
                        f"; the floor allows no less than {100 * least_error(setup):.1f} %"))
    lines += ["", "| number | paper | " + " | ".join(setup.label for setup, _ in fits) + " |",
              "| --- | --- |" + " --- |" * len(fits)]
    for name in PAPER:
        cells = [f"{np.median(v[name]):.1f} [{v[name].min():.1f}-{v[name].max():.1f}]" for _, v in fits]
        lines.append(f"| {name} | {PAPER[name]:g} | " + " | ".join(cells) + " |")
    lines.append("| largest error (medians) | | " + " | ".join(
        f"{100 * error({k: float(np.median(v[k])) for k in PAPER}):.1f} %" for _, v in fits) + " |")
    lines += ["", *conclusion(fits)]
    return "\n".join(lines) + "\n"
