"""Reading a dataset from the GlusterFS volume of scripts/shared_fs.sh against a node-local store, as the
read benchmarks do (benchmarks/shared_io.py, shards.py, loader.py): the benchmark ImageFolder on the
mount, emptied caches before a cold pass, one pass of reads on threads and its table, and the options
and volume handling they share."""

from __future__ import annotations

import argparse
import os
import sys
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
from hpcshuffle.storage.shared_io import START_HINT, shared_volume
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
    """The range of samples/s over repeats, e.g. `620-670`."""
    return f"{min(values):.0f}-{max(values):.0f}"


def read_options(parser: argparse.ArgumentParser) -> None:
    """The options of a read comparison (benchmarks/shared_io.py, shards.py)."""
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


def on_shared_volume(script: str, measure: Callable[[argparse.Namespace, Path, str], None],
                     args: argparse.Namespace) -> None:
    """`measure(args, mount, how it was found)` on the GlusterFS volume, which is stopped after when it
    was started here (as root); without it, exit naming how to start it."""
    with shared_volume() as (mount, found):
        if mount is None:
            sys.exit(f"{script} needs the GlusterFS volume mounted: {found}. "
                     f"Start it as root with `{START_HINT}` (see scripts/shared_fs.sh), then run this again.")
        measure(args, mount, found)
