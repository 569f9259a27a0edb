"""The `hpcshuffle` command: plan, synth, train, report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hpcshuffle.plan import FIXED_Q, PLANNERS, EpochPlan, PlanSpec, plan_epochs


def plan_summary(plans: list[EpochPlan]) -> str:
    spec = plans[0].spec
    lines = [
        f"N={spec.num_samples} samples, M={spec.num_ranks} workers, b={spec.batch_size}, q={spec.q}, "
        f"seed={spec.seed}: {spec.iterations} iterations/epoch, every rank trains on {spec.max_share} "
        f"samples/epoch; partitions {spec.min_share}..{spec.max_share}",
        f"{'epoch':>5} {'held min..max':>14} {'sent/rank':>12} {'recv/rank':>12} {'peak/rank':>10} "
        f"{'bound':>6} {'shared reads':>13}",
    ]
    for plan in plans:
        held = [len(ids) for ids in plan.held]
        sent, received, peak = plan.sent_counts(), plan.received_counts(), plan.store_peak()
        lines.append(
            f"{plan.epoch:>5} {f'{min(held)}..{max(held)}':>14} {f'{min(sent)}..{max(sent)}':>12} "
            f"{f'{min(received)}..{max(received)}':>12} {max(peak):>10} {spec.storage_bound():>6} "
            f"{sum(plan.reads_shared):>13}"
        )
    return "\n".join(lines)


def plan_json(plans: list[EpochPlan]) -> str:
    def ids(arrays: list[np.ndarray]) -> list[list[int]]:
        return [array.tolist() for array in arrays]

    epochs = [
        {
            "epoch": plan.epoch,
            "held": ids(plan.held),
            "order": ids(plan.order),
            "sent": plan.sent_counts(),
            "received": plan.received_counts(),
            "store_peak": plan.store_peak(),
            "reads_shared": plan.reads_shared,
        }
        for plan in plans
    ]
    return json.dumps({"epochs": epochs})


def cmd_plan(args: argparse.Namespace) -> None:
    q = FIXED_Q.get(args.shuffle, args.q)
    if args.shuffle in FIXED_Q and args.q not in (None, q):
        raise ValueError(f"--shuffle {args.shuffle} means q={q}; use --shuffle partial --q {args.q}")
    if q is None:
        raise ValueError("--shuffle partial needs --q (the fraction exchanged per epoch, in [0, 1])")
    spec = PlanSpec(args.samples, args.workers, args.batch, q, args.seed)
    plans = list(plan_epochs(spec, args.shuffle, args.epochs))
    print(plan_json(plans) if args.json else plan_summary(plans))


def cmd_synth(args: argparse.Namespace) -> None:
    from hpcshuffle.formats.synthetic import synth_imagefolder

    root = synth_imagefolder(args.out, args.samples, args.classes, args.val_samples, args.size, args.seed)
    print(f"wrote {args.samples} training images in {args.classes} classes to {root}/train (and {root}/val)")


def cmd_report(args: argparse.Namespace) -> None:
    from hpcshuffle.report import breakdown_table

    print(breakdown_table([Path(d) for d in args.run_dirs]))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        from hpcshuffle import train

        sys.argv = ["hpcshuffle train", *argv[1:]]
        train.main()
        return
    parser = argparse.ArgumentParser(prog="hpcshuffle", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    plan = commands.add_parser("plan", help="dry-run a shuffling plan: partitions, exchanges, storage")
    plan.add_argument("--samples", type=int, required=True, help="N, training samples")
    plan.add_argument("--workers", type=int, required=True, help="M, ranks")
    plan.add_argument("--shuffle", choices=sorted(PLANNERS), required=True)
    plan.add_argument("--q", type=float, default=None, help="fraction exchanged per epoch (partial)")
    plan.add_argument("--batch", type=int, default=32, help="b, samples per rank per iteration")
    plan.add_argument("--epochs", type=int, default=3)
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument("--json", action="store_true", help="per epoch and rank: ids held and order")
    plan.set_defaults(run=cmd_plan)

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

    commands.add_parser("train", help="train: `hpcshuffle train <hydra overrides>` (see conf/)")

    report = commands.add_parser("report", help="breakdown table across run directories")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    report.set_defaults(run=cmd_report)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (ValueError, FileNotFoundError) as err:
        parser.exit(2, f"hpcshuffle {args.command}: error: {err}\n")


if __name__ == "__main__":
    main()
