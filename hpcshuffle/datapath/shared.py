"""Global shuffling's data path: every sample from shared storage, unless a full node replica
(storage.replica) or a planned cache of the reads (cache.policy, node_cache.py) serves it."""

from __future__ import annotations

from hpcshuffle.comm.world import on_all
from hpcshuffle.datapath.base import (
    DataPath,
    RunContext,
    check_node_shares,
    open_store,
    rank_store_dir,
)
from hpcshuffle.plan import EpochPlan
from hpcshuffle.staging.stage import replica_ids
from hpcshuffle.storage.node_cache import PlannedCache
from hpcshuffle.training.metrics import RankEpoch


class SharedPath(DataPath):
    """Global shuffling: every sample from shared storage, or from the node's full replica
    (storage.replica, staged when the path is built) or a planned cache of the reads (cache.enabled)."""

    def __init__(self, run: RunContext) -> None:
        super().__init__(run)
        config, world, spec = run.config, run.world, run.spec
        self.replica = None  # this rank's share of its node's full replica
        self.cache = None
        if config.storage.replica:
            share = replica_ids(spec.num_samples, world.local_rank, world.local_size)
            self.replica = open_store(run, rank_store_dir(run, world.rank), share, headroom=0.0)
            check_node_shares(run, self.replica, world.node_ranks)
            self.store_roots = [rank_store_dir(run, rank) for rank in world.node_ranks]
            self.counter = "read_local"
        elif config.cache.enabled:
            self.cache = self.plan_cache(run)
            self.cache_dir = self.cache.root
        self.make_loader()

    @staticmethod
    def plan_cache(run: RunContext) -> PlannedCache:
        """Collective: plan this rank's cache of `cache.samples` samples (default a quarter of ⌈N/M⌉)
        under its store directory; every rank raises ConfigError if any cannot create it. Rank 0
        prints its planned hit ratio."""
        config, world, spec = run.config, run.world, run.spec
        capacity = config.cache.samples or max(1, spec.max_share // 4)
        cache = on_all(world, lambda: PlannedCache(
            rank_store_dir(run, world.rank) / "cache", spec, config.shuffle.name, config.cache.policy, capacity,
            config.epochs, world.rank, run.first_plan.epoch, run.start_step,
        ), OSError)
        if world.is_root:
            print(f"cache: {config.cache.policy}, {capacity} samples per rank under {config.storage.local_dir}; "
                  f"rank 0's planned hit ratio {cache.planned_hit_ratio:.3f} (planned in {cache.planning_s:.1f} s)",
                  flush=True)
        return cache

    def set_order(self, plan: EpochPlan, first_step: int) -> None:
        if self.cache is None:
            return super().set_order(plan, first_step)
        self.order.set_order(
            plan.order[self.world.rank][first_step * self.spec.batch_size :], plan.epoch,
            cache=self.cache.decisions(plan.epoch, first_step),
        )

    def before_step(self, step: int, row: RankEpoch, sample_ids: list[int]) -> None:
        if self.cache is None:
            return super().before_step(step, row, sample_ids)
        epoch = self.plan.epoch
        self.cache.evict(epoch, step)  # the batch is read: its evictions are due
        hits = self.cache.hits(epoch, step)
        row.samples["read_cache"] += hits
        row.samples["read_shared"] += len(sample_ids) - hits

    def record_extras(self, samples: dict) -> dict:
        if self.cache is None:
            return {}
        hits, reads = samples["read_cache"], samples["read_shared"]
        return {"cache": {"policy": self.cache.policy, "samples": self.cache.capacity,
                          "hit_ratio": hits / max(hits + reads, 1)}}

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        if self.replica is not None:
            row.samples["store_peak"] = len(self.replica)

    def close(self) -> None:
        for user in (self.cache, self.replica):
            if user is not None:
                user.close()
