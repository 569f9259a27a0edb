"""Node scope against rank scope: what sharing a node's partition buys, on one machine.

Trains LS and PLS (q 0.3 by default) with `storage.scope=rank` and with `storage.scope=node`,
the ranks pretending to be nodes of `--per-node` ranks (`storage.ranks_per_node`), every run
with `audit=true`, in one session on the same synthetic data. For each run it prints the samples
lost or duplicated at every epoch boundary (from the audit), the samples sent over MPI, the shuffle
quality after the last epoch (`mixing`, 1 = as mixed as global shuffling) and the mean epoch
time. Last line: `node/rank samples sent (partial, q Q): X`.

    python benchmarks/node_scope.py [--ranks 4] [--per-node 2] [--samples 2000] [--epochs 4] [--q 0.3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hpcshuffle.files import read_jsonl
from hpcshuffle.formats.synthetic import synth_imagefolder

IMAGE_SIZE = 16  # pixels, of the synthetic images


def train(work: Path, name: str, ranks: int, data: Path, overrides: list[str]) -> Path:
    run_dir = work / name
    bin_dir = Path(sys.executable).parent
    command = [str(bin_dir / "mpiexec"), "-n", str(ranks), sys.executable, "-m", "hpcshuffle.train",
               "dataset=imagefolder", f"dataset.root={data}", f"hydra.run.dir={run_dir}",
               f"storage.local_dir={work / ('store-' + name)}", "audit=true", "progress=false", *overrides]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{name} failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    return run_dir


def lost_or_duplicated(run_dir: Path, num_samples: int) -> int:
    """Over all epochs: ids held by no rank, plus extra copies of ids held by several."""
    by_epoch: dict[int, Counter] = {}
    for row in read_jsonl(run_dir / "audit.jsonl"):
        by_epoch.setdefault(row["epoch"], Counter()).update(row["held"])
    return sum(
        (num_samples - len(held)) + sum(count - 1 for count in held.values() if count > 1)
        for held in by_epoch.values()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--per-node", type=int, default=2, help="ranks per pretended node")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--q", type=float, default=0.3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workdir", default=None, help="default: a temporary directory under $TMPDIR")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hpcshuffle-bench-node-", dir=args.workdir))
    try:
        compare(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(work: Path, args: argparse.Namespace) -> None:
    data = synth_imagefolder(work / "data", args.samples, 10, num_val_samples=40, image_size=IMAGE_SIZE, progress=False)
    # trained at the stored size: what is compared is samples moved and mixing, not convolutions
    common = [f"epochs={args.epochs}", f"batch_size={args.batch}", f"dataset.image_size={IMAGE_SIZE}"]
    scopes = {"rank": ["storage.scope=rank"],
              "node": ["storage.scope=node", f"storage.ranks_per_node={args.per_node}"]}
    shuffles = {"local": ["shuffle=local"], "partial": ["shuffle=partial", f"shuffle.q={args.q}"]}
    print(f"{args.ranks} ranks, node scope as {args.ranks // args.per_node} nodes × {args.per_node} ranks, "
          f"N={args.samples}, {args.epochs} epochs, b={args.batch}")
    print(f"{'shuffle':<8} {'scope':<5} {'lost+dup':>8} {'sent':>7} {'sent/epoch':>10} {'mixing':>7} {'epoch_s':>8}")
    results = {}
    for shuffle, shuffle_overrides in shuffles.items():
        for scope, scope_overrides in scopes.items():
            overrides = [*common, *shuffle_overrides, *scope_overrides]
            run_dir = train(work, f"{shuffle}-{scope}", args.ranks, data, overrides)
            records = read_jsonl(run_dir / "metrics.jsonl")
            assert {record["scope"] for record in records} == {scope}, "the run did not use the scope asked for"
            sent = sum(record["samples"]["sent"] for record in records)
            mixing = records[-1]["mixing"]["quality"]
            epoch_s = sum(record["time"]["epoch"]["max"] for record in records) / len(records)
            bad = lost_or_duplicated(run_dir, args.samples)
            results[shuffle, scope] = (sent, mixing)
            print(f"{shuffle:<8} {scope:<5} {bad:>8} {sent:>7} {sent / len(records):>10.1f} {mixing:>7.3f} "
                  f"{epoch_s:>8.2f}")
    for shuffle in shuffles:
        print(f"mixing node − rank ({shuffle}): {results[shuffle, 'node'][1] - results[shuffle, 'rank'][1]:+.3f}")
    print(f"node/rank samples sent (partial, q {args.q:g}): "
          f"{results['partial', 'node'][0] / results['partial', 'rank'][0]:.2f}")


if __name__ == "__main__":
    main()
