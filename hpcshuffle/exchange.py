"""The PLS sample exchange over MPI, overlapped with training (the scheduler of Fig. 3).

Per epoch::

    scheduler.scheduling(plan)          # this rank's sends and expected receives
    for iteration in range(I):
        scheduler.communicate(iteration)    # post this iteration's ≈ q·b Isends, take what arrived
        ... forward / backward / allreduce ...
    scheduler.synchronize()             # finish, make received samples durable, one barrier
    scheduler.clean_local_storage()     # only now delete what was sent; commit the manifest

`repair(moves)` carries out a one-off set of moves at once (start-up repairs, see stage.py).

Only this module moves sample payloads. Each sample travels as one or more messages with
numpy byte buffers (Isend / Improbe + Irecv, sizes probed, never a fixed receive buffer); a
payload larger than `max_message_bytes` is split so that no MPI count exceeds int32. Messages
between two ranks cannot overtake each other, so the receiver knows from the plan which
sample each message must carry, and checks it.
"""

from __future__ import annotations

import errno
import struct
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from hpcshuffle import chaos
from hpcshuffle.plan import EpochPlan, Exchange
from hpcshuffle.store import SampleMeta, Store

TAG_SAMPLE = 7
# sample_id, label, payload bytes (after header and relpath), source mtime, xxh3 checksum, relpath bytes
HEADER = struct.Struct("<qqqqQI")
MAX_MESSAGE_BYTES = 1 << 30  # 1 GiB, well below the 2 GiB int32 limit of MPI counts


class ExchangeError(RuntimeError):
    """The exchange cannot complete: ranks disagree on the plan, or a peer stopped answering."""


@dataclass
class _Incoming:
    """A sample whose first message has arrived and whose remaining chunks are awaited."""

    meta: SampleMeta
    chunks: list[np.ndarray]
    remaining_bytes: int


@dataclass
class EpochTraffic:
    sent: int = 0
    received: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0
    pending_sends: list = field(default_factory=list)  # (request, buffer) kept alive until done


def encode(meta: SampleMeta, data: bytes) -> bytes:
    relpath = meta.relpath.encode()
    header = HEADER.pack(
        meta.sample_id, meta.label, len(data), meta.source_mtime_ns, int(meta.checksum, 16), len(relpath)
    )
    return header + relpath + data


