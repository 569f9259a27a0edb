"""The `abci` shared storage fitted to Nguyen et al.'s per-phase numbers (issue 46), on the order-statistics
path (hpcshuffle/scale/order_stats.py): experiments/scale_fit.py's logic.

Free: `FREE`, three knobs no public source fixes. Fixed, each from its source in conf/platform/abci.yaml:
the loader's 4 workers ([PT-EX]) and `prefetch: 0` (the fastest rank's 11.9 s of I/O: a loader reading
ahead would leave it ~0), the servers (801 HDDs), their service (1 ms: cached reads; the fit cannot
separate it from `file_latency`, which multiplies the same chains), the metadata rate and bandwidth
(PROXY figures; they cost < 0.1 s an epoch here), the model's FW+BW and gradient bytes ([DLE], [TV]),
the allreduce (NCCL's tuner) and the lognormal shape of the client factor.

The fit minimises the sum of squared log-ratios of the fast path's MEDIANS over seeds to the targets
(`TARGETS`), by Nelder–Mead over the logs of the free knobs from each of `STARTS` (abci.yaml's values,
and the same with a light tail), keeping the best: deterministic, so a rerun gives the same values.
Leave-one-out: each target is left out in turn, the others fitted, and the left-out one predicted
(median, p10–p90). No fit uses all five: the five are not jointly reachable in this model nor under the
authors' own timers (results/reference/scale/timers.txt: io + allreduce is the same on every rank, so
mean allreduce ≥ 142 − 19.6 s > 70 s), and the odd one out there is the slowest rank's 142 s, measured
apart from the other numbers. The fitted values are the fit to the other four (`HELD_OUT`), and a
knob's uncertainty is the range of its fitted value over the five leave-one-out fits.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import optimize

from hpcshuffle.scale.order_stats import DRAWS, breakdown
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.scale.seeds import Spread

FREE = ("shared.file_latency", "shared.client_spread.cv", "loader.cpu_per_file")
START = {"shared.file_latency": 1.2e-2, "shared.client_spread.cv": 4.5, "loader.cpu_per_file": 1.27e-2}  # abci.yaml's
STARTS = [START, {**START, "shared.client_spread.cv": 1.5}]  # a heavy and a light tail: the error has two valleys
WORKERS, MODEL = 512, "densenet161"  # Nguyen et al. Sec. V-F: DenseNet-161 at 512 workers, b = 32, ImageNet-1K
TARGETS = {  # (shuffle, Result field): seconds per epoch, Nguyen et al. Sec. V-F
    ("global", "io_s"): 19.6, ("global", "io_min_s"): 11.9, ("global", "io_max_s"): 142.0,
    ("global", "allreduce_s"): 70.0, ("local", "io_s"): 8.0,
}
NAMES = {("global", "io_s"): "GS I/O mean", ("global", "io_min_s"): "GS I/O fastest rank",
         ("global", "io_max_s"): "GS I/O slowest rank", ("global", "allreduce_s"): "GS allreduce mean",
         ("local", "io_s"): "LS I/O mean"}
HELD_OUT = ("global", "io_max_s")  # the fitted values leave the slowest rank's 142 s out (timers.txt says why)
OUTSIDE = 1e6  # the objective where the fast path refuses the knobs
PREDICTED = ("resnet50", 128, "almost 5x")  # not fitted: Nguyen Fig. 9, GS/LS at 128 workers


def with_free(platform: Platform, values: dict[str, float]) -> Platform:
    """`platform` with the free knobs of `values` set (the sections rebuilt and checked, as a yaml's are)."""
    unknown = set(values) - set(FREE)
    if unknown:
        raise ValueError(f"not a free knob of the fit: {sorted(unknown)} (free: {list(FREE)})")
    shared, loader = platform.shared, platform.loader
    spread = shared.client_spread
    if "shared.client_spread.cv" in values:
        if spread.dist != "lognormal":
            raise ValueError(f"shared.client_spread is {spread.dist}: the fit frees the cv of a lognormal")
        spread = replace(spread, cv=values["shared.client_spread.cv"])
    shared = replace(shared, client_spread=spread,
                     file_latency=values.get("shared.file_latency", shared.file_latency))
    loader = replace(loader, cpu_per_file=values.get("loader.cpu_per_file", loader.cpu_per_file))
    return replace(platform, shared=shared, loader=loader)


def predict(platform: Platform, values: dict[str, float], workers: int = WORKERS, model: str = MODEL,
            draws: int = DRAWS) -> dict[tuple[str, str], Spread]:
    """Every (shuffle, field) of the order-statistics breakdown of GS and LS with `values` set."""
    changed = with_free(platform, values)
    spreads = {}
    for shuffle in ("global", "local"):
        result = breakdown(changed, Scenario(workers, shuffle, None, model=model), draws)
        for field in ("io_s", "io_min_s", "io_max_s", "allreduce_s", "epoch_s"):
            spreads[(shuffle, field)] = getattr(result, field)
    return spreads


def objective(platform: Platform, targets: dict, logs: np.ndarray, workers: int = WORKERS,
              draws: int = DRAWS) -> float:
    """Σ ln²(median / target) over `targets`, the free knobs at exp(`logs`)."""
    try:
        spreads = predict(platform, dict(zip(FREE, np.exp(logs).tolist())), workers, draws=draws)
    except (ValueError, OverflowError):  # outside the fast path's assumptions (busy servers), or a knob past
        return OUTSIDE                      # floating point (a target set that leaves it free): not a fit
    return float(sum(math.log(spreads[key].median / value) ** 2 for key, value in targets.items()))


@dataclass(frozen=True)
class Fit:
    """The free knobs' fitted values, the error left (Σ ln²) and every prediction at them."""

    values: dict[str, float]
    error: float
    predictions: dict[tuple[str, str], Spread]


def fit(platform: Platform, targets: dict, starts: list[dict[str, float]] | None = None, workers: int = WORKERS,
        draws: int = DRAWS) -> Fit:
    """The free knobs minimising `objective` over `targets` (at least one): Nelder–Mead from each of `starts`
    (default `STARTS`), the best kept."""
    if not targets:
        raise ValueError("a fit needs at least one target")
    unknown = set(targets) - set(TARGETS) - {(shuffle, field) for shuffle, field in targets if field == "epoch_s"}
    if unknown:
        raise ValueError(f"no such target {sorted(unknown)}: choose from {sorted(TARGETS)}")
    bad = {key: value for key, value in targets.items() if not (value > 0 and math.isfinite(value))}
    if bad:
        raise ValueError(f"targets must be positive seconds, got {bad}")
    best = None
    for start in starts or STARTS:
        found = optimize.minimize(lambda x: objective(platform, targets, x, workers, draws),
                                  np.log([start[knob] for knob in FREE]), method="Nelder-Mead",
                                  options={"xatol": 1e-4, "fatol": 1e-10, "maxiter": 4000, "maxfev": 8000})
        if best is None or found.fun < best.fun:
            best = found
    values = dict(zip(FREE, np.exp(best.x).tolist()))
    return Fit(values, float(best.fun), predict(platform, values, workers, draws=draws))


@dataclass(frozen=True)
class LeftOut:
    """One leave-one-out row: the target left out, the fit to the others, its prediction of the left-out one."""

    key: tuple[str, str]
    target: float
    fit: Fit

    @property
    def prediction(self) -> Spread:
        """The left-out number's median and p10–p90 over seeds, from the fit to the others."""
        return self.fit.predictions[self.key]


def leave_one_out(platform: Platform, targets: dict = TARGETS, starts: list[dict[str, float]] | None = None,
                  progress=None) -> list[LeftOut]:
    """For each target, the fit to all the others (from `starts`, default `STARTS`) and its prediction of
    that one; `progress` (a callable) hears of each fit as it ends."""
    rows = []
    for key, value in targets.items():
        started = time.perf_counter()
        rows.append(LeftOut(key, value, fit(platform, {k: v for k, v in targets.items() if k != key}, starts)))
        if progress:
            progress(f"fit without {NAMES[key]}: error left {rows[-1].fit.error:.4f} "
                     f"({time.perf_counter() - started:.0f} s)")
    return rows


def adopted_leave_one_out(platform: Platform, adopted: Fit, progress=None) -> list[LeftOut]:
    """The adopted fit's own leave-one-out: each of its targets (all but `HELD_OUT`) left out in turn and
    predicted from a fit to the rest, started from the adopted values. Three knobs on three numbers: each
    fit is exact, so the left-out number is the only test it gets."""
    return leave_one_out(platform, {key: value for key, value in TARGETS.items() if key != HELD_OUT},
                         [adopted.values], progress)


# every knob of the fast path set from Nguyen Sec. V-F's numbers, fitted or by hand (abci.yaml says how)
CHOSEN_FROM_PAPER = {**{knob: "fitted" for knob in FREE},
                     "loader.prefetch": "set to 0 by hand from the fastest rank's 11.9 s of I/O",
                     "shared.service.mean": "set to its range's low end because the fit cannot separate it from "
                                            "shared.file_latency"}


def held_out(rows: list[LeftOut]) -> LeftOut:
    """The leave-one-out row whose fit gives the fitted values: the one without `HELD_OUT`."""
    return next(row for row in rows if row.key == HELD_OUT)


def ratio_spread(platform: Platform, values: dict[str, float], model: str, workers: int) -> Spread:
    """GS/LS of `model` at `workers` over seeds (LS draws nothing, so GS's epoch quantiles over LS's)."""
    spreads = predict(platform, values, workers, model)
    local = spreads[("local", "epoch_s")].median
    gs = spreads[("global", "epoch_s")]
    return Spread(gs.median / local, gs.p10 / local, gs.p90 / local)


def _seconds(spread: Spread) -> str:
    return f"{spread.median:7.1f} ({spread.p10:.1f}-{spread.p90:.1f})"


def report(platform: Platform, command: str, rows: list[LeftOut], adopted: list[LeftOut], stored_ratio: str = "") -> str:
    """fit.txt: the command, the fitted values (the fit without `HELD_OUT`) with their leave-one-out range,
    that fit's residuals, the leave-one-out tables (of all five targets, `rows`, and of the adopted four,
    `adopted`), the knobs chosen from the paper's numbers and the unfitted ResNet-50 GS/LS at 128 workers."""
    chosen = held_out(rows).fit
    lines = [command, "",
             f"abci's shared storage fitted on the order-statistics path (hpcshuffle/scale/order_stats.py) to Nguyen "
             f"et al. Sec. V-F ({MODEL}, {WORKERS} workers, b=32, ImageNet-1K): medians over seeds",
             "", f"{'knob':<26} {'fitted':>10} {'range over the leave-one-out fits':>34} {'abci.yaml now':>14}"]
    current = {"shared.file_latency": platform.shared.file_latency, "shared.client_spread.cv": platform.shared.client_spread.cv,
               "loader.cpu_per_file": platform.loader.cpu_per_file}
    for knob in FREE:
        fitted = [row.fit.values[knob] for row in rows]
        lines.append(f"{knob:<26} {chosen.values[knob]:>10.4g} {min(fitted):>16.4g} - {max(fitted):<15.4g} "
                     f"{current[knob]:>14.4g}")
    lines += ["", f"fitted: the fit to the four numbers other than the {NAMES[HELD_OUT]} "
              f"({TARGETS[HELD_OUT]:g} s), which timers.txt finds inconsistent with them; error left: "
              f"sum of ln^2(median/target) = {chosen.error:.4f}", "",
              f"{'paper number':<22} {'paper s':>8} {'fitted values: median (p10-p90)':>36} {'err':>6}   "
              f"{'left out, fit to the other four: median (p10-p90)':>52} {'err':>6}"]
    for row in rows:
        both = chosen.predictions[row.key]
        lines.append(f"{NAMES[row.key]:<22} {row.target:>8.1f} {_seconds(both):>36} {both.median / row.target - 1:>+6.0%}   "
                     f"{_seconds(row.prediction):>52} {row.prediction.median / row.target - 1:>+6.0%}")
    lines += ["", "the leave-one-out fits (the other four targets each time):",
              f"{'left out':<22} " + " ".join(f"{knob:>24}" for knob in FREE) + f" {'error left':>11}"]
    for row in rows:
        lines.append(f"{NAMES[row.key]:<22} " + " ".join(f"{row.fit.values[knob]:>24.4g}" for knob in FREE)
                     + f" {row.fit.error:>11.4f}")
    lines += ["", f"the adopted fit's own leave-one-out (its {len(adopted)} targets; each left out, the other "
              f"{len(adopted) - 1} fitted by the {len(FREE)} knobs: an exact fit, so the left-out number is its only test):",
              f"{'left out':<22} {'paper s':>8} {'predicted: median (p10-p90)':>32} {'err':>6} "
              + " ".join(f"{knob:>24}" for knob in FREE)]
    for row in adopted:
        lines.append(f"{NAMES[row.key]:<22} {row.target:>8.1f} {_seconds(row.prediction):>32} "
                     f"{row.prediction.median / row.target - 1:>+6.0%} "
                     + " ".join(f"{row.fit.values[knob]:>24.4g}" for knob in FREE))
    errors = sorted(abs(row.prediction.median / row.target - 1) for row in adopted)
    lines.append(f"median absolute held-out error {np.median(errors):.0%} (largest {errors[-1]:.0%})")
    lines += ["", f"knobs chosen from the paper's numbers: {len(CHOSEN_FROM_PAPER)}, against {len(adopted)} "
              f"independent targets the adopted fit uses:"]
    lines += [f"  {knob:<24} {how}" for knob, how in CHOSEN_FROM_PAPER.items()]
    model, workers, paper = PREDICTED
    fitted_ratio = ratio_spread(platform, chosen.values, model, workers)
    now_ratio = ratio_spread(platform, current, model, workers)
    lines += ["", f"not fitted: {model} GS/LS at {workers} workers (paper: {paper}), median (p10-p90) over seeds",
              f"  fast path, fitted values:       {fitted_ratio.median:.2f} ({fitted_ratio.p10:.2f}-{fitted_ratio.p90:.2f})",
              f"  fast path, abci.yaml's values:  {now_ratio.median:.2f} ({now_ratio.p10:.2f}-{now_ratio.p90:.2f})"]
    if stored_ratio:
        lines.append(f"  simulated, abci.yaml's values:  {stored_ratio}")
    return "\n".join(lines)


def write_platform(path: Path, values: dict[str, float], note: str, source: Path | None = None) -> None:
    """Set the free knobs in the platform yaml at `path` to `values`, each line's comment saying what it was
    fitted to (`note`); ValueError when a knob's line is not found. With `source`, `path` is a new platform:
    `source`'s yaml under the name of `path`'s stem, so the platform it was fitted from keeps its values."""
    text = path.read_text() if source is None else source.read_text()
    if source is not None:
        text, count = re.subn(r"^name: \S+", f"name: {path.stem}", text, count=1, flags=re.M)
        if count != 1:
            raise ValueError(f"{source}: no `name:` line to rename to {path.stem}")
        text = (f"# {path.name}: {source.name} with the free knobs fitted by experiments/scale_fit.py (FITTED below); "
                f"every other number and source as in {source.name}\n") + text
    patterns = {"shared.file_latency": r"^(  file_latency: )\S+(.*)$",
                "shared.client_spread.cv": r"^(  client_spread: \{dist: lognormal, mean: 1\.0, cv: )[^}]+(\}.*)$",
                "loader.cpu_per_file": r"^(  cpu_per_file: )\S+(.*)$"}
    for knob, pattern in patterns.items():
        section = knob.split(".")[0]
        head, _, body = text.partition(f"\n{section}:")
        block_end = re.search(r"^\S", body[1:], flags=re.M)
        block = body[: block_end.start() + 1] if block_end else body
        replaced, count = re.subn(pattern, lambda m: f"{m.group(1)}{values[knob]:.3g}{m.group(2).split('#')[0]}"
                                  f"  # FITTED by experiments/scale_fit.py to {note}", block, count=1, flags=re.M)
        if count != 1:
            raise ValueError(f"{path}: no line for {knob} under {section}: to write the fitted value into")
        text = head + f"\n{section}:" + replaced + body[len(block):]
    path.write_text(text)
