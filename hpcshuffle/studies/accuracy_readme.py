"""The README's accuracy block, written from the stored studies so no number in it can go stale.

    python -m hpcshuffle.studies.accuracy_readme [README.md]

rewrites the lines between BEGIN and END from results/reference/accuracy_fashion.json (Fashion-MNIST
at the paper's regime, first, once it has a trained cell), accuracy_study.json (real digits; its
`digits/global` variant) and accuracy_synthetic.json (the synthetic study, kept as a labelled secondary). tests/unit/test_docs.py makes the block again and fails where the README differs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

from hpcshuffle.analysis.intervals import EQUIVALENCE_MARGIN, REACH_LEVEL
from hpcshuffle.analysis.tune import predictor_record
from hpcshuffle.plan.corgipile import BUFFER_BLOCKS
from hpcshuffle.studies import readme_blocks
from hpcshuffle.studies.accuracy_runs import strategy_of
from hpcshuffle.studies.readme_blocks import rewrite_block
from hpcshuffle.studies.runs import REPO

BEGIN = "<!-- accuracy: made by `python -m hpcshuffle.studies.accuracy_readme` from results/reference; do not edit -->"
END = "<!-- accuracy: end -->"
STUDY = REPO / "results/reference/accuracy_study.json"
SYNTHETIC = REPO / "results/reference/accuracy_synthetic.json"
FASHION = REPO / "results/reference/accuracy_fashion.json"
GLOBAL_NORM = "global"  # a study's variant with BatchNorm over the global batch, filed as <dataset>/global
DATASETS = {"fashion": "Real clothing photos (Fashion-MNIST)", "digits": "Real handwritten digits",
            "synthetic": "Synthetic images"}
FAMILIES = {"local": "LS", "partial": "PLS"}
NORMS = {"worker": "BatchNorm per worker", "global": "BatchNorm over the global batch"}


def number(value: float, digits: int = 1) -> str:
    """A signed number as the README prints it, with a true minus sign; one more digit where rounding
    would hide which side of 0 it lies (−0.03, not −0.0)."""
    if value and abs(value) < 0.5 * 10**-digits:
        digits += 1
    return f"{value:+.{digits}f}".replace("-", "−")


def gap_text(gap: dict | None) -> str:
    """`mean [low, high]` of a paired gap with the interval the rule reads (REACH_LEVEL), a ✓ where it
    reaches GS, or a dash where the study has none."""
    if gap is None:
        return "–"
    low, high = gap["ci90"]
    return f"{number(gap['gap_mean'])} [{number(low)}, {number(high)}]" + (" ✓" if gap["reaches_global"] else "")


def q_text(q: float | None) -> str:
    """A q as the table prints it: 0 is LS itself, None is no q of the study's."""
    return "none" if q is None else "0 (LS)" if q == 0 else f"{q:g}"


PEERS = {"corgipile": "CorgiPile", "streaming_py1e": "Streaming py1e", "streaming_py1br": "Streaming py1br"}


def name(strategy: str) -> str:
    """A strategy as the README names it: LS, q 0.1, CorgiPile."""
    return "LS" if strategy == "local" else PEERS.get(strategy, strategy.replace("partial-", "q "))


def column_order(strategy: str) -> tuple:
    """LS, then the q's, then the peers' shuffles."""
    return strategy != "local", not strategy.startswith("partial-"), strategy


def gaps_by_cell(study: dict) -> dict[tuple, dict]:
    """{(partition, workers, strategy as the CLI names it): the gap's entry}."""
    return {(g["partition"], g["workers"], strategy_of(g)): g for g in study["gaps"]}


