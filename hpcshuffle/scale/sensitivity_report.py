"""`hpcshuffle scale --sensitivity`'s output (the study: hpcshuffle/scale/sensitivity.py): the table,
its JSON document and the tornado figure. At one seed they are one draw; over seeds (`--seeds N`)
each ratio is its median over the seeds, and the base's p10 and p90 over them are a row, and a bar,
of their own (`SeedSpread`), ordered by swing with the knobs."""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.scale.sensitivity import (
    ENDS,
    RATIOS,
    KnobEffect,
    Outcome,
    SeedSpread,
    Sensitivity,
)


def _header(study: Sensitivity) -> str:
    pls, spread = study.scenarios["partial"], study.seed_spread
    head = (f"platform {study.platform} ({study.source}): {pls.model} on {pls.dataset}, b={pls.batch_size} per rank, "
            f"{pls.workers} workers, {pls.scope} scope")
    if spread is None:
        return (f"{head}, seed {pls.seed}; GS/LS and PLS/LS (q={pls.q:g}): epoch over "
                "LS's epoch, with one knob at its low or high and every other number at the platform's value")
    return (f"{head}, seeds {spread.seeds[0]}..{spread.seeds[-1]}; GS/LS and PLS/LS (q={pls.q:g}): epoch over LS's "
            "epoch at the same seed, with one knob at its low or high and every other number at the platform's "
            f"value; low and high: medians over the {study.seeds} seeds, except in the row {spread.name}: the base's "
            "p10 and p90 over them")


def _base_line(study: Sensitivity) -> str:
    if study.seed_spread is None:
        return f"base: GS/LS {study.base.gs_ls:.3f}  PLS/LS {study.base.pls_ls:.3f}"
    spreads = {name: study.base.spread(ratio) for ratio, name in RATIOS.items()}
    return "base: " + "  ".join(f"{name} {s.median:.3f} [{s.p10:.3f}, {s.p90:.3f}]" for name, s in spreads.items()) \
        + " (median [p10, p90] over the seeds)"


def sensitivity_table(study: Sensitivity) -> str:
    """The base ratios, then one line per knob (and over several seeds one for the seed), largest GS/LS
    swing first."""
    rows = study.rows()
    width = max([len("knob")] + [len(row.name) for row in rows])
    ratio_heads = [f"{name} {end}" for name in RATIOS.values() for end in ENDS]
    lines = [_header(study), _base_line(study),
             f"{'knob':<{width}} {'low':>10} {'mid':>10} {'high':>10} "
             + " ".join(f"{head:>11}" for head in ratio_heads) + "  source"]
    for row in rows:
        if isinstance(row, SeedSpread):
            ratios = [value for ratio in RATIOS for value in (row.base.spread(ratio).p10, row.base.spread(ratio).p90)]
            lines.append(f"{row.name:<{width}} {'-':>10} {'-':>10} {'-':>10} "
                         + " ".join(f"{value:>11.3f}" for value in ratios)
                         + f"  the base's p10 and p90 over {len(row.seeds)} seeds: no knob moved")
            continue
        knob = row.knob
        ratios = [getattr(getattr(row, end), ratio) for ratio in RATIOS for end in ENDS]
        lines.append(f"{knob.path:<{width}} {knob.low:>10.4g} {knob.mid:>10.4g} {knob.high:>10.4g} "
                     + " ".join(f"{value:>11.3f}" for value in ratios) + f"  {knob.source}")
    return "\n".join(lines)


