"""Three paper figures at the papers' scale, from SimGrid simulations (`hpcshuffle scale`), each
with the paper's stated values beside the simulated ones, and two tables of the model's mechanisms
(experiments/scale_fit.py: `fit`, the abci storage fitted to Nguyen's DenseNet-161 breakdown and
ResNet-50's unfitted GS/LS; `knee`, PLS-0.1/LS by exchange scheduler, noise and network latency):

- Nguyen et al. Fig. 9: epoch time against workers (16-2,048) for global (GS), local (LS) and
  partial-0.1 (PLS) shuffling, ResNet-50 on ImageNet-1K, platform `abci` (b = 32 per rank: the
  paper's "40 and 20 iterations" per epoch at 1,024 and 2,048 workers). Log-log plot and the
  ratios GS/LS and PLS/LS per worker count, against the ratios the paper's text states.
- Nguyen et al. Fig. 10: the breakdown (I/O · exchange · FW+BW · allreduce) at 512 workers for
  LS, PLS q = 0.1 ... 1.0 and GS, ResNet-50 and DenseNet-161. An epoch there is 79 iterations; a
  PLS-1.0 iteration is 16,384 concurrent exchange messages, ~30 s of SimGrid on this machine, so
  `--fig10-iterations` (default 10) full iterations are simulated and their seconds scaled by
  N / samples to one epoch; the table checks the scaling against Fig. 9's whole epochs at 512.
- Yang & Cong Fig. 8: the per-epoch cost of collectively loading ImageNet-1K on 16-256 Lassen
  nodes (4 learners each), the regular loader (GS reading GPFS) against locality-aware loading.
  Yang measured loading only, so the platform gets a model `loading_only` with negligible FW+BW
  (1 ns per sample) and no gradient bytes, added here (conf/ is not changed):
  with_values(platform, {"models.loading_only": ...}). The local batch
  is b = 128 (`--yang-batch`): Yang's loading-only Fig. 1 and the training runs of Table I
  (8,192 / 64 learners) use 128; Sec. VI-A does not restate it.
  A second set charges decoding (`--yang-decode-ms`, default 2.1 ms per sample on one core, measured
  by benchmarks/loader.py here) over a learner's 11 cores: locality-aware loading still decodes.
- Optionally, a sensitivity curve for Fig. 9: GS with another per-file latency of the shared file
  system (`--gs-latency-ms`; `hpcshuffle scale --sensitivity` varies it beside every other knob).

Every simulation is cached as json under `<out>/cache/`, keyed by the platform file's sha256,
the changes made to it here, the scenario and the simulator's code (hpcshuffle/scale/engine.py,
scenario.py, platform.py, platform_yaml.py, traffic.py, storage.py, slots.py, hpcshuffle/plan/): a
rerun only simulates what is missing, and a platform whose yaml changed, or a changed engine, is
simulated again. Writes under
`--out`: `fit.txt`, `nguyen_fig9_epoch_time.png` and `nguyen_fig9.txt`, `nguyen_fig10_breakdown.png`
and `nguyen_fig10.txt`, `yang_fig8_loading.png` and `yang_fig8.txt`, `pls_knee.txt` and
`pls_knee.png`, and `scale_study.json` (every simulated row).

    python experiments/scale_study.py [--out results/reference/scale] [--jobs 2]
        [--figures fit fig9 fig10 yang8 knee] [--workers 16 32 ... 2048] [--densenet-q 0.1 0.3 0.5 1.0]
        [--no-densenet] [--yang-batch 128] [--gs-latency-ms 5] [--quick]

`--quick` checks the plumbing in a few minutes: a 1/20 ImageNet (64,058 samples), Fig. 9 at 16 and
32 workers, Fig. 10 at 64 workers with q = 0.1 and 1.0, Yang at 16 and 32 nodes; use another
`--out` for it. Each simulation is one process (SimGrid runs once per process); `--jobs` run at a
time (≤ 4 GiB each at 2,048 workers).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml
from scale_fit import (
    FIT_SEEDS,
    KNEE_ITERATIONS,
    KNEE_WORKERS,
    fit_table,
    knee_setups,
    knee_table,
)

from hpcshuffle.analysis.plots import PHASE_LABELS, new_figure, save
from hpcshuffle.plan import run_label
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Model, Platform
from hpcshuffle.scale.platform_yaml import (
    platform_from_dict,
    platform_path,
    with_values,
)
from hpcshuffle.scale.scenario import PHASES, Result, Scenario, check_scenario

NGUYEN_WORKERS = [16, 32, 64, 128, 256, 512, 1024, 2048]
FIG10_WORKERS = 512
FIG10_QS = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0]
YANG_NODES = [16, 32, 64, 128, 256]
QUICK_SAMPLES = 1_281_167 // 20
LOADING_ONLY = Model(fwbw_per_sample=1e-9, gradient_bytes=0.0)
YANG_CORES_PER_LEARNER = 11  # Yang Sec. VI: 44 POWER9 cores per node, 4 learners (10 loader workers each)

# What the papers' text states (the figures' exact values are not in the text).
PAPER = {
    "fig9": {
        "source": "nguyen2022-why-globally-reshuffle.txt Sec. V-F (Fig. 9), ABCI, ResNet-50, ImageNet-1K",
        "gs_over_ls": {128: "~5 ('almost 5x slower')"},
        "pls_over_ls": {**{m: "~1 ('similar')" for m in (16, 32, 64, 128, 256, 512)},
                        1024: "> 1 ('significantly degrades')", 2048: "> 1 ('significantly degrades')"},
        "iterations": {1024: 40, 2048: 20},
    },
    "fig10": {
        "source": "nguyen2022-why-globally-reshuffle.txt Sec. V-F (Fig. 10), ABCI, 512 workers, mean of 5 epochs",
        "pls_over_ls_max": 1.37,
        "densenet_io_s": {"global": 19.6, "local": 8.0},
        "densenet_gs_io_range_s": (11.9, 142.0),
        "densenet_gs_allreduce_s": 70.0,
    },
    "yang8": {
        "source": "yang2019-locality-aware-loading.txt Sec. VI-A (Fig. 8), Lassen, GPFS, 4 learners per node",
        "speedup": {256: 34.0},
        "regular": "the cost did not decrease while scaling up (16-256 nodes)",
    },
}


@dataclass(frozen=True)
class Setup:
    """A platform file plus the changes this study makes to it (recorded, and part of the cache key):
    `values` maps dotted paths of the yaml to what they are set to (platform.with_values)."""

    name: str
    platform: str  # conf/platform/<name>.yaml
    values: dict = field(default_factory=dict)

    def changes(self) -> dict:
        return self.values


@dataclass
class Job:
    figure: str
    label: str
    setup: Setup
    scenario: Scenario
    scale: float = 1.0  # simulated seconds x scale = seconds per epoch (Fig. 10 simulates part of an epoch)


class Platforms:
    """Each platform file read once (bytes → sha256 → Platform), so the key and the simulation agree."""

    def __init__(self) -> None:
        self.raw: dict[str, tuple[str, dict, str]] = {}

    def get(self, setup: Setup) -> tuple[Platform, str]:
        if setup.platform not in self.raw:
            path = platform_path(setup.platform)
            data = path.read_bytes()
            self.raw[setup.platform] = (hashlib.sha256(data).hexdigest(), yaml.safe_load(data), str(path))
        digest, raw, source = self.raw[setup.platform]
        return with_values(platform_from_dict(raw, source), setup.values), digest


def code_digest() -> str:
    """sha256 of the code that decides a simulated epoch: the engine, the scenario's records, the platform
    and its loader, the traffic and the plan (a changed engine is simulated again, as a changed platform
    file is)."""
    package = Path(__file__).resolve().parents[1] / "hpcshuffle"
    files = [package / "scale" / name for name in ("engine.py", "scenario.py", "platform.py", "platform_yaml.py",
                                                    "traffic.py", "storage.py", "slots.py")]
    files += sorted((package / "plan").glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


CODE_SHA256 = code_digest()


def cache_key(digest: str, setup: Setup, scenario: Scenario) -> str:
    text = json.dumps({"platform_sha256": digest, "code_sha256": CODE_SHA256, "platform": setup.platform,
                       "changes": setup.changes(), "scenario": asdict(scenario)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def cache_path(out: Path, setup: Setup, scenario: Scenario, key: str) -> Path:
    q = "" if scenario.q is None else f"-q{scenario.q:g}"
    return (out / "cache" / f"{setup.name}-{scenario.model}-{scenario.shuffle}{q}-M{scenario.workers}"
            f"-b{scenario.batch_size}-{key[:16]}.json")


def build_jobs(args: argparse.Namespace) -> list[Job]:
    abci = Setup("abci", args.nguyen_platform)
    slow_gs = Setup(f"abci-gs{args.gs_latency_ms:g}ms", args.nguyen_platform,
                    {"shared.file_latency": args.gs_latency_ms / 1000})
    lassen = Setup("lassen-loading", args.yang_platform, {"models.loading_only": asdict(LOADING_ONLY)})
    # decoding and augmenting each sample (the engine charges a loader's CPU as one core's execution per
    # batch, so the cost per sample is spread over the cores a learner's loader workers use)
    decode = Setup(f"lassen-loading-decode{args.yang_decode_ms:g}ms", args.yang_platform,
                   {"models.loading_only": asdict(LOADING_ONLY),
                    "loader.cpu_per_file": args.yang_decode_ms / 1000 / YANG_CORES_PER_LEARNER})
    samples = QUICK_SAMPLES if args.quick else None
    fig9_workers = args.workers or ([16, 32] if args.quick else NGUYEN_WORKERS)
    fig10_workers = 64 if args.quick else FIG10_WORKERS
    qs = [0.1, 1.0] if args.quick else FIG10_QS
    densenet_qs = [0.1, 1.0] if args.quick else args.densenet_q
    gs_latency_workers = fig9_workers if args.quick else [m for m in fig9_workers if m in args.gs_latency_workers]
    nodes = args.nodes or ([16, 32] if args.quick else YANG_NODES)
    models = ["resnet50"] if args.no_densenet else ["resnet50", "densenet161"]

    def scenario(workers: int, shuffle: str, q: float | None, model: str = "resnet50", batch: int = 32,
                 part: int | None = None) -> Scenario:
        return Scenario(workers, shuffle, q, model, "imagenet1k", batch, samples=part or samples)

    # Fig. 10: `--fig10-iterations` full iterations stand for the epoch (one PLS-1.0 iteration at 512 workers
    # is 16,384 concurrent messages, ~30 s of SimGrid here); seconds are scaled by N / samples
    part = None
    scale = 1.0
    if args.fig10_iterations and not args.quick:
        part = args.fig10_iterations * fig10_workers * 32
        scale = 1_281_167 / part

    jobs: list[Job] = []
    if "fig9" in args.figures:
        for m in fig9_workers:
            jobs += [Job("fig9", "global", abci, scenario(m, "global", None)),
                     Job("fig9", "local", abci, scenario(m, "local", None)),
                     Job("fig9", "partial-0.1", abci, scenario(m, "partial", 0.1))]
            if args.gs_latency_ms > 0 and m in gs_latency_workers:
                jobs.append(Job("fig9", f"global ({args.gs_latency_ms:g} ms/file)", slow_gs,
                                scenario(m, "global", None)))
    if "fig10" in args.figures:
        for model in models:
            jobs += [Job("fig10", "local", abci, scenario(fig10_workers, "local", None, model, part=part), scale)]
            jobs += [Job("fig10", f"partial-{q:g}", abci, scenario(fig10_workers, "partial", q, model, part=part), scale)
                     for q in (qs if model == "resnet50" else densenet_qs)]
            jobs += [Job("fig10", "global", abci, scenario(fig10_workers, "global", None, model, part=part), scale)]
    if "fit" in args.figures:  # experiments/scale_fit.py: the fit, seed by seed, and the unfitted prediction
        for model, workers in (("densenet161", fig10_workers), ("resnet50", 128)):
            jobs.append(Job("fit", f"{model} local", abci, scenario(workers, "local", None, model)))
            jobs += [Job("fit", f"{model} global", abci, dataclasses.replace(scenario(workers, "global", None, model),
                                                                             seed=seed))
                     for seed in (FIT_SEEDS[:2] if args.quick else FIT_SEEDS)]
    if "knee" in args.figures:  # experiments/scale_fit.py: PLS-0.1 / LS by scheduler, noise and latency
        alpha = platform_from_dict(yaml.safe_load(platform_path(args.nguyen_platform).read_text())).allreduce.alpha
        knee_workers = [64, 128] if args.quick else KNEE_WORKERS
        for name, values in knee_setups(alpha):
            setup = Setup(name, args.nguyen_platform, values)
            for m in knee_workers:
                part = KNEE_ITERATIONS * m * 32
                if name.startswith("hpcshuffle"):
                    jobs.append(Job("knee", "local", setup, scenario(m, "local", None, part=part)))
                jobs.append(Job("knee", "partial-0.1", setup, scenario(m, "partial", 0.1, part=part)))
            if name == "kakurenbo|none|1x":  # its one fitted number: PLS q=1.0 / LS at Fig. 10's scale
                jobs.append(Job("knee", "partial-1", setup,
                                scenario(knee_workers[0], "partial", 1.0, part=KNEE_ITERATIONS * knee_workers[0] * 32)))
    if "yang8" in args.figures:
        for n in nodes:
            for shuffle, label in (("global", "regular"), ("locality", "locality-aware")):
                jobs.append(Job("yang8", label, lassen, scenario(4 * n, shuffle, None, "loading_only", args.yang_batch)))
                if args.yang_decode_ms > 0:
                    jobs.append(Job("yang8", f"{label} + decode", decode,
                                    scenario(4 * n, shuffle, None, "loading_only", args.yang_batch)))
    return jobs


def run_jobs(jobs: list[Job], out: Path, jobs_at_once: int) -> dict[int, tuple[Result, str, bool]]:
    """Every job's Result (from the cache or simulated now), its platform sha256, and whether it was cached."""
    platforms = Platforms()
    resolved: dict[int, tuple[Result, str, bool]] = {}
    pending: dict[str, tuple[Platform, Scenario, Path, str, Setup]] = {}
    waiting: dict[str, list[int]] = {}
    for index, job in enumerate(jobs):
        platform, digest = platforms.get(job.setup)
        check_scenario(platform, job.scenario)  # before any simulation, not after
        key = cache_key(digest, job.setup, job.scenario)
        path = cache_path(out, job.setup, job.scenario, key)
        if path.exists():
            resolved[index] = (Result(**json.loads(path.read_text())["result"]), digest, True)
        else:
            pending.setdefault(key, (platform, job.scenario, path, digest, job.setup))
            waiting.setdefault(key, []).append(index)
    cached = len(resolved)
    print(f"{len(jobs)} rows: {cached} from the cache, {len(pending)} simulations to run, {jobs_at_once} at a time",
          flush=True)
    # the largest runs first, so the last ones to finish are short (a rough cost: exchange-heavy first)
    order = sorted(pending, key=lambda k: (pending[k][1].shuffle != "partial", -(pending[k][1].q or 0),
                                           -pending[k][1].workers))
    started = time.perf_counter()
    (out / "cache").mkdir(parents=True, exist_ok=True)

    def one(key: str) -> tuple[str, Result]:
        platform, scenario, _, _, _ = pending[key]
        return key, simulate(platform, scenario)

    with ThreadPoolExecutor(max_workers=max(1, jobs_at_once)) as pool:
        futures = [pool.submit(one, key) for key in order]
        for done, future in enumerate(as_completed(futures), 1):
            key, result = future.result()
            platform, scenario, path, digest, setup = pending[key]
            record = {"platform": platform.name, "platform_file": platform.source, "platform_sha256": digest,
                      "code_sha256": CODE_SHA256,
                      "changes": setup.changes(), "scenario": asdict(scenario), "result": asdict(result),
                      "simulated_at": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}"}
            path.write_text(json.dumps(record, indent=1) + "\n")
            for index in waiting[key]:
                resolved[index] = (result, digest, False)
            print(f"[{done}/{len(order)}] {setup.name} {scenario.model} {run_label(scenario.shuffle, result.q)} "
                  f"M={scenario.workers}: epoch {result.epoch_s:.1f} s simulated in {result.wall_s:.0f} s wall "
                  f"({time.perf_counter() - started:.0f} s so far)", flush=True)
    return resolved


