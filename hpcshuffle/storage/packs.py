"""Packs: many samples' bytes back to back in one file of the node-local store, then a trailer
listing them; how one is written and read back, and how a packed sample's bytes are freed.

A pack is what one exchange message brought or one staged shard: one create and one write for
many samples instead of one each. A packed sample that leaves the store has its bytes freed in
place (a hole punched in the pack), and the pack is deleted with its last sample, so the store's
bytes stay those of the samples it holds. Which samples of a pack are still live is the store's
record (store.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import struct
from dataclasses import dataclass, field, replace

import numpy as np
import xxhash

from hpcshuffle.files import atomic_write
from hpcshuffle.formats.catalog import SampleMeta

PACK_SUFFIX = ".pack"
PACK_FOOTER = struct.Struct("<Q8s")  # a pack ends with its trailer's length and this magic
PACK_MAGIC = b"HSPACK01"
_LIBC = ctypes.CDLL(None, use_errno=True)
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


@dataclass(frozen=True)
class Location:
    """Where a packed sample's bytes are: `nbytes` at `offset` of the pack file `path`."""

    path: str
    offset: int
    nbytes: int


@dataclass
class Pack:
    """A pack the store holds samples in: their offsets (ascending) and ids, and where its trailer starts."""

    path: str
    payload_bytes: int
    offsets: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)


def write_pack(
    path: str, metas: list[SampleMeta], payload: memoryview | np.ndarray | bytes, *, checked: bool
) -> tuple[list[SampleMeta], Pack]:
    """Write samples whose bytes lie back to back in `payload` (sizes from `metas`) as one pack
    file, their trailer after them; durable only after the store's `sync`.

    With `checked`, the caller has checked the bytes against the metas' checksums (the
    exchange's receiver); otherwise each sample is hashed here.

    Returns:
        (the metas written, with their checksums; the pack).
    """
    view = memoryview(payload).cast("B")
    offsets = list(itertools.accumulate((meta.nbytes for meta in metas), initial=0))
    if offsets[-1] != len(view):
        raise ValueError(f"{len(view)} payload bytes for samples of {offsets[-1]}")
    if not checked:
        metas = [replace(meta, checksum=xxhash.xxh3_64_hexdigest(view[start:end]))
                 for meta, start, end in zip(metas, offsets, offsets[1:])]
    atomic_write(path, [view, pack_trailer(metas, offsets[:-1])], durable=False, hashed=False)
    return metas, Pack(path, offsets[-1], offsets[:-1], [meta.sample_id for meta in metas])


def pack_trailer(metas: list[SampleMeta], offsets: list[int]) -> bytes:
    """What ends a pack: its samples (id, manifest row, offset), then its length and PACK_MAGIC."""
    rows = [[meta.sample_id, *meta.row(), offset] for meta, offset in zip(metas, offsets, strict=True)]
    trailer = json.dumps(rows).encode()
    return trailer + PACK_FOOTER.pack(len(trailer), PACK_MAGIC)


def read_pack_trailer(path: str) -> tuple[list[SampleMeta], list[int], int]:
    """(samples, their offsets, payload bytes) of a pack; ValueError, TypeError or KeyError if it
    does not end in a whole trailer (the store names the damaged pack: store.py)."""
    with open(path, "rb") as pack:
        size = pack.seek(0, os.SEEK_END)
        if size < PACK_FOOTER.size:
            raise ValueError("shorter than its footer")
        pack.seek(size - PACK_FOOTER.size)
        length, magic = PACK_FOOTER.unpack(pack.read(PACK_FOOTER.size))
        if magic != PACK_MAGIC or length > size - PACK_FOOTER.size:
            raise ValueError("no pack footer at its end")
        payload_bytes = size - PACK_FOOTER.size - length
        pack.seek(payload_bytes)
        rows = json.loads(pack.read(length))
    metas = [SampleMeta(int(i), relpath, int(label), int(nbytes), checksum, int(mtime_ns))
             for i, relpath, label, nbytes, checksum, mtime_ns, _ in rows]
    offsets = [int(row[6]) for row in rows]
    return metas, offsets, payload_bytes


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Free `length` bytes at `offset` of a file without moving what follows (fallocate PUNCH_HOLE)."""
    if length <= 0:
        return
    if _LIBC.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, ctypes.c_long(offset), ctypes.c_long(length)):
        err = ctypes.get_errno()
        raise OSError(err, f"cannot free a packed sample's bytes: {os.strerror(err)}; the node-local store's file "
                           "system must support hole punching (ext4, xfs, btrfs, tmpfs do)")


def release(freed: str | tuple[str, int, int]) -> None:
    """Carry out what `Store.detach` returned: delete a file, or punch (path, start, end) out of a pack."""
    if isinstance(freed, str):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(freed)
        return
    path, start, end = freed
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        punch_hole(fd, start, end - start)
    finally:
        os.close(fd)
