"""The one MPI payload transport, under the PLS exchange (exchange.py) and loans (loans.py).

Each owner frames a header of its own, which its receiver checks against the plan::

    transport = Transport(comm, tag, deliver, timeout_s)   # deliver(source, header, payload)
    transport.post(dst, header, payload)        # Isend, chunked; buffers kept until sent
    message, payload = transport.message(header, payload_bytes)  # or: fill the payload in place
    transport.send(dst, message)                # ...and send it without another copy
    transport.poll()                            # take in what arrived, deliver whole messages
    transport.wait(done, stall_report)          # poll until done(); the stall watchdog
    transport.barrier(stall_report)             # every rank here, without spinning a core
    transport.drain(barrier, stall_report)      # finish posted sends (barrier: everyone's)

Message buffers come from a pool (`Buffers`) and go back to it once sent, or once the owner
`release`s what was delivered to it, so their pages are faulted in once, not once per message.

Above `max_message_bytes` a message is chunked (MPI counts are int32): the first chunk carries
a frame (payload and header sizes), the header and the start of the payload, the rest carry
the payload on. Receives are sized by Improbe, never fixed. Messages between two ranks do not
overtake each other, so chunks are reassembled per source in the order they were probed.
"""

from __future__ import annotations

import bisect
import struct
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from hpcshuffle.errors import PeerLost

MAX_MESSAGE_BYTES = 1 << 30  # 1 GiB, well below the 2 GiB int32 limit of MPI counts
FRAME = struct.Struct("<QI")  # payload bytes, header bytes: what a message's first chunk announces
POLL_INTERVAL_S = 0.0002  # a wait that found nothing sleeps this long, so it does not spin a core
Deliver = Callable[[int, np.ndarray, np.ndarray], None]  # (source rank, header, payload), uint8 arrays


KEEP_BYTES = 256 << 20  # free buffers a transport keeps for reuse, at most
SMALLEST_BUFFER = 64 << 10  # buffers are allocated in powers of two from here, so sizes recur


