"""Run the transport's owners alone (no torch) under mpiexec and check them against the plan.

Usage: mpiexec -n K python tests/mpi/exchange_driver.py {partial,locality} STORE_DIR N Q EPOCHS MAX_MESSAGE_BYTES
partial: the PLS exchange; every store is checked against the plan after every epoch.
locality: loans; every rank checks what it borrows at each step, byte for byte.
Payloads are 0..3000 bytes derived from the sample id, so chunking, empty samples and byte
corruption would all show. Rank 0 prints "exchange ok: K samples moved" when every check
passed on every rank.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
from mpi4py import MPI

from hpcshuffle.comm.exchange import Scheduler
from hpcshuffle.comm.loans import Lender
from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.plan import EpochPlan, PlanSpec, plan_epochs
from hpcshuffle.storage.store import Store

AHEAD_STEPS = 2


def payload(sample_id: int) -> bytes:
    rng = np.random.default_rng(sample_id)
    return rng.integers(0, 256, size=int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()


def exchange(comm: MPI.Comm, store: Store, spec: PlanSpec, plans: list[EpochPlan], max_message_bytes: int) -> int:
    """Every epoch's PLS exchange; returns the samples this rank received."""
    rank, moved = comm.Get_rank(), 0
    scheduler = Scheduler(comm, store, "driver", timeout_s=60, max_message_bytes=max_message_bytes)
    for plan in plans:
        scheduler.scheduling(plan)
        for iteration in range(spec.iterations):
            scheduler.communicate(iteration)
        scheduler.synchronize()
        scheduler.clean_local_storage()
        moved += scheduler.traffic.received
        expected = plan.next_held()[rank]
        diff = store.verify(expected)
        assert diff.clean, f"rank {rank} epoch {plan.epoch}: missing {diff.missing[:5]} extra {diff.extra[:5]}"
        for sample_id in expected:
            assert store.read_bytes(int(sample_id)) == payload(int(sample_id)), f"sample {sample_id} corrupted"
            assert store.meta(int(sample_id)).label == int(sample_id) % 7
    scheduler.close()
    store.close()
    reopened = Store(store.root)
    assert reopened.epoch == len(plans) and reopened.ids() == set(plans[-1].next_held()[rank].tolist())
    return moved


def lend(comm: MPI.Comm, store: Store, spec: PlanSpec, plans: list[EpochPlan], max_message_bytes: int) -> int:
    """Every epoch's loans; returns the samples this rank borrowed."""
    rank, moved = comm.Get_rank(), 0
    lender = Lender(comm, store, AHEAD_STEPS, timeout_s=60, max_message_bytes=max_message_bytes)
    for plan in plans:
        lender.start_epoch(plan)
        loans = plan.loans
        for step in range(spec.iterations):
            lender.post(step)
            borrowed = lender.borrowed(step)
            planned = loans.sample_id[(loans.dst == rank) & (loans.step == step)].tolist()
            assert Counter(i for i, _ in borrowed) == Counter(planned), f"rank {rank} step {step}: not the plan's loans"
            for sample_id, data in borrowed:
                assert data == payload(sample_id), f"lent sample {sample_id} corrupted"
            moved += len(borrowed)
        lender.finish()
    lender.close()
    store.close()
    return moved


def main() -> None:
    shuffle, store_dir, num_samples, q, epochs, max_message_bytes = sys.argv[1:7]
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    spec = PlanSpec(int(num_samples), size, batch_size=4, q=float(q), seed=3)
    plans = list(plan_epochs(spec, shuffle, int(epochs)))
    store = Store(Path(store_dir) / f"rank{rank}")
    for sample_id in plans[0].held[rank]:
        store.add(SampleMeta(int(sample_id), f"train/c/{sample_id}.bin", int(sample_id) % 7), payload(int(sample_id)))
    store.commit(0, "driver")
    carry_out = {"partial": exchange, "locality": lend}[shuffle]
    total = comm.reduce(carry_out(comm, store, spec, plans, int(max_message_bytes)), root=0)
    if rank == 0:
        print(f"exchange ok: {total} samples moved")


if __name__ == "__main__":
    main()
