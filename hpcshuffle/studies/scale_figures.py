"""The scale study's figures and tables (experiments/scale_study.py): Nguyen et al. Fig. 9 and Fig. 10 and
Yang & Cong Fig. 8, simulated, each table with the paper's stated values beside the simulated ones."""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.analysis.plots import PHASE_LABELS, new_figure, save
from hpcshuffle.scale.scenario import PHASES, Result
from hpcshuffle.studies.scale_grid import PAPER, YANG_CORES_PER_LEARNER
from hpcshuffle.studies.scale_jobs import Job


def fig9(rows: list[tuple[Job, Result]], out: Path) -> str:
    """Nguyen Fig. 9 from its rows: the table (returned) and `nguyen_fig9_epoch_time.png` under `out`."""
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
    """Nguyen Fig. 10 from its rows: the table (returned, with the part-epoch scaling checked against Fig. 9's
    whole epochs, `full`) and `nguyen_fig10_breakdown.png` under `out`."""
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
    """Yang & Cong Fig. 8 from its rows: the table (returned) and `yang_fig8_loading.png` under `out`."""
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