def cell_table(study: dict, predicted: dict[tuple, float | None]) -> list[str]:
    """Per (partition, M): GS's top-1, each strategy's paired gap, the smallest q reaching GS and the
    pre-registered q."""
    gaps = gaps_by_cell(study)
    strategies = sorted({key[2] for key in gaps}, key=column_order)
    reference = {(r["partition"], r["workers"]): r for r in study["rows"] if r["strategy"] == "global"}
    head = ["partition", "M", "GS top-1", *(f"{name(s)} − GS" for s in strategies),
            "smallest q reaching GS", "pre-registered q"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    order = study["setup"]["partitions"]  # as the study was asked for them
    for cell in sorted(study["cells"], key=lambda c: (order.index(c["partition"]), c["workers"])):
        key = (cell["partition"], cell["workers"])
        gs = reference[key]
        low, high = gs["ci95"]
        before = q_text(predicted[key]) if key in predicted else "(trained first)"
        lines.append("| " + " | ".join([
            cell["partition"], str(cell["workers"]), f"{gs['top1_mean']:.1f} [{low:.1f}, {high:.1f}]",
            *(gap_text(gaps.get((*key, s))) for s in strategies), q_text(cell["smallest_q_reaching_global"]), before,
        ]) + " |")
    return lines


def correlation_text(found: dict) -> str:
    """Pearson and Spearman of one correlation, overall and within each strategy family."""
    def pair(entry: dict) -> str:
        if entry["pearson_r"] is None:
            return f"undefined ({entry['runs']} runs)"
        return (f"Pearson r = {number(entry['pearson_r'], 2)}, Spearman ρ = {number(entry['spearman_rho'], 2)} "
                f"({entry['runs']} runs)")

    within = "; ".join([*(f"within {FAMILIES.get(family) or name(family)} {pair(entry)}"
                          for family, entry in found["by_family"].items()),
                        *(f"within {partition} partitions {pair(entry)}"
                          for partition, entry in found["by_partition"].items())])
    return f"{pair(found)}; {within}"


def heading(study: dict, what: str) -> str:
    """A study's first line: its data, model and training, bold where it is named."""
    setup = study["setup"]
    batches = ", ".join(f"b = {b} at M = {m}" for m, b in setup["batch_size"].items())
    more = setup.get("seeds_where_wide")
    def named(key: str) -> str:
        return ", ".join(f"{p} M = {m} {name(s)}" for p, m, s in (more or {}).get(key, []) if s != "global")

    cells, waiting = named("cells"), named("still_to_train")
    wide = (f", {more['seeds']} where the paired gap's interval was wider than {more['wider_than']:g} points: "
            + (f"{cells}, and GS at their M" if cells else "none so far")
            + (f"; still at {setup['seeds']}, to train: {waiting}" if waiting else "") if more else "")
    return (f"**{DATASETS[setup['dataset']]}, {what}** ({setup['samples']:,} training images of {setup['classes']} "
            f"classes, {setup['model']}, {NORMS[study['rows'][0]['norm']]}, {setup['epochs']} epochs, {batches}, "
            f"{setup['seeds']} seeds a cell{wide}).")


def cells_named(keys: Iterable[tuple]) -> str:
    """(partition, M) cells as the README lists them: `contiguous M = 32, random M = 256`, or none."""
    return ", ".join(f"{p} M = {m}" for p, m in keys) or "none"


def fashion_section(fashion: dict) -> list[str]:
    """The Fashion-MNIST study, first: its trained cells, what they show, and the cells still to train."""
    variant = global_norm(fashion)
    lines = [heading(fashion, "the study at the paper's regime"), "", *cell_table(fashion, predicted_of(fashion, fashion)),
             *variant_table(variant, fashion), "", *findings(fashion, variant)]
    for what, study in (("", fashion), (" with global BatchNorm", variant or {})):
        if waiting := study.get("preregistered", {}).get("not_trained"):
            lines.append(f"- Pre-registered{what}, not yet trained in full: "
                         f"{cells_named((c['partition'], c['workers']) for c in waiting)}.")
    if "preregistered_peers" in fashion:
        lines.append(peers_line(fashion["preregistered_peers"]))
    lines += shared_reads_lines(fashion)
    return lines


def peers_line(check: dict) -> str:
    """The second pre-registration (the plans' label skew and Streaming's entropy score of every strategy,
    committed before the peers' runs) held against training: Spearman's ρ per cell and per partition."""
    def rho(found: float | None) -> str:
        return "undefined" if found is None else number(found, 2)

    cells = "; ".join(f"{c['partition']} M = {c['workers']} {rho(c['rho_skew'])} and {rho(c['rho_entropy'])}"
                      for c in check["cells"])
    within = "; ".join(f"{partition} {rho(found['skew']['spearman_rho'])} and "
                       f"{rho(found['entropy']['spearman_rho'])} ({found['skew']['points']} points)"
                       for partition, found in check["by_partition"].items())
    return (f"- **The peers' shuffles** read the file order (class by class) in shards of {check['score_shard']} "
            "consecutive samples: CorgiPile the shards in a new random order each epoch through a buffer of "
            f"{BUFFER_BLOCKS} shards (its default, shuffle.buffer 0); "
            "Streaming py1e and py1br the exact ids a StreamingDataset gives each worker, each worker a node of its "
            "own (Streaming's default canonical node count, the physical nodes, is then M) and its default shuffle "
            "block (2^18 samples, more than the dataset). Without a partition they are trained once per M and "
            "stand in both partitions' rows. **Their pre-registration** (every "
            "strategy's planned label skew and Streaming's shuffle-quality score, committed before any peer's run) "
            "against the trained paired gaps, Spearman ρ of −skew and of the score, per cell: "
            f"{cells}; within partitions: {within}.")


def shared_reads_lines(study: dict) -> list[str]:
    """Per M, each strategy's samples read from shared storage per epoch (seed 0's plans, the cells'
    `plan_measures`: the first epoch and the rest apart where they differ); none for a study made before them."""
    by_workers: dict[int, dict] = {}
    for cell in study["cells"]:  # the reads do not depend on the partition: the first cell of each M
        if "plan_measures" in cell:
            by_workers.setdefault(cell["workers"], cell["plan_measures"])
    lines = []
    for workers, measures in sorted(by_workers.items()):
        def reads(found: dict) -> str:
            first, *rest = found["shared_reads"]
            later = round(sum(rest) / len(rest)) if rest else first
            return f"{first:,}" if later == first else f"{first:,} in the first epoch, {later:,} after"

        lines.append(f"- Samples read from shared storage per epoch at M = {workers} (seed 0's plans; LS and PLS "
                     f"stage theirs once before): " + "; ".join(f"{'GS' if s == 'global' else name(s)} {reads(found)}" for s, found in
                                                               measures.items()) + ".")
    return lines


def block(study: dict, synthetic: dict, fashion: dict | None = None) -> str:
    """The README's accuracy block (module doc), led by the Fashion-MNIST study where it has cells."""
    lines = [
        f"Gaps to GS are final top-1 points paired by seed, mean [{REACH_LEVEL * 100:.0f} % interval]; a strategy *reaches "
        f"GS* (✓) where that interval's lower end is at most δ = {EQUIVALENCE_MARGIN:g} point below 0: an equivalence "
        "test, under which a wide interval that merely contains 0 does not pass. The pre-registered q was "
        "committed before the cell was trained; all cells are scored again under this rule from their stored "
        "runs (`experiments/accuracy_rescore.py`), nothing retrained.",
        "",
    ]
    if fashion is not None:
        lines += [*fashion_section(fashion), ""]
    variant = global_norm(study)
    lines += [heading(study, "the study" if fashion is None else "the earlier study"), "",
              *cell_table(study, predicted_of(study, study)), *variant_table(variant, study)]
    lines += ["", *findings(study, variant), f"- **Synthetic data, the secondary study** ({synthetic_line(synthetic, study)}).",
              "", record_line([found for found in (fashion, study) if found is not None])]
    return "\n".join(lines)


def global_norm(study: dict) -> dict | None:
    """The study's variant with BatchNorm over the global batch, if it has one."""
    return study.get("variants", {}).get(f"{study['rows'][0]['dataset']}/{GLOBAL_NORM}")


def variant_table(variant: dict | None, study: dict) -> list[str]:
    """The global-BatchNorm variant's table, under its study's (none without a variant)."""
    if variant is None:
        return []
    return ["", "With BatchNorm over the global batch instead (`model.norm=global`):", "",
            *cell_table({**variant, "setup": study["setup"]}, predicted_of(variant, study))]


def record_line(studies: list[dict]) -> str:
    """What `tune-q --predict` is good for, counted over every pre-registration above, the studies' and
    their variants' (its output says the same)."""
    checks = {f"{found['rows'][0]['dataset']}/{found['rows'][0]['norm']}": found["preregistered"]
              for study in studies for found in (study, *study.get("variants", {}).values())
              if "preregistered" in found}
    return ("**What `tune-q --predict` is good for**, over the pre-registered cells above: "
            + "; ".join(predictor_record(checks)) + ".")


def stored_studies() -> tuple[dict, dict, dict | None]:
    """The studies the block is made from: digits, synthetic and (once it has a trained cell) Fashion-MNIST."""
    fashion = json.loads(FASHION.read_text()) if FASHION.exists() else None
    return json.loads(STUDY.read_text()), json.loads(SYNTHETIC.read_text()), fashion


def predicted_of(variant: dict, study: dict) -> dict[tuple, float | None]:
    """A study's or variant's pre-registered q by cell (its own pre-registration, else the main study's)."""
    found = variant.get("preregistered") or study["preregistered"]
    return {(c["partition"], c["workers"]): c["predicted_q"] for c in found["cells"]}


def findings(study: dict, variant: dict | None) -> list[str]:
    """What holds and what does not, counted from the cells."""
    gaps = gaps_by_cell(study)
    cells = [(c["partition"], c["workers"]) for c in study["cells"]]
    kept = [key for key in cells if (g := gaps.get((*key, "local"))) and g["reaches_global"]]
    lost = [key for key in cells if key not in kept]
    lines = [f"- **LS reaches GS in {len(kept)} of {len(cells)} cells** ({cells_named(kept)})"
             + (f"; not in {cells_named(lost)}." if lost else ".")]
    for strategy in sorted({key[2] for key in gaps if key[2] != "local"}, key=column_order):
        reach = [key for key in cells if (g := gaps.get((*key, strategy))) and g["reaches_global"]]
        missed = [key for key in cells if key not in reach]
        what = PEERS.get(strategy) or f"q = {strategy.removeprefix('partial-')}"
        lines.append(f"- {what} reaches GS in {len(reach)} of {len(cells)} cells"
                     + (f"; not in {cells_named(missed)}." if missed else "."))
    lines.append(prediction_line("**Pre-registered predictions**", study["preregistered"]))
    lines.append(f"- Final label skew against the paired gap to GS: "
                 f"{correlation_text(study['quality_vs_gap']['label_skew'])}.")
    if variant is not None:
        kept_global = [(c["partition"], c["workers"]) for c in variant["cells"] if c["local_reaches_global"]]
        tested = [(c["partition"], c["workers"]) for c in variant["cells"]]
        why = (": in these cells LS's loss under per-worker BatchNorm comes from BatchNorm's statistics over "
               "class-skewed batches" if set(tested) <= set(lost) and set(kept_global) == set(tested) else "")
        beside = gaps_by_cell(variant)
        lines.append(f"- With global BatchNorm, LS reaches GS in {len(kept_global)} of {len(variant['cells'])} cells "
                     f"({cells_named(kept_global)}){why}. LS − GS with global BatchNorm against per-worker: "
                     + "; ".join(f"{cells_named([key])} {gap_text(beside.get((*key, 'local')))} against "
                                 f"{gap_text(gaps.get((*key, 'local')))}" for key in tested) + ".")
        if "preregistered" in variant:
            lines.append(prediction_line("Its pre-registered predictions (label skew does not see the norm)",
                                         variant["preregistered"]))
    return lines


def prediction_line(what: str, check: dict) -> str:
    """How a pre-registration fared: the q right (the same or a larger one that reaches GS) and wrong,
    and the pairs of strategies training ranked against the plans."""
    misses = [c for c in check["cells"] if not c["q_hit"]]
    wrong = "; wrong in " + ", ".join(f"{c['partition']} M = {c['workers']} (predicted {q_text(c['predicted_q'])}, "
                                      f"trained {q_text(c['trained_q'])})" for c in misses) if misses else ""
    return (f"- {what}: q right in {check['q_hits']} of {len(check['cells'])} cells ({check['q_same']} the q "
            f"training found, {check['q_hits'] - check['q_same']} a larger q that still reaches GS){wrong}. Of "
            f"{check['pairs_claimed']} pairs of strategies the plans ranked apart, training ranks "
            f"{check['pairs_against']} the other way, {check['pairs_against_beyond_noise']} of them beyond the noise. "
            "The constants, scored by the same rule: " + ", ".join(
                f"{name} right in {hits} ({check['baselines_exact'][name]} the same q)"
                for name, hits in check["baselines"].items()) + ".")


def synthetic_line(synthetic: dict, study: dict) -> str:
    """The synthetic study in one line, and how its q = 0.1 against GS compares with the digits' on the
    contiguous cells, where the two datasets were both trained."""
    setup, gaps = synthetic["setup"], gaps_by_cell(synthetic)
    parts = [f"{p} M = {m}: LS {gap_text(gaps.get((p, m, 'local')))}, q 0.1 {gap_text(gaps.get((p, m, 'partial-0.1')))}"
             for p, m in ((c["partition"], c["workers"]) for c in synthetic["cells"])]
    line = (f"{setup['samples']:,} synthetic images of {setup['classes']} close classes, {setup['seeds']} seeds: "
            + "; ".join(parts))
    small = {source: [g["gap_mean"] for key, g in gaps_by_cell(source_json).items()
                      if key[0] == "contiguous" and key[2] == "partial-0.1"]
             for source, source_json in (("synthetic", synthetic), ("digits", study))}
    if small["synthetic"] and small["digits"] and min(small["synthetic"]) > 0 > max(small["digits"]):
        line += (". On contiguous partitions q = 0.1 beats GS on every synthetic cell and trails it on every digits "
                 "cell: a small q tuned on the synthetic data would be wrong on real images")
    return line


def rewrite(readme: Path) -> bool:
    """Put the block made from the stored studies between the README's markers; True if it changed."""
    return rewrite_block(readme, BEGIN, END, block(*stored_studies()))


def stored_block(readme: Path) -> str:
    """The block as the README holds it now."""
    return readme_blocks.stored_block(readme, BEGIN, END)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "README.md"
    print(f"{path}: {'rewritten' if rewrite(path) else 'already current'}")
