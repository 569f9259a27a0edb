"""The run's dataset: synthesized on first use when the config asks, listed once on rank 0 and
shared with every rank (a parallel file system should not serve M directory scans), its reads
made honest as storage.shared_reads says (shared_io.py)."""

from __future__ import annotations

import fcntl
import json
from dataclasses import replace
from pathlib import Path

from hpcshuffle.comm.world import World, agree, on_root
from hpcshuffle.config import RunConfig
from hpcshuffle.config.groups import UNCACHED
from hpcshuffle.formats import get_format
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.synthetic import GENERATOR_VERSION
from hpcshuffle.storage.shared_io import (
    START_HINT,
    check_shared_dir,
    mount_of,
    node_memory_bytes,
    warnings_for,
)


def prepare_dataset(world: World, config: RunConfig) -> tuple[Catalog, Catalog]:
    """Collective: (training catalog, validation catalog), synthesizing the dataset first if asked.

    With storage.shared_dir, every node checks it is mounted before anything is listed or written
    there. Rank 0 prints what makes the run's shared reads not those of shared storage, when the
    strategy trains from it.
    """
    dataset, storage = config.dataset, config.storage
    if storage.shared_dir is not None:
        agree(world, check_shared_dir(storage.shared_dir))
    fmt = get_format(dataset.format)

    def listing() -> tuple[Catalog, Catalog]:
        if dataset.synthesize is not None:
            spec = dict(dataset.synthesize)
            data_seed = spec.pop("seed", config.seed)  # a study's seeds share one dataset
            ensure_synthetic(dataset.format, dataset.root, spec, data_seed, config.progress)
        train_split, val_split = fmt.splits
        return fmt.scan(dataset.root, train_split), fmt.scan(dataset.root, val_split)

    def reachable_listing() -> tuple[Catalog, Catalog]:
        try:
            return listing()
        except OSError as err:  # the file system itself, not a sample: name it and the way back
            raise DatasetError(
                f"dataset.root {dataset.root} cannot be read ({err.strerror or err}: {err.filename}); if it lies on "
                f"shared storage, bring that back (e.g. {START_HINT}) and run the same command again: a run "
                "resumes from its last checkpoint"
            ) from None

    train, val = on_root(world, reachable_listing, DatasetError, ValueError)
    missing = None if dataset.root.is_dir() else f"dataset.root {dataset.root} is not readable here"
    agree(world, missing)
    honest = {"uncached": storage.shared_reads == UNCACHED, "mount": mount_of(dataset.root).point}
    train, val = replace(train, **honest), replace(val, **honest)
    if world.is_root and config.strategy.trains_from_shared:
        for note in warnings_for(train, node_memory_bytes()):
            print(f"warning: {note}", flush=True)
    return train, val


def ensure_synthetic(format_name: str, root: Path, spec: dict, seed: int, progress: bool) -> None:
    """Synthesize the `format_name` dataset `spec` describes at `root`, unless it is there already.

    Concurrent runs take a lock beside `root`: one writes, the others wait and reuse it. A marker
    file records what was made; DatasetError if `root` holds another synthetic dataset, or data
    that is not one.
    """
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        # the runs of a sweep may start at once: one writes the dataset, the others wait and reuse it
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = root / ".synthetic.json"
        wanted = {"format": format_name, **spec, "seed": seed, "generator": GENERATOR_VERSION}
        if marker.exists():
            # markers written before datasets had formats name none: they were all ImageFolders
            found = {"format": "imagefolder", **json.loads(marker.read_text())}
            if found != wanted:
                raise DatasetError(
                    f"{root} holds a synthetic dataset made with {found}, not {wanted}; "
                    "delete it or point dataset.root elsewhere"
                )
            return
        if root.exists() and any(root.iterdir()):
            raise DatasetError(
                f"{root} exists but is not a complete synthetic dataset made here; to train on the data "
                f"there, name its format and make none (e.g. dataset=imagefolder dataset.root={root}, or "
                f"dataset={format_name} dataset.synthesize=null); to synthesize, delete it or point dataset.root "
                "at an empty directory"
            )
        get_format(format_name).synthesize(root, seed=seed, progress=progress, **spec)
        marker.write_text(json.dumps(wanted))
