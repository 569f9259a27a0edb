"""wandb logging, in addition to metrics.jsonl: offline unless WANDB_MODE says otherwise, and never
the reason a run fails or waits (no network on compute nodes is the usual case).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


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
        print(f"hpcshuffle: wandb disabled ({type(err).__name__}: {err}); metrics.jsonl has everything",
              file=sys.stderr, flush=True)
        self.run = None

    def log(self, record: dict) -> None:
        if self.run is None:
            return
        try:
            self.run.log(flatten(record), step=record["epoch"])
        except Exception as err:  # noqa: BLE001
            self.warn(err)

    def close(self) -> None:
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as err:  # noqa: BLE001
                self.warn(err)
