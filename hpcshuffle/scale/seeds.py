"""A simulated answer over seeds: each scenario at seeds S..S+N−1, reported as a median with its 10–90 % range.

One seed is one draw. On `abci` the slowest of 32 nodes' file-system clients (`client_spread`, lognormal
cv 4.5) sets GS's epoch, since synchronous SGD waits for it every iteration, and that slowest factor
differs a lot from one draw to the next. So `hpcshuffle scale --seeds N` simulates each scenario at N
seeds and reports every phase, and every epoch's ratio to LS, as the median and the 10th and 90th
percentiles over those seeds.

A scenario in which nothing draws at random gives the same answer at every seed (`is_deterministic`):
it is simulated once, at the first seed, and reported with p10 = median = p90.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from hpcshuffle.errors import at_least
from hpcshuffle.plan import PATH_EXCHANGE, PATH_LOANS, get_strategy, with_role
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Distribution, Platform, SharedStorage
from hpcshuffle.scale.recommend import recommendation_lines, simulate_each
from hpcshuffle.scale.scenario import Result, Scenario, result_row

SPREAD_FIELDS = ("epoch_s", "io_s", "exchange_s", "fwbw_s", "allreduce_s", "io_min_s", "io_max_s")


# ---- what draws at random ---------------------------------------------------------------------

def varies(distribution: Distribution) -> bool:
    """Whether two draws of `distribution` can differ: not for `fixed`, a mean of 0, or a lognormal of cv 0."""
    if distribution.dist == "fixed" or distribution.mean == 0:
        return False
    return not (distribution.dist == "lognormal" and distribution.cv == 0)


def queues_vary(shared: SharedStorage) -> bool:
    """Whether a read from `shared` storage waits a time drawn at random (scale/storage.py): its clients'
    factors, its service times, the server each file goes to (when there are several) or a wait behind
    other jobs (a background load)."""
    return (varies(shared.client_spread) or varies(shared.service) or shared.servers > 1
            or shared.background_load > 0)


def is_deterministic(platform: Platform, scenario: Scenario) -> bool:
    """Whether simulating `scenario` on `platform` gives the same epoch, phase by phase, at every seed.

    The seed reaches a simulated epoch in four places, and this is False where any of them can differ:

    - the plan (scale/traffic.py): which samples each rank reads, sends and borrows. The engine sees
      per rank and iteration only how many samples it reads locally and from shared storage, which
      the plan's shape fixes, and the messages and loans between ranks, whose peers are drawn. So a
      strategy that exchanges samples (at q > 0) or lends them differs from seed to seed; one that
      moves nothing does not.
    - shared storage's queues (scale/storage.py), where the epoch reads shared storage:
      `queues_vary`.
    - `exchange.noise`, drawn for every rank's FW+BW: `varies`.
    - the PLS authors' scheduler (scale/slots.py) draws its peers, but only for an exchange, as above.

    A False is conservative: a partial run whose q is too small to move a sample is seeded anyway.
    """
    strategy = get_strategy(scenario.shuffle)
    moves = strategy.data_path == PATH_LOANS or (strategy.data_path == PATH_EXCHANGE and strategy.q_for(scenario.q) > 0)
    reads_shared_randomly = strategy.trains_from_shared and queues_vary(platform.shared)
    return not (moves or reads_shared_randomly or varies(platform.exchange.noise))


# ---- a quantity over seeds --------------------------------------------------------------------

SPREAD_PROBABILITIES = (0.5, 0.1, 0.9)  # the quantiles of Spread's fields, in their order: median, p10, p90


@dataclass(frozen=True)
class Spread:
    """A quantity over seeds: its median, and its 10th and 90th percentiles (p10, p90: numpy's default,
    linear interpolation between the two nearest of the sorted values). Over one value all three are it."""

    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The spread of `values` (at least one); ValueError for none."""
        if len(values) == 0:
            raise ValueError("a spread over seeds needs at least one value, got none")
        p10, median, p90 = np.percentile(np.asarray(values, dtype=np.float64), [10, 50, 90])
        return cls(median=float(median), p10=float(p10), p90=float(p90))

    def as_dict(self) -> dict[str, float]:
        """{"median", "p10", "p90"}, as `--json` writes it."""
        return {"median": self.median, "p10": self.p10, "p90": self.p90}


