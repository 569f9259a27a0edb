"""Rates of one cluster node and of two nodes together, for `experiments/cluster_scaling.py` to
write a `conf/platform/` file from. Runs on the nodes (under `srun`) and prints one JSON object.

    srun -N 1 -n 1 python experiments/cluster_probe.py node --root /pfs/DATASET --big /pfs/FILE \
        --store /tmp/DIR [--files 200] [--model small_cnn] [--image-size 32] [--batch 32] [--repeats 10] \
        [--readers 1 2 3]
    srun -N 2 --ntasks-per-node 1 --mpi=pmi2 python experiments/cluster_probe.py allreduce [--model small_cnn]
    srun -N 1 -n 1 python experiments/cluster_probe.py contention --ranks 3 [--iterations 60] [--model small_cnn]

`node` times what a training rank does, through the loader's own code (hpcshuffle.storage.loader.Samples):
reading dataset files from shared storage as GS reads them (pages dropped after each read) and the
CPU the node's GlusterFS client spends on them, streaming one large file from shared storage, the
same files from a node-local store, loading them from there as a batch (read, seeded augmentation,
decode, collate), writing and reading a large node-local file, and FW+BW of the model on a batch.
Each timed pass follows an untimed one, so the storage server's own cache is as warm as after a
run's first epoch. `allreduce` times the gradient allreduce the training loop makes
(`learner.average_gradients`, gloo) between two ranks. `contention` runs K processes on the node doing
FW+BW in lockstep (a barrier after each step), as K training ranks sharing the node's cores do, and
times an iteration; scale/jitter.py turns it into the model's `exchange.noise`.
The MPI link itself is `python -m hpcshuffle.scale.pingpong`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hpcshuffle.studies.node_probe import contention, probe_allreduce, probe_node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    probes = parser.add_subparsers(dest="probe", required=True)
    node = probes.add_parser("node", help="one node's storage and compute rates")
    node.add_argument("--root", required=True, help="an ImageFolder dataset on shared storage")
    node.add_argument("--big", required=True, help="a large file on shared storage")
    node.add_argument("--store", required=True, help="a node-local directory to make (and remove)")
    node.add_argument("--files", type=int, default=200)
    node.add_argument("--image-size", type=int, default=32)
    node.add_argument("--batch", type=int, default=32)
    node.add_argument("--readers", type=int, nargs="*", default=[], metavar="K",
                      help="also read the files with K threads at once, for each K (the storage's rate with K readers)")
    for sub in (node, probes.add_parser("allreduce", help="the gradient allreduce between the ranks (gloo)")):
        sub.add_argument("--model", default="small_cnn")
        sub.add_argument("--repeats", type=int, default=10)
    lockstep = probes.add_parser("contention", help="K ranks' FW+BW in lockstep on this node's cores")
    lockstep.add_argument("--ranks", type=int, required=True)
    lockstep.add_argument("--iterations", type=int, default=60)
    lockstep.add_argument("--model", default="small_cnn")
    lockstep.add_argument("--image-size", type=int, default=32)
    lockstep.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    if args.probe == "node":
        result = probe_node(Path(args.root), Path(args.big), Path(args.store), args.files, args.image_size, args.batch,
                            args.model, args.repeats, tuple(args.readers))
    elif args.probe == "contention":
        result = contention(args.model, 10, args.image_size, args.batch, args.ranks, args.iterations)
    else:
        result = probe_allreduce(args.model, args.repeats)
    if result is not None:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
