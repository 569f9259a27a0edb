"""Loans over the payload transport on one rank (lent to itself over MPI_COMM_SELF)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcshuffle.comm.loans import Lender
from hpcshuffle.comm.transport import ExchangeError
from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.plan import EpochPlan, Loans, PlanSpec
from hpcshuffle.storage.store import Store
from tests.conftest import budget

BIG_SAMPLE = bytes(range(256)) * 20  # 5120 bytes: several messages of at most 1000


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as store:
        store.add(SampleMeta(3, "train/c/3.bin", 1), BIG_SAMPLE)
        yield store


def lent_at_step_1(epoch: int, src: int = 0) -> EpochPlan:
    """An epoch whose only loan is sample 3, from `src` to rank 0 at step 1 (the lender reads nothing else)."""
    one = np.ones(1, dtype=np.int64)
    loans = Loans(step=one, src=one * src, dst=one * 0, sample_id=one * 3)
    return EpochPlan(PlanSpec(num_samples=4, num_ranks=1, batch_size=2), epoch, held=[], order=[], loans=loans)


def test_a_loan_over_max_message_bytes_arrives_whole(store):
    lender = Lender(MPI.COMM_SELF, store, ahead=1, timeout_s=budget(10), max_message_bytes=1000)
    try:
        for epoch in range(2):  # a loan is matched by its epoch as well as its sample id
            lender.start_epoch(lent_at_step_1(epoch))
            assert lender.borrowed(0) == []
            assert lender.borrowed(1) == [(3, BIG_SAMPLE)]
            lender.finish()
    finally:
        lender.close()


def test_a_loan_that_never_arrives_is_named(store):
    """The plan says rank 1 lends sample 3, but on MPI_COMM_SELF nobody does."""
    lender = Lender(MPI.COMM_SELF, store, ahead=1, timeout_s=0.05)  # expires by design
    try:
        lender.start_epoch(lent_at_step_1(0, src=1))
        with pytest.raises(ExchangeError, match=(
            r"rank 0: waited 0 s without progress for the samples it borrows at step 1 of epoch 0; "
            r"still expecting \{1: \[3\]\} \(rank: first ids\). A peer has likely died"
        )):
            lender.borrowed(1)
    finally:
        lender.close()
