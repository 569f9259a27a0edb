"""The transport's owners alone over a real mpiexec: chunked payloads, empty payloads, many epochs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_mpi

pytestmark = pytest.mark.mpi
DRIVER = str(Path(__file__).with_name("exchange_driver.py"))


@pytest.mark.parametrize(
    ("shuffle", "ranks", "max_message_bytes"),
    # small limits force payloads into several messages
    [("partial", 2, 1 << 30), ("partial", 3, 257), ("partial", 5, 1000), ("locality", 3, 257)],
)
def test_transfers_match_plan_byte_for_byte(tmp_path, shuffle, ranks, max_message_bytes):
    args = ["-m", "mpi4py", DRIVER, shuffle, str(tmp_path), "157", "0.5", "4", str(max_message_bytes)]
    result = run_mpi(ranks, args, 120)
    assert result.returncode == 0, result.stderr[-3000:]
    moved = int(result.stdout.split("exchange ok: ")[1].split()[0])
    assert moved > 0


BARRIER_PROBE = """
import time
from mpi4py import MPI
from hpcshuffle.comm.transport import Transport
delivered = []
transport = Transport(MPI.COMM_WORLD, 5, lambda source, header, payload: delivered.append(source), timeout_s=30)
if transport.rank == 1:
    transport.post(0, b"next epoch", b"payload")
    time.sleep(0.5)  # rank 0 waits at the barrier meanwhile
transport.barrier(lambda: "never reached")
if transport.rank == 0:
    print("delivered during the barrier:", len(delivered))
transport.drain(barrier=True, stall_report=lambda: "never drained")
if transport.rank == 0:
    print("delivered after:", len(delivered))
transport.close()
"""


def test_the_epochs_barrier_takes_nothing_in():
    # a rank that left the barrier may already send the next epoch's messages: a rank still
    # waiting must not take them in as this epoch's (its Scheduler would call them unplanned)
    result = run_mpi(2, ["-c", BARRIER_PROBE], 60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "delivered during the barrier: 0" in result.stdout and "delivered after: 1" in result.stdout, result.stdout
