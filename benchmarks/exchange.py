"""The PLS exchange against the MPI ceiling: one epoch of the Scheduler's exchange, then one
`Alltoallv` of the same plan's bytes between the same ranks, in one `mpiexec` job.

For each store (tmpfs, disk), sample size (4 KB, 100 KB, 2 MB) and q (0.1, 0.3, 0.5) every
rank fills a fresh store with its plan's partition, runs the epoch's exchange with nothing in
between (scheduling, communicate per iteration, synchronize, clean_local_storage and the
deletes it leaves to the writer thread: reads, checks, writes, the flush and the deletes
included), and then the `Alltoallv` (the fastest of
three), and the same messages as the Scheduler's (one per peer and iteration) as Isend/Irecv
between buffers in memory (the fastest of three: what point-to-point MPI gives this pattern).
Prints samples/s and GB/s, the ratios, and the CPU per moved sample of the training thread and
of the whole process (the exchange's own threads included). Last line:
`exchange/Alltoallv ratio (100 KB, q 0.3, tmpfs): X`.

Above it, a bound on that ratio for this machine: every moved sample is written into a store
once and read out once (their cost per 100 KB sample measured here, back to back in one file)
on one of the cores, and its messages take at least their point-to-point time. With 4 ranks on
2 cores that bound was 0.13-0.20 in our runs, whatever the exchange does.

Also measured, in the same run: what this machine's kernel charges to create and write, read and
unlink one 100 KB file on tmpfs, one after another: most of it is the bytes (a write allocates
and fills pages), which a moved sample pays once written and once read whatever the store's layout.

    python benchmarks/exchange.py [--ranks 4] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = {4096: "4 KB", 102400: "100 KB", 2097152: "2 MB"}
STORES = {"tmpfs": "/dev/shm", "disk": "/var/tmp"}
HEADLINE = ("tmpfs", 102400, 0.3)


def samples_for(size: int, ranks: int, bytes_per_rank: int) -> int:
    """N so each rank holds about `bytes_per_rank`, at least 64 samples and at most 5,000 each."""
    return ranks * min(max(bytes_per_rank // size, 64), 5000)


def one_config(comm, kind: str, size: int, q: float, bytes_per_rank: int, batch: int) -> dict:
    """One epoch's exchange and one Alltoallv of the same bytes, timed on every rank."""
    from mpi4py import MPI

    from hpcshuffle.comm.exchange import Scheduler
    from hpcshuffle.formats.catalog import SampleMeta
    from hpcshuffle.plan import PlanSpec, plan_epochs
    from hpcshuffle.storage.store import Store

    rank, ranks = comm.Get_rank(), comm.Get_size()
    spec = PlanSpec(samples_for(size, ranks, bytes_per_rank), ranks, batch_size=batch, q=q, seed=7)
    plan = next(iter(plan_epochs(spec, "partial", 1)))
    root = Path(comm.bcast(tempfile.mkdtemp(prefix="hpcshuffle-bench-exchange-", dir=STORES[kind]) if rank == 0 else None))
    store = Store(root / f"rank{rank}")
    try:
        data = np.random.default_rng(rank).integers(0, 256, size, dtype=np.uint8).tobytes()
        for sample_id in plan.held[rank].tolist():
            store.add(SampleMeta(sample_id, f"train/c/{sample_id}.bin", sample_id % 7), data, durable=False)
        store.commit(0, "bench")
        scheduler = Scheduler(comm, store, "bench", timeout_s=120)
        comm.Barrier()
        started, thread_cpu, process_cpu = MPI.Wtime(), time.thread_time(), time.process_time()
        scheduler.scheduling(plan)
        for iteration in range(spec.iterations):
            scheduler.communicate(iteration)
        scheduler.synchronize()
        scheduler.clean_local_storage()
        thread_cpu = time.thread_time() - thread_cpu
        scheduler.close()  # waits for the sent files' deletes, which training overlaps with the next epoch
        process_cpu, elapsed = time.process_time() - process_cpu, MPI.Wtime() - started
        diff = store.verify(plan.next_held()[rank])
        if not diff.clean:
            raise RuntimeError(f"rank {rank}: the exchange lost {diff.missing[:5]} or kept {diff.extra[:5]}")
        received = scheduler.traffic.received
    finally:
        store.close()
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(root, ignore_errors=True)

    moves = plan.exchange
    point_to_point = min(replay(comm, moves, size) for _ in range(3))
    send_counts = np.bincount(moves.dst[moves.src == rank], minlength=ranks) * size
    recv_counts = np.bincount(moves.src[moves.dst == rank], minlength=ranks) * size
    if max(send_counts.sum(), recv_counts.sum()) >= 1 << 31:
        raise ValueError("an Alltoallv buffer over 2 GiB (int32 counts): lower --bytes-per-rank")
    send, recv = np.ones(send_counts.sum(), np.uint8), np.ones(recv_counts.sum(), np.uint8)
    displacements = [np.concatenate([[0], np.cumsum(counts)[:-1]]) for counts in (send_counts, recv_counts)]
    ceiling = float("inf")
    for _ in range(3):
        comm.Barrier()
        start = MPI.Wtime()
        comm.Alltoallv([send, (send_counts, displacements[0]), MPI.BYTE], [recv, (recv_counts, displacements[1]), MPI.BYTE])
        ceiling = min(ceiling, comm.allreduce(MPI.Wtime() - start, op=MPI.MAX))
    return {
        "moved": comm.allreduce(received),
        "exchange_s": comm.allreduce(elapsed, op=MPI.MAX),
        "alltoallv_s": ceiling,
        "p2p_s": point_to_point,
        "thread_cpu_s": comm.allreduce(thread_cpu),
        "process_cpu_s": comm.allreduce(process_cpu),
    }


