"""Checkpoints: what a run needs to continue exactly where it stopped.

`<run dir>/checkpoint.pt` is written by rank 0 (atomically: temporary name, fsync, rename) at
epoch ends, optionally every K steps, and when the job is preempted. It holds:

    epoch, step   where training continues: the plan of `epoch`, from iteration `step`
    plan          the plan's shape (samples, workers, batch, q, seed, shuffle) and the dataset's
                  fingerprint: the exchange state is "the stores hold plan(epoch).held", so
                  resuming recomputes that plan and reconciles the stores to it
    model, optimizer
    ranks         per rank: RNG states, and inside an epoch the counters and trained ids so far

The preemption signal (Slurm's `--signal=USR1@120`, or the SIGTERM before a requeue) may reach
any subset of the ranks; `Preemption` makes all of them stop at the same iteration.
"""

from __future__ import annotations

import io
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from hpcshuffle.errors import ConfigError
from hpcshuffle.metrics import RankEpoch
from hpcshuffle.store import atomic_write

FILE = "checkpoint.pt"
FORMAT = 1
# what must not change between a checkpoint and its resumption (the worker count may)
FIXED = ("shuffle", "num_samples", "batch_size", "q", "seed", "dataset")
PREEMPT_EXIT_CODE = 75  # EX_TEMPFAIL: "try again"; jobs/train.sbatch requeues on it


@dataclass
class RankState:
    """One rank's part of a checkpoint."""

    rng: dict
    # inside an epoch (step > 0) only:
    row: RankEpoch | None = None  # the interrupted epoch's counters so far
    trained: list[int] = field(default_factory=list)  # ids trained so far in that epoch
    buffers: dict = field(default_factory=dict)  # BatchNorm statistics: per rank until averaged at the epoch's end


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, payload: dict) -> Path:
    path = run_dir / FILE
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **payload}, buffer)
    atomic_write(path, [buffer.getbuffer()])
    return path


def load(run_dir: Path) -> dict | None:
    """The run directory's checkpoint, or None if it has none."""
    path = run_dir / FILE
    if not path.exists():
        return None
    try:
        # our own file, with numpy RNG states and dataclasses in it: not weights-only
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same thing
        raise ConfigError(f"checkpoint {path} is unreadable ({err}); delete it to start over") from err
    if checkpoint.get("format") != FORMAT:
        raise ConfigError(f"checkpoint {path} has format {checkpoint.get('format')}, this version reads {FORMAT}")
    return checkpoint


def check_resumable(checkpoint: dict, plan: dict, epochs: int, where: Path) -> None:
    """Refuse a checkpoint written for another plan, or one whose run is already complete."""
    saved = checkpoint["plan"]
    differ = [f"{key}: {saved[key]} then, {plan[key]} now" for key in FIXED if saved[key] != plan[key]]
    if differ:
        raise ConfigError(
            f"the checkpoint in {where} belongs to another run ({'; '.join(differ)}); resume with "
            "the same settings (the worker count may change) or start a new run directory"
        )
    if checkpoint["epoch"] >= epochs:
        raise ConfigError(
            f"the run in {where} already completed {checkpoint['epoch']} epochs; pass a larger "
            f"epochs= to train on, or start a new run directory"
        )


class Preemption:
    """Turns SIGUSR1 / SIGTERM on any rank into one agreed stopping iteration on all ranks.

    Each `poll` completes the previous iteration's non-blocking MAX-allreduce of the "signalled"
    flag and posts the next, so it costs no synchronous round trip, and every rank sees the
    same result at the same call.
    """

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm.Dup()
        self.signalled: str | None = None  # the first signal this rank received
        self._flag = np.zeros(1, dtype=np.int32)
        self._agreed = np.zeros(1, dtype=np.int32)
        self._request: MPI.Request | None = None
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self.SIGNALS}

    def _on_signal(self, signum, frame) -> None:
        self.signalled = self.signalled or signal.Signals(signum).name

    def poll(self) -> bool:
        """Collective, once per iteration: True on every rank once any rank has been signalled."""
        if self._request is not None:
            self._request.Wait()
            self._request = None
            if self._agreed[0]:
                return True
        self._flag[0] = self.signalled is not None
        self._request = self.comm.Iallreduce(self._flag, self._agreed, op=MPI.MAX)
        return False

    def close(self) -> None:
        if self._request is not None:
            self._request.Wait()
        self.comm.Free()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Preempted(Exception):  # noqa: N818 - not an error: the job stops on request
    """Every rank stopped at the same iteration and the checkpoint is written."""

    collective = True