class Scheduler:
    """Carries out this rank's part of each epoch's exchange.

    Args:
        comm: the job's communicator; the scheduler works on a private duplicate of it.
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
        self.comm = comm.Dup()
        self.rank = comm.Get_rank()
        self.store = store
        self.plan_key = plan_key
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self.plan: EpochPlan | None = None
        self._what: str | None = None  # "epoch 3" or "the start-up repair", for messages
        self.traffic = EpochTraffic()
        self._events = 0  # counts every completed step, for the stall watchdog
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-writer")

    # -- the Fig. 3 API ------------------------------------------------------------------

    def scheduling(self, plan: EpochPlan) -> None:
        """Prepare the epoch: which samples go where, when, and what must arrive from whom."""
        self.plan = plan
        self._begin(plan.exchange, f"epoch {plan.epoch}")

    def _begin(self, moves: Exchange | None, what: str) -> None:
        self._moves, self._what = moves, what
        self.traffic = EpochTraffic()
        if moves is None:
            self._sends = np.empty(0, dtype=np.int64)
            self._expected: dict[int, deque[int]] = {}
        else:
            self._sends = moves.sends_of(self.rank)
            self._expected = {}
            for row in moves.receives_of(self.rank):
                self._expected.setdefault(int(moves.src[row]), deque()).append(int(moves.sample_id[row]))
        self._next_send = 0
        self._writes: list[Future] = []
        self._incoming: dict[int, _Incoming] = {}
        self._pending_recvs: list[tuple[MPI.Request, np.ndarray, int]] = []

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
        self._poll()

    def synchronize(self) -> None:
        """Finish every transfer of the epoch and make the received samples durable.

        Ends in one barrier: once it returns on any rank, every rank has fsynced every sample
        it received, so senders may delete their copies.
        """
        if self._what is None:
            raise ExchangeError("synchronize() before scheduling()")
        self.communicate(np.iinfo(np.int64).max)  # whatever is left to post
        seen, last_progress = self._events, time.monotonic()
        while not self._poll():
            if self._events != seen:
                seen, last_progress = self._events, time.monotonic()
            elif time.monotonic() - last_progress > self.timeout_s:
                raise ExchangeError(self._stall_report())
            else:
                time.sleep(0.0005)
        for write in self._writes:
            write.result()  # re-raises a failed write (e.g. a full disk) here, before the commit
        self.store.sync()
        chaos.point(self.rank, self.plan.epoch if self.plan else -1, "before_barrier")
        self.comm.Barrier()

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
        messages until all ranks' posted sends are done (a non-blocking barrier entered once a
        rank's own sends are). Nothing is deleted or committed: the store stays at the epoch's
        start, plus uncommitted received files that the next start reconciles.
        """
        if self._what is None:
            return
        barrier, seen, last_progress = None, self._events, time.monotonic()
        while True:
            self._poll()
            if barrier is None and not self.traffic.pending_sends:
                barrier = self.comm.Ibarrier()
            if barrier is not None and barrier.Test() and not self._pending_recvs:
                break
            if self._events != seen:
                seen, last_progress = self._events, time.monotonic()
            elif time.monotonic() - last_progress > self.timeout_s:
                raise ExchangeError(self._stall_report())
            time.sleep(0.0005)
        for write in self._writes:
            write.result()
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
        self.comm.Free()

    # -- internals -----------------------------------------------------------------------

    def _post_send(self, row: int) -> None:
        moves = self._moves
        sample_id, dst = int(moves.sample_id[row]), int(moves.dst[row])
        data = self.store.read_bytes(sample_id)
        payload = np.frombuffer(encode(self.store.meta(sample_id), data), dtype=np.uint8)
        for start in range(0, len(payload), self.max_message_bytes):
            chunk = payload[start : start + self.max_message_bytes]
            request = self.comm.Isend([chunk, MPI.BYTE], dest=dst, tag=TAG_SAMPLE)
            self.traffic.pending_sends.append((request, chunk))
        self.traffic.sent += 1
        self.traffic.sent_bytes += len(data)

    def _poll(self) -> bool:
        """Advance every transfer without blocking; True once all of this epoch's are done."""
        status = MPI.Status()
        while (message := self.comm.Improbe(MPI.ANY_SOURCE, TAG_SAMPLE, status)) is not None:
            buffer = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
            self._pending_recvs.append((message.Irecv([buffer, MPI.BYTE]), buffer, status.Get_source()))
            self._events += 1
        still_waiting = []
        for request, buffer, source in self._pending_recvs:
            if request.Test():
                self._accept(source, buffer)
                self._events += 1
            else:
                still_waiting.append((request, buffer, source))
        self._pending_recvs = still_waiting
        sends = self.traffic.pending_sends
        if sends and MPI.Request.Testall([request for request, _ in sends]):
            self.traffic.pending_sends = []
            self._events += 1
        return (
            self._next_send == len(self._sends)
            and not self.traffic.pending_sends
            and not self._pending_recvs
            and not self._incoming
            and not any(self._expected.values())
        )

    def _accept(self, source: int, buffer: np.ndarray) -> None:
        incoming = self._incoming.get(source)
        if incoming is None:
            incoming = self._start_sample(source, buffer)
        else:
            incoming.chunks.append(buffer)
            incoming.remaining_bytes -= len(buffer)
        if incoming.remaining_bytes < 0:
            raise ExchangeError(
                f"rank {self.rank} got more bytes than announced for sample "
                f"{incoming.meta.sample_id} from rank {source}"
            )
        if incoming.remaining_bytes == 0:
            self._incoming.pop(source, None)
            data = b"".join(chunk.tobytes() for chunk in incoming.chunks)
            # off the main thread: the write proceeds while this rank computes FW/BW
            self._writes.append(self._writer.submit(self._write_received, source, incoming.meta, data))
            self.traffic.received += 1
            self.traffic.received_bytes += len(data)

    def _write_received(self, source: int, sent: SampleMeta, data: bytes) -> None:
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

    def _start_sample(self, source: int, buffer: np.ndarray) -> _Incoming:
        expected = self._expected.get(source)
        if not expected:
            raise ExchangeError(
                f"rank {self.rank} received an unplanned sample from rank {source}; the ranks "
                "disagree on the plan (different seed, q, dataset or worker count?)"
            )
        sample_id, label, total_bytes, mtime_ns, checksum, relpath_bytes = HEADER.unpack_from(buffer)
        want = expected.popleft()
        if sample_id != want:
            raise ExchangeError(
                f"rank {self.rank} expected sample {want} from rank {source} but got {sample_id}; "
                "the ranks disagree on the plan (different seed, q, dataset or worker count?)"
            )
        body_start = HEADER.size + relpath_bytes
        relpath = buffer[HEADER.size : body_start].tobytes().decode()
        first = buffer[body_start:]
        meta = SampleMeta(sample_id, relpath, label, total_bytes, f"{checksum:016x}", mtime_ns)
        incoming = _Incoming(meta, [first], total_bytes - len(first))
        self._incoming[source] = incoming
        return incoming

    def _stall_report(self) -> str:
        missing = {src: list(ids)[:5] for src, ids in self._expected.items() if ids}
        return (
            f"rank {self.rank}: no exchange progress for {self.timeout_s:.0f} s in "
            f"{self._what}; still expecting samples from ranks {missing} (first ids shown), "
            f"{len(self.traffic.pending_sends)} send messages unfinished. A peer has likely died "
            "or hung; check its log"
        )
