"""`hpcshuffle model`: epoch times of regular, distributed-cache and locality-aware loading (Yang & Cong eqs. 1-8)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcshuffle.analysis.model import IMAGENET_PFS


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle model` to `commands`."""
    model = commands.add_parser(
        "model",
        help="predict epoch times of regular, distributed-cache and locality-aware loading (Yang & Cong eqs. 1-8)",
        description="Epoch time = max(training D/(p·V), sample I/O + preprocessing D/(p·U)). Sample I/O is "
        "D/R for regular loading, (1-α)·D/R + α·D/Rc·(p-1)/p with a distributed cache, and "
        "(1-α)·D/R + α·D/Rb·β for locality-aware loading. Defaults: ResNet-50 on ImageNet-1k read "
        "from a parallel file system by nodes of 4 V100-class GPUs. Rates count samples per second.",
    )
    model.add_argument("--samples", metavar="D", type=int, default=IMAGENET_PFS.num_samples,
                       help="D, samples in the dataset (default: %(default)s, ImageNet-1k)")
    model.add_argument("--train-rate", metavar="V", type=float, default=IMAGENET_PFS.train_samples_per_s,
                       help="V, samples/s one node trains on with data in memory (default: %(default)s)")
    model.add_argument("--io-rate", metavar="R", type=float, default=IMAGENET_PFS.io_samples_per_s,
                       help="R, samples/s the shared file system delivers to all nodes together (default: %(default)s)")
    model.add_argument("--preprocess-rate", metavar="U", type=float, default=IMAGENET_PFS.preprocess_samples_per_s,
                       help="U, samples/s one node decodes and augments (default: %(default)s)")
    model.add_argument("--alpha", metavar="ALPHA", type=float, default=IMAGENET_PFS.cached_fraction,
                       help="α, fraction of the dataset the nodes cache together, in [0, 1] (default: %(default)s)")
    model.add_argument("--cache-rate", metavar="RC", type=float, default=IMAGENET_PFS.cache_samples_per_s,
                       help="Rc, samples/s read from remote caches over the interconnect (default: %(default)s)")
    model.add_argument("--balance-rate", metavar="RB", type=float, default=None,
                       help="Rb, samples/s of load-balancing transfers (default: Rc)")
    model.add_argument("--beta", metavar="BETA", type=float, default=None,
                       help="β, fraction of the dataset moved per epoch for balancing (default: the median "
                       "simulated imbalance for --batch on each node count)")
    model.add_argument("--batch", type=int, default=32, metavar="B",
                       help="b, local batch per node, for simulating β (default: %(default)s)")
    model.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256], metavar="P",
                       help="node counts p (default: 1 2 4 ... 256)")
    model.add_argument("--seed", type=int, default=0, help="seed of the β simulation")
    model.add_argument("--json", action="store_true", help="parameters and per node count every method's times")
    model.add_argument("--plot", default=None, metavar="PNG", help="also write epoch time vs nodes here")
    model.set_defaults(run=cmd_model)


def cmd_model(args: argparse.Namespace) -> None:
    """Predict every method's epoch time per node count and print the table (or JSON); with --plot also
    write epoch time vs nodes."""
    from hpcshuffle.analysis.model import ModelParams, model_json, model_table, predict

    params = ModelParams(
        num_samples=args.samples,
        train_samples_per_s=args.train_rate,
        io_samples_per_s=args.io_rate,
        preprocess_samples_per_s=args.preprocess_rate,
        cached_fraction=args.alpha,
        cache_samples_per_s=args.cache_rate,
        balance_samples_per_s=args.balance_rate,
        balance_fraction=args.beta,
    )
    predictions = predict(params, args.nodes, args.batch, args.seed)
    if args.plot:
        from hpcshuffle.analysis.plots import plot_model

        plot_model(params, predictions, Path(args.plot))
    render = model_json if args.json else model_table
    print(render(params, predictions, args.batch))
    if args.plot and not args.json:
        print(f"wrote {args.plot}")
