"""Run the PLS exchange alone (no torch) under mpiexec and check every store against the plan.

Usage: mpiexec -n K python tests/mpi/exchange_driver.py STORE_DIR N Q EPOCHS MAX_MESSAGE_BYTES
Payloads are 0..3000 bytes derived from the sample id, so chunking, empty samples and byte
corruption would all show. Rank 0 prints "exchange ok" when every check passed on every rank.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from hpcshuffle.exchange import Scheduler
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.store import SampleMeta, Store


def payload(sample_id: int) -> bytes:
    rng = np.random.default_rng(sample_id)
    return rng.integers(0, 256, size=int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()


def main() -> None:
    store_dir, num_samples, q, epochs, max_message_bytes = sys.argv[1:6]
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    spec = PlanSpec(int(num_samples), size, batch_size=4, q=float(q), seed=3)
    plans = list(plan_epochs(spec, "partial", int(epochs)))
    store = Store(Path(store_dir) / f"rank{rank}")
    for sample_id in plans[0].held[rank]:
        store.add(SampleMeta(int(sample_id), f"train/c/{sample_id}.bin", int(sample_id) % 7), payload(int(sample_id)))
    store.commit(0, "driver")
    scheduler = Scheduler(comm, store, "driver", timeout_s=60, max_message_bytes=int(max_message_bytes))
    moved = 0
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
    reopened = Store(Path(store_dir) / f"rank{rank}")
    assert reopened.epoch == len(plans) and reopened.ids() == set(plans[-1].next_held()[rank].tolist())
    total = comm.reduce(moved, root=0)
    if rank == 0:
        print(f"exchange ok: {total} samples moved")


if __name__ == "__main__":
    main()
