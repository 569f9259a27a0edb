"""Tune q (Nguyen et al. §III-D): start with local shuffling, treat q as a hyper-parameter.

Given the summary rows of a sweep (`hpcshuffle.analysis.report.collect`), recommend per worker
count (and first partition) the smallest exchange fraction q whose final validation score is within
a tolerance of global shuffling's (or, without a global run, of the best run's). Where every point
has 2 or more seeds, also the smallest q that reaches global shuffling by the one rule of
analysis/intervals.py: the lower end of the 90 % interval of its gap to global, paired seed by seed,
is at most δ (1 point) below 0.
Which strategies lie on the q axis, which one is the reference and which the "vs LS" baseline, the
strategy table says (`hpcshuffle.plan`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from hpcshuffle.analysis.intervals import (
    EQUIVALENCE_MARGIN,
    REACH_LEVEL,
    REACH_RULE,
    interval95,
    paired_gap,
    reaches_global,
)
from hpcshuffle.errors import at_least
from hpcshuffle.plan import STRATEGIES, get_strategy, with_role

REFERENCES = ("auto", "global", "best")  # "global": the table's reference strategy, as the CLI spells it
CANDIDATES = tuple(name for name, strategy in STRATEGIES.items() if strategy.on_q_axis)  # local is q = 0
COMPARED = (*CANDIDATES, with_role("reference").name)  # the strategies a sweep's rows may hold
TABLE_ORDER = {name: index for index, name in enumerate(STRATEGIES)}  # rows at equal q, in table order
SCORE_UNITS = {"val_top1": "top-1 %", "val_iou": "100·IoU"}
EPSILON = 1e-9  # a score exactly at reference - tolerance qualifies despite float rounding


@dataclass
class QRow:
    """One (shuffle, q) of a group: its runs (seeds) averaged."""

    shuffle: str
    q: float
    workers: int
    runs: int
    final_score: float  # mean over runs
    score_sd: float | None  # sample standard deviation over runs; None for a single run
    ci95: tuple[float, float] | None  # the mean's 95 % Student-t interval; None for a single run
    epoch_s: float | None
    vs_local: float | None  # epoch_s / the baseline's (local shuffling's) epoch_s at the same worker count
    sent_per_epoch: float | None
    scores: dict[int, float] = field(default_factory=dict)  # final score per seed; {} where a seed repeats
    recommended: bool = False


@dataclass
class GroupResult:
    """The recommendation for one worker count (of one model and dataset)."""

    workers: int
    model: str | None
    dataset: str | None
    partition: str
    score_name: str
    reference: str | None  # "global" or "best"; None when a global reference was asked for but is missing
    reference_label: str  # e.g. "global" or "best (partial q=0.3)"
    reference_score: float | None
    recommended_q: float | None
    recommended_score: float | None
    reason: str  # why no q qualifies ("" when one does)
    rows: list[QRow]
    notes: list[str] = field(default_factory=list)
    reach_q: float | None = None  # smallest candidate q that reaches global (intervals.reaches_global)
    reach_gap: tuple[float, float, float, int] | None = None  # its paired gap: mean, low, high, seeds
    reach_reason: str = ""  # why there is no reach_q ("" when there is one)


@dataclass
class TuneResult:
    """`tune-q`'s answer: one group per (model, dataset, partition, workers), and (run, why) of the runs left out."""

    tolerance: float
    groups: list[GroupResult]
    skipped: list[tuple[str, str]]  # (run, why it was left out)

    def group(self, workers: int) -> GroupResult:
        """The only group with this worker count (several when the results mix models or datasets)."""
        found = [g for g in self.groups if g.workers == workers]
        if len(found) != 1:
            raise KeyError(f"{len(found)} groups have workers={workers}")
        return found[0]


