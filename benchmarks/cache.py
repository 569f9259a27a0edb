"""Cache hit ratio of LRU, NoPFS-style and Lobster's policies on one rank's global-shuffle reads.

The trace is what one rank reads from shared storage under global shuffling: the concatenation
over epochs of `plan.order[rank]` of a GS plan (N samples, M ranks, batch b, seed). Each policy
runs a cache of `cache-fraction`·⌈N/M⌉ samples over the whole trace (`hpcshuffle.storage.cache_sim.simulate`);
a hit is a read served without shared storage. Prints a table (hits, hit ratio over the run and
in the last epoch, seconds to simulate) and, last, `reuse-distance/LRU hit ratio: X`.

Nothing is read here: every read is simulated, so "shared storage" is a count of misses, and the
mount or its emulation play no part. What a miss costs against a hit on this node is what
benchmarks/shared_io.py measures (guarded GlusterFS reads against the node-local store);
node_cache.py replays these decisions on real reads in training.

    python benchmarks/cache.py [--samples 50000] [--ranks 4] [--epochs 10] [--cache-fraction 0.25]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hpcshuffle.plan import PlanSpec
from hpcshuffle.storage.cache import POLICIES
from hpcshuffle.storage.cache_sim import rank_trace, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--cache-fraction", type=float, default=0.25, help="cache size as a fraction of ⌈N/M⌉")
    parser.add_argument("--rank", type=int, default=0, help="whose trace to simulate")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.cache_fraction < 0:
        parser.error(f"--cache-fraction must be >= 0, got {args.cache_fraction}")

    spec = PlanSpec(num_samples=args.samples, num_ranks=args.ranks, batch_size=args.batch, seed=args.seed)
    trace, epoch_lengths = rank_trace(spec, "global", args.epochs, args.rank)
    capacity = int(args.cache_fraction * spec.max_share)

    results = {}
    for policy in POLICIES:
        start = time.perf_counter()
        result = simulate(trace, capacity, policy, epoch_lengths)
        results[policy] = (result, time.perf_counter() - start)

    distinct = len(np.unique(trace))
    print(f"trace: rank {args.rank}'s reads under global shuffling, N={args.samples} M={args.ranks} "
          f"b={args.batch} seed={args.seed}, {args.epochs} epochs = {len(trace)} reads of {distinct} ids; "
          f"cache {capacity} samples ({args.cache_fraction:g}·⌈N/M⌉)")
    print(f"{'policy':<16} {'hits':>9} {'hit ratio':>10} {'last epoch':>11} {'seconds':>8}")
    for policy, (result, seconds) in results.items():
        last = result.epoch_hit_ratio[-1] if len(epoch_lengths) else 0.0
        print(f"{policy:<16} {result.hits:>9} {result.hit_ratio:>10.4f} {last:>11.4f} {seconds:>8.2f}")
    lru = results["lru"][0].hit_ratio
    best = results["reuse_distance"][0].hit_ratio
    if lru:
        ratio = best / lru
    else:  # no reuse LRU could catch (e.g. one epoch): equal if the optimum finds none either
        ratio = 1.0 if best == 0 else float("inf")
    print(f"reuse-distance/LRU hit ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
