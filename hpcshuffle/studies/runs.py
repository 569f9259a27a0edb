"""Training runs for the experiment scripts: a strategy's overrides, shared storage for a study, one
run trained unless complete (`python -m hpcshuffle.train`, under `mpiexec` or as virtual workers),
its records. Runs start in the repository root, as the scripts do (`python experiments/<name>.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import STRATEGIES
from hpcshuffle.storage.shared_io import shared_volume

REPO = Path(__file__).resolve().parents[2]  # the source checkout: runs start here
BIN = Path(sys.executable).parent  # this venv's bin: its python, the mpich wheel's mpiexec, hpcshuffle


def launch_environment() -> dict[str, str]:
    """This process's environment for a launched run: this venv's bin first on PATH (its mpiexec and
    hpcshuffle), and one OpenMP thread a rank."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}


def strategy_overrides(strategy: str) -> list[str]:
    """`partial-<q>`, or any other strategy of the table by its name (`global`, `local`, `corgipile`,
    `streaming_py1e`, ...), as Hydra overrides."""
    if strategy.startswith("partial-"):
        return ["shuffle=partial", f"shuffle.q={float(strategy.removeprefix('partial-'))}"]
    if strategy in STRATEGIES and strategy != "partial":
        return [f"shuffle={strategy}"]
    others = ", ".join(name for name in STRATEGIES if name != "partial")
    raise ValueError(f"unknown strategy {strategy!r}: use partial-<q> (e.g. partial-0.1) or one of {others}")


@contextmanager
def shared_storage(overrides: list[str]) -> Iterator[list[str]]:
    """The overrides that make runs read shared storage from the GlusterFS mount of
    scripts/shared_fs.sh: the one mounted already, or one started here (root) and stopped after.
    Without either, or when `overrides` name an absolute dataset.root (read where it is), [] and
    a plain word on where global shuffling reads."""
    roots = [o.split("=", 1)[1] for o in overrides if o.startswith("dataset.root=")]
    if roots and Path(roots[-1]).is_absolute():
        print(f"shared storage: dataset.root {roots[-1]} is read where it is (give a relative dataset.root to "
              "put the dataset on the GlusterFS mount)", flush=True)
        yield []
        return
    with shared_volume() as (mount, how):  # stopped after only when started here
        if mount is None:
            print(f"shared storage: no GlusterFS mount ({how}); global shuffling reads dataset.root from this "
                  "node's disk, each file's pages dropped after reading it", flush=True)
            yield []
            return
        print(f"shared storage: GlusterFS at {mount} ({how}); datasets live under it", flush=True)
        yield [f"storage.shared_dir={mount}"]


def records(run_dir: Path) -> list[dict]:
    """The epochs `run_dir`'s metrics.jsonl holds so far (a last line cut short is left out); [] before any."""
    path = run_dir / "metrics.jsonl"
    return read_jsonl(path, partial_last=True) if path.exists() else []


def completed(run_dir: Path, epochs: int) -> list[dict] | None:
    """The records of a run that already holds `epochs` epochs (said and reused), else None; a run cut
    short earlier, without checkpoints, loses its records so that it starts over rather than appends."""
    done = records(run_dir)
    if len(done) >= epochs:
        print(f"  {run_dir}: complete, reused", flush=True)
        return done
    if done:
        print(f"  {run_dir}: {len(done)} of {epochs} epochs, trained again", flush=True)
    for name in ("metrics.jsonl", "audit.jsonl"):  # both are appended to, epoch by epoch
        (run_dir / name).unlink(missing_ok=True)
    return None


def train_arguments(overrides: list[str], epochs: int, virtual_workers: int = 0) -> list[str]:
    """The Hydra overrides of one experiment run (whatever launches it): rank scope unless
    `overrides` say otherwise, `epochs`, no checkpoints, no progress bars."""
    virtual = [f"shuffle.virtual_workers={virtual_workers}"] if virtual_workers else []
    # the papers give each GPU its own partition: rank scope, whatever nodes this machine has
    scope = [] if any(o.startswith("storage.scope=") for o in overrides) else ["storage.scope=rank"]
    return [*overrides, *scope, *virtual, f"epochs={epochs}", "checkpoint.every_epochs=0", "progress=false"]


def train(run_dir: Path, overrides: list[str], epochs: int, ranks: int = 1, virtual_workers: int = 0) -> list[dict]:
    """Train into `run_dir` unless it already holds `epochs` epochs; returns its records.

    `ranks` > 1 launches `mpiexec -n ranks`; `virtual_workers` > 0 runs one process with that
    many virtual workers (`hpcshuffle simulate`).
    """
    done = completed(run_dir, epochs)
    if done is not None:
        return done
    launcher = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
    arguments = train_arguments(overrides, epochs, virtual_workers)
    command = [*launcher, sys.executable, "-m", "hpcshuffle.train", *arguments, f"hydra.run.dir={run_dir}"]
    env = launch_environment()
    start = time.perf_counter()
    print(f"  {run_dir}: {' '.join(arguments)}", flush=True)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"training into {run_dir} failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    print(f"    done in {time.perf_counter() - start:.0f} s", flush=True)
    return records(run_dir)
