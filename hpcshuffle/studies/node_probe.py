"""Rates of one cluster node and of two nodes together, measured where a training rank runs
(experiments/cluster_probe.py under srun), for the cluster scaling experiment to write a `conf/platform/`
file from: storage and compute through the loader's own code (hpcshuffle.storage.loader.Samples), and
the gradient allreduce the training loop makes. Each timed pass follows an untimed one, so the storage
server's own cache is as warm as after a run's first epoch."""

from __future__ import annotations

import os
import queue
import shutil
import time
from pathlib import Path

import numpy as np
import psutil

CHUNK = 1 << 20
RANK_WAIT_S = 600  # for every rank of the contention probe to finish


def timed(action, repeats: int = 1) -> float:
    """Seconds per call of `action()` over `repeats` calls, after one untimed call."""
    action()
    started = time.perf_counter()
    for _ in range(repeats):
        action()
    return (time.perf_counter() - started) / repeats


def client_cpu_s() -> float:
    """CPU seconds used so far by the GlusterFS clients of this node (the `glusterfs` processes in
    this process's mount namespace: every node's /proc lists every node's clients; psutil knows no
    namespaces, so each process's is read from /proc/PID/ns/mnt)."""
    mine = os.readlink("/proc/self/ns/mnt")
    total = 0.0
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "glusterfs":
            continue
        try:
            if os.readlink(f"/proc/{process.pid}/ns/mnt") != mine:
                continue
            times = process.cpu_times()
        except (OSError, psutil.Error):  # gone, or not ours to read
            continue
        total += times.user + times.system
    return total


def read_file(path: Path) -> int:
    """Read `path` whole, unbuffered, a MiB at a time; its bytes."""
    with open(path, "rb", buffering=0) as source:
        return sum(len(chunk) for chunk in iter(lambda: source.read(CHUNK), b""))