def check_seeds(first_seed: int, seeds: int) -> None:
    """ValueError unless `seeds` >= 1 and the first seed >= 0 (numpy's seeds are non-negative)."""
    at_least("--seeds", seeds, 1, "(how many seeds to simulate each scenario at: --seeds 1 for one draw, "
             "--seeds 20 for a median and its 10-90 % range)")
    at_least("--seed", first_seed, 0, "(the first seed; numpy's seeds are non-negative)")


@dataclass(frozen=True)
class SeedRuns:
    """One scenario at each of its seeds.

    Attributes:
        scenario: the scenario at its first seed.
        seeds: every seed asked, S..S+N−1.
        results: one per simulated seed, in order: all of `seeds`, or only the first where the
            scenario is `deterministic` (its answer at every other seed is the same).
        deterministic: `is_deterministic` of the scenario on its platform.
    """

    scenario: Scenario
    seeds: tuple[int, ...]
    results: tuple[Result, ...]
    deterministic: bool

    @property
    def first(self) -> Result:
        """The result at the first seed (workers, label, scope, iterations are the same at every seed)."""
        return self.results[0]

    def simulated(self) -> list[tuple[int, Result]]:
        """(seed, result) of each simulation run."""
        return list(zip(self.seeds, self.results))

    def at(self, seed: int) -> Result:
        """The result at `seed`, one of `seeds`."""
        return self.results[0 if self.deterministic else self.seeds.index(seed)]

    def spread(self, field: str) -> Spread:
        """A Result's `field` (e.g. "epoch_s", "io_s") over the seeds."""
        return Spread.of([getattr(result, field) for result in self.results])

    def ratio(self, baseline: SeedRuns) -> Spread:
        """This epoch over `baseline`'s, seed by seed (both at the same seed), over the seeds."""
        seeds = self.seeds[:1] if self.deterministic and baseline.deterministic else self.seeds
        return Spread.of([self.at(seed).epoch_s / baseline.at(seed).epoch_s for seed in seeds])


@dataclass(frozen=True)
class SeedPlan:
    """What simulating one scenario at `seeds` seeds takes: SeedRuns' `scenario`, `seeds` and
    `deterministic`, before any result. `simulate_seeds` runs a platform's plans; a study that runs
    several platforms at once (scale/sensitivity.py) pools theirs."""

    scenario: Scenario
    seeds: tuple[int, ...]
    deterministic: bool

    @classmethod
    def of(cls, platform: Platform, scenario: Scenario, seeds: int) -> SeedPlan:
        """`scenario` at its seed and the `seeds` − 1 after it, on `platform` (`is_deterministic` there)."""
        return cls(scenario, tuple(range(scenario.seed, scenario.seed + seeds)), is_deterministic(platform, scenario))

    def simulations(self) -> list[tuple[str, Scenario]]:
        """(progress label, scenario at its seed) of each simulation to run: one per seed, or only the
        first where deterministic; the label is empty at one seed."""
        if len(self.seeds) == 1:
            return [("", self.scenario)]
        if self.deterministic:
            return [("every seed (nothing drawn)", replace(self.scenario, seed=self.seeds[0]))]
        return [(f"seed {seed}", replace(self.scenario, seed=seed)) for seed in self.seeds]

    def runs(self, results: Iterator[Result]) -> SeedRuns:
        """The SeedRuns made of the next results, one per simulation, in `simulations`' order."""
        return SeedRuns(self.scenario, self.seeds, tuple(next(results) for _ in self.simulations()),
                        self.deterministic)


