"""What a run directory says about its samples: per epoch, did the ranks train on every sample
(`audit.jsonl`, written with `audit=true`), did the node-local stores hold each sample exactly once
at the epoch's start (strategies that keep stores), and did every sent sample arrive
(`metrics.jsonl`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from hpcshuffle.files import read_jsonl


def epoch_exactness(ids: Iterable[int], num_samples: int) -> tuple[int, int]:
    """(samples of 0..num_samples-1 missing from `ids`, occurrences beyond each sample's first): of one
    epoch's trained ids from every rank together, or of what every store held."""
    counts = Counter(ids)
    lost = num_samples - sum(1 for i in counts if 0 <= i < num_samples)
    return lost, sum(counts.values()) - len(counts)


def audit_problems(run_dir: Path) -> list[str]:
    """One line per problem found in `run_dir`'s records; [] when no sample was lost or duplicated.

    Each rank trains ⌈N/M⌉ samples an epoch (a rank holding fewer repeats some), so an epoch may
    train M·⌈N/M⌉ − N samples twice and no more.
    """
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    if not metrics:
        return [f"{run_dir}/metrics.jsonl holds no epochs"]
    if not (run_dir / "audit.jsonl").exists():
        return [f"{run_dir}/audit.jsonl is missing: run with audit=true"]
    num_samples, workers = metrics[-1]["num_samples"], metrics[-1]["workers"]
    padding = workers * -(-num_samples // workers) - num_samples
    by_epoch: dict[int, dict[int, dict]] = {}
    for row in read_jsonl(run_dir / "audit.jsonl"):
        by_epoch.setdefault(row["epoch"], {})[row["rank"]] = row
    problems = []
    if sorted(by_epoch) != [record["epoch"] for record in metrics]:
        problems.append(f"audit.jsonl holds epochs {sorted(by_epoch)}, metrics.jsonl {[r['epoch'] for r in metrics]}")
    for record in metrics:
        if record["samples"]["sent"] != record["samples"]["received"]:
            problems.append(f"epoch {record['epoch']}: {record['samples']['sent']} samples sent, "
                            f"{record['samples']['received']} received")
    for epoch, rows in sorted(by_epoch.items()):
        if sorted(rows) != list(range(workers)):
            problems.append(f"epoch {epoch}: audit rows of ranks {sorted(rows)}, expected 0..{workers - 1}")
        untrained, repeats = epoch_exactness((i for row in rows.values() for i in row["trained"]), num_samples)
        if untrained:
            problems.append(f"epoch {epoch}: {untrained} of {num_samples} samples trained on by no rank (lost)")
        if repeats > padding:
            problems.append(f"epoch {epoch}: {repeats} samples trained again, {padding} allowed (duplicated)")
        held = [i for row in rows.values() for i in row["held"]]
        if held:  # a strategy with stores: each sample in exactly one of them
            lost, copies = epoch_exactness(held, num_samples)
            if lost or copies:
                problems.append(f"epoch {epoch}: the stores hold {lost} samples in no store and {copies} extra copies")
    return problems
