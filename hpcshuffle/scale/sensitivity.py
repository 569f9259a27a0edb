"""Which of a cluster's numbers matter? `hpcshuffle scale --sensitivity`, one knob at a time.

A platform yaml may give, under `ranges:`, a sourced low and high for any of its numbers (a "knob",
named by its dotted path in the yaml: `shared.file_latency`, `models.resnet50.fwbw_per_sample`):

    ranges:
      shared.file_latency: {low: 5.0e-3, high: 5.0e-2, source: "Lustre bottom-up 5 ms; Yang's GPFS 50 ms"}

Each knob is set to its low and to its high, every other number kept at the platform's value, and
the epochs of global (GS), local (LS) and partial (PLS, at q) shuffling are simulated at one worker
count; GS/LS and PLS/LS at both ends, against the platform's own (the base), show which knobs move
the answer. Every range and every variant is checked before anything is simulated.

At one seed that is one draw of whatever the platform draws at random. Over seeds S..S+N−1
(`--seeds N`, scale/seeds.py) every platform runs at each seed (a scenario that draws nothing, once),
each ratio is paired by seed, a knob's ends are their medians over the seeds, and the base's own
10–90 % range over the seeds (`SeedSpread`) sits beside the knobs' swings: a knob that moves the
answer less than the seed does is not what sets it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpcshuffle.plan import get_strategy
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Platform, PlatformError
from hpcshuffle.scale.platform_yaml import with_values
from hpcshuffle.scale.recommend import simulate_each
from hpcshuffle.scale.scenario import Result, Scenario, check_scenario
from hpcshuffle.scale.seeds import SeedPlan, SeedRuns, Spread, check_seeds

ENDS = ("low", "high")
SHUFFLES = ("global", "local", "partial")  # GS, LS, PLS
RATIOS = {"gs_ls": "GS/LS", "pls_ls": "PLS/LS"}
OVER_LS = {"gs_ls": "global", "pls_ls": "partial"}  # whose epoch each ratio divides by LS's
BASE = ("", "base")  # the key of the unvaried platform among (knob path, end) keys; no path is ""
ENTRY_KEYS = ("low", "high", "source")
EXAMPLE = 'ranges:\n  shared.file_latency: {low: 5.0e-3, high: 5.0e-2, source: "where these come from"}'


class RangeError(PlatformError):
    """A `ranges:` entry, or a variant it makes, that cannot be simulated; names the knob, the file and the fix."""


@dataclass(frozen=True)
class KnobRange:
    """One knob: its dotted `path` in the platform yaml, its sourced `low` and `high`, and `mid`, the
    platform's own value."""

    path: str
    low: float
    mid: float
    high: float
    source: str

    def value(self, end: str) -> float:
        """The knob's value at `end`, "low" or "high"."""
        return {"low": self.low, "high": self.high}[end]


@dataclass(frozen=True)
class Outcome:
    """The GS, LS and PLS runs of one platform (the base, or one knob at one end) at the study's seeds,
    by shuffle name."""

    runs: dict[str, SeedRuns]

    @property
    def results(self) -> dict[str, Result]:
        """Each shuffle's result at the first seed, by shuffle name."""
        return {shuffle: run.first for shuffle, run in self.runs.items()}

    def spread(self, ratio: str) -> Spread:
        """`ratio` (one of RATIOS) over the seeds, paired by seed: each seed's epoch over LS's at that seed."""
        return self.runs[OVER_LS[ratio]].ratio(self.runs["local"])

    @property
    def gs_ls(self) -> float:
        """Global shuffling's epoch over local shuffling's (at one seed; over several, its median)."""
        return self.spread("gs_ls").median

    @property
    def pls_ls(self) -> float:
        """Partial local shuffling's epoch over local shuffling's (at one seed; over several, its median)."""
        return self.spread("pls_ls").median


@dataclass(frozen=True)
class KnobEffect:
    """The outcomes with one knob at its low and at its high end, the others at the platform's values."""

    knob: KnobRange
    low: Outcome
    high: Outcome

    def swing(self, ratio: str) -> float:
        """|ratio at high − ratio at low|, `ratio` one of RATIOS ("gs_ls", "pls_ls")."""
        return abs(getattr(self.high, ratio) - getattr(self.low, ratio))

    @property
    def name(self) -> str:
        """The knob's path: its row's name."""
        return self.knob.path


@dataclass(frozen=True)
class SeedSpread:
    """How far the base's ratios move with the seed alone: a row beside the knobs, its swing the
    base's p90 − p10 over the seeds, as a knob's is |high − low|."""

    seeds: tuple[int, ...]
    base: Outcome

    @property
    def name(self) -> str:
        """The row's name, e.g. "seed (0..19)"."""
        return f"seed ({self.seeds[0]}..{self.seeds[-1]})"

    def swing(self, ratio: str) -> float:
        """The base's p90 − p10 of `ratio` (one of RATIOS) over the seeds."""
        spread = self.base.spread(ratio)
        return spread.p90 - spread.p10


