"""Per-sample read throughput: the node-local store against shared storage (the GlusterFS mount of
scripts/shared_fs.sh), read with and without the page-cache guard, pass after pass.

A synthetic ImageFolder of ImageNet-sized JPEGs (`--size 352`: ~107 KB each, ImageNet's mean is
~110 KB) is written once under `<mount>/bench/` and reused by later runs (and by loader.py with
the same `--samples`/`--size`). Each run stages it into a fresh `Store` on this node's disk
(`--local-dir`, default $TMPDIR or /tmp, as `storage.local_dir`), then reads every sample in a
new random order per pass, `--passes` times, from:

- `local store`: the rank's store as local and partial shuffling read it (`Store.read_bytes`;
  the page cache may keep what an epoch read, as it does in a run);
- `shared, guarded`: the catalog on the mount as global shuffling reads it by default
  (`storage.shared_reads=uncached`: each file's pages are dropped after it is read, so every
  pass goes to the file system; the servers' own caches stay warm, as a real PFS's do);
- `shared, unguarded`: the same catalog with `uncached=False`: from pass 2 on this node's page
  cache serves it, which is the "potential caching" that makes global shuffling look free.

Before each storage's pass 1 every cache is emptied: as root by `echo 3 > /proc/sys/vm/drop_caches`
(which, with the brick on this machine, also empties the server's cache), otherwise by dropping
each file's pages (posix_fadvise DONTNEED; the server's cache stays warm), as the header says.
`--repeats` rounds of all three; the table gives the median and the range over them.

The last line, `shared/local read ratio: X`, is the local store's samples/s over the guarded
mount's, both over passes 2..k (the steady state every later epoch pays): how many times slower
an epoch's reads are under global shuffling than under local shuffling on this node. X > 1 means
shared storage is slower. The cold pass's ratio is printed on the line before.

    python benchmarks/shared_io.py [--samples 2000] [--size 352] [--passes 3] [--threads 1] [--repeats 3]
    python benchmarks/shared_io.py --samples 64 --size 32 --passes 2 --repeats 1     # a few seconds

The mount must be up (`bash scripts/shared_fs.sh status`); as root this starts it
(`bash scripts/shared_fs.sh start`), otherwise it fails saying so. The first run at a size
writes the dataset to the mount (~1 min for the default); later runs take ~45 s.

Measured on the 2-core VM (brick on the same virtual disk, so the GlusterFS client and server
share the two cores), defaults, samples/s, median of 3 repeats per run:

- the default mount (direct I/O, the client caches nothing), 2 runs:

      local store        cold 4,700-4,750  passes 2-3 24,000-34,000  (page cache)
      shared, guarded    cold   620-670    passes 2-3    870-940
      shared, unguarded  cold   680        passes 2-3    850-920     (nothing to cache)
      shared/local read ratio: 32.07, 31.78

- mounted with the page cache (`HPCSHUFFLE_SHARED_DIRECT_IO=0`), 2 runs of 3 repeats:

      local store        cold 4,300-5,450  passes 2-3 21,000-38,000
      shared, guarded    cold   680-840    passes 2-3    850-1,170
      shared, unguarded  cold   630-760    passes 2-3  1,260-1,650
      shared/local read ratio: 28.14, 30.67 (by repeat 24-33); cold pass 5.7-7.0

  Without the guard the second pass is only ~1.4x faster: on the FUSE mount opening and closing
  a file costs ~0.4 ms of a ~0.9 ms read even when its pages are cached, so the page cache saves
  the data transfer, not the round trips. `--threads 8`: guarded 1,900-2,200, local
  7,000-15,600 (the threads contend for the GIL), ratio 5.6-6.4.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hpcshuffle.formats.catalog import Catalog
from hpcshuffle.formats.imagefolder import scan
from hpcshuffle.formats.synthetic import GENERATOR_VERSION
from hpcshuffle.staging.dataset import ensure_synthetic
from hpcshuffle.storage.shared_io import START_HINT, direct_io, mount_of, shared_volume
from hpcshuffle.storage.store import Store

NUM_CLASSES = 10


def shared_dataset(mount: Path, num_samples: int, image_size: int, seed: int = 0) -> Catalog:
    """The benchmark ImageFolder on the mount (written on first use, then reused), its train split's
    catalog guarded (uncached=True, storage.shared_reads' default) and knowing its mount."""
    root = mount / "bench" / f"imagefolder-{num_samples}x{image_size}px-seed{seed}-v{GENERATOR_VERSION}"
    spec = {"samples": num_samples, "classes": NUM_CLASSES, "size": image_size, "val_samples": NUM_CLASSES}
    if not (root / ".synthetic.json").exists():  # written last; present: a reader needs no write access
        ensure_synthetic("imagefolder", root, spec, seed, progress=sys.stderr.isatty())
    return replace(scan(root, "train"), uncached=True, mount=mount)


def drop_caches() -> bool:
    """Empty the page, dentry and inode caches of this machine (root only); False if not allowed."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
    except OSError:
        return False
    return True


def evict(paths: Sequence[Path]) -> None:
    """Drop these files' pages from this node's page cache (any user may: posix_fadvise DONTNEED)."""
    for path in paths:
        with open(path, "rb") as file:
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def make_cold(paths: Sequence[Path]) -> str:
    """Empty the caches before a cold pass; says how."""
    if drop_caches():
        return "drop_caches"
    evict(paths)
    return "DONTNEED"


@dataclass(frozen=True)
class Source:
    """One way to read the samples: its name, read(sample id) -> bytes, and its files."""

    name: str
    read: Callable[[int], bytes]
    paths: list[Path]


def pass_table(rates: dict[str, list[list[float]]], mbps: dict[str, list[list[float]]]) -> None:
    """Per source and pass (samples/s and MB/s of each repeat): the median samples/s, their range, the median MB/s."""
    width = max(map(len, rates)) + 1
    print(f"{'source':<{width}} {'pass':>4} {'samples/s':>9} {'range':>13} {'MB/s':>7}")
    for name, passes in rates.items():
        for epoch, repeats in enumerate(passes):
            print(f"{name:<{width}} {epoch + 1:>4} {np.median(repeats):>9.0f} {spread(repeats):>13} "
                  f"{np.median(mbps[name][epoch]):>7.1f}")


def steady(passes: list[list[float]]) -> list[float]:
    """Per repeat, the mean samples/s over passes 2..k (pass 1 is cold)."""
    return [float(np.mean([rates[repeat] for rates in passes[1:]])) for repeat in range(len(passes[0]))]


def read_pass(read: Callable[[int], bytes], sample_ids: np.ndarray, threads: int) -> tuple[float, int]:
    """(seconds, bytes) to read `sample_ids` once, on `threads` threads."""
    start = time.perf_counter()
    if threads == 1:
        nbytes = sum(len(read(sample_id)) for sample_id in sample_ids.tolist())
    else:
        with ThreadPoolExecutor(threads) as pool:
            nbytes = sum(map(len, pool.map(read, sample_ids.tolist())))
    return time.perf_counter() - start, nbytes


def stage(catalog: Catalog, store: Store, threads: int = 8) -> None:
    """Copy every sample of `catalog` into `store`, flushed once at the end."""
    with ThreadPoolExecutor(threads) as pool:
        datas = pool.map(catalog.read_bytes, range(len(catalog)))
        for sample_id, data in enumerate(datas):
            store.add(catalog.meta(sample_id), data, durable=False)
    store.commit(0, "benchmarks/shared_io.py")


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}-{max(values):.0f}"


def read_options(parser: argparse.ArgumentParser) -> None:
    """The options of a read comparison, shared with benchmarks/shards.py."""
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--size", type=int, default=352, help="image side; 352: ~107 KB JPEGs (ImageNet ~110 KB)")
    parser.add_argument("--passes", type=int, default=3, help="epochs over the samples; pass 1 is cold")
    parser.add_argument("--threads", type=int, default=1, help="reads in flight at once")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of all three sources")
    parser.add_argument("--seed", type=int, default=0)


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> None:
    """Refuse a count below 1 (--passes below 2: pass 1 is cold), naming the option."""
    for name in names:
        least = 2 if name == "passes" else 1
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(args, name)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    read_options(parser)
    parser.add_argument("--local-dir", default=os.environ.get("TMPDIR", "/tmp"), help="where the store goes")
    args = parser.parse_args()
    check_counts(parser, args, ("samples", "passes", "threads", "repeats"))

    on_shared_volume("benchmarks/shared_io.py", measure, args)


def on_shared_volume(script: str, measure: Callable[[argparse.Namespace, Path, str], None],
                     args: argparse.Namespace) -> None:
    """`measure(args, mount, how it was found)` on the GlusterFS volume, which is stopped after when it
    was started here (as root); without it, exit naming how to start it."""
    with shared_volume() as (mount, found):
        if mount is None:
            sys.exit(f"{script} needs the GlusterFS volume mounted: {found}. "
                     f"Start it as root with `{START_HINT}` (see scripts/shared_fs.sh), then run this again.")
        measure(args, mount, found)


def measure(args: argparse.Namespace, mount: Path, found: str) -> None:
    guarded = shared_dataset(mount, args.samples, args.size, args.seed)
    unguarded = replace(guarded, uncached=False)
    shared_paths = [guarded.path(sample_id) for sample_id in range(len(guarded))]
    work = Path(tempfile.mkdtemp(prefix="hpcshuffle-bench-shared_io-", dir=args.local_dir))
    try:
        with Store(work / "rank00000") as store:
            stage(guarded, store)
            sources = [
                Source("local store", store.read_bytes, [store.path(i) for i in range(len(guarded))]),
                Source("shared, guarded", guarded.read_bytes, shared_paths),
                Source("shared, unguarded", unguarded.read_bytes, shared_paths),
            ]
            # rates[source][pass] -> samples/s per repeat; mbps likewise
            rates = {source.name: [[] for _ in range(args.passes)] for source in sources}
            mbps = {source.name: [[] for _ in range(args.passes)] for source in sources}
            cold_how = set()
            for repeat in range(args.repeats):
                for source in sources:
                    cold_how.add(make_cold(source.paths))
                    for epoch in range(args.passes):
                        order = np.random.default_rng([args.seed, repeat, epoch]).permutation(args.samples)
                        seconds, nbytes = read_pass(source.read, order, args.threads)
                        rates[source.name][epoch].append(args.samples / seconds)
                        mbps[source.name][epoch].append(nbytes / seconds / 1e6)
            total_bytes = sum(path.stat().st_size for path in shared_paths)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    local_fs = mount_of(work)
    print(f"{args.samples} JPEGs of {args.size}x{args.size} (mean {total_bytes / args.samples / 1e3:.0f} KB), "
          f"{args.threads} thread(s), new random order each pass, median and range of {args.repeats} repeats")
    print(f"shared: {guarded.root} on {mount_of(guarded.root).fs_type} ({found}); "
          f"local store: {args.local_dir} on {local_fs.fs_type} ({local_fs.source})")
    if direct_io(mount_of(guarded.root).point):
        print("the mount uses direct I/O: its client caches nothing, so guarded and unguarded read alike "
              "(HPCSHUFFLE_SHARED_DIRECT_IO=0 bash scripts/shared_fs.sh start mounts it with the page cache)")
    if cold_how == {"drop_caches"}:
        print("pass 1 cold: echo 3 > /proc/sys/vm/drop_caches before each source (the server's caches too)")
    else:
        print("pass 1 cold: not root (or /proc/sys not writable), so each file's pages were dropped "
              "(posix_fadvise DONTNEED) instead of drop_caches: the servers' caches stayed warm")
    pass_table(rates, mbps)
    local, shared = steady(rates["local store"]), steady(rates["shared, guarded"])
    by_repeat = [lo / sh for lo, sh in zip(local, shared)]
    cold = [lo / sh for lo, sh in zip(rates["local store"][0], rates["shared, guarded"][0])]
    print(f"local/guarded-shared samples/s, pass 1 (cold): {np.median(cold):.2f} (range {min(cold):.2f}-{max(cold):.2f}); "
          f"passes 2..{args.passes} by repeat: " + ", ".join(f"{ratio:.2f}" for ratio in by_repeat))
    print(f"shared/local read ratio: {np.median(by_repeat):.2f}")


if __name__ == "__main__":
    main()
