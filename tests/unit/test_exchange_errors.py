"""Exchange moves and failures that must be named, on one rank (a move to itself over MPI_COMM_SELF)."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from mpi4py import MPI

from hpcshuffle.exchange import ExchangeError, Scheduler
from hpcshuffle.plan import Exchange
from hpcshuffle.store import SampleMeta, Store

BIG_SAMPLE_BYTES = 5000


def one_move(sample_id: int, src: int = 0) -> Exchange:
    zeros = np.zeros(1, dtype=np.int64)
    return Exchange(slots=1, slot=zeros, src=zeros + src, dst=zeros, sample_id=zeros + sample_id, iteration=zeros)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as store:
        store.add(SampleMeta(3, "train/c/3.bin", 1), b"x" * 100)
        store.add(SampleMeta(4, "train/c/4.bin", 2), bytes(range(256)) * (BIG_SAMPLE_BYTES // 256))
        yield store


@pytest.mark.parametrize(
    ("sample_id", "max_message_bytes"),
    [(3, 1 << 30), (4, 1000)],  # sample 4 travels in several messages
)
def test_a_move_arrives_intact(store, sample_id, max_message_bytes):
    sent = store.read_bytes(sample_id)
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=10, max_message_bytes=max_message_bytes)
    try:
        scheduler.repair(one_move(sample_id))
    finally:
        scheduler.close()
    assert store.read_bytes(sample_id) == sent and store.intact(sample_id)
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


def test_a_sample_that_never_arrives_is_named(store):
    """The plan says rank 1 sends sample 3, but on MPI_COMM_SELF nobody does."""
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=0.05)
    try:
        with pytest.raises(ExchangeError, match=(
            r"rank 0: no exchange progress for 0 s in the start-up repair; still expecting samples from "
            r"ranks \{1: \[3\]\} \(first ids shown\), 0 send messages unfinished. A peer has likely died"
        )):
            scheduler.repair(one_move(3, src=1))
    finally:
        scheduler.close()
