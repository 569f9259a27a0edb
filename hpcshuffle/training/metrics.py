"""The epoch breakdown: per-rank phase timers and sample counters, reduced once per epoch.

Phases follow Fig. 10 of Nguyen et al.: `io` (waiting for the next batch), `exchange` (sample
exchange calls outside overlap, plus the final synchronize), `fwbw` (forward + backward),
`allreduce` (gradient allreduce + weight update) and the whole `epoch`. Accelerator utilisation
(`util`) is DLIO's: compute time (fwbw + allreduce) over the epoch's wall time. `run_au` is MLPerf
Storage's, for a whole run: FW+BW over the run's wall time less its first step's I/O.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hpcshuffle.files import read_jsonl

PHASES = ("io", "exchange", "fwbw", "allreduce", "epoch")
# skipped: unreadable samples left out of their batch (loader.on_error=skip)
# read_cache: reads the planned cache (cache.policy) served instead of shared storage
COUNTERS = ("read_local", "read_shared", "read_cache", "sent", "received", "store_peak", "skipped")


@dataclass
class RankEpoch:
    """What one rank measured during one epoch (raw, not reduced)."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    samples: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    loss_sum: float = 0.0
    step_losses: list[float | None] = field(default_factory=list)  # None: a step whose samples were all skipped
    iterations: int = 0
    lr: float = 0.0  # the learning rate of the last iteration
    first_io: float = 0.0  # the io of the epoch's step 0: MLPerf Storage's AU leaves the run's first out
    started_at: float = 0.0  # wall clock (Unix seconds) when the epoch began on this rank

    @contextmanager
    def phase(self, name: str, sync=None) -> Iterator[None]:
        """Time a block into `seconds[name]`; `sync` (e.g. torch.cuda.synchronize) runs at both ends."""
        if sync:
            sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            if sync:
                sync()
            self.seconds[name] += time.perf_counter() - start


def utilisation(seconds: dict[str, float]) -> float:
    """Accelerator utilisation as DLIO defines it: compute (fwbw + allreduce) over the epoch's wall time, a
    fraction in [0, 1]; 0 for an epoch that took no time."""
    if seconds["epoch"] <= 0:
        return 0.0
    return min((seconds["fwbw"] + seconds["allreduce"]) / seconds["epoch"], 1.0)


AU_THRESHOLDS = {"resnet50": 0.90, "unet3d": 0.90, "cosmoflow": 0.70}  # MLPerf Storage v1.0: a run qualifies above


def run_au(records: list[dict]) -> float | None:
    """Accelerator utilisation as MLPerf Storage scores a run: what the accelerators computed (FW+BW, mean
    over ranks) over the run's wall time (every epoch, mean over ranks) less its first step's I/O, a
    fraction in [0, 1]. The allreduce is not compute here: much of it is waiting for the slowest rank.
    None for runs recorded before `first_io`."""
    if not records or "first_io" not in records[0]["time"]:
        return None
    compute = sum(record["time"]["fwbw"]["mean"] for record in records)
    wall = sum(record["time"]["epoch"]["mean"] for record in records) - records[0]["time"]["first_io"]["mean"]
    return min(compute / wall, 1.0) if wall > 0 else 0.0


def record_util(record: dict) -> float:
    """The epoch's utilisation, mean over ranks; records written before `util` existed get the
    utilisation of the mean phase times instead."""
    if "util" in record:
        return record["util"]["mean"]
    return utilisation({phase: stats["mean"] for phase, stats in record["time"].items()})


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}


def reduce_epoch(rows: list[RankEpoch], step_loss: bool = False) -> dict:
    """min / mean / max over ranks of every phase and of the utilisation, and counters summed over
    ranks; with `step_loss`, each step's loss averaged over the ranks that trained on something at
    that step."""
    time_stats = {phase: _spread([row.seconds[phase] for row in rows]) for phase in PHASES}
    time_stats["first_io"] = _spread([row.first_io for row in rows])
    samples = {name: sum(row.samples[name] for row in rows) for name in COUNTERS}
    samples["store_peak_rank_max"] = max(row.samples["store_peak"] for row in rows)
    iterations = sum(row.iterations for row in rows)
    reduced = {
        "time": time_stats,
        "util": _spread([utilisation(row.seconds) for row in rows]),
        # wall clock (Unix seconds) of the first rank's start and of this reduction: the epoch's window,
        # for matching it with what was measured outside the run (e.g. a link's byte counters)
        "wall": {"start": min(row.started_at for row in rows), "end": time.time()},
        "samples": samples,
        "train_loss": sum(row.loss_sum for row in rows) / max(iterations, 1),
    }
    if step_loss:
        reduced["step_loss"] = [_mean_of_known(step) for step in zip(*(row.step_losses for row in rows))]
    return reduced


def _mean_of_known(values: tuple[float | None, ...]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def drop_epochs_from(path: Path, epoch: int) -> int:
    """Remove the records of `epoch` and later (a resumed run writes them again); returns how many."""
    if not path.exists():
        return 0
    records = read_jsonl(path)
    kept = [record for record in records if record["epoch"] < epoch]
    if len(kept) < len(records):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(json.dumps(record) + "\n" for record in kept))
        tmp.replace(path)
    return len(records) - len(kept)


TABLE_HEADER = (
    f"{'epoch':>5} {'io':>8} {'exchange':>9} {'fwbw':>8} {'allreduce':>9} {'epoch_s':>8} {'util':>5} "
    f"{'loss':>7} {'val':>8} {'sent':>7} {'recv':>7} {'shared':>7} {'skew':>6}"
)


def validation_score(record: dict) -> float:
    """The headline validation number in %: top-1 accuracy, or mean IoU for segmentation."""
    return record["val_top1"] if "val_top1" in record else 100.0 * record["val_iou"]


def table_row(record: dict) -> str:
    """One line of the per-epoch breakdown (mean over ranks; epoch time is the slowest rank's; util in %)."""
    seconds = record["time"]
    samples = record["samples"]
    return (
        f"{record['epoch']:>5} {seconds['io']['mean']:>8.2f} {seconds['exchange']['mean']:>9.2f} "
        f"{seconds['fwbw']['mean']:>8.2f} {seconds['allreduce']['mean']:>9.2f} "
        f"{seconds['epoch']['max']:>8.2f} {record_util(record):>5.0%} {record['train_loss']:>7.3f} "
        f"{validation_score(record):>8.2f} {samples['sent']:>7} {samples['received']:>7} {samples['read_shared']:>7} "
        f"{label_skew_text(record):>6}"
    )


def label_skew_text(record: dict) -> str:
    """The epoch's label skew (`mixing.labels.excess`, analysis/labels.py) as the table prints it; "-" without labels."""
    skew = (record.get("mixing") or {}).get("labels")
    return f"{skew['excess']:.3f}" if skew else "-"


__all__ = [
    "AU_THRESHOLDS", "COUNTERS", "PHASES", "RankEpoch", "drop_epochs_from", "record_util", "reduce_epoch", "run_au",
    "table_row", "utilisation", "validation_score",
]
