"""The PLS sample exchange over MPI, overlapped with training (the scheduler of Fig. 3).

Per epoch::

    scheduler.scheduling(plan)          # this rank's sends and expected receives
    for iteration in range(I):
        scheduler.communicate(iteration)    # post this iteration's ≈ q·b Isends, take what arrived
        ... forward / backward / allreduce ...
    scheduler.synchronize()             # finish, make received samples durable, one barrier
    scheduler.clean_local_storage()     # only now delete what was sent; commit the manifest

`repair(moves)` carries out a one-off set of moves at once (start-up repairs, see stage.py).

Samples travel through the payload transport (transport.py): what a rank sends one peer in one
iteration goes as one message, its header listing the samples, its payload their bytes read
straight from the store into the message. Messages between two ranks cannot overtake each
other, so the receiver knows from the plan which samples each message must carry, and checks
them; each sample's checksum is checked once, on arrival, before it is written.

Three threads besides the training thread, so that it only hands work over and commits the
store at the epoch's end (7-12 µs of its CPU per moved 100 KB sample here):
- the exchange thread makes every transport call, in the order the training thread asked;
  between iterations it takes in whatever arrives (every IDLE_POLL_S while anything is in
  flight). MPI is initialised with MPI_THREAD_MULTIPLE (mpi4py's default) for it.
- the reader thread reads the next iteration's messages from the store ahead of time;
- the writer thread checks what arrived and writes each message as one pack (store.py), and
  frees what was sent once the store is committed without it.
A failure on the exchange thread is raised in the training thread by its next call.
"""

from __future__ import annotations

import errno
import queue
import struct
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import xxhash
from mpi4py import MPI

from hpcshuffle.comm import chaos
from hpcshuffle.comm.transport import MAX_MESSAGE_BYTES, ExchangeError, Transport
from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.plan import EpochPlan, Exchange
from hpcshuffle.storage.packs import release
from hpcshuffle.storage.store import Store

TAG_SAMPLE = 7
# how often the exchange thread looks for arrivals between iterations: every 1 ms, its wake-ups
# cost 8 % of a 2-rank training epoch on 2 cores here
IDLE_POLL_S = 0.05
CLOSE_WAIT_S = 5.0  # how long `close` waits for the exchange thread to stop
COUNT = struct.Struct("<q")  # a message header starts with how many samples it carries
# then one record per sample, then their relpaths (utf-8) back to back
RECORD = np.dtype([("sample_id", "<i8"), ("label", "<i8"), ("source_mtime_ns", "<i8"), ("checksum", "<u8"),
                   ("nbytes", "<i8"), ("relpath_bytes", "<i8")])


@dataclass
class EpochTraffic:
    """What this rank sent and received in one epoch's exchange (or one repair): samples and bytes."""

    sent: int = 0
    received: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0


def encode_header(metas: list[SampleMeta]) -> bytes:
    """A message's header: the sample count, one RECORD per sample, then their relpaths (utf-8)."""
    relpaths = [meta.relpath.encode() for meta in metas]
    records = np.array(
        [(m.sample_id, m.label, m.source_mtime_ns, int(m.checksum, 16), m.nbytes, len(relpath))
         for m, relpath in zip(metas, relpaths, strict=True)],
        dtype=RECORD,
    )
    return b"".join((COUNT.pack(len(metas)), records.tobytes(), *relpaths))


