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
