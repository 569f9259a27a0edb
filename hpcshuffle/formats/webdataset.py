"""WebDataset tar shards: ``<root>/{train,val}/*.tar``, each holding ``<key>.<ext>`` members grouped by key.

A sample is one key: its image (``<key>.jpg``, ``.jpeg`` or ``.png``) and ``<key>.cls``, its class
index in ASCII decimal; other members (``.json`` metadata, say) are passed over. The sample's
bytes are the image member's bytes, so the ImageFolder codec decodes them and a store keeps
them as ``<id>.jpg``. Class names come from ``<root>/classes.txt`` (one per line) when it is
there, else are ``class_0 .. class_{K-1}`` with K the largest label + 1.

Shards are read with the standard library's `tarfile`, not the `webdataset` package: a sample is
read with one positioned read at its member's data offset, and whole shards will be moved byte
for byte, both of which need `TarInfo.offset_data` and sizes; the webdataset package only streams.

Listing thousands of shards through their tar headers reads every header of every shard, so
`hpcshuffle synth webdataset` and `hpcshuffle pack` also write ``<root>/<split>/index.json``
(per shard its name, size and mtime; per sample its key, extension, data offset, size and
label). A scan uses it when every shard's size and mtime still match it, and otherwise reads
the tars themselves.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from hpcshuffle.errors import at_least
from hpcshuffle.formats import imagefolder
from hpcshuffle.formats.catalog import DatasetError, ShardedCatalog, find_split
from hpcshuffle.formats.codec import DatasetFormat
from hpcshuffle.formats.synthetic import check_image_spec, class_image, jpeg_bytes

SPLITS = imagefolder.SPLITS
IMAGE_EXTS = ("jpg", "jpeg", "png")
LABEL_EXT = "cls"
INDEX = "index.json"
INDEX_VERSION = 1
CLASSES = "classes.txt"
TAR_BLOCK = 512
FIX = "pack it again with `hpcshuffle pack` (or `hpcshuffle synth webdataset`)"


class ShardSample(NamedTuple):
    """One sample of a shard, as index.json stores it (a JSON list in this order)."""

    key: str
    ext: str
    offset: int  # of the image member's data in the shard
    size: int
    label: int


@dataclass(frozen=True)
class WebDatasetCatalog(ShardedCatalog):
    """A split of tar shards: sample i is the image member at `offsets[i]` in its shard.

    `relpaths` are virtual (``train/shard-00003/000123.jpg``): a store keeps a sample as a file
    with its image's extension. A shard's samples are `shard_samples(shard)`; their byte ranges
    in it are `offsets` and `sizes` over those ids.

    Attributes:
        offsets: per sample, the offset of its image member's data in its shard.
        sizes: per sample, the image member's size in bytes.
    """

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    def sample_nbytes(self, sample_id: int) -> int:
        return self.sizes[sample_id]

    def read_chunks(self, sample_id: int) -> Iterator[bytes]:
        offset, size = self.offsets[sample_id], self.sizes[sample_id]
        with self.open_shard(sample_id, offset, size) as shard:
            data = os.pread(shard.fileno(), size, offset)
        if len(data) != size:
            raise DatasetError(f"{self.path(sample_id)} ends inside sample {sample_id}'s image "
                               f"({self.relpaths[sample_id]}); the shard was truncated: {FIX}")
        return iter((data,))

    def read_shard(self, shard: int) -> bytes:
        """One read from the first image to the end of the last (their tar headers and padding
        with them), then the images joined."""
        ids = self.shard_samples(shard)
        start, end = self.offsets[ids[0]], self.offsets[ids[-1]] + self.sizes[ids[-1]]
        with self.open_shard(ids[0], start, end - start) as source:
            data = os.pread(source.fileno(), end - start, start)
        if len(data) != end - start:
            raise DatasetError(f"{self.path(ids[0])} ends {end - start - len(data)} bytes before its last image: "
                               f"the shard was truncated: {FIX}")
        view = memoryview(data)
        return b"".join(view[self.offsets[i] - start : self.offsets[i] - start + self.sizes[i]] for i in ids)


def padded(nbytes: int) -> int:
    """A member's data as a tar stores it, padded to whole blocks."""
    return -(-nbytes // TAR_BLOCK) * TAR_BLOCK


def tar_bytes(nbytes: int) -> int:
    """What a member of `nbytes` adds to a tar: its header block and its padded data."""
    return TAR_BLOCK + padded(nbytes)


# -- listing -----------------------------------------------------------------------------------


def scan_shard(path: Path) -> list[ShardSample]:
    """A shard's samples in member order, from its tar headers and `.cls` members."""
    shard_bytes = path.stat().st_size
    images: dict[str, tarfile.TarInfo] = {}
    labels: dict[str, int] = {}
    try:
        with tarfile.open(path, "r:") as tar:  # "r:": uncompressed only, so offsets are file offsets
            end = 0
            for member in tar:
                end = member.offset_data + padded(member.size)
                directory, _, name = member.name.rpartition("/")
                stem, dot, ext = name.partition(".")
                if not member.isfile() or not dot:
                    continue
                key, ext = f"{directory}/{stem}" if directory else stem, ext.lower()
                if member.offset_data + member.size > shard_bytes:
                    raise tarfile.ReadError(f"member {member.name} runs past the end of the file")
                if ext in IMAGE_EXTS:
                    if key in images:
                        raise DatasetError(
                            f"{path}: key {key!r} has two images ({images[key].name}, {member.name}); a key "
                            "holds one sample, so give each image its own key"
                        )
                    images[key] = member
                elif ext == LABEL_EXT:
                    labels[key] = read_label(path, tar, member, key)
            # tarfile stops quietly at a header cut short after the first member: a whole shard
            # ends with two zero blocks after its last member
            tar.fileobj.seek(end)
            if tar.fileobj.read(2 * TAR_BLOCK) != bytes(2 * TAR_BLOCK):
                raise tarfile.ReadError(f"no end-of-archive blocks after the member ending at byte {end}")
    except tarfile.ReadError as err:
        raise DatasetError(f"{path} is not a readable tar shard (truncated or corrupt?): {err}; {FIX}") from None
    unlabelled = [key for key in images if key not in labels]
    if unlabelled:
        raise DatasetError(
            f"{path}: key {unlabelled[0]!r} has an image but no {unlabelled[0]}.{LABEL_EXT} label "
            f"({len(unlabelled)} such keys); add the labels or {FIX}"
        )
    imageless = [key for key in labels if key not in images]
    if imageless:
        raise DatasetError(
            f"{path}: key {imageless[0]!r} has a label but no image ({', '.join(IMAGE_EXTS)}; "
            f"{len(imageless)} such keys); add the images or {FIX}"
        )
    return [
        ShardSample(key, member.name.rpartition(".")[2].lower(), member.offset_data, member.size, labels[key])
        for key, member in images.items()
    ]


def read_label(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo, key: str) -> int:
    """The class index in label member `member` of a shard; DatasetError unless it is ASCII decimal."""
    text = tar.extractfile(member).read().decode(errors="replace").strip()
    if not text.isascii() or not text.isdecimal():
        raise DatasetError(
            f"{path}: {member.name} holds {text[:20]!r}, not a class index (a non-negative integer in ASCII "
            f"decimal); fix key {key!r}'s label or {FIX}"
        )
    return int(text)


def read_index(split_dir: Path, stats: list[os.stat_result], names: list[str]) -> list[list[ShardSample]] | None:
    """Per shard its samples from `split_dir/index.json`; None if it is missing, unreadable or
    does not describe these shards as they are now (names, sizes, mtimes)."""
    try:
        index = json.loads((split_dir / INDEX).read_text())
        if index["version"] != INDEX_VERSION or [entry["name"] for entry in index["shards"]] != names:
            return None
        current = all(
            (entry["bytes"], entry["mtime_ns"]) == (stat.st_size, stat.st_mtime_ns)
            for entry, stat in zip(index["shards"], stats)
        )
        return [[ShardSample(*row) for row in entry["samples"]] for entry in index["shards"]] if current else None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no index, or not one this version wrote: the tars say what they hold


def shard_paths(root: Path, split: str) -> list[Path]:
    """A split's shards in name order."""
    split_dir = find_split(
        root, split, "WebDataset", f"tar shards {root}/{{{','.join(SPLITS)}}}/*.tar — pack an ImageFolder with "
        f"`hpcshuffle pack --src IMAGEFOLDER --out {root}`, make one with `hpcshuffle synth webdataset --out {root} "
        "--samples N`, or set dataset.root"
    )
    paths = sorted(split_dir.glob("*.tar"))
    if not paths:
        raise DatasetError(f"{split_dir} holds no .tar shards; {FIX}")
    return paths


def read_class_names(root: Path, labels: list[int]) -> tuple[str, ...]:
    """The names in `root/classes.txt` (DatasetError if too few for `labels`), else class_0 .. class_<max label>."""
    path = root / CLASSES
    if not path.is_file():
        return tuple(f"class_{label}" for label in range(max(labels) + 1))
    names = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    if max(labels) >= len(names):
        raise DatasetError(f"a shard has label {max(labels)} but {path} names {len(names)} classes; "
                           f"add the missing names or remove {path} to number the classes")
    return names


def scan(root: str | Path, split: str) -> WebDatasetCatalog:
    """List a split's shards (in name order) and their samples (in member order)."""
    root = Path(root)
    split_dir = root / split
    paths = shard_paths(root, split)
    stats = [path.stat() for path in paths]
    shards = read_index(split_dir, stats, [path.name for path in paths]) or [scan_shard(path) for path in paths]
    samples = [(index, sample) for index, shard in enumerate(shards) for sample in shard]
    if not samples:
        raise DatasetError(f"the shards in {split_dir} hold no samples (images with .{LABEL_EXT} labels); {FIX}")
    shard_index, members = zip(*samples)
    labels = [sample.label for sample in members]
    return WebDatasetCatalog(
        root,
        read_class_names(root, labels),
        tuple(f"{split}/{paths[index].stem}/{sample.key}.{sample.ext}" for index, sample in samples),
        tuple(labels),
        shards=tuple(f"{split}/{path.name}" for path in paths),
        shard_mtime_ns=tuple(stat.st_mtime_ns for stat in stats),
        sample_shard=shard_index,
        offsets=tuple(sample.offset for sample in members),
        sizes=tuple(sample.size for sample in members),
    )


# -- writing -----------------------------------------------------------------------------------




def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Append a file `name` holding `data` to `tar` (mode 644, mtime 0, so equal samples make equal shards)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644  # mtime 0: the same samples make the same shard, byte for byte
    tar.addfile(info, io.BytesIO(data))


def write_split(
    split_dir: Path, samples: Iterable[tuple[str, str, bytes, int]], shard_samples: int | None,
    shard_bytes: int | None, bar: tqdm,
) -> list[int]:
    """Write (key, ext, image bytes, label) samples, in order, into `split_dir/shard-NNNNN.tar`,
    then `split_dir/index.json`.

    Args:
        shard_samples: close a shard once it holds this many samples (None: no limit).
        shard_bytes: close a shard before a sample would take its members past this size (None:
            no limit; the tar's end blocks and padding add up to 10 KiB); a shard holds at least
            one sample however large.

    Returns:
        Per shard written, its size in bytes.
    """
    split_dir.mkdir(parents=True, exist_ok=True)
    tar, shards, count, nbytes = None, 0, 0, 0
    try:
        for key, ext, data, label in samples:
            label_data = f"{label}".encode()
            sample_bytes = tar_bytes(len(data)) + tar_bytes(len(label_data))
            full = count == shard_samples or (shard_bytes is not None and nbytes + sample_bytes > shard_bytes)
            if tar is None or (count and full):
                if tar is not None:
                    tar.close()
                tar = tarfile.open(split_dir / f"shard-{shards:05d}.tar", "w")
                shards, count, nbytes = shards + 1, 0, 0
            add_member(tar, f"{key}.{ext}", data)
            add_member(tar, f"{key}.{LABEL_EXT}", label_data)
            count, nbytes = count + 1, nbytes + sample_bytes
            bar.update()
    finally:
        if tar is not None:
            tar.close()
    return write_index(split_dir)


def write_index(split_dir: Path) -> list[int]:
    """`split_dir/index.json` from the shards' own tar headers, as a scan would list them.

    Returns:
        Per shard, its size in bytes.
    """
    paths = sorted(split_dir.glob("*.tar"))
    stats = [path.stat() for path in paths]
    index = {"version": INDEX_VERSION, "shards": [
        {"name": path.name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "samples": scan_shard(path)}
        for path, stat in zip(paths, stats)
    ]}
    (split_dir / INDEX).write_text(json.dumps(index, separators=(",", ":")))
    return [stat.st_size for stat in stats]


def check_no_shards(out: Path) -> None:
    """Refuse to write where shards are: new shards would be listed with the old ones."""
    for split in SPLITS:
        if any((out / split).glob("*.tar")):
            raise ValueError(f"{out / split} already holds shards; write into an empty --out")


def write_class_names(root: Path, classes: Iterable[str]) -> None:
    """Write `classes` one per line to `root/classes.txt`."""
    (root / CLASSES).write_text("".join(f"{name}\n" for name in classes))


def synthesize(
    out: str | Path, *, seed: int, progress: bool, samples: int, classes: int = 10, size: int = 32,
    val_samples: int | None = None, shard_samples: int = 100,
) -> Path:
    """Write `synth imagefolder`'s learnable JPEGs as shards of `shard_samples`, classes in a
    random (seeded) order within and across shards, with classes.txt and each split's index.

    Returns:
        The dataset root, `out`.
    """
    val_samples = check_image_spec(samples, classes, val_samples, size)
    at_least("--shard-samples", shard_samples)
    out = Path(out)
    check_no_shards(out)
    rng = np.random.default_rng(seed)
    with tqdm(total=samples + val_samples, desc=f"synth {out}", unit="img", disable=not progress) as bar:
        for split, count in zip(SPLITS, (samples, val_samples)):
            labels = rng.permutation(np.arange(count) % classes).tolist()
            images = (
                (f"{index:07d}", "jpg", jpeg_bytes(class_image(label, classes, size, rng)), label)
                for index, label in enumerate(labels)
            )
            write_split(out / split, images, shard_samples, None, bar)
    write_class_names(out, (f"class_{label:03d}" for label in range(classes)))
    return out


@dataclass(frozen=True)
class Packed:
    """What `pack` wrote, per split: samples, shards and bytes."""

    samples: dict[str, int]
    shards: dict[str, int]
    nbytes: dict[str, int]
    classes: int


def pack(
    src: str | Path, out: str | Path, *, shard_samples: int | None = 1000, shard_bytes: int | None = None,
    shuffle: bool = True, seed: int = 0, progress: bool = True,
) -> Packed:
    """Pack both splits of the ImageFolder at `src` into shards at `out`, with classes.txt and indexes.

    A sample's key is its id in the ImageFolder's listing, so every packed image can be traced
    back to its file.

    Args:
        shuffle: pack each split in a random (seeded) order. An ImageFolder lists its images
            class by class, so packed in that order most shards would hold a single class and a
            loader that reads shards in turn would feed the model one class at a time.
    """
    if shard_samples is None and shard_bytes is None:
        raise ValueError("give a shard size: --shard-samples or --shard-bytes")
    for flag, limit in (("--shard-samples", shard_samples), ("--shard-bytes", shard_bytes)):
        if limit is not None:
            at_least(flag, limit)
    src, out = Path(src), Path(out)
    check_no_shards(out)
    catalogs = {split: imagefolder.scan_split(src, split) for split in SPLITS}
    rng = np.random.default_rng(seed)
    shard_sizes = {}
    with tqdm(total=sum(map(len, catalogs.values())), desc=f"pack {out}", unit="img", disable=not progress) as bar:
        for split, catalog in catalogs.items():
            order = rng.permutation(len(catalog)).tolist() if shuffle else range(len(catalog))
            images = (
                (f"{sample_id:09d}", catalog.relpaths[sample_id].rpartition(".")[2].lower(),
                 catalog.read_bytes(sample_id), catalog.labels[sample_id])
                for sample_id in order
            )
            shard_sizes[split] = write_split(out / split, images, shard_samples, shard_bytes, bar)
    write_class_names(out, catalogs[SPLITS[0]].classes)
    return Packed(
        {split: len(catalog) for split, catalog in catalogs.items()},
        {split: len(sizes) for split, sizes in shard_sizes.items()},
        {split: sum(sizes) for split, sizes in shard_sizes.items()},
        len(catalogs[SPLITS[0]].classes),
    )


FORMAT = DatasetFormat(SPLITS, scan, imagefolder.make_codec, synthesize)
