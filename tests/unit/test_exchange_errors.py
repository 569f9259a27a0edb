"""Exchange moves and failures that must be named, on one rank (a move to itself over MPI_COMM_SELF)."""

from __future__ import annotations

import errno
import time
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

from hpcshuffle.comm.exchange import ExchangeError, Scheduler
from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.plan import Exchange
from hpcshuffle.storage.store import Store, StoreError
from tests.conftest import budget

BIG_SAMPLE_BYTES = 5000


def moves(*sample_ids: int, src: int = 0) -> Exchange:
    """Each sample from `src` to rank 0, all in one iteration (so in one message)."""
    zeros = np.zeros(len(sample_ids), dtype=np.int64)
    return Exchange(slots=len(sample_ids), slot=np.arange(len(sample_ids)), src=zeros + src, dst=zeros,
                    sample_id=np.array(sample_ids, dtype=np.int64), iteration=zeros)


def assert_repair_fails(store: Store, exchange: Exchange, error: type[Exception], match: str, timeout_s: float = 10) -> None:
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=timeout_s)
    try:
        with pytest.raises(error, match=match):
            scheduler.repair(exchange)
    finally:
        scheduler.close()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as store:
        store.add(SampleMeta(3, "train/c/3.bin", 1), b"x" * 100)
        store.add(SampleMeta(4, "train/c/4.bin", 2), bytes(range(256)) * (BIG_SAMPLE_BYTES // 256))
        yield store


@pytest.mark.parametrize(
    ("sample_ids", "max_message_bytes"),
    [((3,), 1 << 30), ((4,), 1000), ((4, 3), 1000)],  # sample 4 travels in several chunks
)
def test_moves_arrive_intact(store, sample_ids, max_message_bytes):
    sent = {sample_id: store.read_bytes(sample_id) for sample_id in sample_ids}
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=budget(10), max_message_bytes=max_message_bytes)
    try:
        scheduler.repair(moves(*sample_ids))
    finally:
        scheduler.close()
    for sample_id in sample_ids:
        assert store.read_bytes(sample_id) == sent[sample_id] and store.intact(sample_id)
    assert (scheduler.traffic.sent, scheduler.traffic.received) == (len(sample_ids),) * 2


def test_a_sample_changed_in_the_senders_store_is_named_and_not_written(store):
    path = store.path(3)
    path.write_bytes(b"y" * 100)  # same size, other bytes: only the checksum tells
    assert_repair_fails(store, moves(3), ExchangeError, (
        r"rank 0: sample 3 \(train/c/3.bin\) from rank 0 arrived with checksum [0-9a-f]{16}, sent as "
        r"[0-9a-f]{16}: corrupted in transit or in the sender's store"
    ))
    assert path.read_bytes() == b"y" * 100  # the receiver wrote nothing over it


def test_a_truncated_store_file_is_named_by_the_sender(store):
    store.path(4).write_bytes(b"short")
    assert_repair_fails(store, moves(4), StoreError, (
        rf"store file {store.path(4)} does not hold the {BIG_SAMPLE_BYTES // 256 * 256} bytes its manifest records "
        rf"for sample 4: "
        rf"it was changed outside hpcshuffle; delete {store.root} and run again to restage it"
    ))


def test_a_full_node_local_disk_is_named(store, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "add_pack", full)
    assert_repair_fails(store, moves(3), ExchangeError, (
        rf"rank 0: node-local storage {store.root} is full \(No space left on device\) while receiving "
        r"1 sample\(s\) \(\d+ bytes\) from rank 0 in the start-up repair; free space there.*lower shuffle.q"
    ))


def test_a_sample_that_never_arrives_is_named(store):
    """The plan says rank 1 sends sample 3, but on MPI_COMM_SELF nobody does."""
    assert_repair_fails(store, moves(3, src=1), ExchangeError, (
        r"rank 0: no exchange progress for 0 s in the start-up repair; still expecting samples from "
        r"ranks \{1: \[3\]\} \(first ids shown\), 0 send messages unfinished. A peer has likely died"
    ), timeout_s=0.05)  # expires by design


def test_a_failure_on_the_exchange_thread_is_raised_by_the_training_threads_next_call(store):
    store.path(4).write_bytes(b"short")
    scheduler = Scheduler(MPI.COMM_SELF, store, "k", timeout_s=budget(10))
    try:
        scheduler.scheduling(SimpleNamespace(epoch=0, exchange=moves(4)))
        scheduler.communicate(0)  # returns at once: the exchange thread fails on its own
        deadline = time.monotonic() + budget(10)
        with pytest.raises(StoreError, match=rf"store file {store.path(4)} does not hold the"):
            while time.monotonic() < deadline:
                scheduler.communicate(1)
                time.sleep(0.01)
    finally:
        scheduler.close()
