"""Two tables of the scale study (experiments/scale_study.py) that test the scale model's mechanisms (issue 36):

- `fit`: the `abci` shared storage fitted to the only per-phase numbers Nguyen et al. give
  (DenseNet-161 at 512 workers: GS I/O mean 19.6 s, fastest rank 11.9 s, slowest 142 s, allreduce
  70 s; LS I/O 8 s), seed by seed — the slowest rank is one draw among 128 nodes, so the spread over
  seeds is part of the answer — and then, unfitted, ResNet-50's GS/LS at 128 workers (paper:
  "almost 5x"), seed by seed too.
- `knee`: PLS-0.1 against LS at 512-2,048 workers under the two exchange schedulers (hpcshuffle's;
  the PLS authors', a barrier per exchanged sample), with and without per-rank noise on the
  training thread and with the network's latency as measured or 10x it: for which settings does
  each scheduler have a knee, as the paper saw at 1,024-2,048 workers? Plus the check of the
  authors' scheduler's one fitted number: PLS q = 1.0 against LS at 512 (paper: 1.37x).

scale_grid.build_jobs builds their jobs (the settings of `knee_setups`) and scale_jobs.run_jobs runs them
with its cache; the tables and the figure are made here.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from hpcshuffle.analysis.plots import new_figure, save

FIT_SEEDS = (0, 1, 2, 3, 4)
FIT_BAND = 0.35  # issue 36: each fitted phase within ±35 % of the paper's
FIT_TARGETS = {  # Nguyen et al. Sec. V-F, DenseNet-161, 512 workers, ImageNet-1K
    ("global", "io_s"): 19.6, ("global", "io_min_s"): 11.9, ("global", "io_max_s"): 142.0,
    ("global", "allreduce_s"): 70.0, ("local", "io_s"): 8.0,
}
PREDICTION_BAND = (3.0, 7.0)  # ResNet-50 GS/LS at 128 workers; paper "almost 5x"
KNEE_WORKERS = (512, 2048)
KNEE_ITERATIONS = 10  # full iterations simulated per run (a PLS slot is a barrier of every rank)
NOISE = {  # per-rank jitter of each FW+BW and each slot of the training thread: none, or heavy-tailed
    "none": {"dist": "fixed", "mean": 0.0},
    "pareto 0.1 ms a=1.5": {"dist": "pareto", "mean": 1.0e-4, "shape": 1.5},
}
LATENCY_FACTORS = (1, 10)  # the network's per-hop latency (allreduce.alpha) as measured, and 10x: congestion
SCHEDULERS = ("hpcshuffle", "kakurenbo")


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


def fit_table(rows) -> str:
    """`rows`: (job, result) with job.label "<model> <shuffle>" and the scenario's seed."""
    by = {(job.label, job.scenario.seed): result for job, result in rows}
    seeds = sorted({job.scenario.seed for job, _ in rows if job.label.endswith("global")})
    lines = ["The abci shared storage fitted to Nguyen et al. Sec. V-F (DenseNet-161, 512 workers, b=32): seconds "
             "per epoch, simulated, against the paper",
             f"{'seed':>4} {'GS io':>7} {'GS io min':>10} {'GS io max':>10} {'GS allreduce':>13} {'LS io':>7} "
             f"{'GS epoch':>9} {'LS epoch':>9}   within ±{FIT_BAND:.0%}"]
    local = by[("densenet161 local", 0)]
    for seed in seeds:
        gs = by[("densenet161 global", seed)]
        errors = {(shuffle, key): (getattr(gs if shuffle == "global" else local, key) / value - 1)
                  for (shuffle, key), value in FIT_TARGETS.items()}
        outside = [f"{shuffle} {key} {error:+.0%}" for (shuffle, key), error in errors.items() if abs(error) > FIT_BAND]
        lines.append(f"{seed:>4} {gs.io_s:>7.1f} {gs.io_min_s:>10.1f} {gs.io_max_s:>10.1f} {gs.allreduce_s:>13.1f} "
                     f"{local.io_s:>7.1f} {gs.epoch_s:>9.1f} {local.epoch_s:>9.1f}   "
                     + ("all" if not outside else "not: " + ", ".join(outside)))
    lines.append(f"{'paper':>4} {19.6:>7.1f} {11.9:>10.1f} {142.0:>10.1f} {70.0:>13.1f} {8.0:>7.1f}")
    lines += ["", "Then, not fitted: ResNet-50 at 128 workers (paper: GS 'almost 5x slower' than LS; issue 36 asks "
              f"for {PREDICTION_BAND[0]:g}-{PREDICTION_BAND[1]:g})",
              f"{'seed':>4} {'GS epoch':>9} {'LS epoch':>9} {'GS/LS':>6} {'GS io':>7} {'GS io max':>10} {'LS io':>7}"]
    local = by[("resnet50 local", 0)]
    ratios = []
    for seed in seeds:
        gs = by[("resnet50 global", seed)]
        ratios.append(gs.epoch_s / local.epoch_s)
        lines.append(f"{seed:>4} {gs.epoch_s:>9.1f} {local.epoch_s:>9.1f} {ratios[-1]:>6.2f} {gs.io_s:>7.1f} "
                     f"{gs.io_max_s:>10.1f} {local.io_s:>7.1f}")
    lines.append(f"GS/LS over seeds: {min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.2f}")
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
