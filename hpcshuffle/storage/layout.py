"""Where a node-local store keeps what, and what it records of each sample.

Layout::

    <root>/samples/<sample_id:09d><suffix>   a sample's bytes, exactly as in the dataset
    <root>/packs/<name>.pack                 many samples' bytes back to back, then a trailer
                                             listing them (see `write_pack`, packs.py)
    <root>/manifest.json                     {"epoch", "plan_key",
                                              "samples": {id: [relpath, label, nbytes, xxh3, source_mtime_ns
                                                               (, pack name, offset)]}}
    <root>/locations.json                    {id: [pack name, offset, nbytes]} of the packed samples,
                                             published with the manifest for loaders and node peers
    <root>/.lock                             held (flock) while a process owns the store

`<root>` is a rank's own directory under the node-local one (`rank_dir`); a manifest row is a
`SampleMeta` (formats/catalog.py). Reading a manifest raises what parsing raises (ValueError, KeyError, TypeError);
the store turns that into a StoreError that says what to do (store.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from hpcshuffle.files import atomic_write
from hpcshuffle.formats.catalog import SampleMeta

MANIFEST = "manifest.json"
LOCATIONS = "locations.json"  # where packed samples are, for readers without the store (`published_locations`)


def rank_dir(local_dir: Path, rank: int) -> Path:
    """Each rank's own store directory under the node-local directory."""
    return Path(local_dir) / f"rank{rank:05d}"


def sample_file(samples_dir: str, sample_id: int, relpath: str) -> str:
    """Where a store keeps a sample: its id, zero-padded, with the original file's suffix.

    Plain strings, as the exchange computes this for every sample it moves (pathlib costs
    microseconds a call); the suffix is pathlib's (`PurePath.suffix`).
    """
    name = relpath.rpartition("/")[2]
    dot = name.rfind(".")
    suffix = name[dot:] if 0 < dot < len(name) - 1 else ""
    return f"{samples_dir}/{sample_id:09d}{suffix}"


def sample_path(store_root: Path, sample_id: int, relpath: str) -> Path:
    """`sample_file` of the store at `store_root`, as a Path."""
    return Path(sample_file(str(Path(store_root) / "samples"), sample_id, relpath))


def read_manifest(path: Path) -> tuple[int, str, dict[int, SampleMeta], dict[int, tuple[str, int]]]:
    """(epoch, plan key, samples, where the packed ones are: id -> (pack name, offset)) of a manifest."""
    manifest = json.loads(path.read_text())
    samples, where = {}, {}
    for key, row in manifest["samples"].items():
        relpath, label, nbytes, checksum, mtime_ns, *packed = row
        if packed:
            name, offset = packed
            where[int(key)] = (str(name), int(offset))
        samples[int(key)] = SampleMeta(int(key), relpath, int(label), int(nbytes), checksum, int(mtime_ns))
    return manifest["epoch"], manifest["plan_key"], samples, where


def write_manifest(
    root: Path, epoch: int, plan_key: str, metas: dict[int, SampleMeta], where: dict[int, tuple[str, int]]
) -> None:
    """Record durably, in the store at `root`, that it holds `metas` (the packed ones at `where`)
    for `plan_key`'s plan at `epoch`: the published locations first, then the manifest."""
    manifest = {
        "epoch": epoch,
        "plan_key": plan_key,
        "samples": {str(i): m.row() + list(where.get(i, ())) for i, m in sorted(metas.items())},
    }
    locations = {str(i): [name, offset, metas[i].nbytes] for i, (name, offset) in sorted(where.items())}
    atomic_write(root / LOCATIONS, [json.dumps(locations).encode()])
    atomic_write(root / MANIFEST, [json.dumps(manifest).encode()])
