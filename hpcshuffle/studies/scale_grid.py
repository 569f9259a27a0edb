"""The scale study's grid (experiments/scale_study.py): the jobs of each figure and table, what the papers'
text states beside them, and the study's settings (`GridOptions`, one field per command-line option)."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

import yaml

from hpcshuffle.scale.platform import Model
from hpcshuffle.scale.platform_yaml import platform_from_dict, platform_path
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.studies.scale_fit import (
    FIT_SEEDS,
    KNEE_ITERATIONS,
    KNEE_WORKERS,
    knee_setups,
)
from hpcshuffle.studies.scale_jobs import Job, Setup

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
class GridOptions:
    """What the study simulates (experiments/scale_study.py's options of the same names; None: the default)."""

    figures: list[str]  # of fit, fig9, fig10, yang8, knee
    workers: list[int] | None  # Fig. 9's worker counts (None: NGUYEN_WORKERS)
    nodes: list[int] | None  # Yang Fig. 8's node counts (None: YANG_NODES)
    yang_batch: int
    yang_decode_ms: float  # 0: Yang's loading with decoding is not run
    gs_latency_ms: float  # 0: no GS curve with another per-file latency
    gs_latency_workers: list[int]
    no_densenet: bool
    fig10_iterations: int  # 0: whole epochs
    densenet_q: list[float]
    nguyen_platform: str
    yang_platform: str
    quick: bool


def build_jobs(options: GridOptions) -> list[Job]:
    """Every job of the figures `options` name, in the order their tables list them."""
    abci = Setup("abci", options.nguyen_platform)
    slow_gs = Setup(f"abci-gs{options.gs_latency_ms:g}ms", options.nguyen_platform,
                    {"shared.file_latency": options.gs_latency_ms / 1000})
    lassen = Setup("lassen-loading", options.yang_platform, {"models.loading_only": asdict(LOADING_ONLY)})
    # decoding and augmenting each sample (the engine charges a loader's CPU as one core's execution per
    # batch, so the cost per sample is spread over the cores a learner's loader workers use)
    decode = Setup(f"lassen-loading-decode{options.yang_decode_ms:g}ms", options.yang_platform,
                   {"models.loading_only": asdict(LOADING_ONLY),
                    "loader.cpu_per_file": options.yang_decode_ms / 1000 / YANG_CORES_PER_LEARNER})
    samples = QUICK_SAMPLES if options.quick else None
    fig9_workers = options.workers or ([16, 32] if options.quick else NGUYEN_WORKERS)
    fig10_workers = 64 if options.quick else FIG10_WORKERS
    qs = [0.1, 1.0] if options.quick else FIG10_QS
    densenet_qs = [0.1, 1.0] if options.quick else options.densenet_q
    gs_latency_workers = fig9_workers if options.quick else [m for m in fig9_workers if m in options.gs_latency_workers]
    nodes = options.nodes or ([16, 32] if options.quick else YANG_NODES)
    models = ["resnet50"] if options.no_densenet else ["resnet50", "densenet161"]

    def scenario(workers: int, shuffle: str, q: float | None, model: str = "resnet50", batch: int = 32,
                 part: int | None = None) -> Scenario:
        return Scenario(workers, shuffle, q, model, "imagenet1k", batch, samples=part or samples)

    # Fig. 10: `--fig10-iterations` full iterations stand for the epoch (one PLS-1.0 iteration at 512 workers
    # is 16,384 concurrent messages, ~30 s of SimGrid here); seconds are scaled by N / samples
    part = None
    scale = 1.0
    if options.fig10_iterations and not options.quick:
        part = options.fig10_iterations * fig10_workers * 32
        scale = 1_281_167 / part

    jobs: list[Job] = []
    if "fig9" in options.figures:
        for m in fig9_workers:
            jobs += [Job("fig9", "global", abci, scenario(m, "global", None)),
                     Job("fig9", "local", abci, scenario(m, "local", None)),
                     Job("fig9", "partial-0.1", abci, scenario(m, "partial", 0.1))]
            if options.gs_latency_ms > 0 and m in gs_latency_workers:
                jobs.append(Job("fig9", f"global ({options.gs_latency_ms:g} ms/file)", slow_gs,
                                scenario(m, "global", None)))
    if "fig10" in options.figures:
        for model in models:
            jobs += [Job("fig10", "local", abci, scenario(fig10_workers, "local", None, model, part=part), scale)]
            jobs += [Job("fig10", f"partial-{q:g}", abci, scenario(fig10_workers, "partial", q, model, part=part), scale)
                     for q in (qs if model == "resnet50" else densenet_qs)]
            jobs += [Job("fig10", "global", abci, scenario(fig10_workers, "global", None, model, part=part), scale)]
    if "fit" in options.figures:  # scale_fit.py: the fit, seed by seed, and the unfitted prediction
        for model, workers in (("densenet161", fig10_workers), ("resnet50", 128)):
            jobs.append(Job("fit", f"{model} local", abci, scenario(workers, "local", None, model)))
            jobs += [Job("fit", f"{model} global", abci, dataclasses.replace(scenario(workers, "global", None, model),
                                                                             seed=seed))
                     for seed in (FIT_SEEDS[:2] if options.quick else FIT_SEEDS)]
    if "knee" in options.figures:  # scale_fit.py: PLS-0.1 / LS by scheduler, noise and latency
        alpha = platform_from_dict(yaml.safe_load(platform_path(options.nguyen_platform).read_text())).allreduce.alpha
        knee_workers = [64, 128] if options.quick else KNEE_WORKERS
        for name, values in knee_setups(alpha):
            setup = Setup(name, options.nguyen_platform, values)
            for m in knee_workers:
                part = KNEE_ITERATIONS * m * 32
                if name.startswith("hpcshuffle"):
                    jobs.append(Job("knee", "local", setup, scenario(m, "local", None, part=part)))
                jobs.append(Job("knee", "partial-0.1", setup, scenario(m, "partial", 0.1, part=part)))
            if name == "kakurenbo|none|1x":  # its one fitted number: PLS q=1.0 / LS at Fig. 10's scale
                jobs.append(Job("knee", "partial-1", setup,
                                scenario(knee_workers[0], "partial", 1.0, part=KNEE_ITERATIONS * knee_workers[0] * 32)))
    if "yang8" in options.figures:
        for n in nodes:
            for shuffle, label in (("global", "regular"), ("locality", "locality-aware")):
                loading = scenario(4 * n, shuffle, None, "loading_only", options.yang_batch)
                jobs.append(Job("yang8", label, lassen, loading))
                if options.yang_decode_ms > 0:
                    jobs.append(Job("yang8", f"{label} + decode", decode, loading))
    return jobs

