"""Compare runs: the Fig. 10-style breakdown per run, and epoch time relative to local shuffling."""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.metrics import PHASES, read_jsonl, validation_score


def run_summary(run_dir: Path, skip_first: bool) -> dict:
    """Mean over epochs (the first left out when there are several: it pays start-up costs)."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    if not records:
        raise ValueError(f"{run_dir}/metrics.jsonl holds no epochs")
    steady = records[1:] if skip_first and len(records) > 1 else records
    last = records[-1]
    summary = {
        "run": run_dir.name,
        "shuffle": last["shuffle"],
        "q": last["q"],
        "workers": last["workers"],
        "epochs": len(records),
        "val": validation_score(last),
        "read_shared": sum(r["samples"]["read_shared"] for r in steady) / len(steady),
        "sent": sum(r["samples"]["sent"] for r in steady) / len(steady),
    }
    for phase in PHASES:
        stat = "max" if phase == "epoch" else "mean"
        summary[phase] = sum(r["time"][phase][stat] for r in steady) / len(steady)
    return summary


def breakdown_table(run_dirs: list[Path], skip_first: bool = True) -> str:
    for run_dir in run_dirs:
        if not (run_dir / "metrics.jsonl").exists():
            raise FileNotFoundError(f"{run_dir} has no metrics.jsonl; is it a run directory?")
    rows = [run_summary(d, skip_first) for d in run_dirs]
    local = [r["epoch"] for r in rows if r["shuffle"] == "local"]
    lines = [
        "seconds per epoch, mean over ranks (epoch: slowest rank), "
        + ("epochs after the first" if skip_first else "all epochs"),
        f"{'shuffle':>8} {'q':>5} {'M':>3} {'io':>7} {'exchange':>8} {'fwbw':>7} {'allreduce':>9} "
        f"{'epoch':>7} {'vs LS':>6} {'sent':>7} {'shared':>7} {'val':>8}",
    ]
    for r in rows:
        ratio = f"{r['epoch'] / local[0]:.2f}" if local else "-"
        lines.append(
            f"{r['shuffle']:>8} {r['q']:>5.2f} {r['workers']:>3} {r['io']:>7.2f} {r['exchange']:>8.2f} "
            f"{r['fwbw']:>7.2f} {r['allreduce']:>9.2f} {r['epoch']:>7.2f} {ratio:>6} {r['sent']:>7.0f} "
            f"{r['read_shared']:>7.0f} {r['val']:>8.2f}"
        )
    return "\n".join(lines)
