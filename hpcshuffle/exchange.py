"""The PLS sample exchange over MPI, overlapped with training (the scheduler of Fig. 3).

Per epoch::

    scheduler.scheduling(plan)          # this rank's sends and expected receives
    for iteration in range(I):
        scheduler.communicate(iteration)    # post this iteration's ≈ q·b Isends, take what arrived
        ... forward / backward / allreduce ...
    scheduler.synchronize()             # finish, make received samples durable, one barrier
    scheduler.clean_local_storage()     # only now delete what was sent; commit the manifest

`repair(moves)` carries out a one-off set of moves at once (start-up repairs, see stage.py).

Samples travel through the payload transport (transport.py), one message per sample whose
header names it. Messages between two ranks cannot overtake each other, so the receiver knows
from the plan which sample each message must carry, and checks it.
"""

from __future__ import annotations

import errno
import struct
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from hpcshuffle import chaos
from hpcshuffle.plan import EpochPlan, Exchange
from hpcshuffle.store import SampleMeta, Store
from hpcshuffle.transport import MAX_MESSAGE_BYTES, ExchangeError, Transport

TAG_SAMPLE = 7
HEADER = struct.Struct("<qqqQ")  # sample_id, label, source mtime, xxh3 checksum; the relpath follows


@dataclass
class EpochTraffic:
    sent: int = 0
    received: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0


def encode_header(meta: SampleMeta) -> bytes:
    return HEADER.pack(meta.sample_id, meta.label, meta.source_mtime_ns, int(meta.checksum, 16)) + meta.relpath.encode()


def decode_header(header: np.ndarray, nbytes: int) -> SampleMeta:
    sample_id, label, mtime_ns, checksum = HEADER.unpack_from(header)
    relpath = header[HEADER.size :].tobytes().decode()
    return SampleMeta(sample_id, relpath, label, nbytes, f"{checksum:016x}", mtime_ns)


