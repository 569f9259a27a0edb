"""Strong scaling on the namespace cluster of scripts/cluster.sh, measured: Nguyen et al. Fig. 9 in
miniature (one dataset, more nodes), GS against LS and PLS, beside what `hpcshuffle scale`
predicts for the same cluster.

- Reads the running cluster's settings from `bash scripts/cluster.sh status` (it starts none).
- Makes one dataset of ~107 KB JPEGs on /pfs once (`hpcshuffle synth imagefolder --size 352`,
  as benchmarks/shared_io.py's; run on the login node, so it is written through GlusterFS).
- Measures the cluster's rates (experiments/cluster_probe.py and `python -m
  hpcshuffle.scale.pingpong` under srun) and writes them as a platform, `conf/platform/nscluster.yaml`.
- Per node count, one jobs/train.sbatch job per strategy: GS reads every sample from /pfs every
  epoch, LS and PLS q = 0.1 / 0.3 train from node-local stores staged from /pfs before the first
  epoch (staging is not in the epoch time). small_cnn on the images resized to 32×32, so decoding
  and I/O, not FW+BW, carry the epoch; `audit=true`, and every run's audit is checked for lost or
  duplicated samples. The first epoch is left out of the times (start-up).
- Writes under --out: `scaling.json` (`hpcshuffle scale --json`'s rows plus `nodes`: `epoch_s`
  the slowest rank's epoch as scale's, each phase the mean over ranks, both the mean over the timed
  epochs), `predicted.json` (`hpcshuffle scale --platform nscluster --json`), `scaling.txt` (the
  tables printed) and `scaling.png`.

    python experiments/cluster_scaling.py [--nodes 1 2 3] [--ranks-per-node 1] [--epochs 3]
        [--samples 3000] [--out results/reference/cluster] [--platform-out conf/platform/nscluster.yaml]
    python experiments/cluster_scaling.py --quick --nodes 1 2     # the plumbing, in about 3 minutes

Completed runs under --out are reused; --quick writes under results/experiments/cluster_quick (and
its platform there) unless told otherwise. Each job runs on the machine's cores with whatever else
runs there: the progress line gives the load average before and during it and the other Slurm jobs
that ran meanwhile. For numbers worth keeping, run it while nothing else does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from hpcshuffle.studies.cluster import PFS, connect, snapshot
from hpcshuffle.studies.cluster_platform import write_platform
from hpcshuffle.studies.cluster_runs import (
    BATCH,
    IMAGE_SIZE,
    MODEL,
    ensure_dataset,
    predict,
    probe,
    run_all,
)
from hpcshuffle.studies.cluster_tables import comparison_table, plot, scaling_table
from hpcshuffle.studies.runs import REPO

BUSY_LOAD = 0.5  # a load average above this before the first run: say the times will carry other work


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3], metavar="K")
    parser.add_argument("--ranks-per-node", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None, help="default 3 (2 with --quick); the first is not timed")
    parser.add_argument("--samples", type=int, default=None, help="training images (default 3000, 256 with --quick)")
    parser.add_argument("--out", default=None,
                        help="default results/reference/cluster (--quick: results/experiments/cluster_quick)")
    parser.add_argument("--platform-out", default=None, help="the platform to write (default "
                        "conf/platform/nscluster.yaml; --quick: <out>/nscluster.yaml)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny version: the plumbing, not the numbers (trains every run again)")
    args = parser.parse_args()
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.samples = args.samples or (256 if args.quick else 3000)
    args.out = Path(args.out or ("results/experiments/cluster_quick" if args.quick else "results/reference/cluster"))
    args.platform_out = Path(args.platform_out or (args.out / "nscluster.yaml" if args.quick
                                                   else "conf/platform/nscluster.yaml"))
    for path in (args.out, args.platform_out):
        if path.resolve().is_relative_to("/tmp") or path.resolve().is_relative_to(PFS):
            parser.error(f"{path} is not seen both here and on the cluster's nodes (/tmp is node-local there, /pfs "
                         "is mounted only there): use a directory under the repository")
    if args.epochs < 2:
        parser.error(f"--epochs must be >= 2 (the first is not timed), got {args.epochs}")
    if min(args.nodes) < 1 or args.ranks_per_node < 1:
        parser.error("--nodes and --ranks-per-node must be >= 1")
    ranks = max(args.nodes) * args.ranks_per_node
    if args.samples < ranks * BATCH:
        parser.error(f"--samples {args.samples} leaves each of {ranks} ranks less than a batch of {BATCH}: give at "
                     f"least {ranks * BATCH}")
    return args


def main() -> None:
    args = parse_args()
    out = args.out if args.out.is_absolute() else REPO / args.out  # jobs see the path from their own nodes
    platform = args.platform_out if args.platform_out.is_absolute() else REPO / args.platform_out
    if args.quick:  # it checks the plumbing: reused runs would check nothing
        shutil.rmtree(out / "runs", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cluster-scaling-") as workdir:
        cluster = connect(snapshot(Path(workdir)), max(args.nodes))
        print(f"cluster: {' '.join(f'{k}={v}' for k, v in cluster.settings.items())}", flush=True)
        if os.getloadavg()[0] > BUSY_LOAD:
            print(f"warning: the machine's load average is {os.getloadavg()[0]:.1f} before any run: other work "
                  f"shares its {os.cpu_count()} cores with every node, and the times will carry it", flush=True)
        dataset = ensure_dataset(cluster, args.samples)
        write_platform(platform, cluster.settings, probe(cluster, dataset, args.quick), args.ranks_per_node, MODEL,
                       (dataset.name, args.samples), IMAGE_SIZE, BATCH)
        print(f"platform: {platform}", flush=True)
        runs = run_all(cluster, args.nodes, args.ranks_per_node, args.epochs, out, dataset)
    rows = [run.row for run in runs]
    (out / "scaling.json").write_text(json.dumps({"platform": "nscluster", "cluster": cluster.settings,
                                                  "runs": rows}, indent=1) + "\n")
    predicted = predict(platform, dataset.name, rows)
    tables = [scaling_table(rows, {(run.nodes, run.label): run.means for run in runs})]
    if predicted is not None:
        (out / "predicted.json").write_text(json.dumps(predicted, indent=1) + "\n")
        tables.append(comparison_table(rows, predicted))
    text = "\n\n".join(tables)
    print(text)
    jobs = "\n".join(f"{run.nodes} node(s) {run.label}: {run.how}" for run in runs)
    heading = (f"the jobs (the machine's {os.cpu_count()} cores: the load average before each and during it, its "
               "own ranks included, and other Slurm jobs meanwhile)")
    (out / "scaling.txt").write_text(f"{text}\n\n{heading}\n{jobs}\n")
    plot(rows, predicted, out / "scaling.png")
    print(f"wrote {out / 'scaling.json'}, {out / 'scaling.txt'}, {out / 'scaling.png'}")
    problems = [problem for run in runs for problem in run.problems]
    if problems:
        sys.exit("samples lost or duplicated:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
