"""Partial local shuffling's data path: the store, while a fraction q of it moves to peers
for the next epoch (the Fig. 3 scheduler, exchange.py), overlapped with forward/backward."""

from __future__ import annotations

from hpcshuffle.comm.exchange import Scheduler
from hpcshuffle.datapath.base import RunContext
from hpcshuffle.datapath.store import StorePath
from hpcshuffle.plan import EpochPlan
from hpcshuffle.training.metrics import RankEpoch


class ExchangePath(StorePath):
    """Partial local shuffling: reads the store while the Fig. 3 scheduler moves q of it to peers.

    Each step posts that iteration's sends before forward/backward; the epoch's end waits for every
    receiver, then deletes what was sent and commits the store (collective: every rank ends the epoch).
    A preempted epoch abandons its exchange and leaves the store as it was at the epoch's start.
    """

    def __init__(self, run: RunContext) -> None:
        super().__init__(run)
        self.scheduler = Scheduler(self.world.comm, self.store, run.plan_key, run.config.world.timeout_s)

    def start_epoch(self, plan: EpochPlan, first_step: int, row: RankEpoch) -> None:
        super().start_epoch(plan, first_step, row)
        with row.phase("exchange"):
            self.scheduler.scheduling(plan)

    def before_step(self, step: int, row: RankEpoch, sample_ids: list[int]) -> None:
        super().before_step(step, row, sample_ids)
        # overlap: post this iteration's q·b sends before FW so they progress during FW/BW
        with row.phase("exchange"):
            self.scheduler.communicate(step)

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        with row.phase("exchange"):
            if stopped is not None:
                self.scheduler.abandon()  # the store stays at the epoch's start: resume reconciles
            else:
                self.scheduler.synchronize()  # every receiver has made its samples durable
                row.samples["store_peak"] = len(self.store)
                self.scheduler.clean_local_storage()  # only now delete what was sent; commit
                if len(self.store_roots) > 1:
                    self.world.comm.Barrier()  # the node's stores are committed before any rank reads them
        row.samples["sent"] = self.scheduler.traffic.sent
        row.samples["received"] = self.scheduler.traffic.received

    def close(self) -> None:
        self.scheduler.close()
        super().close()
