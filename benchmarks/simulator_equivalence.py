"""Virtual workers against real ranks: the same run as `mpiexec -n M` and as one process.

Trains the same seeded run twice on a synthetic ImageFolder — once with M real ranks
(`mpiexec -n M python -m hpcshuffle.train`, gloo allreduce, per-rank BatchNorm) and once in
one process with `shuffle.virtual_workers=M` (ghost BatchNorm, worker-mean loss), and a third
time virtually with `shuffle.virtual_chunk=1` (one worker per forward/backward, accumulated
gradients) — and compares the per-step training loss (mean over workers), the samples each
worker trained on and the final validation accuracy. Prints a table per step and, last,
`max |loss_sim - loss_mpi|: X` over every step of every epoch.

    python benchmarks/simulator_equivalence.py [--workers 4] [--shuffle partial] [--q 0.3]
        [--samples 512] [--batch 16] [--epochs 2] [--model small_cnn] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def train(args: argparse.Namespace, out: Path, name: str, ranks: int, extra: list[str]) -> dict:
    """One training run; returns its per-step losses, trained ids per worker and final score."""
    run_dir = out / name
    overrides = [
        f"shuffle={args.shuffle}", *([f"shuffle.q={args.q}"] if args.shuffle == "partial" else []),
        f"model={args.model}", f"epochs={args.epochs}", f"batch_size={args.batch}", f"seed={args.seed}",
        f"dataset.root={out / 'data'}", f"dataset.synthesize.samples={args.samples}",
        f"storage.local_dir={out / 'store'}", f"hydra.run.dir={run_dir}",
        "logger.step_loss=true", "audit=true", "checkpoint.every_epochs=0", "progress=false", *extra,
    ]
    launcher = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
    command = [*launcher, sys.executable, "-m", "hpcshuffle.train", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"{name} run failed ({' '.join(command)}):\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    audits = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    return {
        "losses": [loss for record in records for loss in record["step_loss"]],
        "trained": {(a["epoch"], a["rank"]): a["trained"] for a in audits},
        "val": records[-1]["val_top1"],
        "sent": [record["samples"]["sent"] for record in records],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="M: real ranks, and virtual workers")
    parser.add_argument("--shuffle", default="partial", choices=["global", "local", "partial", "locality"])
    parser.add_argument("--q", type=float, default=0.3, help="exchange fraction (shuffle=partial)")
    parser.add_argument("--samples", type=int, default=512, help="synthetic training images (32×32, 10 classes)")
    parser.add_argument("--batch", type=int, default=16, help="local batch per worker")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--model", default="small_cnn", help="a conf/model name (BatchNorm, no dropout)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--norm", default="worker", choices=["worker", "global"],
                        help="model.norm: BatchNorm over each worker's batch, or over the global batch (then no "
                             "chunked run: its statistics need the whole global batch in one pass)")
    parser.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    args = parser.parse_args()
    if args.workers < 2:
        parser.error(f"--workers must be >= 2 to compare against a real MPI run, got {args.workers}")

    with tempfile.TemporaryDirectory(prefix="hpcshuffle-equivalence-") as scratch:
        out = Path(args.out or scratch)
        norm = [f"model.norm={args.norm}"]
        mpi = train(args, out, "mpi", args.workers, norm)
        sim = train(args, out, "virtual", 1, [f"shuffle.virtual_workers={args.workers}", *norm])
        chunked = sim if args.norm == "global" else train(
            args, out, "virtual-chunk1", 1, [f"shuffle.virtual_workers={args.workers}", "shuffle.virtual_chunk=1"])

    steps = len(mpi["losses"])
    print(f"{args.shuffle} shuffling (q={args.q}), M={args.workers}, b={args.batch}, N={args.samples}, "
          f"{args.model}, {args.epochs} epochs = {steps} steps; real: mpiexec -n {args.workers} (gloo), "
          f"virtual: one process; BatchNorm over {'the global batch' if args.norm == 'global' else 'each worker'}"
          + (" (no chunked run: global statistics need one pass, its columns repeat the virtual run)"
             if args.norm == "global" else ""))
    print(f"{'step':>4} {'loss_mpi':>12} {'loss_sim':>12} {'|diff|':>10} {'sim chunk=1':>12} {'|diff|':>10}")
    for step, (real, virtual, one) in enumerate(zip(mpi["losses"], sim["losses"], chunked["losses"])):
        print(f"{step:>4} {real:>12.7f} {virtual:>12.7f} {abs(virtual - real):>10.2e} {one:>12.7f} "
              f"{abs(one - real):>10.2e}")
    same = mpi["trained"] == sim["trained"] == chunked["trained"]
    print(f"same samples per worker, step and epoch: {'yes' if same else 'NO'}")
    print(f"samples sent per epoch: mpi {mpi['sent']}, virtual {sim['sent']}, virtual chunk=1 {chunked['sent']}")
    print(f"final validation top-1: mpi {mpi['val']:.4f} %, virtual {sim['val']:.4f} %, "
          f"virtual chunk=1 {chunked['val']:.4f} %")
    if len(sim["losses"]) != steps or len(chunked["losses"]) != steps:
        sys.exit(f"the runs trained different step counts: {steps}, {len(sim['losses'])}, {len(chunked['losses'])}")
    worst = max(abs(a - b) for a, b in zip(sim["losses"], mpi["losses"]))
    print(f"max |loss_sim - loss_mpi|: {worst:.2e}")


if __name__ == "__main__":
    main()