class Buffers:
    """Message buffers kept for reuse, the smallest that fits first; safe to use from several threads.

    A fresh buffer costs a page fault per 4 KiB the first time it is written: ~20 µs for 300 KB
    here when another thread frees it, as the exchange's writer thread does. A reused one does not.
    """

    def __init__(self, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self._sizes: list[int] = []  # sorted; _free[i] has _sizes[i] bytes
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of exactly `nbytes` (a view of a pooled buffer); its contents are arbitrary."""
        with self._lock:
            index = bisect.bisect_left(self._sizes, nbytes)
            if index < len(self._sizes):
                del self._sizes[index]
                return self._free.pop(index)[:nbytes]
        return np.empty(max(SMALLEST_BUFFER, 1 << (nbytes - 1).bit_length()), dtype=np.uint8)[:nbytes]

    def give(self, array: np.ndarray) -> None:
        """Take back the buffer under `array`, a view `take` gave; nothing may use it afterwards."""
        buffer = array if array.base is None else array.base
        if not isinstance(buffer, np.ndarray):
            return  # not one of ours (a view of bytes)
        with self._lock:
            if sum(self._sizes) + len(buffer) <= self.keep_bytes:
                index = bisect.bisect_left(self._sizes, len(buffer))
                self._sizes.insert(index, len(buffer))
                self._free.insert(index, buffer)


class ExchangeError(RuntimeError):
    """Payloads cannot be moved: ranks disagree on the plan, or a peer stopped answering."""


class ExchangeStalled(ExchangeError, PeerLost):
    """The stall watchdog fired: no progress for `timeout_s` (world.timeout_s), a peer is likely
    frozen or dead. The same exit code as a lost peer in a collective: the job can be requeued."""


@dataclass
class _Outgoing:
    """A posted message: its buffer goes back to the pool once every chunk is sent."""

    buffer: np.ndarray
    chunks_unsent: int


@dataclass
class _Assembly:
    """A message whose first chunk has arrived; `payload` fills as the others do."""

    header: np.ndarray
    payload: np.ndarray
    filled_bytes: int


class Transport:
    """Moves framed payloads between the ranks of a private duplicate of `comm`.

    Args:
        comm: the job's communicator; the transport works on a private duplicate of it, so its
            messages never meet anyone else's.
        tag: the MPI tag of every message.
        deliver: called with (source rank, header, payload) for each complete message, in the
            order a source posted them; it owns the arrays from then on.
        timeout_s: how long a wait may make no progress before it raises ExchangeError.
        max_message_bytes: the largest single MPI message; bigger payloads are chunked.
    """

    def __init__(
        self, comm: MPI.Comm, tag: int, deliver: Deliver, timeout_s: float, max_message_bytes: int = MAX_MESSAGE_BYTES
    ) -> None:
        if not FRAME.size < max_message_bytes < 1 << 31:
            raise ValueError(
                f"max_message_bytes must be in ({FRAME.size}, 2**31) (MPI counts are int32), got {max_message_bytes}"
            )
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.tag = tag
        self.deliver = deliver
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self.buffers = Buffers()
        self._sends: list[tuple[MPI.Request, _Outgoing]] = []  # a buffer must outlive its request
        self._receives: dict[int, deque[tuple[MPI.Request, np.ndarray]]] = defaultdict(deque)  # by source
        self._assembling: dict[int, _Assembly] = {}  # by source

    @property
    def sends_in_flight(self) -> int:
        """Posted messages (chunks) not yet sent."""
        return len(self._sends)

    @property
    def receiving(self) -> bool:
        """Whether a message is partly taken in: a receive in flight, or chunks still to come."""
        return bool(self._assembling) or any(self._receives.values())

    def post(self, dst: int, header: bytes, payload: bytes) -> None:
        """Send `header` and `payload` to rank `dst` without blocking; `poll` progresses it."""
        message, body = self.message(header, len(payload))
        body[:] = np.frombuffer(payload, dtype=np.uint8)
        self.send(dst, message)

    def message(self, header: bytes, payload_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """A message's buffer (frame, header, then room for the payload) and a view of that room.

        Fill the payload view in place (e.g. read files into it), then `send` the buffer: the
        bytes are copied once, by whoever fills them, instead of once more to join the parts.
        """
        if FRAME.size + len(header) > self.max_message_bytes:
            raise ValueError(
                f"a {len(header)}-byte header does not fit one {self.max_message_bytes}-byte message "
                f"with its {FRAME.size}-byte frame; raise max_message_bytes"
            )
        payload_start = FRAME.size + len(header)
        message = self.buffers.take(payload_start + payload_bytes)
        FRAME.pack_into(message, 0, payload_bytes, len(header))
        message[FRAME.size : payload_start] = np.frombuffer(header, dtype=np.uint8)
        return message, message[payload_start:]

    def send(self, dst: int, message: np.ndarray) -> None:
        """Send a buffer from `message` to rank `dst` without blocking, in chunks of at most
        `max_message_bytes` (views: big payloads are not copied); do not change it until sent."""
        starts = range(0, len(message), self.max_message_bytes)  # never empty: the frame
        outgoing = _Outgoing(message, len(starts))
        for start in starts:
            chunk = message[start : start + self.max_message_bytes]
            self._sends.append((self.comm.Isend([chunk, MPI.BYTE], dest=dst, tag=self.tag), outgoing))

    def release(self, delivered: np.ndarray) -> None:
        """Hand back a payload `deliver` was given, once done with it, so its buffer is reused."""
        self.buffers.give(delivered)

    def poll(self) -> bool:
        """Advance every transfer without blocking and deliver what completed; True if anything progressed."""
        progressed = self._probe()
        for source, queue in self._receives.items():
            # only the oldest receive of a source may be taken: chunks are assembled in the order sent
            while queue and queue[0][0].Test():
                self._take(source, queue.popleft()[1])
                progressed = True
        if self._sends:
            sent = MPI.Request.Testsome([request for request, _ in self._sends])
            if sent:
                for index in sent:
                    outgoing = self._sends[index][1]
                    outgoing.chunks_unsent -= 1
                    if not outgoing.chunks_unsent:
                        self.buffers.give(outgoing.buffer)
                done = set(sent)
                self._sends = [send for index, send in enumerate(self._sends) if index not in done]
                progressed = True
        return progressed

    def wait(self, done: Callable[[], bool], stall_report: Callable[[], str], take_in: bool = True) -> None:
        """Poll until `done()`; after `timeout_s` without progress raise ExchangeStalled(stall_report()).

        Without `take_in`, only `done()` is tested between sleeps: nothing is received meanwhile.
        """
        last_progress_s = time.monotonic()
        while not done():
            if take_in and self.poll():
                last_progress_s = time.monotonic()
            elif time.monotonic() - last_progress_s > self.timeout_s:
                raise ExchangeStalled(stall_report())
            else:
                time.sleep(POLL_INTERVAL_S)

    def barrier(self, stall_report: Callable[[], str]) -> None:
        """Wait until every rank reaches this call; after `timeout_s` raise ExchangeStalled(stall_report()).

        MPI_Barrier spins a core while it waits, which, with more ranks than cores, is taken from
        the ranks still working; this tests an Ibarrier and sleeps in between. It takes nothing
        in meanwhile: a rank that has left the barrier may already be sending the next epoch's
        messages, which this epoch's receiver would reject as unplanned.
        """
        self.wait(self.comm.Ibarrier().Test, stall_report, take_in=False)

    def drain(self, barrier: bool, stall_report: Callable[[], str]) -> None:
        """Finish this rank's posted sends, delivering whatever arrives meanwhile.

        With `barrier`, also keep receiving until every rank's posted sends are done: what an
        early stop needs, since a posted message must be received before MPI can shut down.
        Each rank enters a non-blocking barrier once its own sends are done.
        """
        entered: MPI.Request | None = None

        def finished() -> bool:
            nonlocal entered
            if self._sends:
                return False
            if not barrier:
                return True
            if entered is None:
                entered = self.comm.Ibarrier()
            return entered.Test() and not self.receiving

        self.wait(finished, stall_report)

    def close(self) -> None:
        """Free the transport's duplicate communicator (collective in MPI: every rank of it calls close)."""
        self.comm.Free()

    # -- internals -----------------------------------------------------------------------

    def _probe(self) -> bool:
        """Start a receive, sized by its probe, for every message that has arrived; True if any had."""
        status, found = MPI.Status(), False
        while (message := self.comm.Improbe(MPI.ANY_SOURCE, self.tag, status)) is not None:
            buffer = self.buffers.take(status.Get_count(MPI.BYTE))
            self._receives[status.Get_source()].append((message.Irecv([buffer, MPI.BYTE]), buffer))
            found = True
        return found

    def _take(self, source: int, chunk: np.ndarray) -> None:
        """Add a received chunk to its source's message; deliver the message once it is whole."""
        assembly = self._assembling.pop(source, None)
        if assembly is None:
            payload_bytes, header_bytes = FRAME.unpack_from(chunk)
            payload_start = FRAME.size + header_bytes
            header, payload = chunk[FRAME.size : payload_start], chunk[payload_start:]
            if len(payload) == payload_bytes:
                self.deliver(source, header, payload)  # the whole message in one: no copy
                return
            assembly = _Assembly(header.copy(), np.empty(payload_bytes, dtype=np.uint8), 0)
            chunk = payload
        filled_bytes = assembly.filled_bytes + len(chunk)
        if filled_bytes > len(assembly.payload):
            raise ExchangeError(
                f"rank {self.rank} got {filled_bytes} payload bytes in a message from rank {source} that "
                f"announced {len(assembly.payload)}; the ranks frame messages differently (mixed hpcshuffle versions?)"
            )
        assembly.payload[assembly.filled_bytes : filled_bytes] = chunk
        assembly.filled_bytes = filled_bytes
        self.buffers.give(chunk)
        if filled_bytes == len(assembly.payload):
            self.deliver(source, assembly.header, assembly.payload)
        else:
            self._assembling[source] = assembly
