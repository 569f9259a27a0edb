"""Virtual workers' data path: one process trains the union of M workers' local batches of the
M-worker plan (simulate.py), read from shared storage: it simulates the training, not the I/O.
It records the samples the M workers would send each other, counted from the plan."""

from __future__ import annotations

from hpcshuffle.comm.world import World
from hpcshuffle.config import RunConfig
from hpcshuffle.datapath.base import DataPath, RunContext
from hpcshuffle.errors import ConfigError
from hpcshuffle.plan import EpochPlan
from hpcshuffle.training.metrics import RankEpoch
from hpcshuffle.training.simulate import split_by_worker, virtual_order


def virtual_workers(config: RunConfig, world: World) -> int:
    """M when this process simulates M workers, else 0 (the workers are the job's ranks)."""
    virtual = config.shuffle.virtual_workers
    if virtual and world.size > 1:
        raise ConfigError(
            f"shuffle.virtual_workers={virtual} trains {virtual} workers in one process, but this job "
            f"has {world.size}: start one process (no mpiexec -n) or set shuffle.virtual_workers=0",
            collective=True,
        )
    return virtual


class VirtualPath(DataPath):
    """One process trains the M virtual workers' batches as one global batch (M·b per step), read
    from shared storage; an epoch's sent/received counts are what the M workers would move."""

    def __init__(self, run: RunContext) -> None:
        super().__init__(run)
        self.make_loader(run.spec.num_ranks * run.spec.batch_size)  # a step is the global batch

    def set_order(self, plan: EpochPlan, first_step: int) -> None:
        self.order.set_order(virtual_order(plan, first_step), plan.epoch)

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        # what the M workers would have sent each other (moves and loans), as M real ranks count it;
        # an epoch stopped early counts nothing (nothing is moved for real to count up to the stop)
        if stopped is None:
            row.samples["sent"] = sum(self.plan.sent_counts())
            row.samples["received"] = sum(self.plan.received_counts())

    def audit(self, trained: list[int]) -> list[tuple[list[int], list[int]]]:
        return list(zip((ids.tolist() for ids in self.plan.held), split_by_worker(trained, self.spec)))
