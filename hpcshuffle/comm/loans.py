"""Locality-aware loading's transfers over MPI: samples lent to a peer for one step.

Per epoch::

    lender.start_epoch(plan, first_step)
    for step in ...:
        lender.post(step)              # Isend what peers borrow up to `ahead` steps from now
        ... the loader asks lender.borrowed(step) for what this rank borrows at `step`
    lender.finish()                    # every lent sample has been received

Unlike the PLS exchange (exchange.py) nothing is written to a store: the borrower trains on
the bytes and drops them. Lent samples travel ahead of their step, through the payload
transport (transport.py), so the transfer overlaps the steps before it; the receiver matches
each message to the plan by the epoch and sample id in its header.
"""

from __future__ import annotations

import struct
import time
from collections import defaultdict, deque

import numpy as np
from mpi4py import MPI

from hpcshuffle.comm.transport import MAX_MESSAGE_BYTES, ExchangeError, Transport
from hpcshuffle.plan import EpochPlan
from hpcshuffle.storage.store import Store

TAG_LOAN = 8
HEADER = struct.Struct("<qq")  # epoch, sample id


class Lender:
    """Carries out this rank's part of each epoch's loans.

    Args:
        comm: the job's communicator; the lender's transport works on a private duplicate of it.
        store: this rank's cache, which lent samples are read from.
        ahead: how many steps before its step a loan is sent (prefetch depth); it must cover
            the loader's own look-ahead, or a rank could wait for a loan not yet sent.
        timeout_s: how long a wait for a borrowed sample may make no progress before it fails.
        max_message_bytes: the largest single MPI message; bigger samples are chunked.
    """

    def __init__(
        self, comm: MPI.Comm, store: Store, ahead: int, timeout_s: float = 300.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        if ahead < 1:
            raise ValueError(f"loans must be sent at least 1 step ahead, got {ahead}")
        self.transport = Transport(comm, TAG_LOAN, self._accept, timeout_s, max_message_bytes)
        self.rank = self.transport.rank
        self.store = store
        self.ahead = ahead
        self._early: list[tuple[int, np.ndarray, np.ndarray]] = []  # messages of an epoch not started yet
        self.start_epoch(None)

    def start_epoch(self, plan: EpochPlan | None, first_step: int = 0) -> None:
        """Prepare the loans of `plan` from `first_step` on (a resumed epoch skips the earlier ones)."""
        self.epoch = None if plan is None else plan.epoch
        self.wait_s = 0.0  # time spent blocked on borrowed samples
        self._sends: list[tuple[int, int, int]] = []  # (step, dst, sample_id), by step
        # (src, sample id) -> the steps it is lent at, earliest first (padding can repeat a sample)
        self._expected: dict[tuple[int, int], deque[int]] = defaultdict(deque)
        self._missing: dict[int, int] = defaultdict(int)  # step -> borrowed samples not yet arrived
        loans = None if plan is None else plan.loans
        if loans is not None:
            for row in loans.lends_of(self.rank):
                if loans.step[row] >= first_step:
                    self._sends.append((int(loans.step[row]), int(loans.dst[row]), int(loans.sample_id[row])))
            for row in loans.borrows_of(self.rank):
                step = int(loans.step[row])
                if step >= first_step:
                    self._expected[int(loans.src[row]), int(loans.sample_id[row])].append(step)
                    self._missing[step] += 1
        self._next_send = 0
        self._arrived: dict[int, list[tuple[int, bytes]]] = defaultdict(list)  # step -> (id, bytes)
        early, self._early = self._early, []
        for message in early:
            self._accept(*message)

    def post(self, step: int) -> None:
        """Send every loan due by `step + ahead`, and take in what has arrived."""
        while self._next_send < len(self._sends) and self._sends[self._next_send][0] <= step + self.ahead:
            _, dst, sample_id = self._sends[self._next_send]
            self.transport.post(dst, HEADER.pack(self.epoch, sample_id), self.store.read_bytes(sample_id))
            self._next_send += 1
        self.transport.poll()

    def borrowed(self, step: int) -> list[tuple[int, bytes]]:
        """(sample id, bytes) of what this rank borrows at `step`, waiting for them if needed."""
        self.post(step)
        started_s = time.monotonic()
        self.transport.wait(lambda: not self._missing.get(step, 0), lambda: self._stall_report(step))
        self.wait_s += time.monotonic() - started_s
        self._missing.pop(step, None)
        return self._arrived.pop(step, [])

    def finish(self) -> None:
        """End the epoch once every loan this rank sent has been received."""
        self.transport.drain(barrier=False, stall_report=self._unsent_report)

    def abandon(self) -> None:
        """Stop the epoch early (preemption): finish only the messages already posted.

        Every rank keeps taking in messages (and drops them) until all ranks' posted sends are
        done, so none is left in flight when MPI shuts down.
        """
        self.transport.drain(barrier=True, stall_report=self._unsent_report)

    def close(self) -> None:
        """Free the lender's transport (its duplicate communicator: MPI frees it collectively)."""
        self.transport.close()

    # -- internals -----------------------------------------------------------------------

    def _accept(self, source: int, header: np.ndarray, payload: np.ndarray) -> None:
        """File a lent sample under the step it is borrowed at."""
        epoch, sample_id = HEADER.unpack_from(header)
        if epoch != self.epoch:
            self._early.append((source, header, payload))  # a peer has started the next epoch already
            return
        steps = self._expected.get((source, sample_id))
        if not steps:
            raise ExchangeError(
                f"rank {self.rank} was lent sample {sample_id} by rank {source} without a planned loan; "
                "the ranks disagree on the plan (different seed, dataset or worker count?)"
            )
        step = steps.popleft()
        self._arrived[step].append((sample_id, payload.tobytes()))
        self._missing[step] -= 1

    def _unsent_report(self) -> str:
        return (
            f"rank {self.rank}: {self.transport.sends_in_flight} messages of samples lent in epoch {self.epoch} "
            f"were not received for {self.transport.timeout_s:.0f} s; a peer has likely died or hung; check its log"
        )

    def _stall_report(self, step: int) -> str:
        waiting = defaultdict(list)
        for (src, sample_id), steps in self._expected.items():
            waiting[src] += [sample_id] * len(steps)
        waiting = {src: ids[:5] for src, ids in waiting.items() if ids}
        return (
            f"rank {self.rank}: waited {self.transport.timeout_s:.0f} s without progress for the samples it "
            f"borrows at step {step} of epoch {self.epoch}; still expecting {waiting} (rank: first ids). A peer "
            "has likely died or hung; check its log"
        )
