"""`hpcshuffle scale --sensitivity`'s output (the study: hpcshuffle/scale/sensitivity.py): the table,
its JSON document and the tornado figure."""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.scale.sensitivity import ENDS, RATIOS, Outcome, Sensitivity


def _header(study: Sensitivity) -> str:
    pls = study.scenarios["partial"]
    return (f"platform {study.platform} ({study.source}): {pls.model} on {pls.dataset}, b={pls.batch_size} per rank, "
            f"{pls.workers} workers, {pls.scope} scope, seed {pls.seed}; GS/LS and PLS/LS (q={pls.q:g}): epoch over "
            "LS's epoch, with one knob at its low or high and every other number at the platform's value")


def sensitivity_table(study: Sensitivity) -> str:
    """The base ratios, then one line per knob, largest GS/LS swing first."""
    width = max([len("knob")] + [len(effect.knob.path) for effect in study.effects])
    ratio_heads = [f"{name} {end}" for name in RATIOS.values() for end in ENDS]
    lines = [_header(study),
             f"base: GS/LS {study.base.gs_ls:.3f}  PLS/LS {study.base.pls_ls:.3f}",
             f"{'knob':<{width}} {'low':>10} {'mid':>10} {'high':>10} "
             + " ".join(f"{head:>11}" for head in ratio_heads) + "  source"]
    for effect in study.effects:
        knob = effect.knob
        ratios = [getattr(getattr(effect, end), ratio) for ratio in RATIOS for end in ENDS]
        lines.append(f"{knob.path:<{width}} {knob.low:>10.4g} {knob.mid:>10.4g} {knob.high:>10.4g} "
                     + " ".join(f"{value:>11.3f}" for value in ratios) + f"  {knob.source}")
    return "\n".join(lines)


def sensitivity_json(study: Sensitivity) -> dict:
    """The table as a document: ratios, and each platform's epochs in seconds by shuffle name."""

    def outcome(result: Outcome) -> dict:
        return {"gs_ls": result.gs_ls, "pls_ls": result.pls_ls,
                "epoch_s": {shuffle: run.epoch_s for shuffle, run in result.results.items()}}

    pls = study.scenarios["partial"]
    return {
        "platform": study.platform, "source": study.source, "workers": pls.workers, "q": pls.q, "model": pls.model,
        "dataset": pls.dataset, "batch": pls.batch_size, "seed": pls.seed, "scope": pls.scope,
        "base": outcome(study.base),
        "knobs": [{"knob": effect.knob.path, "low": effect.knob.low, "mid": effect.knob.mid, "high": effect.knob.high,
                   "source": effect.knob.source, "at_low": outcome(effect.low), "at_high": outcome(effect.high)}
                  for effect in study.effects],
    }


def plot_tornado(study: Sensitivity, path: Path) -> None:
    """Two panels, GS/LS and PLS/LS: per knob, a bar from the base ratio to the ratio with the knob at
    its low and one to the ratio at its high; each panel's largest swing on top."""
    from hpcshuffle.analysis.plots import new_figure, save

    figure = new_figure(12.0, 1.8 + 0.45 * len(study.effects))
    q = study.scenarios["partial"].q
    for index, (ratio, name) in enumerate(RATIOS.items()):
        axes = figure.add_subplot(1, len(RATIOS), index + 1)
        base = getattr(study.base, ratio)
        ordered = sorted(study.effects, key=lambda effect: (effect.swing(ratio), effect.knob.path))  # bottom up
        rows = range(len(ordered))
        # two thin bars per knob, not one spanning low..high: both ends may lie on the same side of the base
        for end, offset, colour in (("low", 0.2, "tab:blue"), ("high", -0.2, "tab:orange")):
            widths = [getattr(getattr(effect, end), ratio) - base for effect in ordered]
            axes.barh([row + offset for row in rows], widths, left=base, height=0.38, color=colour,
                      label=f"knob at its {end}")
        axes.axvline(base, color="black", linewidth=1, label=f"the platform's values (in parentheses): {base:.3f}")
        labels = [f"{e.knob.path}\n{e.knob.low:g} … {e.knob.high:g} ({e.knob.mid:g})" for e in ordered]
        axes.set_yticks(list(rows), labels, fontsize="small")
        axes.set_xlabel("epoch / LS epoch")
        axes.set_title(name if ratio == "gs_ls" else f"{name} (q = {q:g})")
        axes.legend(fontsize="small", loc="best")
    pls = study.scenarios["partial"]
    figure.suptitle(f"{study.platform}: {pls.model} on {pls.dataset}, {pls.workers} workers, b = {pls.batch_size}")
    save(figure, path)