def sensitivity_json(study: Sensitivity) -> dict:
    """The table as a document: ratios, and each platform's epochs in seconds by shuffle name.

    Over several seeds (`"seeds": N`) "gs_ls", "pls_ls" and "epoch_s" are medians over the seeds, each
    platform adds "over_seeds" ({"median", "p10", "p90"} of each ratio and epoch, and how many seeds
    each shuffle was simulated at), and "rows" names the table's rows in its order, the seed's included.
    """
    many = study.seed_spread is not None

    def outcome(result: Outcome) -> dict:
        doc = {"gs_ls": result.gs_ls, "pls_ls": result.pls_ls,
               "epoch_s": {shuffle: run.spread("epoch_s").median for shuffle, run in result.runs.items()}}
        if many:
            doc["over_seeds"] = {
                **{ratio: result.spread(ratio).as_dict() for ratio in RATIOS},
                "epoch_s": {shuffle: run.spread("epoch_s").as_dict() for shuffle, run in result.runs.items()},
                "simulated": {shuffle: len(run.results) for shuffle, run in result.runs.items()}}
        return doc

    pls = study.scenarios["partial"]
    return {
        "platform": study.platform, "source": study.source, "workers": pls.workers, "q": pls.q, "model": pls.model,
        "dataset": pls.dataset, "batch": pls.batch_size, "seed": pls.seed, **({"seeds": study.seeds} if many else {}),
        "scope": pls.scope, "base": outcome(study.base),
        "knobs": [{"knob": effect.knob.path, "low": effect.knob.low, "mid": effect.knob.mid, "high": effect.knob.high,
                   "source": effect.knob.source, "at_low": outcome(effect.low), "at_high": outcome(effect.high)}
                  for effect in study.effects],
        **({"rows": [row.name for row in study.rows()]} if many else {}),
    }


def _tick(row: KnobEffect | SeedSpread) -> str:
    if isinstance(row, SeedSpread):
        return f"{row.name}\nthe base's p10 … p90"
    return f"{row.knob.path}\n{row.knob.low:g} … {row.knob.high:g} ({row.knob.mid:g})"


def plot_tornado(study: Sensitivity, path: Path) -> None:
    """Two panels, GS/LS and PLS/LS: per knob, a bar from the base ratio to the ratio with the knob at
    its low and one to the ratio at its high; over several seeds those are medians, and the base's
    p10 to p90 over the seeds is a grey bar of its own; each panel's largest swing on top."""
    from hpcshuffle.analysis.plots import new_figure, save

    figure = new_figure(12.0, 1.8 + 0.45 * len(study.rows()))
    q, spread = study.scenarios["partial"].q, study.seed_spread
    for index, (ratio, name) in enumerate(RATIOS.items()):
        axes = figure.add_subplot(1, len(RATIOS), index + 1)
        base = getattr(study.base, ratio)
        ordered = sorted(study.rows(), key=lambda row: (row.swing(ratio), row.name))  # bottom up
        knobs = [(at, row) for at, row in enumerate(ordered) if isinstance(row, KnobEffect)]
        # two thin bars per knob, not one spanning low..high: both ends may lie on the same side of the base
        for end, offset, colour in (("low", 0.2, "tab:blue"), ("high", -0.2, "tab:orange")):
            widths = [getattr(getattr(effect, end), ratio) - base for _, effect in knobs]
            axes.barh([at + offset for at, _ in knobs], widths, left=base, height=0.38, color=colour,
                      label=f"knob at its {end}" + (" (median)" if spread else ""))
        if spread is not None:  # one bar, p10 to p90: the seed has no low and high end
            over = spread.base.spread(ratio)
            axes.barh([ordered.index(spread)], [over.p90 - over.p10], left=over.p10, height=0.76, color="tab:gray",
                      label=f"the base over seeds {spread.seeds[0]}..{spread.seeds[-1]}: p10 to p90")
        values = "the platform's values (in parentheses)" + (", median over the seeds" if spread else "")
        axes.axvline(base, color="black", linewidth=1, label=f"{values}: the number in each title")
        axes.set_yticks(list(range(len(ordered))), [_tick(row) for row in ordered], fontsize="small")
        axes.set_xlabel("epoch / LS epoch")
        axes.set_title((name if ratio == "gs_ls" else f"{name} (q = {q:g})") + f": {base:.3f}")
    # one legend below both panels: inside a panel it covers the top bars, the largest swings
    figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize="small")
    pls = study.scenarios["partial"]
    seeds = f", seeds {spread.seeds[0]}..{spread.seeds[-1]} (medians)" if spread else ""
    figure.suptitle(f"{study.platform}: {pls.model} on {pls.dataset}, {pls.workers} workers, b = {pls.batch_size}"
                    + seeds)
    save(figure, path)
