"""Local shuffling's data path: a rank trains on its node-local partition; nothing moves.

With storage.scope=node the partition is its node's: the rank trains on what the plan deals it
from all the node's stores, reading its peers' stores as its own.
"""

from __future__ import annotations

from hpcshuffle.datapath.base import (
    DataPath,
    RunContext,
    check_node_shares,
    open_store,
    rank_store_dir,
)
from hpcshuffle.plan import EpochPlan
from hpcshuffle.storage.store import StoreError
from hpcshuffle.training.metrics import RankEpoch


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
        spec = run.spec
        if spec.ranks_per_node > 1:
            node_ranks = spec.node_ranks(spec.node_of(rank))
            check_node_shares(run, self.store, node_ranks)
            self.store_roots = [rank_store_dir(run, peer) for peer in node_ranks]
        self.held_ids: list[int] = []
        self.make_loader()

    def start_epoch(self, plan: EpochPlan, first_step: int, row: RankEpoch) -> None:
        """As DataPath's, after checking that the store holds exactly the ids `plan` says this rank
        holds at the epoch's start; StoreError naming what is missing or extra otherwise."""
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

    def set_order(self, plan: EpochPlan, first_step: int) -> None:
        if len(self.store_roots) == 1:
            super().set_order(plan, first_step)
            return
        start, rank = first_step * self.spec.batch_size, self.world.rank
        self.order.set_order(plan.order[rank][start:], plan.epoch, homes=plan.homes(rank)[start:])

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        if stopped is None:
            row.samples["store_peak"] = len(self.store)
            self.store.commit(self.plan.epoch + 1, self.run.plan_key)

    def audit(self, trained: list[int]) -> list[tuple[list[int], list[int]]]:
        return [(self.held_ids, trained)]

    def close(self) -> None:
        self.store.close()
