"""The node-local sample store: one directory per rank, one file per sample, one manifest.

Layout::

    <root>/samples/<sample_id:09d><suffix>   the sample's bytes, exactly as in the dataset
    <root>/manifest.json                     {"epoch", "plan_key",
                                              "samples": {id: [relpath, label, nbytes, xxh3, source_mtime_ns]}}
    <root>/.lock                             held (flock) while a process owns the store

Every write is atomic: the bytes go to a temporary name, are fsynced, then renamed over the
final name, and the directory is fsynced. The manifest is rewritten (atomically) only at
`commit`, once per epoch boundary; between commits the sample files are the truth and the
manifest says what the store held at the last committed boundary.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xxhash

MANIFEST = "manifest.json"
CHUNK_BYTES = 8 << 20  # large files are read, hashed and written in pieces of this size
_LIBC = ctypes.CDLL(None, use_errno=True)


class StoreError(RuntimeError):
    """The store cannot be used as asked (locked by another job, out of sync with the plan...)."""


@dataclass(frozen=True)
class SampleMeta:
    """What the store keeps about a sample besides its bytes.

    `nbytes` and `checksum` describe the bytes (checked on every verify and after every
    transfer); `source_mtime_ns` is the source file's mtime when it was staged, so a dataset
    changed since staging is noticed.
    """

    sample_id: int
    relpath: str  # path inside the dataset root, e.g. "train/class_003/000123.jpg"
    label: int
    nbytes: int = 0
    checksum: str = ""
    source_mtime_ns: int = 0

    def row(self) -> list:
        return [self.relpath, self.label, self.nbytes, self.checksum, self.source_mtime_ns]


def read_chunks(path: Path, *, uncached: bool = False) -> Iterator[bytes]:
    """A file's bytes in pieces of at most CHUNK_BYTES, so large samples never sit whole in memory.

    With `uncached`, the file's pages are dropped from this node's page cache once it is read
    (posix_fadvise DONTNEED), so the next read goes to the file system again (shared_io.py).
    """
    with open(path, "rb") as source:
        try:
            while chunk := source.read(CHUNK_BYTES):
                yield chunk
        finally:
            if uncached:
                drop_cached(source.fileno())


def drop_cached(fd: int, offset: int = 0, length: int = 0) -> None:
    """Drop `length` bytes of an open file from `offset` (0: to its end) from this node's page
    cache (posix_fadvise DONTNEED), so the next read of them goes to the file system again."""
    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def checksum_of(chunks: Iterable[bytes]) -> tuple[str, int]:
    """(xxh3-64 hex digest, total bytes) of an iterable of byte chunks."""
    hasher, nbytes = xxhash.xxh3_64(), 0
    for chunk in chunks:
        hasher.update(chunk)
        nbytes += len(chunk)
    return hasher.hexdigest(), nbytes


def rank_dir(local_dir: Path, rank: int) -> Path:
    """Each rank's own store directory under the node-local directory."""
    return Path(local_dir) / f"rank{rank:05d}"


@dataclass(frozen=True)
class StoreDiff:
    """How a store differs from what a plan says it should hold."""

    missing: list[int]
    extra: list[int]

    @property
    def clean(self) -> bool:
        return not self.missing and not self.extra


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


def _fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _syncfs(path: Path) -> None:
    """Flush the whole file system holding `path` in one call (Linux syncfs; os.sync elsewhere).

    One flush for a batch of files costs about one fsync instead of one per file.
    """
    syncfs = getattr(_LIBC, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}) failed: {os.strerror(err)}")
    finally:
        os.close(fd)


def atomic_write(
    path: str | os.PathLike, chunks: Iterable[bytes | memoryview | np.ndarray], *, durable: bool = True, hashed: bool = True
) -> tuple[str, int]:
    """Write `chunks` to `path` so that a crash leaves either the old file or the new one.

    With durable=False the data and the rename are not flushed yet: the caller flushes a
    whole batch at once (`Store.sync`) before anything depends on it. With hashed=False the
    bytes are not hashed (the caller has checked them already) and the checksum returned is "".

    Returns:
        (checksum, nbytes) of what was written, hashed on the way.
    """
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f".{name}.tmp{os.getpid()}.{threading.get_ident()}")
    hasher, nbytes = xxhash.xxh3_64() if hashed else None, 0
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                nbytes += len(view)
                if hasher is not None:
                    hasher.update(view)
                while view:  # os.write may write less than asked (signals, > 2 GiB)
                    view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # a failed source read or a full disk leaves nothing behind
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(directory or ".")
    return (hasher.hexdigest() if hasher is not None else ""), nbytes


