"""The node-local sample store: one directory per rank, samples in files of their own or in packs,
one manifest (what lies where: layout.py).

Every write is atomic: the bytes go to a temporary name, are fsynced, then renamed over the
final name, and the directory is fsynced. The manifest is rewritten (atomically) only at
`commit`, once per epoch boundary; between commits the sample files and packs are the truth and
the manifest says what the store held at the last committed boundary.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xxhash

from hpcshuffle.files import (
    atomic_write,
    checksum_of,
    fsync_dir,
    read_chunks,
    read_exact,
    syncfs,
)
from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.storage.layout import (
    LOCATIONS,
    MANIFEST,
    read_manifest,
    sample_file,
    write_manifest,
)
from hpcshuffle.storage.packs import (
    PACK_SUFFIX,
    Location,
    Pack,
    read_pack_trailer,
    release,
    write_pack,
)


class StoreError(RuntimeError):
    """The store cannot be used as asked (locked by another job, out of sync with the plan...)."""


@dataclass(frozen=True)
class StoreDiff:
    """How a store differs from what a plan says it should hold."""

    missing: list[int]
    extra: list[int]

    @property
    def clean(self) -> bool:
        """True when the store holds exactly what the plan says."""
        return not self.missing and not self.extra


class Store:
    """A rank's node-local store.

    Args:
        root: the rank's own directory (ranks on one node must use different roots).
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.samples_dir = self.root / "samples"
        self.packs_dir = self.root / "packs"
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.packs_dir.mkdir(exist_ok=True)
        self._samples = str(self.samples_dir)
        self._lock = open(self.root / ".lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StoreError(
                f"store {self.root} is in use by another process; give each concurrent job "
                "its own storage.local_dir"
            ) from None
        self._where: dict[int, tuple[str, int]] = {}  # packed samples: id -> (pack name, offset)
        self._packs: dict[str, Pack] = {}
        try:
            self.epoch, self.plan_key, self._meta = self._load_manifest()
            self._sweep_temporaries()
            self._reconcile_with_files()
        except StoreError:
            self.close()
            raise

    # -- reading -------------------------------------------------------------------------

    def ids(self) -> set[int]:
        """The ids of the samples the store holds."""
        return set(self._meta)

    def __len__(self) -> int:
        return len(self._meta)

    def __contains__(self, sample_id: int) -> bool:
        return sample_id in self._meta

    def meta(self, sample_id: int) -> SampleMeta:
        """A held sample's meta (KeyError if not held)."""
        return self._meta[sample_id]

    def location(self, sample_id: int) -> Location | None:
        """Where a packed sample's bytes are; None for a sample in a file of its own (`file`)."""
        where = self._where.get(sample_id)
        if where is None:
            return None
        return Location(self._packs[where[0]].path, where[1], self._meta[sample_id].nbytes)

    def locations(self) -> dict[int, Location]:
        """`location` of every packed sample."""
        return {sample_id: self.location(sample_id) for sample_id in self._where}

    def file(self, sample_id: int) -> str:
        """The file holding a sample: its own, or its pack."""
        where = self._where.get(sample_id)
        if where is not None:
            return self._packs[where[0]].path
        return sample_file(self._samples, sample_id, self._meta[sample_id].relpath)

    def path(self, sample_id: int) -> Path:
        """`file` as a Path."""
        return Path(self.file(sample_id))

    def read_bytes(self, sample_id: int) -> bytes:
        """A held sample's bytes (`read_into` a new buffer); StoreError if its file was changed outside hpcshuffle."""
        buffer = bytearray(self._meta[sample_id].nbytes)
        self.read_into(sample_id, buffer)
        return bytes(buffer)

    def read_into(self, sample_id: int, buffer: memoryview | np.ndarray | bytearray) -> None:
        """Read a sample into `buffer`, exactly its size in the manifest (no bytes object made)."""
        view, path = memoryview(buffer).cast("B"), self.file(sample_id)
        expected = self._meta[sample_id].nbytes
        if len(view) != expected:
            raise ValueError(f"sample {sample_id} is {expected} bytes; the buffer has {len(view)}")
        where = self._where.get(sample_id)  # packed: the bytes at its offset; else its whole file
        if not read_exact(path, view, 0 if where is None else where[1], to_end=where is None):
            raise StoreError(
                f"store file {path} does not hold the {expected} bytes its manifest records for sample {sample_id}: "
                f"it was changed outside hpcshuffle; delete {self.root} and run again to restage it"
            )

    def verify(self, expected_ids) -> StoreDiff:
        """Compare the store with the ids a plan says it holds."""
        expected = {int(i) for i in expected_ids}
        held = self.ids()
        return StoreDiff(missing=sorted(expected - held), extra=sorted(held - expected))

    # -- writing -------------------------------------------------------------------------

    def add(self, meta: SampleMeta, data: bytes | Iterable[bytes], *, durable: bool = True) -> SampleMeta:
        """Store one sample (bytes, or chunks of a large file); returns its meta with checksum and size.

        In a batch pass durable=False, then call `sync` once for all of them.
        """
        if meta.sample_id in self._where:
            release(self.detach(meta.sample_id))  # its old bytes are in a pack: free them (a file is replaced)
        chunks = [data] if isinstance(data, bytes | bytearray | memoryview) else data
        checksum, nbytes = atomic_write(sample_file(self._samples, meta.sample_id, meta.relpath), chunks, durable=durable)
        meta = replace(meta, checksum=checksum, nbytes=nbytes)
        self._meta[meta.sample_id] = meta
        return meta

    def add_pack(
        self, metas: list[SampleMeta], payload: memoryview | np.ndarray | bytes, *, checked: bool
    ) -> list[SampleMeta]:
        """Store samples whose bytes lie back to back in `payload` (sizes from `metas`) as one pack
        file: one create and one write for all of them; durable only after `sync`.

        With `checked`, the caller has checked the bytes against the metas' checksums (the
        exchange's receiver); otherwise each sample is hashed here. A sample the store holds
        already has its old copy freed first (staging a changed or corrupt one again).
        Returns the metas stored.
        """
        for meta in metas:
            if meta.sample_id in self._meta:
                release(self.detach(meta.sample_id))
        name = uuid.uuid4().hex
        metas, self._packs[name] = write_pack(f"{self.packs_dir}/{name}{PACK_SUFFIX}", metas, payload, checked=checked)
        for meta, offset in zip(metas, self._packs[name].offsets, strict=True):
            self._meta[meta.sample_id] = meta
            self._where[meta.sample_id] = (name, offset)
        return metas

    def intact(self, sample_id: int) -> bool:
        """Re-read a stored sample and compare its size and checksum with the manifest."""
        meta = self._meta[sample_id]
        try:
            if sample_id not in self._where and self.path(sample_id).stat().st_size != meta.nbytes:
                return False
            return xxhash.xxh3_64_hexdigest(self.read_bytes(sample_id)) == meta.checksum
        except (FileNotFoundError, StoreError):
            return False

    def remove(self, sample_id: int) -> None:
        """Delete a sample from the store and free its bytes (its file, or its range of a pack) at once."""
        release(self.detach(sample_id))

    def detach(self, sample_id: int) -> str | tuple[str, int, int]:
        """Drop a sample from the store's record and return what frees its bytes, for the caller
        to hand to `release` before anything may write that sample again: its file, or its pack
        once no other sample is left in it, else (pack, start, end), the range to punch out of
        the pack (the gap between its live neighbours). Until then the bytes are like a sample
        received after the last commit: the next start takes a file back, and removes what the
        plan does not want; a range in a pack the manifest still names is simply not read.
        """
        where = self._where.pop(sample_id, None)
        if where is None:
            path = self.file(sample_id)
            del self._meta[sample_id]
            return path
        del self._meta[sample_id]
        pack = self._packs[where[0]]
        start, end, alone = self._gap(where[0], pack.offsets.index(where[1]))
        if alone:
            del self._packs[where[0]]
            return pack.path
        return pack.path, start, end

    def _live(self, name: str, pack: Pack, index: int) -> bool:
        return self._where.get(pack.ids[index]) == (name, pack.offsets[index])

    def _gap(self, name: str, index: int) -> tuple[int, int, bool]:
        """(start, end, no sample of the pack left) of the dead bytes around sample `index` of a pack."""
        pack = self._packs[name]
        before = next((i for i in range(index - 1, -1, -1) if self._live(name, pack, i)), None)
        after = next((i for i in range(index + 1, len(pack.ids)) if self._live(name, pack, i)), None)
        start = 0 if before is None else pack.offsets[before] + self._meta[pack.ids[before]].nbytes
        end = pack.payload_bytes if after is None else pack.offsets[after]
        return start, end, before is None and after is None

    def adopt(self, meta: SampleMeta) -> bool:
        """Take an uncommitted sample (see `orphans`) back into the store; True if it was taken.

        A file of its own is whole (written under a temporary name, then renamed); its checksum
        is computed here. A packed sample is taken only if its bytes still hash to the checksum
        its pack's trailer recorded: a pack whose samples all left the store is deleted after
        its other samples' ranges were punched, so a crash in between leaves an uncommitted pack
        with holes where samples were (their other copies were committed elsewhere first). One
        refused stays an orphan, for `discard_orphans`.
        """
        orphan = self.orphans.pop(meta.sample_id)
        if isinstance(orphan, Path):
            checksum, nbytes = checksum_of(read_chunks(orphan))
            self._meta[meta.sample_id] = replace(meta, checksum=checksum, nbytes=nbytes)
            orphan.rename(self.path(meta.sample_id))
            return True
        name, offset, nbytes, recorded = orphan
        pack, buffer = self._orphan_packs[name], bytearray(nbytes)
        if not read_exact(pack.path, memoryview(buffer), offset, to_end=False) or xxhash.xxh3_64_hexdigest(buffer) != recorded:
            self.orphans[meta.sample_id] = orphan
            return False
        self._packs.setdefault(name, pack)
        self._where[meta.sample_id] = (name, offset)
        self._meta[meta.sample_id] = replace(meta, checksum=recorded, nbytes=nbytes)
        return True

    def discard_orphans(self) -> None:
        """Delete what `adopt` did not take: files, packs none of whose samples were adopted, and
        the bytes of the others' samples that were not."""
        for sample_id, orphan in self.orphans.items():
            if isinstance(orphan, Path):
                orphan.unlink(missing_ok=True)
            elif orphan[0] in self._packs:
                pack = self._packs[orphan[0]]
                start, end, _ = self._gap(orphan[0], pack.offsets.index(orphan[1]))
                release((pack.path, start, end))
        for name, pack in self._orphan_packs.items():
            if name not in self._packs:
                release(pack.path)
        self.orphans, self._orphan_packs = {}, {}

    def sync(self) -> None:
        """Make every write, rename and unlink so far durable."""
        syncfs(self.samples_dir)
        fsync_dir(self.samples_dir)
        fsync_dir(self.packs_dir)

    def commit(self, epoch: int, plan_key: str) -> None:
        """Record durably that the store now holds what `plan_key`'s plan says for `epoch`."""
        self.sync()
        self.epoch, self.plan_key = epoch, plan_key
        write_manifest(self.root, epoch, plan_key, self._meta, self._where)

    def close(self) -> None:
        """Release the store's lock so another process may open it; safe to call twice."""
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- opening -------------------------------------------------------------------------

    def _load_manifest(self) -> tuple[int | None, str | None, dict[int, SampleMeta]]:
        path = self.root / MANIFEST
        if not path.exists():
            return None, None, {}
        try:
            epoch, plan_key, samples, where = read_manifest(path)
        except (ValueError, KeyError, TypeError) as err:
            raise StoreError(
                f"manifest {path} is unreadable ({err!r}); delete {self.root} to restage it"
            ) from err
        self._where.update(where)
        return epoch, plan_key, samples

    def _sweep_temporaries(self) -> None:
        for directory in (self.samples_dir, self.packs_dir):
            for tmp in directory.glob(".*.tmp*"):
                tmp.unlink()

    def _reconcile_with_files(self) -> None:
        """Forget manifest entries whose file or pack is gone; set aside samples that have no entry.

        A file without an entry, or a pack the manifest does not name, was received after the
        last commit. It is never deleted here: its sender may already have deleted its copy.
        `adopt` or `discard_orphans` decide.
        """
        on_disk = {int(p.name[:9]): p for p in self.samples_dir.iterdir() if p.name[:9].isdigit()}
        packs = {p.name[: -len(PACK_SUFFIX)]: str(p) for p in self.packs_dir.iterdir() if p.name.endswith(PACK_SUFFIX)}
        named = {name for name, _ in self._where.values()}
        self.orphans: dict[int, Path | tuple[str, int, int, str]] = {}
        self._orphan_packs: dict[str, Pack] = {}
        for name, path in sorted(packs.items()):
            try:
                metas, offsets, payload_bytes = read_pack_trailer(path)
            except (ValueError, TypeError, KeyError) as err:
                if name not in named:
                    continue  # never committed: a partly written pack cannot be one, so leave it to the user
                raise StoreError(
                    f"pack {path} is damaged ({err}); delete it, and the next start restages what it held"
                ) from None
            pack = Pack(path, payload_bytes, offsets, [meta.sample_id for meta in metas])
            if name in named:
                self._packs[name] = pack
                continue
            self._orphan_packs[name] = pack
            for meta, offset in zip(metas, offsets, strict=True):
                if meta.sample_id not in self._meta:
                    self.orphans[meta.sample_id] = (name, offset, meta.nbytes, meta.checksum)
        gone = [i for i in self._meta if i not in on_disk and self._where.get(i, ("",))[0] not in self._packs]
        for sample_id in gone:
            del self._meta[sample_id]
            self._where.pop(sample_id, None)
        self.orphans.update({i: path for i, path in on_disk.items() if i not in self._meta})
        self._free_dead_ranges()

    def _free_dead_ranges(self) -> None:
        """Punch out of the packs the manifest names the samples it does not: they left and were
        committed without, but a crash came before their bytes were freed."""
        for name, pack in self._packs.items():
            index = 0
            while index < len(pack.ids):
                if self._live(name, pack, index):
                    index += 1
                    continue
                start, end, _ = self._gap(name, index)
                release((pack.path, start, end))
                index = next((i for i in range(index + 1, len(pack.ids)) if self._live(name, pack, i)), len(pack.ids))


def published_locations(root: str | os.PathLike) -> dict[int, Location]:
    """Where the store at `root` keeps its packed samples, as of its last commit; readable while
    another process owns the store (a loader, the node's other ranks)."""
    path = Path(root) / LOCATIONS
    try:
        rows = json.loads(path.read_text())
        packs = f"{Path(root) / 'packs'}"
        return {int(i): Location(f"{packs}/{name}{PACK_SUFFIX}", int(offset), int(nbytes))
                for i, (name, offset, nbytes) in rows.items()}
    except FileNotFoundError:
        return {}  # committed before packs existed: every sample is a file of its own
    except (ValueError, TypeError, AttributeError) as err:
        raise StoreError(f"{path} is unreadable ({err!r}); delete {root} to restage it") from None
