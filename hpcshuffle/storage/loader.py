"""Dataset / Sampler / DataLoader glue: a rank reads the ids its plan lists, from where they live.

Local and partial shuffling read from the node-local store; global shuffling and validation
read the shared dataset (global shuffling through a planned cache with `cache.policy`,
node_cache.py); locality-aware loading reads its store, shared storage for what no node holds,
and trains on bytes peers lent it (loans.py). The format's codec turns bytes into tensors.
Items carry their sample id so the training loop can audit exactly what it trained on.

Random augmentation is seeded by (run seed, epoch, sample id), not by a process's RNG stream:
a sample is augmented alike whichever rank reads it, with any number of loader workers, and
after a resume, so a resumed run repeats an uninterrupted one exactly.

With `io_threads` > 1 (or `decode_threads` > 0) a batch is fetched by fetch.py: all its reads at
once, each sample decoded as its bytes arrive, the batch in completion order. The draws above
make every sample's tensor the same either way; only the order inside a batch changes.

With loader.decode=gpu, a fraction of each training batch (`raw_fraction`) leaves the worker
still encoded, with its drawn crop (`RawImage`), and the batch carries those bytes beside the
decoded samples (`EncodedBatch`, collate.py) for the training process to decode on its device
(device_decode.py). The draws are the same, so are the crop boxes and flips.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from hpcshuffle.config.groups import LoaderConfig
from hpcshuffle.files import atomic_write, read_at
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.codec import Codec
from hpcshuffle.plan import FROM_LOAN, FROM_SHARED
from hpcshuffle.storage.collate import collate_skipping
from hpcshuffle.storage.fetch import BatchFetcher
from hpcshuffle.storage.layout import sample_path
from hpcshuffle.storage.node_cache import NOT_CACHED, cache_file
from hpcshuffle.storage.packs import Location
from hpcshuffle.storage.shared_io import check_still_there
from hpcshuffle.storage.store import published_locations
from hpcshuffle.storage.worker_start import (
    WORKERS_FROM,
    ignore_stop_signals,
    start_worker_server,
)

ON_ERROR = ("fail", "skip")

# torch's CPU RNG is one per process: decode threads seed and augment one at a time, so every
# sample draws its own numbers (a forked child gets a fresh lock: a copied, held one stays held)
_rng_lock = threading.Lock()


def _new_rng_lock() -> None:
    global _rng_lock
    _rng_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_rng_lock)


class SampleKey(NamedTuple):
    """What the loader asks `Samples` for: a sample of an epoch, and where its bytes come from.

    By default from the rank's store (or shared storage without one). Locality-aware loading
    also reads samples no cache holds from shared storage (`shared`) and trains on samples a
    peer lent it (`lent`: the bytes themselves, nothing to read). With a planned cache
    (node_cache.py), `cached` names the copy to read instead of shared storage and `admit` the
    copy to write after reading it (NOT_CACHED: none). When a node's ranks share its samples
    (storage.scope=node), `home` is the store that holds it (an index into `store_roots`).
    A sample a store keeps in a pack has its `location` there (store.py); None: a file of its own.
    `raw`: hand the sample over encoded, with its drawn crop, for the training process to decode.
    """

    epoch: int
    sample_id: int
    shared: bool = False
    lent: bytes | None = None
    cached: int = NOT_CACHED
    admit: int = NOT_CACHED
    home: int = -1
    location: Location | None = None
    raw: bool = False


def augmentation_seed(seed: int, epoch: int, sample_id: int) -> int:
    """The seed of a sample's augmentation in an epoch: the same whichever rank, worker or run reads it."""
    return int(np.random.SeedSequence([seed, epoch, sample_id]).generate_state(1)[0])


