"""`hpcshuffle scale`: simulated epochs at scale on SimGrid; `scale calibrate`, `scale validate`.

    hpcshuffle scale --platform abci --workers 128 512 --shuffle global local partial --q 0.1 [--json]
    hpcshuffle scale --platform abci --workers 128 --shuffle global local --seeds 20 [--jobs 2] [--json]
    hpcshuffle scale --platform abci --workers 256 512 1024 --recommend [--tolerance 0.1] [--seeds 20]
    hpcshuffle scale --platform abci --workers 512 --sensitivity [--q 0.1] [--seeds 5] [--plot tornado.png] [--json]
    hpcshuffle scale calibrate RUN_DIR... [--out conf/platform/this_machine.yaml]
    hpcshuffle scale validate RUN_DIR... [--platform this_machine]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from hpcshuffle.cli import scale_sensitivity
from hpcshuffle.plan import STRATEGIES, get_strategy
from hpcshuffle.scale.envelope import envelope
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.platform_yaml import load_platform
from hpcshuffle.scale.recommend import (
    DEFAULT_QS,
    affordable_q,
    recommendation_table,
)
from hpcshuffle.scale.scenario import PHASES, SCOPES, Scenario, check_scenario
from hpcshuffle.scale.seeds import (
    SeedRuns,
    baselines,
    check_seeds,
    recommendation_over_seeds,
    seeds_document,
    simulate_seeds,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `hpcshuffle scale`, with its calibrate and validate actions, to `commands`."""
    scale = commands.add_parser("scale", help="simulate epochs at 16-4,096 workers on SimGrid (calibrate, validate)",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_simulation_arguments(scale)
    scale.add_argument("--shuffle", nargs="+", choices=sorted(STRATEGIES), default=["global", "local", "partial"])
    scale.add_argument("--q", type=float, nargs="+", default=None,
                       help="exchange rates of partial shuffling (default 0.1; with --recommend the q to search)")
    scale.add_argument("--recommend", action="store_true",
                       help="per worker count, the largest q whose epoch stays within --tolerance of LS (with "
                            "--seeds N: whose median epoch / LS over the seeds does)")
    scale.add_argument("--tolerance", type=float, default=0.10, help="allowed slowdown over LS (default 0.10)")
    scale.add_argument("--seeds", type=int, default=1, metavar="N",
                       help="simulate each scenario at seeds --seed .. --seed+N-1 and report the median and the "
                            "10-90 %% range of every phase and ratio (default 1: one draw); a scenario in which "
                            "nothing is drawn at random is simulated once")
    scale.add_argument("--json", action="store_true",
                       help='print {"platform", "seeds", "runs": [...], "scenarios": [...], "ratios": [...]} '
                            "(seconds per epoch; docs/scale.md); with --sensitivity, the study")
    scale_sensitivity.add_arguments(scale)
    scale.set_defaults(run=cmd_scale)
    actions = scale.add_subparsers(dest="action", required=False)
    from hpcshuffle.cli import scale_calibrate  # noqa: PLC0415 (keeps this module about simulation)

    scale_calibrate.add_parsers(actions)


def add_simulation_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that shape a simulated run: platform, workers, model, dataset, batch, seed, scope, jobs."""
    parser.add_argument("--platform", default="abci", help="conf/platform/<name>.yaml or a yaml path (default abci)")
    parser.add_argument("--workers", type=int, nargs="+", default=[128], metavar="M")
    parser.add_argument("--model", default="resnet50", help="a key of the platform's models: (default resnet50)")
    parser.add_argument("--dataset", default="imagenet1k", help="a key of the platform's datasets: (default imagenet1k)")
    parser.add_argument("--batch", type=int, default=32, help="b, samples per rank per iteration (default 32)")
    parser.add_argument("--seed", type=int, default=0, help="the (first) seed: with --seeds N, seeds S..S+N-1")
    parser.add_argument("--scope", nargs="+", choices=SCOPES, default=["rank"],
                        help="rank: a partition per rank; node: the platform's ranks_per_node ranks share one "
                             "partition per node, and only inter-node moves cross the network (default rank)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="simulations at a time, each its own process (≤ 4 GiB at 2,048 workers)")


def cmd_scale(args: argparse.Namespace) -> None:
    """Simulate the scenarios the flags name and print their table (or JSON), the q recommendation
    (--recommend) or the sensitivity study (--sensitivity, --plot). Every scenario is checked
    before any is simulated."""
    check_seeds(args.seed, args.seeds)
    platform = load_platform(args.platform)
    if args.sensitivity or args.plot is not None:
        scale_sensitivity.cmd_sensitivity(args, platform, _progress)
        return
    if args.recommend:
        affordable_q([], args.tolerance)  # a bad --tolerance fails here
        scenarios = scenarios_of(args, ["local", "partial"], args.q or list(DEFAULT_QS))
    else:
        scenarios = scenarios_of(args, args.shuffle, args.q or [0.1])
    for scenario in scenarios:
        check_scenario(platform, scenario)  # before hours of simulation, not after
    runs = simulate_seeds(platform, scenarios, args.seeds, _progress, args.jobs)
    if args.recommend and args.seeds > 1:
        print(recommendation_over_seeds(runs, args.tolerance))
    elif args.recommend:
        print(recommendation_table([run.first for run in runs], args.tolerance))
    elif args.json:
        document = seeds_document(platform.name, args.seeds, runs)
        for entry, run in zip(document["scenarios"], runs):
            entry["envelope"] = envelope(platform, run.scenario)
        print(json.dumps(document))
    else:
        print(results_table(platform, args, runs))


def scenarios_of(args: argparse.Namespace, shuffles: list[str], qs: list[float]) -> list[Scenario]:
    """One scenario per worker count × scope × strategy (× q for a strategy whose q is the user's);
    a strategy with no partition to share (GS) runs once, in rank scope."""
    scenarios: list[Scenario] = []
    for workers in args.workers:
        for scope in args.scope:
            for shuffle in shuffles:
                strategy = get_strategy(shuffle)
                for q in ([strategy.fixed_q] if strategy.fixed_q is not None else qs):
                    scenario = Scenario(workers, shuffle, q, args.model, args.dataset, args.batch, args.seed,
                                        scope=scope if strategy.node_scope else "rank")
                    if scenario not in scenarios:
                        scenarios.append(scenario)
    return scenarios


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def results_table(platform: Platform, args: argparse.Namespace, runs: list[SeedRuns]) -> str:
    """Seconds per epoch and each phase, with the epoch's ratio to LS at the same worker count and scope,
    and the back-of-envelope's epoch beside the model's (scale/envelope.py: `env` and `model/env`).

    Over several seeds, the epoch and the ratio are each a median with its [p10, p90] and the phases
    medians; the `seeds` column counts the simulations (1 where nothing is drawn at random) and
    `sim wall` adds up their real seconds."""
    many = args.seeds > 1
    local = baselines(runs)

    def cell(spread) -> str:
        return f"{spread.median:.2f}" + (f" [{spread.p10:.2f}, {spread.p90:.2f}]" if many else "")

    over = f"; over seeds {args.seed}..{args.seed + args.seeds - 1}: median [p10, p90], phases median" if many else ""
    epoch_width, ratio_width = (27, 20) if many else (9, 6)
    lines = [
        f"platform {platform.name}: {args.model} on {args.dataset}, b={args.batch} per rank; seconds per epoch "
        f"(epoch: slowest rank; phases: mean over ranks); AU: fwbw / epoch (MLPerf Storage's accelerator "
        f"utilisation); env: the back-of-envelope's epoch, no simulation (docs/scale.md){over}",
        f"{'workers':>7} {'run':<17} {'iters':>6} {'epoch':>{epoch_width}} " + " ".join(f"{p:>9}" for p in PHASES)
        + f" {'AU':>4} {'env':>9} {'model/env':>9} {'vs LS':>{ratio_width}}" + (f" {'seeds':>5}" if many else "")
        + f" {'sim wall':>9}",
    ]
    for run in runs:
        first, baseline = run.first, local.get((run.first.workers, run.first.scope))
        ratio = cell(run.ratio(baseline)) if baseline else "-"
        phases = " ".join(f"{run.spread(f'{phase}_s').median:>9.2f}" for phase in PHASES)
        epoch = cell(run.spread("epoch_s"))
        rough = envelope(platform, run.scenario)["epoch_s"]
        au = statistics.median(result.au for result in run.results)
        lines.append(f"{first.workers:>7} {first.label:<17} {first.iterations:>6} {epoch:>{epoch_width}} {phases} "
                     f"{au:>4.0%} {rough:>9.2f} {run.spread('epoch_s').median / rough:>9.2f} {ratio:>{ratio_width}}"
                     + (f" {len(run.results):>5}" if many else "")
                     + f" {sum(r.wall_s for r in run.results):>8.1f}s")
    once = [run.first.label for run in runs if run.deterministic]
    if many and once:
        lines.append(f"simulated once ({', '.join(once)}): nothing in it is drawn at random on this platform, "
                     "so every seed gives the same epoch (hpcshuffle.scale.seeds.is_deterministic)")
    return "\n".join(lines)