def skip_reason(row: dict, include_incomplete: bool) -> str | None:
    """Why a run's summary row is left out of the tuning (no epochs, no final score, a strategy not
    compared, or incomplete without `include_incomplete`); None when it is kept."""
    if row["epochs_done"] == 0:
        return "no epochs recorded yet"
    if row["final_score"] is None:
        return "no validation score in its last epoch"
    if row["shuffle"] not in COMPARED:
        *others, last = sorted(COMPARED)
        return f"shuffle {row['shuffle']!r} is not {', '.join(others)} or {last}"
    if not row["complete"] and not include_incomplete:
        if row["epochs_planned"] is None:
            return f"incomplete? {row['epochs_done']} epochs, planned count unknown (no epochs in config.yaml)"
        return f"incomplete: {row['epochs_done']}/{row['epochs_planned']} epochs"
    return None


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def run_q(run: dict) -> float:
    """The run's q: its strategy's fixed one (local 0, global 1), else the one it recorded."""
    fixed_q = get_strategy(run["shuffle"]).fixed_q
    return float(run["q"]) if fixed_q is None else fixed_q


def q_rows(runs: list[dict]) -> list[QRow]:
    """Average the runs of each (shuffle, q), sorted by q (in strategy-table order at equal q)."""
    by_q: dict[tuple[str, float], list[dict]] = {}
    for run in runs:
        by_q.setdefault((run["shuffle"], round(run_q(run), 6)), []).append(run)
    rows = []
    for (shuffle, q), same in sorted(by_q.items(), key=lambda item: (item[0][1], TABLE_ORDER[item[0][0]])):
        scores = [run["final_score"] for run in same]
        rows.append(QRow(
            shuffle=shuffle, q=q, workers=same[0]["workers"], runs=len(same), final_score=sum(scores) / len(scores),
            score_sd=statistics.stdev(scores) if len(scores) > 1 else None,
            ci95=interval95(scores, f"{shuffle} q={q:g}")[1:] if len(scores) > 1 else None,
            epoch_s=_mean([run["epoch_s"] for run in same]), vs_local=None,
            sent_per_epoch=_mean([run["sent_per_epoch"] for run in same]),
            scores=by_seed if len(by_seed := {run["seed"]: run["final_score"] for run in same}) == len(same) else {},
        ))
    baseline = find_row(rows, with_role("baseline").name)
    if baseline is not None and baseline.epoch_s:
        for row in rows:
            row.vs_local = None if row.epoch_s is None else row.epoch_s / baseline.epoch_s
    return rows


def find_row(rows: list[QRow], shuffle: str) -> QRow | None:
    """The row of strategy `shuffle` (the first, where its runs differ in q); None without one."""
    return next((row for row in rows if row.shuffle == shuffle), None)


def _user_q(row: QRow) -> bool:
    """Whether the row's q is the user's (partial) rather than implied by the strategy's name."""
    return get_strategy(row.shuffle).fixed_q is None


def _q_text(row: QRow) -> str:
    name = "" if _user_q(row) else f"{row.shuffle}, "
    return f"q={row.q:g} ({name}{row.final_score:.2f})"


def recommend(runs: list[dict], tolerance: float, reference: str) -> GroupResult:
    """The smallest q among one group's candidate runs (local, partial) within `tolerance` of the reference."""
    first = runs[0]
    rows = q_rows(runs)
    reference_name = with_role("reference").name
    group = GroupResult(
        workers=first["workers"], model=first["model"], dataset=first["dataset"],
        partition=first.get("partition") or "random", score_name=first["score_name"],
        reference=None, reference_label=reference_name, reference_score=None, recommended_q=None,
        recommended_score=None, reason="", rows=rows,
    )
    for column in ("score_name", "batch_size", "epochs_planned"):
        values = sorted({str(run[column]) for run in runs})
        if len(values) > 1:
            group.notes.append(f"runs differ in {column} ({', '.join(values)}): their scores may not be comparable")
    reference_row = find_row(rows, reference_name)
    if reference_row is not None and reference in ("auto", "global"):
        group.reference, group.reference_score = "global", reference_row.final_score
    elif reference == "global":
        group.reason = (
            f"no {reference_name} run with {group.workers} workers to compare with; run one or use --reference best"
        )
        return group
    else:
        best = max(rows, key=lambda row: row.final_score)
        group.reference, group.reference_score = "best", best.final_score
        group.reference_label = f"best ({best.shuffle}" + (f" q={best.q:g})" if _user_q(best) else ")")
    candidates = [row for row in rows if row.shuffle in CANDIDATES]
    reach(group, reference_row, candidates)
    if not candidates:
        group.reason = (
            f"no {' or '.join(CANDIDATES)} runs with {group.workers} workers; sweep shuffle={','.join(CANDIDATES)}"
        )
        return group
    threshold = group.reference_score - tolerance - EPSILON
    chosen = next((row for row in candidates if row.final_score >= threshold), None)
    if chosen is None:
        best = max(candidates, key=lambda row: row.final_score)
        group.reason = (
            f"none within {tolerance:.2f} of {group.reference_label} ({group.reference_score:.2f}): the best, "
            f"{_q_text(best)}, is {group.reference_score - best.final_score:.2f} below; "
            "sweep larger q or raise --tolerance"
        )
        return group
    chosen.recommended = True
    group.recommended_q, group.recommended_score = chosen.q, chosen.final_score
    return group


