"""The payload transport on one rank (messages to itself over MPI_COMM_SELF)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcshuffle.comm.transport import FRAME, ExchangeError, ExchangeStalled, Transport
from hpcshuffle.errors import PeerLost
from tests.conftest import budget

TAG = 5
MAX_MESSAGE_BYTES = 1000
HEADER = b"sample 42"
FIRST_PAYLOAD_BYTES = MAX_MESSAGE_BYTES - FRAME.size - len(HEADER)  # what fits beside the frame and header


@pytest.fixture
def delivered():
    return []


@pytest.fixture
def transport(delivered):
    def deliver(source, header, payload):
        delivered.append((source, header.tobytes(), payload.tobytes()))

    transport = Transport(MPI.COMM_SELF, TAG, deliver, timeout_s=budget(10), max_message_bytes=MAX_MESSAGE_BYTES)
    yield transport
    transport.close()


def payload_of(num_bytes: int) -> bytes:
    return np.random.default_rng(num_bytes).integers(0, 256, num_bytes, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("payload_bytes", [0, FIRST_PAYLOAD_BYTES, FIRST_PAYLOAD_BYTES + 1, 5000])
def test_a_payload_arrives_whole_and_once(transport, delivered, payload_bytes):
    transport.post(0, HEADER, payload_of(payload_bytes))
    transport.post(0, b"next", b"after it")  # chunks of one source are not mixed with its next message
    transport.wait(lambda: len(delivered) == 2, lambda: "never arrived")
    assert delivered == [(0, HEADER, payload_of(payload_bytes)), (0, b"next", b"after it")]
    assert not transport.receiving


def test_no_message_exceeds_max_message_bytes(transport):
    transport.post(0, HEADER, payload_of(5000))
    status, sizes = MPI.Status(), []
    # read the wire directly, as a peer without a transport would
    while (message := transport.comm.Improbe(0, TAG, status)) is not None:
        sizes.append(status.Get_count(MPI.BYTE))
        message.Recv([np.empty(sizes[-1], dtype=np.uint8), MPI.BYTE])
    assert sizes == [MAX_MESSAGE_BYTES] * 5 + [FRAME.size + len(HEADER) + 5000 - 5 * MAX_MESSAGE_BYTES]
    transport.drain(barrier=False, stall_report=lambda: "sends never finished")


def test_drain_with_barrier_takes_in_what_was_posted(transport, delivered):
    transport.post(0, HEADER, payload_of(5000))
    transport.drain(barrier=True, stall_report=lambda: "never drained")
    assert delivered == [(0, HEADER, payload_of(5000))] and transport.sends_in_flight == 0


def test_a_wait_without_progress_raises_the_owners_report():
    """A stall is a lost peer (exit code 76, requeued), not bad input; its text says so."""
    transport = Transport(MPI.COMM_SELF, TAG, lambda *message: None, timeout_s=0.05)  # expires by design
    try:
        with pytest.raises(ExchangeStalled, match=(
            r"^rank 0 still expects sample 3 from rank 1; the job script requeues and resumes from the last "
            r"checkpoint; or resubmit$"
        )) as caught:
            transport.wait(lambda: False, lambda: "rank 0 still expects sample 3 from rank 1")
        assert isinstance(caught.value, PeerLost) and isinstance(caught.value, ExchangeError)
    finally:
        transport.close()


def test_a_header_that_does_not_fit_one_message_is_refused(transport):
    with pytest.raises(ValueError, match="does not fit one 1000-byte message.*raise max_message_bytes"):
        transport.post(0, b"h" * MAX_MESSAGE_BYTES, b"")


@pytest.mark.parametrize("max_message_bytes", [FRAME.size, 1 << 31])
def test_max_message_bytes_must_fit_a_frame_and_an_int32_count(max_message_bytes):
    with pytest.raises(ValueError, match="max_message_bytes must be in .*MPI counts are int32"):
        Transport(MPI.COMM_SELF, TAG, lambda *message: None, timeout_s=1,  # never waited on
                  max_message_bytes=max_message_bytes)


def test_a_message_filled_in_place_arrives_and_its_buffer_is_reused_once_sent(transport, delivered):
    message, payload = transport.message(HEADER, 300)
    payload[:] = np.frombuffer(payload_of(300), dtype=np.uint8)
    transport.send(0, message)
    transport.wait(lambda: len(delivered) == 1, lambda: "never arrived")
    assert delivered == [(0, HEADER, payload_of(300))]
    transport.drain(barrier=False, stall_report=lambda: "sends never finished")
    assert transport.buffers.take(10).base is message.base  # back in the pool, the smallest that fits
    assert transport.buffers.take(10).base is not message.base  # taken: the next is another