def decode_header(header: np.ndarray) -> list[SampleMeta]:
    """The metas of the samples a message carries, in order, from its header (`encode_header`)."""
    (count,) = COUNT.unpack_from(header)
    records_end = COUNT.size + count * RECORD.itemsize
    records = np.frombuffer(header[COUNT.size : records_end], dtype=RECORD)
    relpaths = header[records_end:].tobytes()
    metas, start = [], 0
    for sample_id, label, mtime_ns, checksum, nbytes, relpath_bytes in records.tolist():
        metas.append(SampleMeta(sample_id, relpaths[start : start + relpath_bytes].decode(), label, nbytes,
                                f"{checksum:016x}", mtime_ns))
        start += relpath_bytes
    return metas


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
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            raise ExchangeError(
                "the exchange runs MPI on its own thread, which needs MPI_THREAD_MULTIPLE; do not lower "
                "mpi4py.rc.thread_level, or use an MPI library built with thread support"
            )
        self.transport = Transport(comm, TAG_SAMPLE, self._accept, timeout_s, max_message_bytes)
        self.rank = self.transport.rank
        self.store = store
        self.plan_key = plan_key
        self.plan: EpochPlan | None = None
        self._what: str | None = None  # "epoch 3" or "the start-up repair", for messages
        self._expected: dict[int, deque[int]] = {}
        self.traffic = EpochTraffic()
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-reader")
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-writer")
        # every transport call happens on this thread, so the training thread only hands it work
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._deleting: Future | None = None  # the bytes the last epoch sent, being freed
        self._thread = threading.Thread(target=self._serve, name="exchange", daemon=True)
        self._thread.start()

    # -- the Fig. 3 API, called by the training thread -----------------------------------

    def scheduling(self, plan: EpochPlan) -> None:
        """Prepare the epoch: which samples go where, when, and what must arrive from whom."""
        self.plan = plan
        self._ask(self._begin, plan.exchange, f"epoch {plan.epoch}")

    def communicate(self, iteration: int) -> None:
        """Have the sends planned up to `iteration` posted; returns at once.

        Call once per iteration before the forward pass: the exchange thread posts them and
        takes in what arrives while this rank computes forward and backward, and the reader
        thread reads the next iteration's messages from the store meanwhile.
        """
        self._ask(self._post_upto, iteration)

    def synchronize(self) -> None:
        """Finish every transfer of the epoch and make the received samples durable.

        Ends in one barrier: once it returns on any rank, every rank has fsynced every sample
        it received, so senders may delete their copies.
        """
        self._ask(self._finish).result()

    def repair(self, moves: Exchange) -> None:
        """Carry out `moves` at once; returns when every rank has made what it received durable.

        The caller removes what it gave away (all ranks are past the barrier by then).
        """
        self.plan = None
        self._ask(self._begin, moves, "the start-up repair")
        self.synchronize()

    def abandon(self) -> None:
        """Stop the epoch early (preemption): finish only the messages already posted.

        Posted sends must be received before MPI can shut down, so every rank keeps taking in
        messages until all ranks' posted sends are done. Nothing is deleted or committed: the
        store stays at the epoch's start, plus uncommitted received files that the next start
        reconciles.
        """
        self._ask(self._abandon).result()

    def clean_local_storage(self) -> None:
        """Commit the store for the next epoch without the samples this rank sent.

        Their bytes are freed (files deleted, ranges punched out of packs) on the writer thread,
        overlapped with the next epoch, and before anything the writer writes later (a sample
        sent back next epoch lands only after its old copy is gone). Every receiver has flushed
        them by now; a crash before they are gone leaves uncommitted files that the next start
        takes back and removes, or bytes in a pack that nothing reads.
        """
        if self.plan is None:
            raise ExchangeError("clean_local_storage() before scheduling()")
        moves = self.plan.exchange
        sent = [] if moves is None else [self.store.detach(i) for i in moves.sample_id[self._sends].tolist()]
        self.store.commit(self.plan.epoch + 1, self.plan_key)
        self._deleting = self._writer.submit(self._delete, sent, self.plan.epoch)

    def close(self) -> None:
        """Stop the exchange, reader and writer threads (waiting up to CLOSE_WAIT_S for the first), free
        the transport, and raise a failure of the last epoch's deletes."""
        self._commands.put(None)
        self._thread.join(timeout=CLOSE_WAIT_S)
        self._reader.shutdown(cancel_futures=True)
        self._writer.shutdown()  # after the last epoch's deletes
        if not self._thread.is_alive():  # else it is stuck in MPI: the process is failing anyway
            self.transport.close()
        if self._deleting is not None:
            self._deleting.result()  # a failed delete is raised, not dropped

    # -- the exchange thread ---------------------------------------------------------------

    def _ask(self, work: Callable, *args: object) -> Future:
        """Queue `work(*args)` for the exchange thread; raises its earlier failure, if any."""
        if self._failure is not None:
            raise self._failure
        done: Future = Future()
        self._commands.put((done, work, args))
        return done

    def _serve(self) -> None:
        """Run queued work in order; between items, take in what arrives while anything is in flight."""
        while True:
            in_flight = self._what is not None and (
                self.transport.sends_in_flight or self.transport.receiving or any(self._expected.values())
            )
            try:
                command = self._commands.get(timeout=IDLE_POLL_S if in_flight else None)
            except queue.Empty:
                command = (Future(), self.transport.poll, ())
            if command is None:
                return
            done, work, args = command
            if self._failure is not None:
                done.set_exception(self._failure)
                continue
            try:
                done.set_result(work(*args))
            except BaseException as err:  # noqa: BLE001 - the training thread raises it
                self._failure = err
                done.set_exception(err)

    def _begin(self, moves: Exchange | None, what: str) -> None:
        self._moves, self._what = moves, what
        self.traffic = EpochTraffic()
        self._expected = {}  # source -> the sample ids it sends, in order
        if moves is None:
            self._sends = np.empty(0, dtype=np.int64)
        else:
            self._sends = moves.sends_of(self.rank)
            for row in moves.receives_of(self.rank):
                self._expected.setdefault(int(moves.src[row]), deque()).append(int(moves.sample_id[row]))
        self._send_iterations = moves.iteration[self._sends] if moves is not None else self._sends
        self._next_send = 0
        self._composed: dict[int, Future] = {}  # first send of an iteration -> its messages, read ahead
        self._writes: list[Future] = []
        self._read_ahead()

    def _post_upto(self, iteration: int) -> None:
        """Post the sends planned up to `iteration`, and take in whatever has arrived."""
        if self._moves is None:
            return
        end = int(np.searchsorted(self._send_iterations, iteration, side="right"))
        while self._next_send < end:
            stop = self._iteration_end(self._next_send)
            composed = self._composed.pop(self._next_send, None)
            for dst, message, count, nbytes in composed.result() if composed else self._compose(self._next_send, stop):
                self.transport.send(dst, message)
                self.traffic.sent += count
                self.traffic.sent_bytes += nbytes
            self._next_send = stop
        self._read_ahead()
        self.transport.poll()

    def _finish(self) -> None:
        if self._what is None:
            raise ExchangeError("synchronize() before scheduling()")
        self._post_upto(np.iinfo(np.int64).max)  # whatever is left to post
        self.transport.wait(lambda: not any(self._expected.values()), self._stall_report)
        self.transport.drain(barrier=False, stall_report=self._stall_report)
        self._finish_writes()
        self.store.sync()
        chaos.point(self.rank, self.plan.epoch if self.plan else -1, "before_barrier")
        self.transport.barrier(lambda: (
            f"rank {self.rank}: ranks did not reach the end of {self._what} within "
            f"{self.transport.timeout_s:.0f} s of this one; a peer has likely died or hung; check its log"))

    def _abandon(self) -> None:
        if self._what is None:
            return
        for composed in self._composed.values():
            composed.cancel()  # read ahead, never posted: nobody waits for these messages
        self.transport.drain(barrier=True, stall_report=self._stall_report)
        self._finish_writes()
        self._what = None

    def _iteration_end(self, start: int) -> int:
        """The end of the run of sends that share the iteration of send `start`."""
        return int(np.searchsorted(self._send_iterations, self._send_iterations[start], side="right"))

    def _read_ahead(self) -> None:
        """Have the reader thread compose the next iteration's messages while this one trains."""
        start = self._next_send
        if start < len(self._sends) and start not in self._composed:
            self._composed[start] = self._reader.submit(self._compose, start, self._iteration_end(start))

    def _compose(self, start: int, stop: int) -> list[tuple[int, np.ndarray, int, int]]:
        """Sends `start:stop` as one message per peer, samples in the plan's order:
        [(peer, message, samples, payload bytes)]."""
        moves = self._moves
        rows = self._sends[start:stop]
        dsts = moves.dst[rows]
        return [(int(dst), *self._message(moves.sample_id[rows[dsts == dst]].tolist())) for dst in np.unique(dsts)]

    def _message(self, sample_ids: list[int]) -> tuple[np.ndarray, int, int]:
        """The samples' records, then their bytes read into the message from the store."""
        metas = [self.store.meta(sample_id) for sample_id in sample_ids]
        nbytes = sum(meta.nbytes for meta in metas)
        message, payload = self.transport.message(encode_header(metas), nbytes)
        start = 0
        for meta in metas:
            self.store.read_into(meta.sample_id, payload[start : start + meta.nbytes])
            start += meta.nbytes
        return message, len(metas), nbytes

    def _accept(self, source: int, header: np.ndarray, payload: np.ndarray) -> None:
        """Check a received message's samples against the plan and have them written into the store."""
        metas = decode_header(header)
        expected = self._expected.get(source)
        for meta in metas:
            if not expected:
                raise ExchangeError(
                    f"rank {self.rank} received an unplanned sample from rank {source}; the ranks "
                    "disagree on the plan (different seed, q, dataset or worker count?)"
                )
            want = expected.popleft()
            if meta.sample_id != want:
                raise ExchangeError(
                    f"rank {self.rank} expected sample {want} from rank {source} but got {meta.sample_id}; "
                    "the ranks disagree on the plan (different seed, q, dataset or worker count?)"
                )
        if sum(meta.nbytes for meta in metas) != len(payload):
            raise ExchangeError(
                f"rank {self.rank} got {len(payload)} payload bytes from rank {source} for samples of "
                f"{sum(meta.nbytes for meta in metas)}; the ranks frame messages differently (mixed hpcshuffle versions?)"
            )
        # off the main thread: checks and writes proceed while this rank computes FW/BW
        self._writes.append(self._writer.submit(self._write_received, source, metas, payload))
        self.traffic.received += len(metas)
        self.traffic.received_bytes += len(payload)

    def _write_received(self, source: int, metas: list[SampleMeta], payload: np.ndarray) -> None:
        """Check a message's samples, then write them into the store as one pack."""
        start = 0
        for meta in metas:
            data = payload[start : start + meta.nbytes]
            start += meta.nbytes
            # checked before it is written: a corrupted sample never enters the store
            if (arrived := xxhash.xxh3_64_hexdigest(data)) != meta.checksum:
                raise ExchangeError(
                    f"rank {self.rank}: sample {meta.sample_id} ({meta.relpath}) from rank {source} arrived "
                    f"with checksum {arrived}, sent as {meta.checksum}: corrupted in transit or in "
                    "the sender's store"
                )
        try:
            self.store.add_pack(metas, payload, checked=True)
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise ExchangeError(
                f"rank {self.rank}: node-local storage {self.store.root} is full ({err.strerror}) while "
                f"receiving {len(metas)} sample(s) ({len(payload)} bytes) from rank {source} in {self._what}; "
                "free space there, point storage.local_dir at a larger disk, or lower shuffle.q"
            ) from None
        self.transport.release(payload)

    def _delete(self, freed: list[str | tuple[str, int, int]], epoch: int) -> None:
        for done, item in enumerate(freed):
            if done == len(freed) // 2:
                chaos.point(self.rank, epoch, "mid_clean")
            release(item)

    def _finish_writes(self) -> None:
        if self._deleting is not None:
            self._deleting.result()  # the last epoch's deletes: a failure is raised here
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