def reach(group: GroupResult, reference_row: QRow | None, candidates: list[QRow]) -> None:
    """Set the group's smallest candidate q that reaches global shuffling (its seed-paired gap's 90 %
    interval ends at most δ below 0, intervals.reaches_global), or why none does."""
    if reference_row is None or not candidates:
        group.reach_reason = "needs a global run and local or partial runs"
        return
    for row in candidates:
        if len(set(row.scores) & set(reference_row.scores)) < 2:
            group.reach_reason = (f"needs 2 or more seeds run by both {_q_text(row)} and global, one run a seed: "
                                  "sweep seed=0,1,2 for both")
            return
        gap = paired_gap(row.scores, reference_row.scores, f"{row.shuffle} q={row.q:g} - global", REACH_LEVEL)
        if reaches_global(gap[1:3]):
            group.reach_q, group.reach_gap = row.q, gap
            return
    group.reach_reason = (f"no q's paired gap to global is shown to lie within {EQUIVALENCE_MARGIN:g} point of it "
                          "(its interval reaches lower): sweep larger q, or more seeds where the intervals are wide")


def tune_q(rows: list[dict], tolerance: float, reference: str = "auto", include_incomplete: bool = False) -> TuneResult:
    """Recommend q per (model, dataset, workers) group of summary rows.

    Args:
        rows: `hpcshuffle.analysis.report.collect` rows.
        tolerance: how far below the reference a candidate's final score may be, in the score's
            units (points of top-1 %, or of 100·IoU).
        reference: "global" (GS's final score), "best" (the best (shuffle, q)'s mean final score), or
            "auto" (global where the group has a GS run, else best).
        include_incomplete: also count runs that stopped before their planned epochs.

    Returns:
        TuneResult: one GroupResult per group, sorted by model, dataset and workers, and the runs left out.
    """
    at_least("tolerance", tolerance, 0, "(points of the validation score)")
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    skipped, groups = [], {}
    for row in rows:
        why = skip_reason(row, include_incomplete)
        if why:
            skipped.append((row["run"], why))
            continue
        key = (row["model"] or "", row["dataset"] or "", row.get("partition") or "random", row["workers"])
        groups.setdefault(key, []).append(row)
    return TuneResult(
        tolerance=tolerance,
        groups=[recommend(groups[key], tolerance, reference) for key in sorted(groups)],
        skipped=skipped,
    )


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def recommendation_line(group: GroupResult, tolerance: float) -> str:
    """The tolerance rule's answer for one group: the smallest q within `tolerance` of the reference's
    score, or why none qualifies."""
    if group.recommended_q is None:
        return f"workers {group.workers}: no recommendation: {group.reason}"
    chosen = next(row for row in group.rows if row.recommended)
    return (
        f"workers {group.workers}: smallest q within {tolerance:.2f} of {group.reference_label} "
        f"({group.reference_score:.2f}): {_q_text(chosen)}"
    )


def reach_line(group: GroupResult) -> str:
    """The paired rule's answer: printed where every point of the group has 2 or more seeds."""
    if group.reach_q is None:
        return f"workers {group.workers}: no q reaches global ({REACH_RULE}): {group.reach_reason}"
    mean, low, high, seeds = group.reach_gap
    return (f"workers {group.workers}: smallest q reaching global ({REACH_RULE}): q={group.reach_q:g}, "
            f"gap {mean:+.2f} [{low:+.2f}, {high:+.2f}] over {seeds} seeds")