def by_swing(row: KnobEffect | SeedSpread) -> tuple[float, float, str]:
    """The order of rows: largest GS/LS swing first, then largest PLS/LS swing, then by name."""
    return -row.swing("gs_ls"), -row.swing("pls_ls"), row.name


@dataclass(frozen=True)
class Sensitivity:
    """The base platform's outcome and every knob's, largest GS/LS swing first, at `seeds` seeds
    from the scenarios' seed."""

    platform: str
    source: str
    scenarios: dict[str, Scenario]  # by shuffle name, as simulated on every variant (at the first seed)
    base: Outcome
    effects: list[KnobEffect]
    seeds: int = 1

    @property
    def seed_spread(self) -> SeedSpread | None:
        """The base's spread over the seeds as a row of its own; None at one seed."""
        if self.seeds == 1:
            return None
        first = self.scenarios["local"].seed
        return SeedSpread(tuple(range(first, first + self.seeds)), self.base)

    def rows(self) -> list[KnobEffect | SeedSpread]:
        """The knobs and (over several seeds) the seed spread, largest GS/LS swing first (`by_swing`)."""
        spread = self.seed_spread
        return self.effects if spread is None else sorted([*self.effects, spread], key=by_swing)


# ---- ranges and variants (no simulation) ----------------------------------------------------------

def knob_ranges(platform: Platform) -> list[KnobRange]:
    """The platform's `ranges:`, checked: every path names a number of its yaml, both bounds are
    finite non-negative numbers with low ≤ mid ≤ high, and each says its source."""
    where, ranges = platform.source, platform.extra.get("ranges")
    if not ranges:
        raise RangeError(f"platform {platform.name} ({where}) has no ranges: to vary; add a top-level mapping of "
                         f"each knob's sourced low and high, e.g.\n{EXAMPLE}")
    if not isinstance(ranges, dict):
        raise RangeError(f"{where}: ranges: must be a mapping of knob paths, e.g.\n{EXAMPLE}; got {ranges!r}")
    return [_knob_range(str(path), entry, platform.extra["raw"], where) for path, entry in ranges.items()]


def _knob_range(path: str, entry: Any, raw: dict, where: str) -> KnobRange:
    if not isinstance(entry, dict):
        raise RangeError(f"{where}: ranges: {path} must be a mapping {{low: ..., high: ..., source: ...}}, "
                         f"got {entry!r}")
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise RangeError(f"{where}: ranges: {path} has unknown key {unknown[0]!r}; "
                         f"an entry's keys are {list(ENTRY_KEYS)}")
    mid = _number_at(raw, path, where)
    low, high = (_bound(entry, end, path, where) for end in ENDS)
    if low > high:
        raise RangeError(f"{where}: ranges: {path} has low {low:g} above high {high:g}; "
                         f"swap them (low: {high:g}, high: {low:g})")
    if not low <= mid <= high:
        raise RangeError(f"{where}: ranges: {path}: the platform's own value {mid:g} lies outside "
                         f"[low, high] = [{low:g}, {high:g}]; widen the range to include it, or correct the value")
    source = entry.get("source")
    if source is None or not str(source).strip():
        raise RangeError(f"{where}: ranges: {path} has no source:; say where low {low:g} and high {high:g} come "
                         "from (a datasheet, a paper, a measurement), e.g. source: \"Lustre manual, 5-50 ms\"")
    return KnobRange(path, low, mid, high, str(source).strip())


def _bound(entry: dict, end: str, path: str, where: str) -> float:
    if end not in entry:
        raise RangeError(f"{where}: ranges: {path} has no {end}:; an entry needs low:, high: and source:")
    value = entry[end]
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise RangeError(f"{where}: ranges: {path}.{end} must be a finite number >= 0 (every platform number is), "
                         f"got {value!r}")
    return number


def _number_at(raw: dict, path: str, where: str) -> float:
    """The number at dotted `path` of the platform's yaml mapping: the knob's mid."""
    node: Any = raw
    for depth, key in enumerate(path.split(".")):
        here = ".".join(path.split(".")[:depth]) or "the top level"
        if not isinstance(node, dict):
            raise RangeError(f"{where}: ranges: {path} names no key of the platform: {here} is {node!r}, not a mapping")
        if key not in node:
            raise RangeError(f"{where}: ranges: {path} names no key of the platform: {here} has no {key!r} "
                             f"(its keys: {sorted(map(str, node))})")
        node = node[key]
    if isinstance(node, dict):
        raise RangeError(f"{where}: ranges: {path} is a mapping; name one of its numbers: "
                         f"{', '.join(f'{path}.{key}' for key in node)}")
    try:
        if isinstance(node, bool):
            raise TypeError(node)
        return float(node)
    except (TypeError, ValueError):
        raise RangeError(f"{where}: ranges: {path} is {node!r}, not a number: only numbers can be varied") from None