def replay(comm, moves, size: int) -> float:
    """Seconds to move the Scheduler's messages (one per peer and iteration, the same bytes) as
    point-to-point MPI between buffers already in memory: no store, no threads, no checks."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    sends, receives = moves.sends_of(rank), moves.receives_of(rank)
    messages = {}
    for name, rows, peers in (("send", sends, moves.dst[sends]), ("recv", receives, moves.src[receives])):
        keys, counts = np.unique(np.stack([moves.iteration[rows], peers]), axis=1, return_counts=True)
        messages[name] = [(int(peer), int(count) * size) for peer, count in zip(keys[1], counts)]
    largest = max((nbytes for _, nbytes in messages["send"]), default=0)
    send = np.ones(largest, np.uint8)  # every send reads the same touched bytes; MPI allows that
    received = sum(nbytes for _, nbytes in messages["recv"])
    recv = np.ones(received, np.uint8)  # touched: a store's pool of buffers is warm too
    starts = np.concatenate([[0], np.cumsum([nbytes for _, nbytes in messages["recv"]])])
    comm.Barrier()
    start = MPI.Wtime()
    requests = [comm.Irecv([recv[starts[i] : starts[i + 1]], MPI.BYTE], source=peer, tag=3)
                for i, (peer, _) in enumerate(messages["recv"])]
    requests += [comm.Isend([send[:nbytes], MPI.BYTE], dest=peer, tag=3) for peer, nbytes in messages["send"]]
    MPI.Request.Waitall(requests)
    return comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)


def worker(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for kind in args.stores:
        for size in args.sizes:
            for q in args.qs:
                for repeat in range(args.repeats):
                    if comm.Get_rank() == 0:
                        print(f"{kind} {SIZES.get(size, size)} q {q}: repeat {repeat + 1}/{args.repeats}", file=sys.stderr)
                    result = one_config(comm, kind, size, q, args.bytes_per_rank, args.batch)
                    if comm.Get_rank() == 0:
                        print(json.dumps({"store": kind, "size": size, "q": q, **result}), flush=True)


def file_floor(size: int, directory: str, files: int = 500) -> dict[str, float]:
    """µs per file to create and write, read, and unlink `size`-byte files, one after another."""
    data, buffer = os.urandom(size), bytearray(size)
    root = tempfile.mkdtemp(prefix="hpcshuffle-bench-files-", dir=directory)
    paths = [f"{root}/{i}" for i in range(files)]
    times = {}
    try:
        start = time.perf_counter()
        for path in paths:
            with open(path, "wb") as out:
                out.write(data)
        times["write"] = time.perf_counter() - start
        start = time.perf_counter()
        for path in paths:
            with open(path, "rb", buffering=0) as source:
                source.readinto(buffer)
        times["read"] = time.perf_counter() - start
        start = time.perf_counter()
        for path in paths:
            os.unlink(path)
        times["unlink"] = time.perf_counter() - start
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {name: seconds / files * 1e6 for name, seconds in times.items()}


def byte_floor(size: int, directory: str, samples: int = 500) -> dict[str, float]:
    """µs per `size`-byte sample to write samples back to back into one file and read them back:
    what a pack store pays per moved sample at the least, once per file creation is amortised."""
    data, buffer = os.urandom(size), bytearray(size)
    fd, path = tempfile.mkstemp(prefix="hpcshuffle-bench-bytes-", dir=directory)
    times = {}
    try:
        start = time.perf_counter()
        for _ in range(samples):
            os.write(fd, data)
        times["write"] = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(samples):
            os.preadv(fd, [buffer], i * size)
        times["read"] = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return {name: seconds / samples * 1e6 for name, seconds in times.items()}


def span(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def report(rows: list[dict], floor: dict[str, float], bytes_floor: dict[str, float]) -> None:
    print(f"{'store':6s} {'size':>6s} {'q':>4s} {'moved':>6s} {'exchange/s [range]':>24s} {'GB/s':>5s} "
          f"{'Alltoallv/s':>12s} {'GB/s':>6s} {'ratio [range]':>21s} {'p2p/s':>8s} {'/p2p':>5s} "
          f"{'thread µs':>9s} {'process µs':>10s}")
    headline = None
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["store"], row["size"], row["q"]), []).append(row)
    for (kind, size, q), runs in groups.items():
        moved = runs[0]["moved"]
        rates = [run["moved"] / run["exchange_s"] for run in runs]
        ceiling = statistics.median(run["moved"] / run["alltoallv_s"] for run in runs)
        ratios = [run["alltoallv_s"] / run["exchange_s"] for run in runs]
        point_to_point = statistics.median(run["moved"] / run["p2p_s"] for run in runs)
        to_p2p = statistics.median(run["p2p_s"] / run["exchange_s"] for run in runs)
        thread_us = statistics.median(run["thread_cpu_s"] / run["moved"] * 1e6 for run in runs)
        process_us = statistics.median(run["process_cpu_s"] / run["moved"] * 1e6 for run in runs)
        print(f"{kind:6s} {SIZES.get(size, size):>6s} {q:4.1f} {moved:6d} {span(rates, '.0f'):>24s} "
              f"{statistics.median(rates) * size / 1e9:5.2f} {ceiling:12.0f} {ceiling * size / 1e9:6.1f} "
              f"{span(ratios, '.3f'):>21s} {point_to_point:8.0f} {to_p2p:5.2f} {thread_us:9.0f} {process_us:10.0f}")
        if (kind, size, q) == HEADLINE:
            headline = statistics.median(ratios)
            # a bound, not a model: every moved sample is written once and read once on one of
            # this machine's cores, and the messages take at least their point-to-point time
            cores = len(os.sched_getaffinity(0))
            least_s = [moved * sum(bytes_floor.values()) * 1e-6 / cores + run["p2p_s"] for run in runs]
            bound = statistics.median(run["alltoallv_s"] / least for run, least in zip(runs, least_s))
    print("p2p/s: the same messages as Isend/Irecv between buffers in memory (no store, threads or checks); "
          "/p2p: the exchange's rate over that")
    print("thread µs / process µs: CPU per moved sample of the training thread / of the whole process")
    print(f"one {SIZES[102400]} file on tmpfs here (one thread): "
          + ", ".join(f"{name} {us:.0f} µs" for name, us in floor.items()))
    print(f"{SIZES[102400]} samples back to back in one file on tmpfs: "
          + ", ".join(f"{name} {us:.0f} µs" for name, us in bytes_floor.items()))
    if headline is not None:
        print(f"at most {bound:.3f} of the Alltoallv (100 KB, q 0.3, tmpfs) on this machine's {cores} cores: the time "
              "to write and read every moved sample once, with no other work, plus the messages' p2p time")
    print("exchange/Alltoallv ratio (100 KB, q 0.3, tmpfs): "
          + (f"{headline:.3f}" if headline is not None else "not measured (add --sizes 102400 --qs 0.3 --stores tmpfs)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=lambda text: [int(s) for s in text.split(",")], default=list(SIZES))
    parser.add_argument("--qs", type=lambda text: [float(s) for s in text.split(",")], default=[0.1, 0.3, 0.5])
    parser.add_argument("--stores", type=lambda text: text.split(","), default=list(STORES))
    parser.add_argument("--bytes-per-rank", type=int, default=96 << 20, help="each rank's partition, about")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="100 KB and 4 KB, q 0.3, tmpfs, once, 8 MB per rank")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.qs, args.stores, args.repeats, args.bytes_per_rank = [4096, 102400], [0.3], ["tmpfs"], 1, 8 << 20
    unknown = sorted(set(args.stores) - set(STORES))
    if unknown:
        parser.error(f"--stores: unknown {unknown}; choose from {sorted(STORES)}")
    if args.worker:
        worker(args)
        return

    floor, bytes_floor = file_floor(102400, STORES["tmpfs"]), byte_floor(102400, STORES["tmpfs"])
    mpiexec = Path(sys.executable).parent / "mpiexec"
    command = [str(mpiexec), "-n", str(args.ranks), sys.executable, __file__, "--worker", *sys.argv[1:]]
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if result.returncode != 0:
        sys.exit(f"the benchmark job failed (exit status {result.returncode}); its errors are above")
    report([json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")], floor, bytes_floor)


if __name__ == "__main__":
    main()
