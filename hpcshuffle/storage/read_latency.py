"""Per-file read times of shared storage under load, on the node that reads (experiments/storage_latency.py):
a pool of ~100 KB files of random bytes, k reader threads on a node each reading its own distinct files
whole, as global shuffling reads a sample (hpcshuffle.files.read_chunks with `uncached`: the file's pages
dropped after the read), all readers of all nodes starting at one instant; and one untimed pass over
the pool, so the storage server's own cache is as warm as after a run's first epoch."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from pathlib import Path

from hpcshuffle.files import read_chunks

FILE_BYTES = 102_400  # ~100 KB: a JPEG of ImageNet's mean size
POOL_FILES = 1_500  # enough for 3 nodes x 400 distinct files per point


def assignment(pool: int, nodes: int, node: int, readers: int, per_reader: int, seed: int) -> list[list[int]]:
    """The file indices each of `readers` readers on `node` (of `nodes`) reads: a seeded permutation
    of the pool cut into distinct pieces, so no file is read twice in a point, on any node."""
    needed = nodes * readers * per_reader
    if needed > pool:
        raise ValueError(f"{nodes} node(s) x {readers} readers x {per_reader} files need {needed} files, "
                         f"the pool has {pool}")
    order = list(range(pool))
    random.Random(seed).shuffle(order)
    start = node * readers * per_reader
    return [order[start + r * per_reader:start + (r + 1) * per_reader] for r in range(readers)]


def pool_path(root: Path, index: int) -> Path:
    """The pool's file number `index` under `root` (500 to a directory)."""
    return root / f"{index // 500:02d}" / f"f{index:05d}.bin"


def prepare(root: Path, files: int, nbytes: int) -> None:
    """Write the pool of `files` files of `nbytes` random bytes under `root` unless it is complete."""
    mark = root / f".complete-{files}x{nbytes}"
    if mark.exists():
        return
    for index in range(files):
        path = pool_path(root, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(nbytes))
    mark.write_text("")


def read_whole(path: Path) -> int:
    """Read a file as global shuffling reads a sample from shared storage (pages dropped after)."""
    return sum(len(chunk) for chunk in read_chunks(path, uncached=True))


def probe(root: Path, pool: int, nodes: int, node: int, readers: int, per_reader: int, seed: int,
          start_at: float | None) -> dict:
    """k reader threads on this node, each reading its files one after the other, all starting at
    `start_at` (wall clock, shared by the nodes of one machine) or at once; every file's seconds."""
    plan = assignment(pool, nodes, node, readers, per_reader, seed)
    times: list[list[float]] = [[] for _ in range(readers)]
    ends = [0.0] * readers
    nbytes = [0] * readers
    ready = threading.Barrier(readers + 1)

    def reader(slot: int) -> None:
        ready.wait()
        for index in plan[slot]:
            started = time.perf_counter()
            nbytes[slot] += read_whole(pool_path(root, index))
            times[slot].append(time.perf_counter() - started)
        ends[slot] = time.time()

    threads = [threading.Thread(target=reader, args=(slot,), daemon=True) for slot in range(readers)]
    for thread in threads:
        thread.start()
    late = 0.0
    if start_at is not None:
        late = time.time() - start_at
        if late < 0:
            time.sleep(-late)
    start = time.time()
    ready.wait()
    for thread in threads:
        thread.join()
    return {"host": socket.gethostname(), "node": node, "readers": readers, "start": start, "end": max(ends),
            "late_s": max(late, 0.0), "bytes": sum(nbytes), "times": [t for slot in times for t in slot]}


def warm(root: Path, pool: int, threads: int = 4) -> float:
    """Read the whole pool once, untimed in the results (the server's cache then holds it); seconds."""
    started = time.perf_counter()
    indices = list(range(pool))
    workers = [threading.Thread(target=lambda part: [read_whole(pool_path(root, i)) for i in part],
                                args=(indices[slot::threads],)) for slot in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started
