"""`hpcshuffle pack`: an ImageFolder packed into WebDataset tar shards (formats/webdataset.py)."""

from __future__ import annotations

import argparse
import re

UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str) -> int:
    """'64MB', '512KiB', '1e6' or '1000000' → bytes."""
    match = re.fullmatch(r"\s*([0-9.e+]+)\s*([a-z]*)\s*", text.lower())
    try:
        return int(float(match[1]) * UNITS[match[2]])
    except (TypeError, ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64MB, 512KiB, 1GB)") from None


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle pack` to `commands`."""
    pack = commands.add_parser(
        "pack",
        help="pack an ImageFolder into WebDataset tar shards (dataset=webdataset)",
        description="Packs both splits of an ImageFolder (<src>/{train,val}/<class>/*) into "
        "<out>/{train,val}/shard-NNNNN.tar with <out>/classes.txt and each split's index.json. Each "
        "sample is <key>.<ext> + <key>.cls, its key the image's id in the ImageFolder listing.",
    )
    pack.add_argument("--src", required=True, help="ImageFolder root")
    pack.add_argument("--out", required=True, help="where the shards go (its splits must hold no shards yet)")
    size = pack.add_mutually_exclusive_group()
    size.add_argument("--shard-samples", type=int, default=None, help="images per shard (default 1000)")
    size.add_argument("--shard-bytes", type=parse_bytes, default=None,
                      help="close a shard before it would grow past this size, e.g. 64MB")
    pack.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True,
                      help="pack in a random order (default): an ImageFolder lists its images class by class, "
                      "so packed in order most shards would hold a single class")
    pack.add_argument("--seed", type=int, default=0, help="the order's seed")
    pack.set_defaults(run=cmd_pack)


def cmd_pack(args: argparse.Namespace) -> None:
    """Pack --src into shards at --out (1,000 images per shard unless a size is given) and say what was written."""
    from hpcshuffle.formats.webdataset import SPLITS, pack
    from hpcshuffle.storage.capacity import gib

    shard_samples = 1000 if args.shard_samples is None and args.shard_bytes is None else args.shard_samples
    packed = pack(args.src, args.out, shard_samples=shard_samples, shard_bytes=args.shard_bytes,
                  shuffle=args.shuffle, seed=args.seed, progress=True)
    train, val = SPLITS
    print(
        f"packed {packed.samples[train]} training and {packed.samples[val]} validation images in {packed.classes} "
        f"classes into {packed.shards[train]} + {packed.shards[val]} shards ({gib(sum(packed.nbytes.values()))}) "
        f"at {args.out} ({'shuffled, seed ' + str(args.seed) if args.shuffle else 'in listing order'})"
    )
