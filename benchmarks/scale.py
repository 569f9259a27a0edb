"""Simulation speed of `hpcshuffle scale`: one simulated epoch per worker count, wall time and memory.

The issue's target: one simulated epoch of ImageNet-1K at 2,048 ranks in at most 10 minutes of
wall time on 2 cores, in at most 4 GiB. The default scenario is the heaviest the engine sees:
partial local shuffling at q = 0.1 (ResNet-50, ImageNet-1K, b = 32 per rank, platform abci), whose
plan sends an exchange message per (sender, iteration, receiver) on top of every rank's reads,
FW+BW and allreduce.

Each simulation runs alone, one after another, in the forked child `simulate` starts (SimGrid's
engine runs once per process). The table gives per worker count M: iterations I of the epoch,
simulated rank·iterations (M × I, the actor steps SimGrid plays), the wall seconds of the
simulation (the child's own clock: planning the epoch's traffic plus SimGrid), rank·iterations
per wall second, its ratio to the smallest M's rate, and the peak resident memory of the
simulation children so far. That last column is getrusage(RUSAGE_CHILDREN).ru_maxrss, the
largest of any child waited for until then, so with the worker counts in increasing order (the
script sorts them) it is the peak of the run of that M or of a smaller one, and the last line's
is the peak of the whole benchmark. Last line:
`<M> ranks: one simulated epoch in X s wall, Y GiB peak (limits: 600 s, 4 GiB)` for the largest M.

    python benchmarks/scale.py [--workers 16 64 256 1024 2048] [--shuffle partial] [--q 0.1]
        [--platform abci] [--model resnet50] [--batch 32]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform as host
import resource
import sys
import time
from datetime import datetime, timezone

from hpcshuffle.plan import get_strategy, run_label
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform_yaml import load_platform, platform_path
from hpcshuffle.scale.scenario import Scenario, check_scenario

WALL_LIMIT_S = 600.0
MEMORY_LIMIT_GIB = 4.0


def peak_children_gib() -> float:
    """The largest resident set of any child waited for so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 64, 256, 1024, 2048], metavar="M")
    parser.add_argument("--shuffle", default="partial", help="global, local, partial or locality (default partial)")
    parser.add_argument("--q", type=float, default=0.1, help="exchange rate of partial shuffling (default 0.1)")
    parser.add_argument("--platform", default="abci", help="conf/platform/<name>.yaml or a yaml path (default abci)")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--dataset", default="imagenet1k")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    platform = load_platform(args.platform)
    fixed_q = get_strategy(args.shuffle).fixed_q
    workers = sorted(set(args.workers))  # increasing, so the running ru_maxrss is the peak up to this M
    scenarios = [Scenario(m, args.shuffle, args.q if fixed_q is None else fixed_q, args.model, args.dataset,
                          args.batch) for m in workers]
    for scenario in scenarios:
        check_scenario(platform, scenario)  # before minutes of simulation, not after

    digest = hashlib.sha256(platform_path(args.platform).read_bytes()).hexdigest()[:12]
    print(f"# python benchmarks/scale.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {host.node()}, "
          f"{len(os.sched_getaffinity(0))} cores; platform {platform.name} "
          f"({platform.source}, sha256 {digest}); {args.model} on {args.dataset}, b={args.batch} per rank; "
          f"{run_label(args.shuffle, scenarios[0].q)}")
    print("# peak MiB: ru_maxrss of the simulation children so far (runs go in increasing M, so it is the "
          "peak of this M's run or a smaller one's)")
    header = (f"{'M':>6} {'iters':>6} {'rank·iters':>11} {'wall s':>8} {'rank·it/s':>10} {'peak MiB':>9} "
              f"{'rate vs M=' + str(workers[0]):>12} {'sim epoch s':>12}")
    print(header, flush=True)
    first_rate = None
    last = None
    for scenario in scenarios:
        started = time.perf_counter()
        result = simulate(platform, scenario)
        outside = time.perf_counter() - started  # with the fork, the pipe and the child's exit
        steps = scenario.workers * result.iterations
        rate = steps / result.wall_s
        first_rate = first_rate or rate
        peak = peak_children_gib()
        print(f"{scenario.workers:>6} {result.iterations:>6} {steps:>11} {result.wall_s:>8.1f} {rate:>10.0f} "
              f"{peak * 1024:>9.0f} {rate / first_rate:>12.2f} {result.epoch_s:>12.1f}", flush=True)
        last = (scenario.workers, max(result.wall_s, outside), peak)
    m, wall, peak = last
    met = wall <= WALL_LIMIT_S and peak <= MEMORY_LIMIT_GIB
    print(f"target (<= {WALL_LIMIT_S:.0f} s and <= {MEMORY_LIMIT_GIB:.0f} GiB at {m} ranks): {'met' if met else 'MISSED'}")
    print(f"{m} ranks: one simulated epoch in {wall:.0f} s wall, {peak:.2f} GiB peak "
          f"(limits: {WALL_LIMIT_S:.0f} s, {MEMORY_LIMIT_GIB:.0f} GiB)")


if __name__ == "__main__":
    main()