def write_file(path: Path, nbytes: int) -> None:
    """Write `nbytes` (rounded up to a MiB) of seeded random bytes to `path`, fsynced."""
    block = np.random.default_rng(0).integers(0, 256, CHUNK, dtype=np.uint8).tobytes()
    with open(path, "wb") as sink:
        for _ in range(-(-nbytes // CHUNK)):
            sink.write(block)
        sink.flush()
        os.fsync(sink.fileno())


def samples_of(root: Path, store_root: Path | None, image_size: int):
    """The training set as a rank's loader reads it (hpcshuffle.storage.loader.Samples): from shared storage
    (store_root None, pages dropped after each read) or from a node-local store."""
    from hpcshuffle.formats import get_format
    from hpcshuffle.formats.codec import DatasetOptions
    from hpcshuffle.formats.imagefolder import ImageFolderCodec
    from hpcshuffle.storage.loader import Samples

    catalog = get_format("imagefolder").scan(root, "train")
    codec = ImageFolderCodec(len(catalog.classes), DatasetOptions("flip", image_size))
    return Samples(catalog, codec, None if store_root is None else [store_root], train=True)


def per_file(load, ids: list[int]) -> float:
    """Seconds per file of `load((epoch, id))` over `ids`, after an untimed pass (the storage
    server's cache then is as warm as after a run's first epoch)."""
    return timed(lambda: [load((1, i)) for i in ids]) / len(ids)


def shared_reads(shared, ids: list[int]) -> dict:
    """Per-file seconds of reading samples from shared storage as GS does, and the client's CPU per file."""
    cpu = client_cpu_s()
    seconds = per_file(shared.load, ids)
    client = (client_cpu_s() - cpu) / (2 * len(ids))  # over per_file's two passes
    sizes = [shared.catalog.stat(i).nbytes for i in ids]
    return {"shared_file_s": seconds, "client_cpu_per_file_s": client, "files": len(ids),
            "sample_bytes": float(np.mean(sizes))}


def concurrent_reads(shared, ids: list[int], readers: int) -> dict:
    """`readers` threads reading distinct files of `ids` from shared storage at once, as GS reads them
    (after an untimed pass): the bytes per second they got together, and the mean seconds per file."""
    import threading

    pieces = [ids[slot::readers] for slot in range(readers)]
    times: list[float] = []

    def reader(piece: list[int]) -> None:
        for i in piece:
            started = time.perf_counter()
            shared.load((1, i))
            times.append(time.perf_counter() - started)  # list.append is atomic under the GIL

    def together() -> None:
        threads = [threading.Thread(target=reader, args=(piece,)) for piece in pieces]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    seconds = timed(together)
    timed_times = times[len(ids):]  # the timed pass's, after the untimed one's
    nbytes = sum(shared.catalog.stat(i).nbytes for i in ids)
    return {"readers": readers, "read_Bps": nbytes / seconds, "file_s": float(np.mean(timed_times))}


def local_rates(shared, store_dir: Path, ids: list[int], image_size: int, batch: int, big_bytes: int) -> dict:
    """From a node-local store holding `ids`: seconds per file read, and per file loaded the way a
    rank's loader loads a batch (read, seeded augmentation, decode, collate); a large node-local
    file's write and read rates."""
    from hpcshuffle.storage.loader import collate_skipping
    from hpcshuffle.storage.store import Store

    shutil.rmtree(store_dir, ignore_errors=True)
    try:
        with Store(store_dir / "store") as store:
            for i in ids:
                store.add(shared.catalog.meta(i), shared.load((1, i)), durable=False)
            store.sync()
        local = samples_of(shared.catalog.root, store_dir / "store", image_size)
        read_s = per_file(local.load, ids)
        batches = [ids[start:start + batch] for start in range(0, len(ids), batch)]
        loaded_s = timed(lambda: [collate_skipping(local.__getitems__([(1, i) for i in keys])) for keys in batches])
        big = store_dir / "big.bin"
        write_big_s = timed(lambda: write_file(big, big_bytes))
        read_big_s = timed(lambda: read_file(big))
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return {"local_file_s": read_s, "loaded_per_file_s": loaded_s / len(ids),
            "local_write_Bps": big_bytes / write_big_s, "local_read_Bps": big_bytes / read_big_s}


def fwbw_step(model_name: str, classes: int, image_size: int, batch: int):
    """(a call that runs FW+BW of `model_name` on one random batch, the model)."""
    import torch

    from hpcshuffle.models import build

    model, loss_fn = build(model_name, num_classes=classes), torch.nn.CrossEntropyLoss()
    images, labels = torch.randn(batch, 3, image_size, image_size), torch.randint(0, classes, (batch,))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()

    return step, model


def compute(model_name: str, classes: int, image_size: int, batch: int, repeats: int) -> dict:
    """FW+BW per sample on a batch, one thread, and the bytes of the model's gradients."""
    step, model = fwbw_step(model_name, classes, image_size, batch)
    fwbw_s = timed(step, repeats) / batch
    return {"fwbw_per_sample_s": fwbw_s, "gradient_bytes": 4.0 * sum(p.numel() for p in model.parameters())}


def _lockstep(barrier, results, rank: int, model_name: str, classes: int, image_size: int, batch: int,
              iterations: int) -> None:
    """One of `contention`'s ranks: `iterations` FW+BW steps, each followed by a barrier with the others,
    as synchronous SGD's allreduce makes them wait; puts (rank, iteration walls, own step seconds)."""
    import torch

    torch.set_num_threads(1)
    step, _ = fwbw_step(model_name, classes, image_size, batch)
    step()  # untimed: the first step allocates
    walls, steps = [], []
    barrier.wait()
    last = time.perf_counter()
    for _ in range(iterations):
        step()
        steps.append(time.perf_counter() - last)
        barrier.wait()
        now = time.perf_counter()
        walls.append(now - last)
        last = now
    results.put((rank, walls, steps))


def contention(model_name: str, classes: int, image_size: int, batch: int, ranks: int, iterations: int) -> dict:
    """`ranks` processes on this node doing FW+BW on a batch in lockstep (a barrier after every step),
    one thread each, as that many training ranks do when they share the node's cores: the mean and
    spread of an iteration (barrier to barrier, rank 0's clock), and each step's own seconds."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # torch in the children, none of its threads forked
    barrier, results = context.Barrier(ranks), context.Queue()
    workers = [context.Process(target=_lockstep, args=(barrier, results, rank, model_name, classes, image_size,
                                                       batch, iterations)) for rank in range(ranks)]
    for worker in workers:
        worker.start()
    try:
        gathered = sorted(results.get(timeout=RANK_WAIT_S) for _ in workers)
    except queue.Empty:
        codes = [worker.exitcode for worker in workers]
        for worker in workers:
            worker.kill()
        raise RuntimeError(f"the contention probe's ranks did not all finish within {RANK_WAIT_S} s "
                           f"(exit codes {codes}; None: still running): lower --iterations, or see their errors above") from None
    for worker in workers:
        worker.join()
    walls = np.array(gathered[0][1])
    steps = np.array([row[2] for row in gathered])
    return {"ranks": ranks, "iterations": iterations, "iteration_s": float(walls.mean()),
            "iteration_p10_s": float(np.percentile(walls, 10)), "iteration_p90_s": float(np.percentile(walls, 90)),
            "step_s": float(steps.mean()), "cpus": os.cpu_count()}


def probe_node(root: Path, big: Path, store: Path, files: int, image_size: int, batch: int, model: str,
               repeats: int, readers: tuple[int, ...] = ()) -> dict:
    """One node's rates: `files` dataset files of the ImageFolder `root` read from shared storage as GS
    reads them and the client's CPU on them, the large file `big` streamed, the same files read by each
    count of `readers` threads at once ("concurrent": the storage's rate with k readers), the same files
    from a store made (and removed) at `store`, loaded as batches of `batch` at `image_size`, and FW+BW
    of `model`."""
    import torch

    torch.set_num_threads(1)  # jobs/train.sbatch: threads = --cpus-per-task = 1
    started = time.perf_counter()
    shared = samples_of(root, None, image_size)
    count = min(files, len(shared.catalog))
    ids = sorted(int(i) for i in np.random.default_rng(0).choice(len(shared.catalog), size=count, replace=False))
    result = shared_reads(shared, ids)
    result["big_bytes"] = big.stat().st_size
    result["shared_read_Bps"] = result["big_bytes"] / timed(lambda: read_file(big))
    if readers:
        result["concurrent"] = [concurrent_reads(shared, ids, k) for k in readers]
    result.update(local_rates(shared, store, ids, image_size, batch, result["big_bytes"]))
    result.update(compute(model, len(shared.catalog.classes), image_size, batch, repeats))
    result["cpus"] = os.cpu_count()
    result["probe_s"] = time.perf_counter() - started
    return result


def probe_allreduce(model_name: str, repeats: int) -> dict | None:
    """Seconds per gradient allreduce of `model_name` between the ranks of this launch (gloo,
    `learner.average_gradients`), on rank 0; None on the others."""
    import torch

    from hpcshuffle.comm.world import discover, init_torch_distributed
    from hpcshuffle.models import build
    from hpcshuffle.training.learner import average_gradients

    world = discover()
    init_torch_distributed(world, "gloo", timeout_s=60)
    torch.set_num_threads(1)
    model = build(model_name, num_classes=10)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    seconds = timed(lambda: average_gradients(model, world.size), repeats)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()  # left to exit, gloo's threads abort the process (two ranks of one node)
    gradient_bytes = 4.0 * sum(p.numel() for p in model.parameters())
    return {"allreduce_s": seconds, "ranks": world.size, "gradient_bytes": gradient_bytes} if world.is_root else None