def knob_variant(platform: Platform, knob: KnobRange, end: str) -> Platform:
    """The platform with `knob` at its `end` ("low" or "high"), built from its yaml mapping and
    checked as any platform file is."""
    try:
        return with_values(platform, {knob.path: knob.value(end)})
    except PlatformError as err:
        raise RangeError(f"ranges: {knob.path} at its {end} {knob.value(end):g} makes a platform that cannot be "
                         f"simulated ({err}); narrow the range") from None


def ratio_scenarios(workers: int, q: float, model: str, dataset: str, batch_size: int, seed: int = 0,
                    scope: str = "rank") -> dict[str, Scenario]:
    """GS, LS and PLS at `q` (by shuffle name); GS has no partition to share, so runs in rank scope."""
    scenarios = {}
    for shuffle in SHUFFLES:
        strategy = get_strategy(shuffle)
        scenarios[shuffle] = Scenario(workers, shuffle, q if strategy.fixed_q is None else strategy.fixed_q, model,
                                      dataset, batch_size, seed, scope=scope if strategy.node_scope else "rank")
    return scenarios


def _simulated_identity(platform: Platform, scenario: Scenario) -> str:
    """What the simulation of `scenario` reads of `platform`: equal strings simulate equal epochs. A
    scenario names one model and one dataset, so the others cannot matter; `extra` and `source` are
    records (platform.py), not inputs. Floats' repr round-trips, so this is exact."""
    reads = dataclasses.replace(platform, models={scenario.model: platform.model(scenario.model)},
                                datasets={scenario.dataset: platform.dataset(scenario.dataset)}, extra={}, source="")
    return repr(reads)


# ---- the study ----------------------------------------------------------------------------------

def sensitivity(platform: Platform, workers: int, q: float, model: str, dataset: str, batch_size: int,
                seed: int = 0, scope: str = "rank", jobs: int = 1, progress: Callable[[str], None] | None = None,
                simulate_one: Callable[[Platform, Scenario], Result] | None = None, seeds: int = 1) -> Sensitivity:
    """Simulate GS, LS and PLS(q) on the platform and on each knob at its low and its high, at seeds
    `seed` .. `seed` + `seeds` − 1.

    Every range, variant and scenario is checked first (RangeError, PlatformError, ValueError); a
    variant the simulation reads as identical to another (a bound equal to the platform's value, a
    knob of a model not simulated) is simulated once, and so is a scenario in which nothing is drawn
    at random (seeds.is_deterministic on its variant). `jobs` simulations run at a time; `progress`
    gets one line per simulation; `simulate_one` (default engine.simulate) runs one, e.g. a cached one.
    """
    check_seeds(seed, seeds)
    knobs = knob_ranges(platform)
    scenarios = ratio_scenarios(workers, q, model, dataset, batch_size, seed, scope)
    variants, names = {BASE: platform}, {BASE: "base"}
    for knob in knobs:
        for end in ENDS:
            variants[knob.path, end] = knob_variant(platform, knob, end)
            names[knob.path, end] = f"{knob.path}={knob.value(end):g}"
    for key, variant in variants.items():
        for scenario in scenarios.values():
            try:
                check_scenario(variant, scenario)
            except ValueError as err:
                if key == BASE:
                    raise
                raise RangeError(f"{platform.source}: ranges: {names[key]} (its {key[1]}) cannot run "
                                 f"{scenario.shuffle} at {workers} workers: {err}; narrow the range") from None
    identity = {key: _simulated_identity(variant, scenarios["local"]) for key, variant in variants.items()}
    runs: dict[tuple[str, str], tuple[str, Platform, Scenario]] = {}  # (identity, shuffle) → the first to need it
    for key, variant in variants.items():
        for shuffle, scenario in scenarios.items():
            runs.setdefault((identity[key], shuffle), (names[key], variant, scenario))
    plans = {run: SeedPlan.of(variant, scenario, seeds) for run, (_, variant, scenario) in runs.items()}
    simulations = [(f"{name}, {label}" if label else name, variant, seeded)
                   for run, (name, variant, _) in runs.items() for label, seeded in plans[run].simulations()]
    results = iter(simulate_each(simulations, progress or (lambda line: None), jobs, simulate_one or simulate))
    by_run = {run: plan.runs(results) for run, plan in plans.items()}

    def outcome(key: tuple[str, str]) -> Outcome:
        return Outcome({shuffle: by_run[identity[key], shuffle] for shuffle in scenarios})

    effects = [KnobEffect(knob, outcome((knob.path, "low")), outcome((knob.path, "high"))) for knob in knobs]
    effects.sort(key=by_swing)
    return Sensitivity(platform.name, platform.source, scenarios, outcome(BASE), effects, seeds)