class Scheduler:
    """Carries out this rank's part of each epoch's exchange.

    Args:
        comm: the job's communicator; the scheduler's transport works on a private duplicate of it.
        store: this rank's node-local store (samples are read from and written into it).
        plan_key: identifies the plan sequence in the store's manifest.
        timeout_s: how long `synchronize` waits without any progress before it gives up.
        max_message_bytes: the largest single MPI message; bigger payloads are chunked.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        store: Store,
        plan_key: str,
        timeout_s: float = 300.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.transport = Transport(comm, TAG_SAMPLE, self._accept, timeout_s, max_message_bytes)
        self.rank = self.transport.rank
        self.store = store
        self.plan_key = plan_key
        self.plan: EpochPlan | None = None
        self._what: str | None = None  # "epoch 3" or "the start-up repair", for messages
        self.traffic = EpochTraffic()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-writer")

    # -- the Fig. 3 API ------------------------------------------------------------------

    def scheduling(self, plan: EpochPlan) -> None:
        """Prepare the epoch: which samples go where, when, and what must arrive from whom."""
        self.plan = plan
        self._begin(plan.exchange, f"epoch {plan.epoch}")

    def _begin(self, moves: Exchange | None, what: str) -> None:
        self._moves, self._what = moves, what
        self.traffic = EpochTraffic()
        self._expected: dict[int, deque[int]] = {}  # source -> the sample ids it sends, in order
        if moves is None:
            self._sends = np.empty(0, dtype=np.int64)
        else:
            self._sends = moves.sends_of(self.rank)
            for row in moves.receives_of(self.rank):
                self._expected.setdefault(int(moves.src[row]), deque()).append(int(moves.sample_id[row]))
        self._next_send = 0
        self._writes: list[Future] = []

    def communicate(self, iteration: int) -> None:
        """Post the sends planned up to `iteration`, and take in whatever has arrived.

        Call once per iteration before the forward pass, so the transfers progress during
        forward and backward.
        """
        moves = self._moves
        if moves is None:
            return
        while self._next_send < len(self._sends) and moves.iteration[self._sends[self._next_send]] <= iteration:
            self._post_send(int(self._sends[self._next_send]))
            self._next_send += 1
        self.transport.poll()

    def synchronize(self) -> None:
        """Finish every transfer of the epoch and make the received samples durable.

        Ends in one barrier: once it returns on any rank, every rank has fsynced every sample
        it received, so senders may delete their copies.
        """
        if self._what is None:
            raise ExchangeError("synchronize() before scheduling()")
        self.communicate(np.iinfo(np.int64).max)  # whatever is left to post
        self.transport.wait(lambda: not any(self._expected.values()), self._stall_report)
        self.transport.drain(barrier=False, stall_report=self._stall_report)
        self._finish_writes()
        self.store.sync()
        chaos.point(self.rank, self.plan.epoch if self.plan else -1, "before_barrier")
        self.transport.comm.Barrier()

    def repair(self, moves: Exchange) -> None:
        """Carry out `moves` at once; returns when every rank has made what it received durable.

        The caller removes what it gave away (all ranks are past the barrier by then).
        """
        self.plan = None
        self._begin(moves, "the start-up repair")
        self.synchronize()

    def abandon(self) -> None:
        """Stop the epoch early (preemption): finish only the messages already posted.

        Posted sends must be received before MPI can shut down, so every rank keeps taking in
        messages until all ranks' posted sends are done. Nothing is deleted or committed: the
        store stays at the epoch's start, plus uncommitted received files that the next start
        reconciles.
        """
        if self._what is None:
            return
        self.transport.drain(barrier=True, stall_report=self._stall_report)
        self._finish_writes()
        self._what = None

    def clean_local_storage(self) -> None:
        """Delete the samples this rank sent, then commit the store for the next epoch."""
        if self.plan is None:
            raise ExchangeError("clean_local_storage() before scheduling()")
        moves = self.plan.exchange
        if moves is not None:
            for done, row in enumerate(self._sends):
                if done == len(self._sends) // 2:
                    chaos.point(self.rank, self.plan.epoch, "mid_clean")
                self.store.remove(int(moves.sample_id[row]))
        self.store.commit(self.plan.epoch + 1, self.plan_key)

    def close(self) -> None:
        self._writer.shutdown()
        self.transport.close()

    # -- internals -----------------------------------------------------------------------

    def _post_send(self, row: int) -> None:
        moves = self._moves
        sample_id, dst = int(moves.sample_id[row]), int(moves.dst[row])
        data = self.store.read_bytes(sample_id)
        self.transport.post(dst, encode_header(self.store.meta(sample_id)), data)
        self.traffic.sent += 1
        self.traffic.sent_bytes += len(data)

    def _accept(self, source: int, header: np.ndarray, payload: np.ndarray) -> None:
        """Check a received sample against the plan and have it written into the store."""
        expected = self._expected.get(source)
        if not expected:
            raise ExchangeError(
                f"rank {self.rank} received an unplanned sample from rank {source}; the ranks "
                "disagree on the plan (different seed, q, dataset or worker count?)"
            )
        sent = decode_header(header, len(payload))
        want = expected.popleft()
        if sent.sample_id != want:
            raise ExchangeError(
                f"rank {self.rank} expected sample {want} from rank {source} but got {sent.sample_id}; "
                "the ranks disagree on the plan (different seed, q, dataset or worker count?)"
            )
        # off the main thread: the write proceeds while this rank computes FW/BW
        self._writes.append(self._writer.submit(self._write_received, source, sent, payload.data))
        self.traffic.received += 1
        self.traffic.received_bytes += len(payload)

    def _write_received(self, source: int, sent: SampleMeta, data: memoryview) -> None:
        try:
            stored = self.store.add(sent, data, durable=False)
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise ExchangeError(
                f"rank {self.rank}: node-local storage {self.store.root} is full ({err.strerror}) while "
                f"receiving sample {sent.sample_id} ({len(data)} bytes) in {self._what}; free space there, "
                "point storage.local_dir at a larger disk, or lower shuffle.q"
            ) from None
        if stored.checksum != sent.checksum:
            raise ExchangeError(
                f"rank {self.rank}: sample {sent.sample_id} ({sent.relpath}) from rank {source} arrived "
                f"with checksum {stored.checksum}, sent as {sent.checksum}: corrupted in transit or in "
                "the sender's store"
            )

    def _finish_writes(self) -> None:
        for write in self._writes:
            write.result()  # re-raises a failed write (e.g. a full disk) here, before the commit

    def _stall_report(self) -> str:
        missing = {src: list(ids)[:5] for src, ids in self._expected.items() if ids}
        return (
            f"rank {self.rank}: no exchange progress for {self.transport.timeout_s:.0f} s in "
            f"{self._what}; still expecting samples from ranks {missing} (first ids shown), "
            f"{self.transport.sends_in_flight} send messages unfinished. A peer has likely died "
            "or hung; check its log"
        )
