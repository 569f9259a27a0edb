"""What one simulated epoch is asked and what it answers: a `Scenario` (workers, shuffle, q, model,
dataset, batch, seed, scope) and its `Result` (seconds per epoch, phase by phase), the check
`simulate` makes before it forks, and a result's `--json` row. scale/engine.py simulates a
Scenario into a Result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hpcshuffle.plan import PlanSpec, get_strategy, run_label
from hpcshuffle.scale.platform import Platform

PHASES = ("io", "exchange", "fwbw", "allreduce")
SCOPES = ("rank", "node")


@dataclass(frozen=True)
class Scenario:
    """One simulated epoch: `workers` ranks of `shuffle` (q) training `model` on `dataset`.

    `scope`: "rank" (every rank its own partition) or "node" (the platform's ranks_per_node ranks
    of a node share one partition in the node's store, as `storage.scope=node`: only moves between
    nodes cross the network).
    """

    workers: int
    shuffle: str
    q: float
    model: str = "resnet50"
    dataset: str = "imagenet1k"
    batch_size: int = 32
    seed: int = 0
    epoch: int = 0
    samples: int | None = None  # overrides the dataset's N (validation against small runs)
    scope: str = "rank"

    def spec(self, platform: Platform) -> PlanSpec:
        """The plan's shape of this scenario on `platform` (N from the platform's dataset unless
        `samples` is set); ValueError for a shape a plan refuses."""
        samples = platform.dataset(self.dataset).samples if self.samples is None else self.samples
        strategy = get_strategy(self.shuffle)
        return PlanSpec(samples, self.workers, self.batch_size, strategy.q_for(self.q), self.seed,
                        ranks_per_node=self.ranks_per_node(platform))

    def ranks_per_node(self, platform: Platform) -> int:
        """The plan's R: 1 in rank scope, the platform's ranks per node in node scope."""
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")
        if self.scope == "rank":
            return 1
        if not get_strategy(self.shuffle).node_scope:
            raise ValueError(f"node scope shares a node's partition among its ranks, but shuffle={self.shuffle} "
                             "reads shared storage and has no partition to share: simulate it in rank scope")
        if self.workers % platform.ranks_per_node:
            raise ValueError(f"node scope fills nodes of {platform.ranks_per_node} ranks on platform {platform.name}, "
                             f"so {self.workers} workers do not make whole nodes: use a multiple of "
                             f"{platform.ranks_per_node}, or rank scope")
        return platform.ranks_per_node


@dataclass(frozen=True)
class Result:
    """Seconds per epoch: `epoch_s` of the slowest rank, each phase the mean over ranks; `io_min_s` and
    `io_max_s` the I/O of the fastest and the slowest rank."""

    workers: int
    shuffle: str
    q: float
    epoch_s: float
    io_s: float
    exchange_s: float
    fwbw_s: float
    allreduce_s: float
    iterations: int
    wall_s: float  # real seconds the simulation took
    scope: str = "rank"
    io_min_s: float = 0.0
    io_max_s: float = 0.0

    @property
    def label(self) -> str:
        """'local', 'partial-0.1', 'partial-0.1-node' (as `hpcshuffle report` labels runs)."""
        return run_label(self.shuffle, self.q, self.scope)

    def phases(self) -> dict[str, float]:
        """Seconds per phase (io, exchange, fwbw, allreduce)."""
        return {phase: getattr(self, f"{phase}_s") for phase in PHASES}

    @property
    def au(self) -> float:
        """MLPerf Storage's accelerator utilisation of the epoch: FW+BW over the epoch (a simulated epoch
        has no first step to leave out; `hpcshuffle report`'s AU does)."""
        return self.fwbw_s / self.epoch_s if self.epoch_s > 0 else 0.0


def check_scenario(platform: Platform, scenario: Scenario) -> None:
    """Raise what `simulate` would refuse `scenario` for (capacity, model, dataset, the plan's shape)."""
    platform.check_workers(scenario.workers)
    platform.model(scenario.model)
    scenario.spec(platform)  # bad shapes fail here, with the plan's message


def result_row(result: Result) -> dict:
    """The `--json` row of one result (seconds per epoch)."""
    row = asdict(result)
    row.pop("wall_s")
    row.pop("iterations")
    row["au"] = result.au
    return row
