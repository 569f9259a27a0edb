"""Loading throughput: a DataLoader reading one sample after another against the same DataLoader
fetching each batch unordered on threads (hpcshuffle/fetch.py), from an emulated parallel file system.

Both read the same shuffled ids of a synthetic ImageFolder through `Samples` and `make_loader`:
the same W worker processes, batch size, and decoding with training augmentation
(RandomResizedCrop to 224 + flips, the ImageNet recipe). The only difference is the threads
inside each worker (default 8 reading + 2 decoding).

The file system is emulated: every file read first sleeps `--latency-ms` (default 2 ms, the
open+read latency of a small file on a busy Lustre/GPFS), then reads the file from the warm page
cache. `time.sleep` releases the GIL, as the wait on a network file system does.

Threads can only hide the wait, so with every core busy decoding the ratio is bounded by
(wait + decode) / decode, printed with the table. The default side of 320 (~87 KiB JPEGs, near
ImageNet's ~110 KB mean) costs about 2-2.5 ms of one core to decode and augment here, about the
read wait: the latency-bound regime the fetcher is for, where a worker that reads one file after
another sits idle nearly half the time (measured ratio on 2 cores: 1.57-1.60). At `--size 384`
(~124 KiB) decoding takes 3-4 ms, the 2 cores become the bottleneck, and the bound falls to
1.5-1.65 (measured 1.35). Training augmentation draws from torch's one RNG per process, so a
worker's decode threads augment one sample at a time (loader.py); `--decode-threads 0`, where the
worker's own thread decodes, does as well here. The first batch (worker start-up) is not timed.

    python benchmarks/loader.py [--samples 2000] [--size 320] [--latency-ms 2] [--workers 2]
    python benchmarks/loader.py --samples 128 --size 64 --batches 3      # a few seconds

Prints a table and, last, `unordered/DataLoader ratio: X` (samples/s of the threaded fetcher over
the plain DataLoader; > 1 is faster).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hpcshuffle.formats.catalog import Catalog
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.formats.imagefolder import make_codec, scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.loader import EpochOrder, Samples, make_loader


@dataclass(frozen=True)
class EmulatedPFS(Catalog):
    """A catalog whose every file read waits `latency_s` first, like a parallel file system."""

    latency_s: float = 0.002

    def read_bytes(self, sample_id: int) -> bytes:
        time.sleep(self.latency_s)  # releases the GIL, as a network file system wait does
        return super().read_bytes(sample_id)


@dataclass(frozen=True)
class Run:
    method: str
    threads: str
    batches: int
    samples: int
    seconds: float
    fingerprints: dict[int, float]  # sample id -> sum over a sparse grid of its pixels


def load_all(samples: Samples, sample_ids: np.ndarray, batch_size: int, workers: int, method: str, threads: str) -> Run:
    """Iterate one epoch of `sample_ids`; the clock starts when the first batch is in."""
    order = EpochOrder()
    order.set_order(sample_ids, epoch=0)
    batches = iter(make_loader(samples, order, batch_size, workers, pin_memory=False))
    next(batches)  # warm-up: worker start-up and the first reads
    start = time.perf_counter()
    num_batches = num_samples = 0
    fingerprints = {}
    for images, _, ids, skipped in batches:
        assert skipped == 0, f"{skipped} samples skipped"
        num_batches += 1
        num_samples += len(ids)
        # a sparse grid: enough to tell crops apart, cheap enough not to take the workers' cores
        fingerprints.update(zip(ids.tolist(), images[:, :, ::7, ::7].double().sum((1, 2, 3)).tolist()))
    return Run(method, threads, num_batches, num_samples, time.perf_counter() - start, fingerprints)


def decode_ms(samples: Samples, count: int) -> float:
    """Mean decode+augment time of one sample on one core, from the page cache (no read wait)."""
    datas = [samples.catalog.root.joinpath(samples.catalog.relpaths[i]).read_bytes() for i in range(count)]
    samples.decode((0, 0), datas[0])
    start = time.perf_counter()
    for sample_id, data in enumerate(datas):
        samples.decode((0, sample_id), data)
    return (time.perf_counter() - start) / count * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--size", type=int, default=320, help="stored image side; 320: ~87 KiB JPEGs")
    parser.add_argument("--image-size", type=int, default=224, help="training crop side")
    parser.add_argument("--augment", default="standard", choices=("standard", "flip", "none"))
    parser.add_argument("--latency-ms", type=float, default=2.0, help="emulated file system wait per file read")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (both methods)")
    parser.add_argument("--io-threads", type=int, default=8, help="reading threads per worker (unordered)")
    parser.add_argument("--decode-threads", type=int, default=2, help="decoding threads per worker (unordered)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default: the whole dataset)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of both methods; each "
                        "method's fastest counts (other load on the machine can only slow a run down)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="default: a temporary directory under $TMPDIR")
    args = parser.parse_args()
    num_batches = args.batches if args.batches is not None else args.samples // args.batch_size - 1
    if num_batches < 1 or (num_batches + 1) * args.batch_size > args.samples:
        parser.error(f"--batches {num_batches} (+1 warm-up) x --batch-size {args.batch_size} needs "
                     f"{(num_batches + 1) * args.batch_size} samples, --samples is {args.samples}")
    torch.set_num_threads(1)  # as in the DataLoader's workers: one core each

    work = Path(tempfile.mkdtemp(prefix="hpcshuffle-bench-loader-", dir=args.workdir))
    try:
        root = synth_imagefolder(work / "data", args.samples, 10, num_val_samples=10, image_size=args.size)
        listing = scan(root, "train")
        catalog = EmulatedPFS(listing.root, listing.classes, listing.relpaths, listing.labels, args.latency_ms / 1000)
        codec = make_codec(root, listing, DatasetOptions(args.augment, args.image_size))
        total_bytes = sum(len(catalog.root.joinpath(relpath).read_bytes()) for relpath in catalog.relpaths)  # warm
        sample_ids = np.random.default_rng(args.seed).permutation(args.samples)[: (num_batches + 1) * args.batch_size]

        def samples(io_threads: int, decode_threads: int) -> Samples:
            return Samples(catalog, codec, None, train=True, seed=args.seed,
                           io_threads=io_threads, decode_threads=decode_threads)

        threads = f"{args.io_threads}+{args.decode_threads}"
        decode_times_ms, plain_runs, unordered_runs = [], [], []
        for _ in range(args.rounds):
            decode_times_ms.append(decode_ms(samples(1, 0), min(64, args.samples)))
            plain_runs.append(load_all(samples(1, 0), sample_ids, args.batch_size, args.workers,
                                       "DataLoader (per sample)", "1"))
            unordered_runs.append(load_all(samples(args.io_threads, args.decode_threads), sample_ids, args.batch_size,
                                           args.workers, "DataLoader + unordered fetch", threads))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    reference = plain_runs[0].fingerprints
    same = all(run.fingerprints.keys() == reference.keys() and all(
        np.isclose(run.fingerprints[i], reference[i], rtol=1e-9) for i in reference) for run in plain_runs + unordered_runs)
    plain, unordered = (min(runs, key=lambda run: run.seconds) for runs in (plain_runs, unordered_runs))
    runs = [plain, unordered]
    per_sample_decode_ms = min(decode_times_ms)
    ceiling = (args.latency_ms + per_sample_decode_ms) / per_sample_decode_ms
    print(f"{args.samples} JPEGs of {args.size}x{args.size} (mean {total_bytes / args.samples / 1024:.0f} KiB), "
          f"training crop {args.image_size} ({args.augment} augmentation), batch {args.batch_size}, "
          f"page cache warm, first batch not timed, fastest of {args.rounds} interleaved rounds")
    print(f"emulated parallel file system: every file read sleeps {args.latency_ms:g} ms first "
          f"(time.sleep releases the GIL, like a network file system wait)")
    print(f"per sample: {args.latency_ms:g} ms read wait + {per_sample_decode_ms:.1f} ms decode+augment on one core; "
          f"ceiling with decoding the bottleneck (wait + decode) / decode = {ceiling:.2f}")
    print(f"{'method':<30} {'workers':>7} {'threads':>7} {'batches':>7} {'seconds':>8} {'samples/s':>9}")
    for run in runs:
        print(f"{run.method:<30} {args.workers:>7} {run.threads:>7} {run.batches:>7} {run.seconds:>8.2f} "
              f"{run.samples / run.seconds:>9.1f}")
    for run_list in (plain_runs, unordered_runs):
        print(f"{run_list[0].method} samples/s by round: "
              + ", ".join(f"{run.samples / run.seconds:.1f}" for run in run_list))
    print(f"same samples and tensors per sample id, every round: {'yes' if same else 'NO'}")
    ratio = (unordered.samples / unordered.seconds) / (plain.samples / plain.seconds)
    print(f"unordered/DataLoader ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