# ---- tables and figures -----------------------------------------------------------------------------
def rows_of(jobs: list[Job], results: dict[int, tuple[Result, str, bool]], figure: str) -> list[tuple[Job, Result]]:
    """The rows of `figure`, seconds per epoch (a part-epoch's seconds scaled by the job's `scale`)."""
    rows = []
    for i, job in enumerate(jobs):
        if job.figure == figure:
            r = results[i][0]
            if job.scale != 1.0:
                r = dataclasses.replace(r, **{f"{p}_s": getattr(r, f"{p}_s") * job.scale for p in (*PHASES, "epoch")})
            rows.append((job, r))
    return rows


def fig9(rows: list[tuple[Job, Result]], out: Path) -> str:
    by = {(job.label, job.scenario.workers): r for job, r in rows}
    labels = list(dict.fromkeys(job.label for job, _ in rows))
    workers = sorted({job.scenario.workers for job, _ in rows})
    paper = PAPER["fig9"]
    extra = [label for label in labels if label not in ("global", "local", "partial-0.1")]
    lines = [
        "Nguyen et al. Fig. 9, simulated: seconds per epoch (slowest rank), ResNet-50 on ImageNet-1K, b=32 per "
        "rank, platform abci",
        f"paper: {paper['source']}; the figure's values are not in the text, only the ratios below",
        f"{'M':>5} {'iters':>6} {'GS s':>9} {'LS s':>8} {'PLS-0.1 s':>10} {'GS/LS':>6} {'PLS/LS':>7}"
        + "".join(f" {label[len('global '):] + ' GS/LS':>14}" for label in extra)
        + f"   {'paper GS/LS':<26} {'paper PLS/LS':<32} paper iters",
    ]
    for m in workers:
        gs, ls, pls = by.get(("global", m)), by[("local", m)], by.get(("partial-0.1", m))
        lines.append(
            f"{m:>5} {ls.iterations:>6} {gs.epoch_s if gs else float('nan'):>9.1f} {ls.epoch_s:>8.1f} "
            f"{pls.epoch_s if pls else float('nan'):>10.1f} "
            f"{(gs.epoch_s / ls.epoch_s) if gs else float('nan'):>6.2f} "
            f"{(pls.epoch_s / ls.epoch_s) if pls else float('nan'):>7.3f}"
            + "".join(f" {by[(label, m)].epoch_s / ls.epoch_s:>14.2f}" if (label, m) in by else f" {'-':>14}"
                      for label in extra)
            + f"   {paper['gs_over_ls'].get(m, '-'):<26} {paper['pls_over_ls'].get(m, '-'):<32} "
            f"{paper['iterations'].get(m, '-')}")
    lines.append("phases of PLS-0.1 (mean over ranks, s): " + "; ".join(
        f"M={m} " + " ".join(f"{p} {by[('partial-0.1', m)].phases()[p]:.2f}" for p in PHASES)
        for m in workers if ("partial-0.1", m) in by))
    table = "\n".join(lines)

    figure = new_figure(6.5, 4.2)
    axes = figure.add_subplot()
    styles = {"global": "o-", "local": "s-", "partial-0.1": "^-"}
    for label in labels:
        points = [(m, by[(label, m)].epoch_s) for m in workers if (label, m) in by]
        axes.plot(*zip(*points), styles.get(label, "o--"), label=f"simulated {label}",
                  alpha=1.0 if label in styles else 0.6)
    if 128 in workers and ("local", 128) in by:  # the one ratio the text gives
        axes.plot([128], [5 * by[("local", 128)].epoch_s], "k*", markersize=11,
                  label="paper: GS ≈ 5× LS at 128 (text)")
    log_log(axes, workers, "workers M (GPUs, 4 per node)", "seconds per epoch (slowest rank)",
            "Nguyen Fig. 9 simulated: ResNet-50 / ImageNet-1K on ABCI")
    axes.legend(fontsize="small")
    save(figure, out / "nguyen_fig9_epoch_time.png")
    return table