class Store:
    """A rank's node-local store.

    Args:
        root: the rank's own directory (ranks on one node must use different roots).
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.samples_dir = self.root / "samples"
        self.samples_dir.mkdir(parents=True, exist_ok=True)
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
        try:
            self.epoch, self.plan_key, self._meta = self._load_manifest()
        except StoreError:
            self.close()
            raise
        self._sweep_temporaries()
        self._reconcile_with_files()

    # -- reading -------------------------------------------------------------------------

    def ids(self) -> set[int]:
        return set(self._meta)

    def __len__(self) -> int:
        return len(self._meta)

    def __contains__(self, sample_id: int) -> bool:
        return sample_id in self._meta

    def meta(self, sample_id: int) -> SampleMeta:
        return self._meta[sample_id]

    def file(self, sample_id: int) -> str:
        return sample_file(self._samples, sample_id, self._meta[sample_id].relpath)

    def path(self, sample_id: int) -> Path:
        return Path(self.file(sample_id))

    def read_bytes(self, sample_id: int) -> bytes:
        with open(self.file(sample_id), "rb") as source:
            return source.read()

    def read_into(self, sample_id: int, buffer: memoryview | np.ndarray) -> None:
        """Read a sample into `buffer`, exactly its size in the manifest (no bytes object made)."""
        view, path = memoryview(buffer).cast("B"), self.file(sample_id)
        expected = self._meta[sample_id].nbytes
        if len(view) != expected:
            raise ValueError(f"sample {sample_id} is {expected} bytes; the buffer has {len(view)}")
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            while view and (got := os.readv(fd, [view])):
                view = view[got:]
            extra = os.read(fd, 1)
        finally:
            os.close(fd)
        if view or extra:
            raise StoreError(
                f"store file {path} is not the {expected} bytes its manifest records: it was changed "
                f"outside hpcshuffle; delete {self.root} and run again to restage it"
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
        chunks = [data] if isinstance(data, bytes | bytearray | memoryview) else data
        checksum, nbytes = atomic_write(sample_file(self._samples, meta.sample_id, meta.relpath), chunks, durable=durable)
        meta = replace(meta, checksum=checksum, nbytes=nbytes)
        self._meta[meta.sample_id] = meta
        return meta

    def add_checked(self, meta: SampleMeta, data: memoryview | np.ndarray) -> None:
        """Store a sample whose bytes the caller has checked against `meta` (size and checksum),
        without hashing them again (the exchange's receiver); durable only after `sync`."""
        atomic_write(sample_file(self._samples, meta.sample_id, meta.relpath), [data], durable=False, hashed=False)
        self._meta[meta.sample_id] = meta

    def intact(self, sample_id: int) -> bool:
        """Re-read a stored sample and compare its size and checksum with the manifest."""
        meta = self._meta[sample_id]
        path = self.path(sample_id)
        try:
            if path.stat().st_size != meta.nbytes:
                return False
            return checksum_of(read_chunks(path))[0] == meta.checksum
        except FileNotFoundError:
            return False

    def remove(self, sample_id: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.detach(sample_id))

    def detach(self, sample_id: int) -> str:
        """Drop a sample from the store's record and return its file, for the caller to delete
        before anything may write that sample again. Until then the file is like one received
        after the last commit: the next start takes it back and removes what the plan does not want.
        """
        path = self.file(sample_id)
        del self._meta[sample_id]
        return path

    def adopt(self, meta: SampleMeta) -> None:
        """Take an uncommitted file (see `orphans`) back into the store; its checksum is computed here."""
        path = self.orphans.pop(meta.sample_id)
        checksum, nbytes = checksum_of(read_chunks(path))
        self._meta[meta.sample_id] = replace(meta, checksum=checksum, nbytes=nbytes)
        path.rename(self.path(meta.sample_id))

    def discard_orphans(self) -> None:
        for path in self.orphans.values():
            path.unlink(missing_ok=True)
        self.orphans = {}

    def sync(self) -> None:
        """Make every write, rename and unlink so far durable."""
        _syncfs(self.samples_dir)
        _fsync_dir(self.samples_dir)

    def commit(self, epoch: int, plan_key: str) -> None:
        """Record durably that the store now holds what `plan_key`'s plan says for `epoch`."""
        self.sync()
        self.epoch, self.plan_key = epoch, plan_key
        manifest = {
            "epoch": epoch,
            "plan_key": plan_key,
            "samples": {str(i): m.row() for i, m in sorted(self._meta.items())},
        }
        atomic_write(self.root / MANIFEST, [json.dumps(manifest).encode()])

    def close(self) -> None:
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
            manifest = json.loads(path.read_text())
            samples = {
                int(key): SampleMeta(int(key), relpath, int(label), int(nbytes), checksum, int(mtime_ns))
                for key, (relpath, label, nbytes, checksum, mtime_ns) in manifest["samples"].items()
            }
            return manifest["epoch"], manifest["plan_key"], samples
        except (ValueError, KeyError, TypeError) as err:
            raise StoreError(
                f"manifest {path} is unreadable ({err!r}); delete {self.root} to restage it"
            ) from err

    def _sweep_temporaries(self) -> None:
        for tmp in self.samples_dir.glob(".*.tmp*"):
            tmp.unlink()

    def _reconcile_with_files(self) -> None:
        """Forget manifest entries whose file is gone; set aside files that have no entry.

        A file without an entry was received after the last commit. It is never deleted here:
        its sender may already have deleted its copy. `adopt` or `discard_orphans` decide.
        """
        on_disk = {int(p.name[:9]): p for p in self.samples_dir.iterdir() if p.name[:9].isdigit()}
        for sample_id in [i for i in self._meta if i not in on_disk]:
            del self._meta[sample_id]
        self.orphans = {i: path for i, path in on_disk.items() if i not in self._meta}
