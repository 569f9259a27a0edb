"""Where rank 0 puts an epoch's record: metrics.jsonl (and audit.jsonl's rows), the printed table,
and wandb. wandb logging is in addition to metrics.jsonl: offline unless WANDB_MODE says otherwise,
and never the reason a run fails or waits (no network on compute nodes is the usual case).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hpcshuffle.files import append_jsonl
from hpcshuffle.training.metrics import table_row


def flatten(record: dict, prefix: str = "") -> dict:
    """{"time": {"io": {"mean": 1}}} -> {"time/io/mean": 1}, as wandb charts keys."""
    flat = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


class WandbSink:
    """Rank 0's wandb run, in the run directory; disabled (with one warning) if wandb fails."""

    def __init__(self, run_dir: Path, project: str, settings: dict) -> None:
        self.run = None
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        try:
            import wandb

            self.run = wandb.init(
                project=project, dir=str(run_dir), name=run_dir.name, config=settings,
                settings=wandb.Settings(init_timeout=60, x_disable_stats=True),
            )
        except Exception as err:  # noqa: BLE001 - logging must never end a training run
            self.warn(err)

    def warn(self, err: BaseException) -> None:
        """Report why wandb stops logging (metrics.jsonl keeps everything) and stop it."""
        print(f"hpcshuffle: wandb disabled ({type(err).__name__}: {err}); metrics.jsonl has everything",
              file=sys.stderr, flush=True)
        self.run = None

    def log(self, record: dict) -> None:
        """Log an epoch's record, flattened, at step `epoch`; a failure turns wandb off, never the run."""
        if self.run is None:
            return
        try:
            self.run.log(flatten(record), step=record["epoch"])
        except Exception as err:  # noqa: BLE001
            self.warn(err)

    def close(self) -> None:
        """Finish the wandb run; a failure is reported, not raised."""
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as err:  # noqa: BLE001
                self.warn(err)


def write_epoch(run_dir: Path, record: dict, audits: list | None, sink: WandbSink | None) -> None:
    """Rank 0's outputs of one epoch: its metrics.jsonl record, its audit.jsonl rows (`audits`: per
    process, per worker it trains, the ids held at the epoch's start and those trained on; None
    without `audit`), its line of the printed table, and its wandb log."""
    append_jsonl(run_dir / "metrics.jsonl", record)
    for rank, (held_ids, trained_ids) in enumerate(worker for process in audits or [] for worker in process):
        append_jsonl(run_dir / "audit.jsonl",
                     {"epoch": record["epoch"], "rank": rank, "held": held_ids, "trained": trained_ids})
    print(table_row(record), flush=True)
    if sink:
        sink.log(record)
