"""`hpcshuffle synth {imagefolder,cifar,deepcam}`: a synthetic dataset in a real format."""

from __future__ import annotations

import argparse

# `hpcshuffle synth` subcommand -> (registered format, the flags that make up its spec, what it writes)
SYNTH = {
    "imagefolder": ("imagefolder", ("samples", "classes", "val_samples", "size"), "images"),
    "cifar": ("cifar100", ("samples", "val_samples", "classes", "layout"), "records"),
    "deepcam": ("deepcam", ("samples", "val_samples", "height", "width"), "samples"),
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    synth = commands.add_parser("synth", help="write a synthetic dataset in a real format")
    formats = synth.add_subparsers(dest="format", required=True)
    imagefolder = formats.add_parser("imagefolder", help="JPEGs in <out>/{train,val}/<class>/")
    imagefolder.add_argument("--out", required=True)
    imagefolder.add_argument("--samples", type=int, required=True, help="training images")
    imagefolder.add_argument("--classes", type=int, default=10)
    imagefolder.add_argument("--val-samples", type=int, default=None, help="default: samples/5")
    imagefolder.add_argument("--size", type=int, default=32, help="image side in pixels")
    imagefolder.add_argument("--seed", type=int, default=0)
    imagefolder.set_defaults(run=cmd_synth)
    cifar = formats.add_parser(
        "cifar", aliases=["cifar100"], help="CIFAR-100 containers in <out>/cifar-100-{python,binary}/"
    )
    cifar.add_argument("--out", required=True)
    cifar.add_argument("--samples", type=int, required=True, help="training records")
    cifar.add_argument("--val-samples", type=int, default=None, help="test records; default: samples/5")
    cifar.add_argument("--classes", type=int, default=100)
    cifar.add_argument("--layout", choices=["python", "binary"], default="python")
    cifar.add_argument("--seed", type=int, default=0)
    cifar.set_defaults(run=cmd_synth, format="cifar")
    deepcam = formats.add_parser("deepcam", help="HDF5 files in <out>/{train,validation}/ and <out>/stats.h5")
    deepcam.add_argument("--out", required=True)
    deepcam.add_argument("--samples", type=int, required=True, help="training files")
    deepcam.add_argument("--val-samples", type=int, default=None, help="validation files; default: samples/5")
    deepcam.add_argument("--height", type=int, default=768, help="a multiple of 16")
    deepcam.add_argument("--width", type=int, default=1152, help="a multiple of 16")
    deepcam.add_argument("--seed", type=int, default=0)
    deepcam.set_defaults(run=cmd_synth)


def cmd_synth(args: argparse.Namespace) -> None:
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
