"""Plain file I/O, the lowest layer every other one may use: atomic, durable writes (`atomic_write`,
`fsync_dir`, `syncfs`), a file that exactly one of several processes creates (`create_first`),
reads (`read_chunks` in pieces, `read_at`, `read_exact`) that can leave this node's page cache as
it was (`drop_cached`), the checksum every stored sample carries (`checksum_of`), and JSON-lines
records (`append_jsonl`, `read_jsonl`: metrics.jsonl, audit.jsonl).

Nothing here knows what a sample, a pack, a manifest or a run is (storage/, training/metrics.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import xxhash

CHUNK_BYTES = 8 << 20  # large files are read, hashed and written in pieces of this size
_LIBC = ctypes.CDLL(None, use_errno=True)


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


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the entries of directory `path` (files created, renamed or unlinked in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def syncfs(path: Path) -> None:
    """Flush the whole file system holding `path` in one call (Linux syncfs; os.sync elsewhere).

    One flush for a batch of files costs about one fsync instead of one per file.
    """
    libc_syncfs = getattr(_LIBC, "syncfs", None)
    if libc_syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc_syncfs(fd) != 0:
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
        fsync_dir(directory or ".")
    return (hasher.hexdigest() if hasher is not None else ""), nbytes


def create_first(path: Path, text: str) -> bool:
    """Create `path` holding `text` unless it exists; whether this call created it. Of processes
    racing for one path, even on different nodes of a shared file system, exactly one wins
    (O_EXCL). Other errors (a directory that cannot be written) are raised."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return True


def read_at(fd: int, view: memoryview, offset: int) -> int:
    """Read into all of `view` from `offset` of `fd` (fewer bytes only at the file's end); bytes read."""
    done = 0
    while done < len(view) and (got := os.preadv(fd, [view[done:]], offset + done)):
        done += got
    return done


def read_exact(path: str, view: memoryview, offset: int, *, to_end: bool) -> bool:
    """Read `len(view)` bytes at `offset` of `path` into `view`; whether the file held them all
    and, with `to_end`, ended there."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        got = read_at(fd, view, offset)
        return got == len(view) and not (to_end and os.pread(fd, 1, offset + len(view)))
    finally:
        os.close(fd)


def append_jsonl(path: Path, record: dict) -> None:
    """Append `record` as one JSON line to `path` (created if missing)."""
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


def read_jsonl(path: Path, partial_last: bool = False) -> list[dict]:
    """The records of a JSON-lines file.

    Args:
        partial_last: leave out a cut-off last line (a run killed mid-write) instead of failing;
            a bad line before it fails either way.
    """
    lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if not (partial_last and number == len(lines)):
                raise ValueError(f"{path}:{number} is not JSON ({err}); repair it or move that run away") from err
    return records
