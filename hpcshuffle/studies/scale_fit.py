"""Two tables of the scale study (experiments/scale_study.py) that test the scale model's mechanisms (issue 36):

- `fit` (fit_check.txt): the check of the order-statistics path (scale/order_stats.py), on which
  experiments/scale_fit.py fits `abci`'s shared storage to Nguyen et al.'s per-phase numbers,
  against SimGrid at the fit's real size (DenseNet-161 at 512 workers, ResNet-50 at 128), seed by
  seed at the client factors the engine draws. The fit itself is hpcshuffle/studies/order_fit.py.
- `knee`: PLS-0.1 against LS at 512-2,048 workers under the two exchange schedulers (hpcshuffle's;
  the PLS authors', a barrier per exchanged sample), with and without per-rank noise on the
  training thread and with the network's latency as measured or 10x it: for which settings does
  each scheduler have a knee, as the paper saw at 1,024-2,048 workers? Plus the check of the
  authors' scheduler's one fitted number: PLS q = 1.0 against LS at 512 (paper: 1.37x).

scale_grid.build_jobs builds their jobs (the settings of `knee_setups`) and scale_jobs.run_jobs runs them
with its cache; the tables and the figure are made here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hpcshuffle.analysis.plots import new_figure, save
from hpcshuffle.scale.order_stats import at_seeds, breakdown
from hpcshuffle.scale.platform import Platform

FIT_SEEDS = (0, 1, 2, 3, 4)
CHECKED = ("io_s", "io_min_s", "io_max_s", "allreduce_s", "epoch_s")
KNEE_WORKERS = (512, 2048)
KNEE_ITERATIONS = 10  # full iterations simulated per run (a PLS slot is a barrier of every rank)
NOISE = {  # per-rank jitter of each FW+BW and each slot of the training thread: none, or heavy-tailed
    "none": {"dist": "fixed", "mean": 0.0},
    "pareto 0.1 ms a=1.5": {"dist": "pareto", "mean": 1.0e-4, "shape": 1.5},
}
LATENCY_FACTORS = (1, 10)  # the network's per-hop latency (allreduce.alpha) as measured, and 10x: congestion
SCHEDULERS = ("hpcshuffle", "kakurenbo")


def with_fenced_block(readme: str, name: str, script: str, text: str) -> str:
    """`readme` with `text` fenced between the markers of `name`'s block, `<!-- begin NAME: SCRIPT writes this
    block -->` and `<!-- end NAME -->` (unchanged where it has none): the blocks of results/reference/scale/README.md
    that experiments/scale_fit.py and scale_knee.py rewrite."""
    begin, end = f"<!-- begin {name}: {script} writes this block -->", f"<!-- end {name} -->"
    head, found, rest = readme.partition(begin)
    if not found or end not in rest:
        return readme
    return head + begin + "\n\n```\n" + text + "\n```\n\n" + end + rest.partition(end)[2]


def knee_setups(alpha: float) -> list[tuple[str, dict]]:
    """(name, platform values) of every knee setting: scheduler x noise x network latency."""
    setups = []
    for scheduler in SCHEDULERS:
        for noise, distribution in NOISE.items():
            for factor in LATENCY_FACTORS:
                values = {"exchange.scheduler": scheduler, "exchange.noise": distribution,
                          "allreduce.alpha": alpha * factor}
                setups.append((f"{scheduler}|{noise}|{factor}x", values))
    return setups


def fit_table(rows, platform: Platform) -> str:
    """The order-statistics path (scale/order_stats.py) against the simulation at the fit's real size, seed by
    seed: each simulated seed beside the fast path at the client factors the engine draws at that seed.
    `rows`: (job, result) with job.label "<model> <shuffle>" and the scenario's seed."""
    lines = ["The order-statistics path against SimGrid at the fit's size, seed by seed (abci as in conf/platform): "
             "seconds per epoch, simulated / fast path at the same seed's client factors (error)"]
    for model in ("densenet161", "resnet50"):
        runs = sorted(((job.scenario, result) for job, result in rows if job.label == f"{model} global"),
                      key=lambda run: run[0].seed)
        if not runs:
            continue
        scenario = runs[0][0]
        fast = at_seeds(platform, scenario, [run[0].seed for run in runs])
        lines += ["", f"{model}, GS at {scenario.workers} workers",
                  f"{'seed':>4} " + " ".join(f"{name:>22}" for name in CHECKED)]
        errors = []
        for (run, result), predicted in zip(runs, fast):
            cells = []
            for field in CHECKED:
                simulated = getattr(result, field)
                errors.append(predicted[field] / simulated - 1)
                cells.append(f"{simulated:.1f}/{predicted[field]:.1f} ({errors[-1]:+.1%})")
            lines.append(f"{run.seed:>4} " + " ".join(f"{cell:>22}" for cell in cells))
        local = [result for job, result in rows if job.label == f"{model} local"]
        if local:
            predicted = breakdown(platform, dataclasses.replace(scenario, shuffle="local", q=None))
            lines.append(f"LS: io {local[0].io_s:.2f}/{predicted.io_s.median:.2f} s, "
                         f"epoch {local[0].epoch_s:.2f}/{predicted.epoch_s.median:.2f} s")
        lines.append(f"largest error: {max(errors, key=abs):+.1%}")
    return "\n".join(lines)


def knee_table(rows, out: Path) -> str:
    """`rows`: (job, result); job.setup.name "<scheduler>|<noise>|<latency>x", job.label "local" (run in the
    hpcshuffle setups only: LS exchanges nothing) or "partial-<q>"."""
    by = {(job.setup.name, job.label, job.scenario.workers): result for job, result in rows}
    workers = sorted({job.scenario.workers for job, _ in rows if job.label == "partial-0.1"})
    lines = [f"PLS-0.1 epoch over LS's on abci (ResNet-50, b=32; {KNEE_ITERATIONS} full iterations simulated per run), "
             "by exchange scheduler, per-rank noise on the training thread, and network latency (allreduce.alpha)",
             f"{'scheduler':<11} {'noise':<20} {'latency':>7} " + " ".join(f"{'M=' + str(m):>8}" for m in workers)
             + f"   knee (PLS/LS rises by > 5 points from {workers[0]} to {workers[-1]})"]
    curves = {}
    for scheduler in SCHEDULERS:
        for noise in NOISE:
            for factor in LATENCY_FACTORS:
                name = f"{scheduler}|{noise}|{factor}x"
                local_name = f"hpcshuffle|{noise}|{factor}x"  # LS exchanges nothing: either scheduler's LS
                ratios = [by[(name, "partial-0.1", m)].epoch_s / by[(local_name, "local", m)].epoch_s
                          for m in workers]
                curves[name] = ratios
                knee = "yes" if ratios[-1] - ratios[0] > 0.05 else "no"
                lines.append(f"{scheduler:<11} {noise:<20} {factor:>6}x " + " ".join(f"{r:>8.3f}" for r in ratios)
                             + f"   {knee}")
    check = [(job, result) for job, result in rows if job.figure == "knee" and job.label == "partial-1"]
    if check:
        job, result = check[0]
        local = by[(job.setup.name.replace("kakurenbo", "hpcshuffle"), "local", job.scenario.workers)]
        lines.append(f"the authors' scheduler's fitted number: PLS q=1.0 / LS at {job.scenario.workers} workers = "
                     f"{result.epoch_s / local.epoch_s:.2f} (paper, Fig. 10: 1.37)")
    figure = new_figure(7.5, 4.4)
    axes = figure.add_subplot()
    for name, ratios in curves.items():
        scheduler, noise, latency = name.split("|")
        axes.plot(workers, ratios, ("o-" if scheduler == "kakurenbo" else "s--"),
                  alpha=0.9 if latency == "1x" else 0.5, label=f"{scheduler}, {noise}, latency {latency}")
    axes.set_xscale("log", base=2)
    axes.set_xticks(workers, [str(m) for m in workers])
    axes.set_xlabel("workers M")
    axes.set_ylabel("PLS-0.1 epoch / LS epoch")
    axes.set_title("Where PLS-0.1 has a knee: two schedulers, noise, network latency (abci, simulated)")
    axes.legend(fontsize="xx-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    save(figure, out / "pls_knee.png")
    return "\n".join(lines)
