"""Reading one epoch from shared storage: the same images as small files and as tar shards.

Metadata operations are what a parallel file system pays most for (an open, a stat and a close per
small file), which is why datasets at scale are packed into shards. This benchmark measures what
that buys on the GlusterFS mount of scripts/shared_fs.sh, with the page-cache guard on
(`storage.shared_reads=uncached`: each file's pages are dropped after it is read, so every pass
goes to the file system):

- `files`: the ImageFolder, one file per sample read in a new random order per pass (how global
  shuffling reads shared storage);
- `shards, pread`: the same images packed into WebDataset tar shards (`hpcshuffle pack`,
  shuffled), each sample read on its own: open its shard, one positioned read, close (how
  staging reads a sample whose shard a store does not take whole, and how global shuffling's
  loader reads `dataset=webdataset`);
- `shards, sequential`: every shard read whole in one read, in a random shard order
  (`ShardedCatalog.read_shard`: how staging reads a shard a store takes whole, before keeping
  it as one pack).

The images are `shared_io.py`'s synthetic ImageFolder (written on first use under
`<mount>/bench/`, ~107 KB JPEGs at the default `--size 352`), packed next to it
`--shard-samples` to a tar. Before each source's first pass every cache is emptied
(`hpcshuffle.studies.shared_reads.make_cold`). `--repeats` rounds of all three; the table gives the median and range.

Then the shuffle quality shards cost, from the plans (no I/O): `--workers` ranks training
`--epochs` epochs of PLS at `--q`, sample by sample against whole shards of `--shard-samples`
(`shuffle.unit=shard`) moving the same number of samples, with shuffle buffers of 0 (a full
shuffle of what a rank holds), 4 shards and 1 shard. Two pair-mixing scores (analysis/quality.py,
1.0 = global shuffling): `worker`, the run's `mixing` (pairs that shared a worker in some epoch),
and `batch` (pairs that shared a local batch), which is what a shuffle buffer changes.

The last line, `shards/files read ratio: X`, is `shards, sequential` samples/s over `files`
samples/s in the steady passes (2..k), the median over repeats: how many times faster an epoch's
reads from shared storage are when the dataset is packed. X > 1 means shards are faster.

    python benchmarks/shards.py [--samples 2000] [--size 352] [--shard-samples 100] [--passes 3] [--threads 1]
                                [--repeats 3] [--workers 4] [--q 0.3] [--epochs 5] [--batch 32]
    python benchmarks/shards.py --samples 64 --size 32 --shard-samples 16 --passes 2 --repeats 1   # seconds

The mount must be up (`bash scripts/shared_fs.sh status`); as root this starts it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from hpcshuffle.analysis.quality import PairMixing
from hpcshuffle.formats import webdataset
from hpcshuffle.formats.catalog import Catalog
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.shared_io import direct_io, mount_of
from hpcshuffle.studies.shared_reads import (
    Source,
    check_counts,
    make_cold,
    on_shared_volume,
    pass_table,
    read_options,
    read_pass,
    shared_dataset,
    steady,
)


def shard_dataset(images: Catalog, shard_samples: int, seed: int) -> webdataset.WebDatasetCatalog:
    """`images` packed into tar shards next to it (on first use), its train split guarded like `images`."""
    root = images.root.with_name(f"{images.root.name}-wds{shard_samples}")
    if not (root / "train" / webdataset.INDEX).exists():  # the index is written last
        webdataset.pack(images.root, root, shard_samples=shard_samples, seed=seed, progress=sys.stderr.isatty())
    return replace(webdataset.scan(root, "train"), uncached=True, mount=images.mount)


def quality(spec: PlanSpec, epochs: int) -> tuple[float, float, float]:
    """(samples sent per epoch, worker mixing, batch mixing) after `epochs` epochs of PLS under `spec`."""
    workers = PairMixing(spec.num_samples, spec.num_ranks)
    batches = PairMixing(spec.num_samples, spec.num_ranks * spec.iterations)
    sent = 0
    for plan in plan_epochs(spec, "partial", epochs):
        sent += sum(plan.sent_counts())
        worker = workers.add_epoch(plan.order)["quality"]
        batch = batches.add_epoch([order[start:stop] for start, stop in spec.steps_from(0) for order in plan.order])
    return sent / epochs, worker, batch["quality"]


def quality_table(args: argparse.Namespace, sample_bytes: float) -> list[str]:
    """Sample-PLS against shard-PLS moving as many samples: the shards' q moves ⌊k/G⌋ whole shards of
    the k = ⌊q·⌊N/M⌋⌋ samples it allows, and sample-PLS runs at the q that moves exactly that many."""
    base = {"num_samples": args.samples, "num_ranks": args.workers, "batch_size": args.batch}
    shard_size, share = args.shard_samples, args.samples // args.workers
    moved = int(args.q * share + 1e-9) // shard_size * shard_size
    rows = [("samples", moved / share, 0, PlanSpec(**base, q=moved / share))]
    for buffer in (0, 4 * shard_size, shard_size):
        rows.append((f"shards of {shard_size}", args.q, buffer,
                     PlanSpec(**base, q=args.q, shard_samples=shard_size, shuffle_buffer=buffer)))
    lines = [f"PLS moving {moved} of a rank's {share} samples per epoch, {args.workers} ranks, b={args.batch}, after "
             f"{args.epochs} epochs (pair mixing, 1.0 = global shuffling):",
             f"{'unit':<16} {'q':>5} {'buffer':>6} {'buffer MB':>9} {'sent/epoch':>10} {'worker':>7} {'batch':>7}"]
    for unit, q, buffer, spec in rows:
        sent, worker, batch = quality(spec, args.epochs)
        memory = f"{buffer * sample_bytes / 1e6:.1f}" if buffer else "-"
        lines.append(f"{unit:<16} {q:>5.3g} {buffer or 'full':>6} {memory:>9} {sent:>10.0f} "
                     f"{worker:>7.3f} {batch:>7.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    read_options(parser)
    parser.add_argument("--shard-samples", type=int, default=100, help="images per tar shard")
    parser.add_argument("--workers", type=int, default=4, help="ranks of the quality comparison")
    parser.add_argument("--q", type=float, default=0.3, help="PLS exchange fraction of the quality comparison")
    parser.add_argument("--epochs", type=int, default=5, help="epochs of the quality comparison")
    parser.add_argument("--batch", type=int, default=32, help="b of the quality comparison")
    args = parser.parse_args()
    check_counts(parser, args,
                 ("samples", "shard_samples", "passes", "threads", "repeats", "workers", "epochs", "batch"))

    on_shared_volume("benchmarks/shards.py", measure, args)


def measure(args: argparse.Namespace, mount: Path, found: str) -> None:
    files = shared_dataset(mount, args.samples, args.size, args.seed)
    shards = shard_dataset(files, args.shard_samples, args.seed)
    shard_paths = [shards.root / name for name in shards.shards]
    samples_of = [len(shards.shard_samples(shard)) for shard in range(len(shard_paths))]
    assert sum(samples_of) == len(files) == args.samples, "the shards do not hold the ImageFolder's images"
    sources = [
        Source("files", files.read_bytes, [files.path(i) for i in range(len(files))]),
        Source("shards, pread", shards.read_bytes, shard_paths),
        Source("shards, sequential", shards.read_shard, shard_paths),
    ]
    units = {"files": args.samples, "shards, pread": args.samples, "shards, sequential": len(shard_paths)}
    rates = {source.name: [[] for _ in range(args.passes)] for source in sources}  # samples/s per repeat
    mbps = {source.name: [[] for _ in range(args.passes)] for source in sources}
    for repeat in range(args.repeats):
        for source in sources:
            make_cold(source.paths)
            for epoch in range(args.passes):
                order = np.random.default_rng([args.seed, repeat, epoch]).permutation(units[source.name])
                seconds, nbytes = read_pass(source.read, order, args.threads)
                rates[source.name][epoch].append(args.samples / seconds)
                mbps[source.name][epoch].append(nbytes / seconds / 1e6)

    image_bytes = sum(path.stat().st_size for path in sources[0].paths)
    tar_bytes = sum(path.stat().st_size for path in shard_paths)
    print(f"{args.samples} JPEGs of {args.size}x{args.size} (mean {image_bytes / args.samples / 1e3:.0f} KB) as files "
          f"and as {len(shard_paths)} tar shards of {args.shard_samples} ({tar_bytes / len(shard_paths) / 1e6:.1f} MB "
          f"each), {args.threads} thread(s), new random order each pass, median and range of {args.repeats} repeats")
    direct = "; the mount uses direct I/O (its client caches nothing)" if direct_io(mount_of(files.root).point) else ""
    print(f"shared: {files.root.parent} on {mount_of(files.root).fs_type} ({found}){direct}")
    pass_table(rates, mbps)
    print("\n".join(quality_table(args, image_bytes / args.samples)))
    files_rate = steady(rates["files"])
    for name in ("shards, pread", "shards, sequential"):
        by_repeat = [rate / base for rate, base in zip(steady(rates[name]), files_rate)]
        print(f"{name} / files samples/s, passes 2..{args.passes} by repeat: "
              + ", ".join(f"{ratio:.2f}" for ratio in by_repeat))
    by_repeat = [rate / base for rate, base in zip(steady(rates["shards, sequential"]), files_rate)]
    print(f"shards/files read ratio: {np.median(by_repeat):.2f}")


if __name__ == "__main__":
    main()
