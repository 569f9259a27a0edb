"""Exchange failures that must be named, on one rank (a move to itself over MPI_COMM_SELF)."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from mpi4py import MPI

from hpcshuffle.exchange import ExchangeError, Scheduler
from hpcshuffle.plan import Exchange
from hpcshuffle.store import SampleMeta, Store


def one_move(sample_id: int) -> Exchange:
    zeros = np.zeros(1, dtype=np.int64)
    return Exchange(slots=1, slot=zeros, src=zeros, dst=zeros, sample_id=zeros + sample_id, iteration=zeros)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as store:
        store.add(SampleMeta(3, "train/c/3.bin", 1), b"x" * 100)
        yield store


def test_a_move_arrives_intact(store):
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=10)
    try:
        scheduler.repair(one_move(3))
    finally:
        scheduler.close()
    assert store.read_bytes(3) == b"x" * 100 and store.intact(3)
    assert (scheduler.traffic.sent, scheduler.traffic.received) == (1, 1)


def test_a_full_node_local_disk_is_named(store, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "add", full)
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=10)
    try:
        with pytest.raises(ExchangeError, match=(
            rf"rank 0: node-local storage {store.root} is full \(No space left on device\) while receiving "
            r"sample 3 .* in the start-up repair; free space there.*lower shuffle.q"
        )):
            scheduler.repair(one_move(3))
    finally:
        scheduler.close()