def fig10(rows: list[tuple[Job, Result]], out: Path, full: list[tuple[Job, Result]]) -> str:
    paper = PAPER["fig10"]
    models = list(dict.fromkeys(job.scenario.model for job, _ in rows))
    workers = rows[0][0].scenario.workers
    first = rows[0]
    part = (f"simulated over {first[1].iterations} full iterations ({first[0].scenario.samples:,} samples), "
            f"seconds scaled x{first[0].scale:.3f} (N / samples) to one epoch"
            if first[0].scale != 1.0 else "one whole epoch simulated")
    lines = [f"Nguyen et al. Fig. 10, simulated: seconds per epoch at {workers} workers on abci, b=32; phases are "
             "means over ranks, epoch the slowest rank; util = (fwbw + allreduce) / epoch",
             part,
             f"paper: {paper['source']}",
             f"{'model':<12} {'run':<12} {'io':>7} {'exchange':>8} {'fwbw':>7} {'allreduce':>9} {'epoch':>7} "
             f"{'vs LS':>6} {'util':>5}"]
    figure = new_figure(5.0 * len(models) + 1.5, 4.4)
    for panel, model in enumerate(models, 1):
        runs = [(job.label, r) for job, r in rows if job.scenario.model == model]
        local = next(r.epoch_s for label, r in runs if label == "local")
        for label, r in runs:
            util = (r.fwbw_s + r.allreduce_s) / r.epoch_s
            lines.append(f"{model:<12} {label:<12} {r.io_s:>7.2f} {r.exchange_s:>8.2f} {r.fwbw_s:>7.2f} "
                         f"{r.allreduce_s:>9.2f} {r.epoch_s:>7.2f} {r.epoch_s / local:>6.2f} {util:>5.0%}")
        axes = figure.add_subplot(1, len(models), panel)
        positions = range(len(runs))
        bottoms = [0.0] * len(runs)
        for phase in PHASES:
            heights = [r.phases()[phase] for _, r in runs]
            axes.bar(positions, heights, bottom=bottoms, width=0.6, label=PHASE_LABELS[phase])
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        axes.scatter(positions, [r.epoch_s for _, r in runs], marker="_", s=300, color="black",
                     label="epoch (slowest rank)")
        for position, (_, r) in zip(positions, runs):
            axes.annotate(f"{r.epoch_s / local:.2f}×", (position, max(r.epoch_s, bottoms[position])),
                          xytext=(0, 3), textcoords="offset points", ha="center", fontsize="x-small")
        names = ["LS" if label == "local" else "GS" if label == "global" else label.removeprefix("partial-")
                 for label, _ in runs]
        axes.set_xticks(list(positions), names)
        axes.set_xlabel("exchange rate q (LS = 0, GS: reads the shared FS)")
        axes.set_ylabel("seconds per epoch")
        axes.set_title(f"{model}, {workers} workers (× = epoch / LS)", fontsize="medium")
        axes.margins(y=0.12)
        if model == "densenet161":
            for label, seconds in paper["densenet_io_s"].items():
                if label in [lab for lab, _ in runs]:
                    x = [lab for lab, _ in runs].index(label)
                    axes.plot([x + 0.33], [seconds], "k*", markersize=8,
                              label="paper I/O (text)" if label == "global" else None)
    figure.axes[-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle("Nguyen Fig. 10 simulated: breakdown against the exchange rate (ABCI)"
                    + (f"\n{first[1].iterations} iterations simulated, scaled ×{first[0].scale:.2f} to an epoch"
                       if first[0].scale != 1.0 else ""), fontsize="medium")
    save(figure, out / "nguyen_fig10_breakdown.png")
    estimates = {(job.scenario.model, job.label): r for job, r in rows}
    checks = [(job.label, r, estimates[(job.scenario.model, job.label)]) for job, r in full
              if job.scenario.workers == workers and (job.scenario.model, job.label) in estimates
              and job.scenario.samples is None]
    if checks and first[0].scale != 1.0:
        lines.append("check of the scaling against the whole epochs of Fig. 9 at the same M (resnet50): " + "; ".join(
            f"{label} {whole.epoch_s:.2f} s whole vs {estimate.epoch_s:.2f} s scaled "
            f"({estimate.epoch_s / whole.epoch_s - 1:+.1%})" for label, whole, estimate in checks))
    lo, hi = paper["densenet_gs_io_range_s"]
    lines += [f"paper: PLS up to {paper['pls_over_ls_max']}x LS's epoch at high q (which q is not stated); FW+BW "
              "constant across runs; DenseNet-161 I/O: GS 19.6 s, LS 8 s (mean over workers); GS I/O per worker "
              f"{lo}-{hi} s; GS gradient exchange (allreduce) 70 s on average (ranks waiting for the slowest reader)"]
    return "\n".join(lines)


def yang8(rows: list[tuple[Job, Result]], out: Path) -> str:
    paper = PAPER["yang8"]
    by = {(job.label, job.scenario.workers): r for job, r in rows}
    learners = sorted({job.scenario.workers for job, _ in rows})
    batch = rows[0][0].scenario.batch_size
    decode = next((job.setup.values["loader.cpu_per_file"] for job, _ in rows
                   if "loader.cpu_per_file" in job.setup.values), None)
    variants = [("", "model loading_only (FW+BW 1 ns/sample, no gradients), decoding not charged")]
    if decode is not None:
        variants.append((" + decode", f"the same, plus decoding: loader.cpu_per_file {decode * 1e3:.3f} ms "
                                      f"({decode * 1e3 * YANG_CORES_PER_LEARNER:g} ms per sample on one core / "
                                      f"{YANG_CORES_PER_LEARNER} cores per learner)"))
    lines = [f"Yang & Cong Fig. 8, simulated: per-epoch cost to collectively load ImageNet-1K on lassen (GPFS), "
             f"4 learners per node, b={batch} per learner",
             "epoch: slowest learner's epoch (incl. the per-step barrier and alpha of an allreduce of 0 bytes, which "
             "Yang's loading runs did not have); load: io + exchange (loans), mean over learners",
             f"paper: {paper['source']}"]
    for suffix, what in variants:
        lines += [f"-- {what}",
                  f"{'nodes':>5} {'learners':>8} {'iters':>5} {'regular epoch':>13} {'regular load':>12} "
                  f"{'locality epoch':>14} {'locality load':>13} {'speedup epoch':>13} {'speedup load':>12}   paper"]
        for m in learners:
            reg, loc = by[("regular" + suffix, m)], by[("locality-aware" + suffix, m)]
            reg_load, loc_load = reg.io_s + reg.exchange_s, loc.io_s + loc.exchange_s
            note = f"~{paper['speedup'][m // 4]:g}x speedup" if m // 4 in paper["speedup"] else ""
            lines.append(f"{m // 4:>5} {m:>8} {reg.iterations:>5} {reg.epoch_s:>13.2f} {reg_load:>12.2f} "
                         f"{loc.epoch_s:>14.3f} {loc_load:>13.3f} {reg.epoch_s / loc.epoch_s:>13.1f} "
                         f"{reg_load / loc_load if loc_load else float('inf'):>12.1f}   {note}")
    lines.append(f"paper: regular loader: {paper['regular']}; locality-aware: scales with the learners; "
                 "multithreading made regular runs 24-71% and locality-aware runs 105-113% faster")
    table = "\n".join(lines)

    figure = new_figure(7.0, 4.6)
    axes = figure.add_subplot()
    nodes = [m // 4 for m in learners]
    for suffix, style in zip([v[0] for v in variants], ("-", "--")):
        for label, marker, colour in (("regular", "o", "tab:blue"), ("locality-aware", "s", "tab:green")):
            axes.plot(nodes, [by[(label + suffix, m)].epoch_s for m in learners], marker + style, color=colour,
                      alpha=1.0 if not suffix else 0.7, label=f"{label}{suffix}: epoch")
            if not suffix:
                axes.plot(nodes, [by[(label, m)].io_s + by[(label, m)].exchange_s for m in learners], marker + ":",
                          color=colour, alpha=0.5, label=f"{label}: io + exchange")
    log_log(axes, nodes, "nodes p (4 learners each)", "seconds per epoch (loading only, simulated)",
            "Yang & Cong Fig. 8 simulated: loading ImageNet-1K on Lassen")
    if 256 in nodes:
        axes.annotate("paper: ~34× at 256 nodes", (256, by[("locality-aware", 1024)].epoch_s), xytext=(-130, 25),
                      textcoords="offset points", fontsize="small", arrowprops={"arrowstyle": "->"})
    axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    save(figure, out / "yang_fig8_loading.png")
    return table


def log_log(axes, ticks: list[int], xlabel: str, ylabel: str, title: str) -> None:
    """Log-log axes with the simulated x values as plain ticks."""
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(ticks, [str(tick) for tick in ticks])
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    plain_log_ticks(axes)
    axes.set_title(title)


def plain_log_ticks(axes) -> None:
    """Log axes labelled 5, 10, 200 rather than 5×10^0."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/reference/scale")
    parser.add_argument("--jobs", type=int, default=2, help="simulations at a time (default 2)")
    parser.add_argument("--figures", nargs="+", choices=["fit", "fig9", "fig10", "yang8", "knee"],
                        default=["fit", "fig9", "fig10", "yang8", "knee"])
    parser.add_argument("--workers", type=int, nargs="+", default=None, metavar="M",
                        help=f"Fig. 9's worker counts (default {' '.join(map(str, NGUYEN_WORKERS))})")
    parser.add_argument("--nodes", type=int, nargs="+", default=None,
                        help=f"Yang Fig. 8's node counts (default {' '.join(map(str, YANG_NODES))})")
    parser.add_argument("--yang-batch", type=int, default=128, help="local batch of Yang's learners (default 128)")
    parser.add_argument("--yang-decode-ms", type=float, default=2.1,
                        help="also Yang's loading with this decode+augment cost per sample on one core, spread over "
                             f"a learner's {YANG_CORES_PER_LEARNER} cores (default 2.1, measured by benchmarks/loader.py "
                             "on this machine; 0: not run)")
    parser.add_argument("--gs-latency-ms", type=float, default=0.0,
                        help="also GS with this shared-FS per-file latency in Fig. 9 (default 0: not run; "
                             "`hpcshuffle scale --sensitivity` varies it with every other knob)")
    parser.add_argument("--gs-latency-workers", type=int, nargs="+", default=[128, 512, 2048], metavar="M",
                        help="the worker counts of that curve (default 128 512 2048)")
    parser.add_argument("--no-densenet", action="store_true", help="Fig. 10 for ResNet-50 only")
    parser.add_argument("--fig10-iterations", type=int, default=10,
                        help="Fig. 10 simulates this many full iterations at 512 workers and scales them to the "
                             "epoch (default 10 of its 79; 0: whole epochs, over an hour here)")
    parser.add_argument("--densenet-q", type=float, nargs="+", default=[0.1, 0.3, 0.5, 1.0],
                        help="Fig. 10's q for DenseNet-161 (default 0.1 0.3 0.5 1.0: fewer than ResNet-50's "
                             "to keep the study near 25 minutes on 2 cores)")
    parser.add_argument("--nguyen-platform", default="abci")
    parser.add_argument("--yang-platform", default="lassen")
    parser.add_argument("--quick", action="store_true", help="a small smoke run of every figure (see above)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    jobs = build_jobs(args)
    results = run_jobs(jobs, out, args.jobs)
    wall = time.perf_counter() - started

    tables = {}
    writers = {"fig9": (fig9, "nguyen_fig9.txt"),
               "fig10": (lambda rows, out: fig10(rows, out, rows_of(jobs, results, "fig9")), "nguyen_fig10.txt"),
               "yang8": (yang8, "yang_fig8.txt"),
               "fit": (lambda rows, out: fit_table(rows), "fit.txt"),
               "knee": (knee_table, "pls_knee.txt")}
    for name in args.figures:
        make, filename = writers[name]
        tables[name] = make(rows_of(jobs, results, name), out)
        (out / filename).write_text(tables[name] + "\n")
        print(tables[name] + "\n", flush=True)

    simulated_wall = sum(r.wall_s for r, _, cached in results.values() if not cached)
    rows = []
    for index, job in enumerate(jobs):
        result, digest, cached = results[index]
        rows.append({"figure": job.figure, "label": job.label, "setup": job.setup.name,
                     "scale_to_epoch": job.scale,
                     "platform_file": str(platform_path(job.setup.platform)), "platform_sha256": digest,
                     "changes": job.setup.changes(), "scenario": asdict(job.scenario), "result": asdict(result),
                     "from_cache": cached})
    summary = {
        "command": "python experiments/scale_study.py " + " ".join(sys.argv[1:]),
        "made": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
        "code_sha256": CODE_SHA256,
        "wall_s": wall,
        "simulated_now_wall_s": simulated_wall,
        "all_simulations_wall_s": sum(r.wall_s for r, _, _ in results.values()),
        "paper": PAPER,
        "rows": rows,
    }
    (out / "scale_study.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"{len(jobs)} rows ({sum(1 for *_, c in results.values() if c)} cached) in {wall:.0f} s wall; "
          f"wrote figures, tables and scale_study.json under {out}")


if __name__ == "__main__":
    main()
