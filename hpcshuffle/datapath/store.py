"""Local shuffling's data path: a rank trains on its node-local partition; nothing moves."""

from __future__ import annotations

from hpcshuffle.datapath.base import DataPath, RunContext, open_store, rank_store_dir
from hpcshuffle.metrics import RankEpoch
from hpcshuffle.plan import EpochPlan
from hpcshuffle.store import StoreError


class StorePath(DataPath):
    """Reads the rank's store, which holds what the plan says at every epoch's start.

    The store is staged (peers first, then shared storage) to the partition of the run's first
    epoch when the path is built, with the room the strategy's moves need.
    """

    counter = "read_local"

    def __init__(self, run: RunContext) -> None:
        super().__init__(run)
        rank = self.world.rank
        headroom = run.config.strategy.headroom(run.spec)
        self.store = open_store(run, rank_store_dir(run, rank), run.first_plan.held[rank], headroom)
        self.store_roots = [self.store.root]
        self.held_ids: list[int] = []
        self.make_loader()

    def start_epoch(self, plan: EpochPlan, first_step: int, row: RankEpoch) -> None:
        rank = self.world.rank
        self.held_ids = sorted(self.store.ids())
        if self.held_ids != plan.held[rank].tolist():
            diff = self.store.verify(plan.held[rank])
            raise StoreError(
                f"rank {rank}'s store does not hold what epoch {plan.epoch}'s plan says: "
                f"{len(diff.missing)} missing (e.g. {diff.missing[:5]}), {len(diff.extra)} extra "
                f"(e.g. {diff.extra[:5]}); was {self.store.root} changed by another job?"
            )
        super().start_epoch(plan, first_step, row)

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        if stopped is None:
            row.samples["store_peak"] = len(self.store)
            self.store.commit(self.plan.epoch + 1, self.run.plan_key)

    def audit(self, trained: list[int]) -> list[tuple[list[int], list[int]]]:
        return [(self.held_ids, trained)]

    def close(self) -> None:
        self.store.close()