def tune_table(result: TuneResult) -> str:
    """Per group the (shuffle, q) table with the recommended row marked, then one line per group."""
    if not result.groups:
        return "\n".join(["no runs to compare", *_skipped_lines(result.skipped)])
    names = sorted({SCORE_UNITS.get(g.score_name, g.score_name) for g in result.groups})
    lines = [
        f"final: validation score at the last epoch ({' / '.join(names) or 'none'}), mean over seeds; sd: over "
        "seeds; 95 %: the mean's Student-t interval",
        "epoch_s: slowest rank's seconds, mean over epochs after the first; vs LS: epoch_s / local's at the same M",
        f"{'shuffle':>8} {'q':>5} {'M':>4} {'runs':>4} {'final':>7} {'sd':>5} {'95 %':>15} {'epoch_s':>8} "
        f"{'vs LS':>6} {'sent/epoch':>11}",
    ]
    several = len({(g.model, g.dataset) for g in result.groups}) > 1
    partitions = len({g.partition for g in result.groups}) > 1
    section = None
    for group in result.groups:
        if (several or partitions) and (group.model, group.dataset, group.partition) != section:
            section = (group.model, group.dataset, group.partition)
            lines.append(f"-- model {group.model}, dataset {group.dataset}, partition {group.partition}")
        for row in group.rows:
            ci = "-" if row.ci95 is None else f"[{row.ci95[0]:.2f}, {row.ci95[1]:.2f}]"
            lines.append(
                f"{row.shuffle:>8} {row.q:>5.2f} {row.workers:>4} {row.runs:>4} {row.final_score:>7.2f} "
                f"{_number(row.score_sd, '.2f'):>5} {ci:>15} {_number(row.epoch_s, '.2f'):>8} "
                f"{_number(row.vs_local, '.2f'):>6} {_number(row.sent_per_epoch, '.0f'):>11}"
                + ("  <- recommended" if row.recommended else "")
            )
    lines.append("")
    for group in result.groups:
        prefix = (f"{group.model}/{group.dataset} " if several else "") + (
            f"partition {group.partition}, " if partitions else "")
        lines.append(prefix + recommendation_line(group, result.tolerance))
        if all(row.ci95 is not None for row in group.rows):
            lines.append(prefix + reach_line(group))
        lines.extend(f"  note: {note}" for note in group.notes)
    return "\n".join(lines + _skipped_lines(result.skipped))


def _skipped_lines(skipped: list[tuple[str, str]]) -> list[str]:
    if not skipped:
        return []
    lines = [f"skipped {len(skipped)} run{'s' * (len(skipped) != 1)}:"]
    lines.extend(f"  {run}: {why}" for run, why in skipped)
    if any(why.startswith("incomplete") for _, why in skipped):
        lines.append("  (--include-incomplete counts incomplete runs at their last epoch)")
    return lines


def predictor_record(checks: dict[str, dict]) -> list[str]:
    """How `tune-q --predict` has fared where its predictions were committed before training, beside the
    constants scored by the same rule on the same cells. `checks`: per study name, its pre-registration
    check (the study JSON's `preregistered`: per cell the predicted and the trained q, and the constants'
    hits). Two questions: the q (a hit: the q training found, or a larger one that still reaches GS), and
    whether LS is safe (predicted q 0 against LS reaching GS; the constants: LS always, LS never)."""
    lines, beaten, safe, always, never, cells = [], 0, 0, 0, 0, 0
    for name, check in checks.items():
        constants = ", ".join(f"{constant} {hits}" for constant, hits in check["baselines"].items())
        lines.append(f"{name}: the q right in {check['q_hits']} of {len(check['cells'])} cells ({constants})")
        beaten += check["q_hits"] > max(check["baselines"].values())
        for cell in check["cells"]:
            kept = cell["trained_q"] == 0  # the smallest q reaching GS is LS's
            safe += (cell["predicted_q"] == 0) == kept
            always, never, cells = always + kept, never + (not kept), cells + 1
    verdict = (f"it beats every constant at choosing q in {beaten} of {len(checks)} studies"
               + (": do not take its q as the one to use" if beaten < len(checks) else ""))
    return [*lines, f"{verdict}; whether LS is safe, it is right in {safe} of {cells} cells (LS always: {always}, "
                    f"LS never: {never})"]