def simulate_seeds(platform: Platform, scenarios: list[Scenario], seeds: int, progress: Callable[[str], None],
                   jobs: int = 1, simulate_one: Callable[[Platform, Scenario], Result] | None = None) -> list[SeedRuns]:
    """Each scenario at its seed and the `seeds` − 1 after it (once where `is_deterministic`), `jobs`
    simulations at a time, each seed its own; a progress line per simulation. In the scenarios' order."""
    check_seeds(min((scenario.seed for scenario in scenarios), default=0), seeds)
    planned = [SeedPlan.of(platform, scenario, seeds) for scenario in scenarios]
    runs = [(label, platform, seeded) for plan in planned for label, seeded in plan.simulations()]
    results = iter(simulate_each(runs, progress, jobs, simulate_one or simulate))
    return [plan.runs(results) for plan in planned]


# ---- ratios to LS, and the document -----------------------------------------------------------

def baselines(runs: list[SeedRuns]) -> dict[tuple[int, str], SeedRuns]:
    """LS's runs by (workers, scope): what each ratio divides by."""
    name = with_role("baseline").name
    return {(run.first.workers, run.first.scope): run for run in runs if run.scenario.shuffle == name}


def ratio_groups(runs: list[SeedRuns]) -> list[dict]:
    """Per (workers, scope) with an LS run, in the runs' order: {"workers", "scope", "ratios": {"<label>/<LS's
    label>": {"median", "p10", "p90"}}}, one ratio per other run there (e.g. "global/local",
    "partial-0.1/local", "partial-0.1-node/local-node")."""
    local = baselines(runs)
    groups: dict[tuple[int, str], dict] = {}
    for run in runs:
        key = (run.first.workers, run.first.scope)
        if key not in local or run is local[key]:
            continue
        group = groups.setdefault(key, {"workers": key[0], "scope": key[1], "ratios": {}})
        group["ratios"][f"{run.first.label}/{local[key].first.label}"] = run.ratio(local[key]).as_dict()
    return list(groups.values())


def recommendation_over_seeds(runs: list[SeedRuns], tolerance: float) -> str:
    """`scale --recommend --seeds N`: per (workers, scope) with an LS run, the largest q whose median over
    seeds of the paired ratio epoch(q) / epoch(LS) is at most 1 + `tolerance`, beside each q's median
    ratio and its [p10, p90]; LS's epoch is its median."""
    first, last = runs[0].seeds[0], runs[0].seeds[-1]
    rows = []
    for (workers, scope), local in sorted(baselines(runs).items()):
        ratios = {run.first.q: run.ratio(local) for run in runs
                  if (run.first.workers, run.first.scope) == (workers, scope) and run is not local}
        within = [q for q, ratio in ratios.items() if ratio.median <= 1 + tolerance]
        rows.append((workers, scope, local.spread("epoch_s").median, max(within, default=None),
                     "  ".join(f"{q:g}:{r.median:.2f} [{r.p10:.2f}, {r.p90:.2f}]" for q, r in ratios.items())))
    return recommendation_lines(f"largest q whose simulated epoch is within {tolerance:.0%} of local shuffling's, "
                                f"by the median over seeds {first}..{last} of epoch / LS paired by seed "
                                "(LS epoch: its median)", "median epoch / LS per q [p10, p90]", rows)


def seeds_document(platform: str, seeds: int, runs: list[SeedRuns]) -> dict:
    """`hpcshuffle scale --json`: {"platform", "seeds": N, "runs": [one row per simulation, with its "seed"],
    "scenarios": [per scenario its label, whether it is deterministic, and each of SPREAD_FIELDS as
    {"median", "p10", "p90"}], "ratios": `ratio_groups`}."""
    return {
        "platform": platform,
        "seeds": seeds,
        "runs": [{**result_row(result), "seed": seed} for run in runs for seed, result in run.simulated()],
        "scenarios": [{"workers": run.first.workers, "shuffle": run.first.shuffle, "q": run.first.q,
                       "scope": run.first.scope, "label": run.first.label, "deterministic": run.deterministic,
                       "simulated": len(run.results),
                       **{field: run.spread(field).as_dict() for field in SPREAD_FIELDS}}
                      for run in runs],
        "ratios": ratio_groups(runs),
    }
