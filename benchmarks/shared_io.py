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
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from hpcshuffle.storage.shared_io import direct_io, mount_of
from hpcshuffle.storage.store import Store
from hpcshuffle.studies.shared_reads import (
    Source,
    check_counts,
    make_cold,
    on_shared_volume,
    pass_table,
    read_options,
    read_pass,
    shared_dataset,
    stage,
    steady,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    read_options(parser)
    parser.add_argument("--local-dir", default=os.environ.get("TMPDIR", "/tmp"), help="where the store goes")
    args = parser.parse_args()
    check_counts(parser, args, ("samples", "passes", "threads", "repeats"))

    on_shared_volume("benchmarks/shared_io.py", measure, args)


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
