"""Ping-pong between two MPI ranks: prints {"latency_s", "bandwidth_Bps"} for `scale calibrate`.

    mpiexec -n 2 python -m hpcshuffle.scale.pingpong [SIZE_BYTES] [REPEATS]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI


def round_trips(comm, buffer: np.ndarray, repeats: int) -> float:
    """Seconds per round trip of `buffer` between ranks 0 and 1."""
    peer = 1 - comm.rank
    comm.Barrier()
    started = time.perf_counter()
    for _ in range(repeats):
        if comm.rank == 0:
            comm.Send(buffer, dest=peer)
            comm.Recv(buffer, source=peer)
        else:
            comm.Recv(buffer, source=peer)
            comm.Send(buffer, dest=peer)
    return (time.perf_counter() - started) / repeats


def main() -> None:
    """Measure latency (half a 1-byte round trip) and bandwidth (SIZE_BYTES each way, default 1 MiB);
    rank 0 prints them as JSON. Exits unless run on exactly 2 ranks."""
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit(f"run with exactly 2 ranks (mpiexec -n 2), got {comm.size}")
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    small = round_trips(comm, np.zeros(1, dtype=np.uint8), repeats * 10)
    large = round_trips(comm, np.zeros(size, dtype=np.uint8), repeats)
    if comm.rank == 0:
        latency = small / 2
        print(json.dumps({"latency_s": latency, "bandwidth_Bps": size / max(large / 2 - latency, 1e-9)}))


if __name__ == "__main__":
    main()