class Samples(Dataset):
    """Samples keyed by `SampleKey` (or a plain (epoch, sample id)), read from node-local stores or
    shared storage, decoded by `codec`.

    Args:
        catalog: the split's listing (labels, where each sample's bytes are).
        codec: the format's decoder (formats/codec.py).
        store_roots: where sample `i` lives: `store_roots[i % len(store_roots)]`, or the key's
            `home` where it has one. One root: the rank's own store (local, partial). Several: a
            node replica split over the node's ranks (global with storage.replica), or the
            stores of a node's ranks (storage.scope=node). None: the catalog, i.e. shared storage.
        train: augment (seeded by `seed`, the epoch and the sample id).
        on_error: a sample that cannot be read or decoded either fails the run naming its file
            ("fail") or is left out of its batch and counted ("skip"; the item is None).
        io_threads, decode_threads: per loader process, the threads that read a batch's files
            and those that decode them (0: the thread that asked for the batch decodes); see
            fetch.py (config: loader.io_threads, loader.decode_threads; Lobster's split of a
            worker's threads between loading and preprocessing). The default 1, 0 reads one
            sample after another.
            Training augmentation holds torch's one RNG, so it runs one sample at a time however
            many decode threads there are; reads still overlap it.
        cache_dir: the rank's planned cache (node_cache.py), for keys that read or admit copies.
        raw_fraction: of each training batch, the share (its first samples) handed over encoded
            (`RawImage`, by the codec's `encoded`) for the training process to decode
            (loader.decode=gpu with loader.gpu_fraction); 0: the workers decode everything.
    """

    def __init__(
        self, catalog: Catalog, codec: Codec, store_roots: list[Path] | None, train: bool, seed: int = 0,
        on_error: str = "fail", io_threads: int = 1, decode_threads: int = 0, cache_dir: Path | None = None,
        raw_fraction: float = 0.0,
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if not 0.0 <= raw_fraction <= 1.0:
            raise ValueError(f"raw_fraction must be in [0, 1], got {raw_fraction}")
        if raw_fraction and not (train and hasattr(codec, "encoded")):
            raise ValueError("only training samples of a codec with `encoded` (ImageFolder JPEGs) can stay encoded")
        self.raw_fraction = raw_fraction
        self.catalog = catalog
        self.codec = codec
        self.store_roots = store_roots
        self.train = train
        self.seed = seed
        self.on_error = on_error
        self.cache_dir = cache_dir
        threaded = io_threads > 1 or decode_threads > 0
        self.fetcher = BatchFetcher(self.load, self.decode, io_threads, decode_threads) if threaded else None

    def __len__(self) -> int:
        return len(self.catalog)

    def from_shared(self, shared: bool) -> bool:
        """Whether a read goes to shared storage: asked for, or no store to read instead."""
        return shared or not self.store_roots

    def where(self, sample_id: int, shared: bool = False, home: int = -1, location: Location | None = None) -> Path:
        """The file holding a sample: the catalog's on shared storage, its pack, or its file in the
        store at `store_roots[home]` (by default `sample_id % len(store_roots)`)."""
        if self.from_shared(shared):
            return self.catalog.path(sample_id)
        if location is not None:
            return Path(location.path)
        root = self.store_roots[home if home >= 0 else sample_id % len(self.store_roots)]
        return sample_path(root, sample_id, self.catalog.relpaths[sample_id])

    def read(self, sample_id: int, shared: bool = False, home: int = -1, location: Location | None = None) -> bytes:
        """A sample's bytes from `where` (for a packed one, just its range of the pack); ValueError if
        its pack ends short of it."""
        if self.from_shared(shared):
            return self.catalog.read_bytes(sample_id)
        if location is None:
            return self.where(sample_id, home=home).read_bytes()
        data = bytearray(location.nbytes)
        fd = os.open(location.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            got = read_at(fd, memoryview(data), location.offset)
        finally:
            os.close(fd)
        if got != location.nbytes:
            raise ValueError(f"its pack ends {location.nbytes - got} bytes short of the sample")
        return bytes(data)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int | torch.Tensor, int] | None:
        return self.decode(key, self.load(key))

    def __getitems__(self, keys: list[tuple[int, int]]) -> list:
        """A batch (DataLoader calls this): in completion order with threads, else in key order."""
        if self.raw_fraction:
            encoded = round(self.raw_fraction * len(keys))
            keys = [SampleKey(*key)._replace(raw=True) if i < encoded else key for i, key in enumerate(keys)]
        if self.fetcher is None:
            return [self[key] for key in keys]
        return self.fetcher.fetch(keys)

    def load(self, key: tuple[int, int]) -> bytes | None:
        """The sample's bytes; None if it is skipped."""
        key = SampleKey(*key)
        if key.lent is not None:
            return key.lent
        if key.cached != NOT_CACHED:
            try:
                return cache_file(self.cache_dir, key.sample_id, key.cached).read_bytes()
            except FileNotFoundError:
                pass  # another worker is still writing the copy: shared storage has the sample too
        try:
            data = self.read(key.sample_id, key.shared, key.home, key.location)
        except (OSError, ValueError) as err:
            if isinstance(err, OSError) and self.from_shared(key.shared):
                check_still_there(self.catalog, err)  # fails the run whatever loader.on_error says
            return self.unreadable(key.sample_id, err, key.shared, home=key.home, location=key.location)
        if key.admit != NOT_CACHED:
            path = cache_file(self.cache_dir, key.sample_id, key.admit)
            try:
                atomic_write(path, [data], durable=False)  # the cache starts empty after a crash
            except OSError as err:
                raise DatasetError(
                    f"cannot write sample {key.sample_id} into the cache at {path}: {err}; free space "
                    "under storage.local_dir, lower cache.samples, or set cache.policy=none"
                ) from None
        return data

    def decode(self, key: tuple[int, int], data: bytes | None) -> tuple[torch.Tensor, int | torch.Tensor, int] | None:
        """(input, target, sample id), augmented as (seed, epoch, sample id) say; None if skipped."""
        if data is None:
            return None
        key = SampleKey(*key)
        label = self.catalog.labels[key.sample_id]
        try:
            if not self.train:
                return (*self.codec.decode(data, label, train=False), key.sample_id)
            sample_seed = augmentation_seed(self.seed, key.epoch, key.sample_id)
            with _rng_lock, torch.random.fork_rng(devices=[]):
                torch.manual_seed(sample_seed)
                if key.raw:
                    return (*self.codec.encoded(data, label), key.sample_id)
                return (*self.codec.decode(data, label, train=True), key.sample_id)
        except (OSError, ValueError) as err:  # codecs raise SampleError, a ValueError
            return self.unreadable(key.sample_id, err, key.shared, lent=key.lent is not None, home=key.home,
                                   location=key.location)

    def unreadable(self, sample_id: int, err: Exception, shared: bool = False, lent: bool = False,
                   home: int = -1, location: Location | None = None) -> None:
        """None in skip mode; else the DatasetError naming the sample's file."""
        if self.on_error == "skip":
            return None
        origin = "the bytes a peer lent" if lent else self.where(sample_id, shared, home, location)
        raise DatasetError(
            f"cannot read sample {sample_id} ({self.catalog.relpaths[sample_id]}) from {origin}: {err}; "
            "replace or remove the file, or set loader.on_error=skip to leave unreadable samples out "
            "(they are counted as `skipped` in metrics.jsonl)"
        ) from None


class Locator:
    """Where the stores at `roots` keep their packed samples, as each published at its last commit:
    `locator(sample_id, home)` is the key's `location` (None: a file of its own)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.tables = [published_locations(root) for root in roots]

    def __call__(self, sample_id: int, home: int = -1) -> Location | None:
        return self.tables[home if home >= 0 else sample_id % len(self.tables)].get(sample_id)


class EpochOrder(Sampler[SampleKey]):
    """Yields a `SampleKey` for each id the plan says this rank trains on this epoch, in the plan's order.

    Locality-aware loading also gives each position's source (`EpochPlan.sources`)
    and `borrow(step)`, which returns the (id, bytes) lent to this rank for a step (loans.py),
    waiting for them if they are still in flight. The sampler runs in the training process, so
    lent bytes reach the loader's workers inside their keys. Global shuffling with a planned
    cache gives, per position, the cached copy to read and the copy to write (node_cache.py).
    A data path reading stores sets `locate` (a `Locator`) each epoch, for samples kept in packs.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.sample_ids: Sequence[int] = ()
        self.sources: Sequence[int] | None = None
        self.borrow: Callable[[int], list[tuple[int, bytes]]] | None = None
        self.steps: Sequence[int] = ()
        self.cache: tuple[list[int], list[int]] | None = None
        self.homes: Sequence[int] | None = None
        self.locate: Locator | None = None

    def set_order(
        self, sample_ids: np.ndarray, epoch: int = 0, sources: np.ndarray | None = None,
        borrow: Callable[[int], list[tuple[int, bytes]]] | None = None, steps: np.ndarray | None = None,
        cache: tuple[np.ndarray, np.ndarray] | None = None, homes: np.ndarray | None = None,
    ) -> None:
        """`sample_ids` in training order; for locality, `sources` and `steps` (each position's step,
        `PlanSpec.step_of`) aligned with them, and `borrow`; for a planned cache, `cache` =
        (read_from, write_as) aligned with them; for a node's shared samples, `homes` (the store
        holding each, `EpochPlan.homes`)."""
        if (sources is None) != (borrow is None):
            raise ValueError("locality-aware loading needs both the sources of the samples and a way to borrow")
        self.epoch = epoch
        self.sample_ids = sample_ids.tolist()
        self.sources = None if sources is None else sources.tolist()
        self.borrow = borrow
        self.steps = () if steps is None else steps.tolist()
        self.cache = None if cache is None else (cache[0].tolist(), cache[1].tolist())
        self.homes = None if homes is None else homes.tolist()

    def __iter__(self) -> Iterator[SampleKey]:
        if self.sources is not None:
            return self._locality_keys()
        if self.cache is not None:
            return (SampleKey(self.epoch, sample_id, cached=cached, admit=admit)
                    for sample_id, cached, admit in zip(self.sample_ids, *self.cache))
        homes = self.homes or itertools.repeat(-1)
        if self.locate is not None:
            return (SampleKey(self.epoch, sample_id, home=home, location=self.locate(sample_id, home))
                    for sample_id, home in zip(self.sample_ids, homes))
        return (SampleKey(self.epoch, sample_id, home=home) for sample_id, home in zip(self.sample_ids, homes))

    def _locality_keys(self) -> Iterator[SampleKey]:
        lent: dict[int, list[bytes]] = defaultdict(list)
        borrowed_step = None
        homes = self.homes or itertools.repeat(-1)
        for sample_id, source, step, home in zip(self.sample_ids, self.sources, self.steps, homes):
            if source != FROM_LOAN:
                shared = source == FROM_SHARED
                location = None if shared or self.locate is None else self.locate(sample_id, home)
                yield SampleKey(self.epoch, sample_id, shared=shared, home=home, location=location)
                continue
            if step != borrowed_step:  # the step's first borrowed sample: take in all of them
                for lent_id, data in self.borrow(step):
                    lent[lent_id].append(data)
                borrowed_step = step
            yield SampleKey(self.epoch, sample_id, lent=lent[sample_id].pop())

    def __len__(self) -> int:
        return len(self.sample_ids)


def make_loader(dataset: Dataset, sampler: Sampler, batch_size: int, workers: int, pin_memory: bool) -> DataLoader:
    """A DataLoader of `dataset` in `sampler`'s order: batches of `batch_size` (the last may be
    short) without the skipped samples (`collate_skipping`), from `workers` processes kept across
    epochs that leave stop signals to their rank (0: the calling process loads)."""
    if workers > 0:
        start_worker_server()
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=pin_memory,
        drop_last=False,
        collate_fn=collate_skipping,
        worker_init_fn=ignore_stop_signals if workers > 0 else None,
        multiprocessing_context=WORKERS_FROM if workers > 0 else None,
    )


def validation_loader(catalog: Catalog, codec: Codec, rank: int, num_ranks: int, batch_size: int,
                      loader: LoaderConfig, pin_memory: bool) -> DataLoader:
    """The validation split as rank `rank` of `num_ranks` reads it: every `num_ranks`-th sample from
    `rank` on, in id order and unaugmented, from shared storage."""
    order = EpochOrder()
    order.set_order(torch.arange(rank, len(catalog), num_ranks).numpy())
    return make_loader(
        Samples(catalog, codec, None, train=False, on_error=loader.on_error,
                io_threads=loader.io_threads, decode_threads=loader.decode_threads), order,
        batch_size, loader.workers, pin_memory=pin_memory,
    )
