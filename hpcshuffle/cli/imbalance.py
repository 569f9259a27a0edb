"""`hpcshuffle imbalance`: how unevenly global batches fall into node caches (Yang & Cong 2019, Fig. 6)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcshuffle.analysis.imbalance import BATCHES_PER_EPOCH, DEFAULT_STEPS


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle imbalance` to `commands`."""
    imbalance = commands.add_parser(
        "imbalance",
        help="simulate how unevenly global batches fall into node caches (Yang & Cong 2019, Fig. 6)",
        description=f"Per (local batch b, nodes p): a dataset of {BATCHES_PER_EPOCH}·p·b samples evenly "
        "cached over p nodes; global batches of p·b are consecutive slices of one seeded permutation per "
        "epoch. Reports the imbalance (Σ deficits against b, as % of p·b) and the transfers Algorithm 1 "
        "needs per step.",
    )
    imbalance.add_argument("--batch", type=int, nargs="+", default=[32, 64, 128], metavar="B",
                           help="local batch sizes b (default: 32 64 128)")
    imbalance.add_argument("--nodes", type=int, nargs="+", default=[16, 64, 256], metavar="P",
                           help="node counts p (default: 16 64 256)")
    imbalance.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                           help="global batches simulated per (b, p) (default: %(default)s)")
    imbalance.add_argument("--seed", type=int, default=0)
    imbalance.add_argument("--json", action="store_true",
                           help='{"medians": [{"batch", "nodes", "imbalance_pct"}, ...], "boxes": [...], ...}')
    imbalance.add_argument("--plot", default=None, metavar="PNG", help="also write the box plot here")
    imbalance.set_defaults(run=cmd_imbalance)


def cmd_imbalance(args: argparse.Namespace) -> None:
    """Simulate every (b, p) and print the table (or JSON); with --plot also write the box plot."""
    from hpcshuffle.analysis.imbalance import imbalance_json, imbalance_table, sweep

    results = sweep(args.batch, args.nodes, args.steps, args.seed)
    if args.plot:
        from hpcshuffle.analysis.plots import plot_imbalance

        plot_imbalance(results, Path(args.plot))
    render = imbalance_json if args.json else imbalance_table
    print(render(results, args.steps, args.seed))
    if args.plot and not args.json:
        print(f"wrote {args.plot}")
