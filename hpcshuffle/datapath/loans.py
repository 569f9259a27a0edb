"""Locality-aware loading's data path: global shuffling's batches from the node-local stores,
ranks lending each other samples for one step (loans.py) to even out their local batches.
With storage.scope=node a rank reads its node's stores, and only nodes lend to each other."""

from __future__ import annotations

from hpcshuffle.comm.loans import Lender
from hpcshuffle.datapath.base import RunContext
from hpcshuffle.datapath.store import StorePath
from hpcshuffle.plan import FROM_LOAN, FROM_SHARED, FROM_STORE, EpochPlan
from hpcshuffle.training.metrics import RankEpoch


class LoanPath(StorePath):
    """Locality-aware loading: global shuffling's order read from the node-local stores, from shared
    storage where the plan says so, and from samples peers lend for one step (`Lender`).

    Loans are posted `shuffle.ahead` steps (at least the DataLoader's look-ahead) before the loader
    asks for them; the time spent waiting for a borrowed sample is counted as exchange, not io.
    """

    def __init__(self, run: RunContext) -> None:
        super().__init__(run)
        config = run.config
        # a loan must be sent before the loader asks for it: cover the DataLoader's look-ahead
        # (2 batches per worker process), the batch being assembled, and the batch loader.decode=gpu
        # decodes ahead
        ahead = max(config.shuffle.ahead, 2 * config.loader.workers + 2 + (config.loader.raw_fraction > 0))
        self.lender = Lender(self.world.comm, self.store, ahead, config.world.timeout_s)
        self.waited_s = 0.0  # of the lender's wait, what is already counted as exchange time

    def set_order(self, plan: EpochPlan, first_step: int) -> None:
        rank, start = self.world.rank, first_step * self.spec.batch_size
        self.sources = plan.sources(rank)
        self.lent_per_step = plan.loans.lent_per_step(rank, self.spec.iterations) if plan.loans else None
        self.lender.start_epoch(plan, first_step)
        self.waited_s = 0.0
        homes = plan.homes(rank)[start:] if len(self.store_roots) > 1 else None
        self.order.set_order(
            plan.order[rank][start:], plan.epoch, sources=self.sources[start:], borrow=self.lender.borrowed,
            steps=self.spec.step_of(first_step), homes=homes,
        )

    def before_step(self, step: int, row: RankEpoch, sample_ids: list[int]) -> None:
        # the loop timed the wait for borrowed samples as reading; it is exchange time
        waited = self.lender.wait_s - self.waited_s
        self.waited_s = self.lender.wait_s
        row.seconds["io"] -= waited
        row.seconds["exchange"] += waited
        with row.phase("exchange"):
            self.lender.post(step)  # overlap: send the loans of the coming steps during FW/BW
        # counted per step trained from the plan, so a resumed epoch counts each loan once
        start, stop = self.spec.batch_bounds(step)
        batch_sources = self.sources[start:stop]
        row.samples["read_local"] += int((batch_sources == FROM_STORE).sum())
        row.samples["read_shared"] += int((batch_sources == FROM_SHARED).sum())
        row.samples["received"] += int((batch_sources == FROM_LOAN).sum())
        row.samples["sent"] += int(self.lent_per_step[step]) if self.lent_per_step is not None else 0

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        with row.phase("exchange"):
            if stopped is not None:
                self.lender.abandon()
            else:
                self.lender.finish()
        super().end_epoch(stopped, row)

    def close(self) -> None:
        self.lender.close()
        super().close()
