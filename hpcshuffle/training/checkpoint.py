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

from hpcshuffle.comm.world import World, on_root
from hpcshuffle.errors import ConfigError
from hpcshuffle.files import atomic_write
from hpcshuffle.training.metrics import RankEpoch, drop_epochs_from

FILE = "checkpoint.pt"
FORMAT = 1
# what must not change between a checkpoint and its resumption (the worker count may)
FIXED = ("shuffle", "num_samples", "batch_size", "q", "seed", "partition", "shard_samples", "shuffle_buffer", "dataset")
# what a checkpoint written before a FIXED key existed had
BEFORE = {"partition": "random", "shard_samples": 1, "shuffle_buffer": 0}
PREEMPT_EXIT_CODE = 75  # EX_TEMPFAIL: "try again"; jobs/train.sbatch requeues on it
# a peer stopped answering for world.timeout_s (frozen, dead, cut off: errors.PeerLost, an exchange's
# stall): nothing is wrong with the input, so requeue and resume from the last checkpoint as well
PEER_LOST_EXIT_CODE = 76
# in the run directory: the code of the rank that aborted the job (srun reports its tasks as killed)
EXIT_CODE_FILE = ".exit_code"


@dataclass
class RankState:
    """One rank's part of a checkpoint."""

    rng: dict
    # inside an epoch (step > 0) only:
    row: RankEpoch | None = None  # the interrupted epoch's counters so far
    trained: list[int] = field(default_factory=list)  # ids trained so far in that epoch
    buffers: dict = field(default_factory=dict)  # BatchNorm statistics: per rank until averaged at the epoch's end


def rng_state() -> dict:
    """The torch, numpy, python (and CUDA, once initialised) RNG states of this process."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    """Set this process's RNGs to `state` (`rng_state`)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, payload: dict) -> Path:
    """Write `payload` atomically as the run directory's checkpoint; returns its path."""
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
    saved = {**BEFORE, **saved}
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


def layout(workers: int, processes: int, ranks_per_node: int = 1) -> str:
    """How messages name the run's workers: "M virtual workers", or "M ranks" (and how they share node stores)."""
    if processes < workers:
        return f"{workers} virtual workers"
    sharing = f" sharing node stores {ranks_per_node} by {ranks_per_node}" if ranks_per_node > 1 else ""
    return f"{workers} ranks{sharing}"


class Checkpointer:
    """The run directory's checkpoint for one run: find it at the start, restore from it, write it.

    Args:
        identity: the plan's shape and dataset (see `FIXED`), plus `num_ranks` (workers),
            `processes` (this job's ranks; fewer than workers when they are virtual) and
            `ranks_per_node` (ranks sharing a node's store; 1 in rank scope).
        resume: "auto" (continue if the run directory holds a checkpoint) or "require".
    """

    def __init__(self, world: World, run_dir: Path, identity: dict, resume: str, epochs: int) -> None:
        self.world, self.run_dir, self.identity = world, run_dir, identity
        self.resume, self.epochs = resume, epochs

    def say(self, message: str) -> None:
        """Print `message` on rank 0."""
        if self.world.is_root:
            print(message, flush=True)

    def find(self) -> dict | None:
        """Collective: the run directory's checkpoint if there is one (and it fits this run)."""
        found = on_root(self.world, self._read, ConfigError)
        if found is None:
            return None
        saved_ranks = found["plan"]["num_ranks"]
        self.say(f"resume: {self.run_dir / FILE} at epoch {found['epoch']}, step {found['step']} "
                 f"(written by {saved_ranks} workers)")
        if not self.same_layout(found):
            now = layout(self.identity["num_ranks"], self.identity["processes"], self.identity["ranks_per_node"])
            saved = found["plan"]
            then = layout(saved_ranks, saved.get("processes", saved_ranks), saved.get("ranks_per_node", 1))
            self.say(f"resume: {now} instead of {then}: re-planned for {self.identity['num_ranks']} workers; each "
                     f"store is restaged to the new plan's epoch {found['epoch']} partition, "
                     "from other ranks' stores first, then from shared storage")
            if found["step"]:
                self.say(f"resume: the checkpoint is inside epoch {found['epoch']}; the old workers' progress "
                         "through it does not carry over to new ones, so the epoch restarts from step 0 with "
                         "the checkpoint's weights")
                found["step"] = 0
        return found

    def _read(self) -> dict | None:
        found = load(self.run_dir)
        if found is None:
            if self.resume == "require":
                raise ConfigError(
                    f"checkpoint.resume=require but {self.run_dir} holds no {FILE}; pass "
                    "the run directory of the interrupted run as hydra.run.dir"
                )
            return None
        check_resumable(found, self.identity, self.epochs, self.run_dir)
        for name in ("metrics.jsonl", "audit.jsonl"):  # records the resumed run writes again
            dropped = drop_epochs_from(self.run_dir / name, found["epoch"])
            if dropped:
                print(f"resume: dropped {dropped} records of epoch {found['epoch']} on from {name}", flush=True)
        return found

    def same_layout(self, found: dict) -> bool:
        """Whether the checkpoint's run had these workers in these processes (virtual or real ranks),
        sharing node stores alike."""
        saved, now = found["plan"], self.identity
        return (saved["num_ranks"], saved.get("processes", saved["num_ranks"]), saved.get("ranks_per_node", 1)) == (
            now["num_ranks"], now["processes"], now["ranks_per_node"])

    def restore(self, found: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> RankState | None:
        """Load the weights; with the same layout also this rank's RNG, and inside an epoch return
        its progress through it (the counters and ids trained so far)."""
        model.load_state_dict(found["model"])
        optimizer.load_state_dict(found["optimizer"])
        if not self.same_layout(found):
            return None
        state: RankState = found["ranks"][self.world.rank]
        restore_rng(state.rng)
        if not found["step"]:
            return None
        model.load_state_dict(state.buffers, strict=False)
        return state

    def save(self, epoch: int, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             row: RankEpoch | None = None, trained=(), buffers: dict | None = None) -> Path:
        """Collective: rank 0 writes where training continues (epoch, step) and everything it needs."""
        state = RankState(rng_state())
        if step:
            state = RankState(state.rng, row, list(trained), buffers or {})
        states = self.world.comm.gather(state, root=0)
        if self.world.is_root:
            save(self.run_dir, {
                "epoch": epoch, "step": step, "plan": self.identity,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "ranks": states,
            })
        return self.run_dir / FILE


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

    def stopped(self, epoch: int, step: int, checkpoint: Path) -> Preempted:
        """Collective, once `poll` said stop and `checkpoint` is written: the error that ends the run,
        naming the signal each rank received and how to continue."""
        signals = self.comm.gather(self.signalled, root=0) or []
        got = ", ".join(f"{name} on rank {rank}" for rank, name in enumerate(signals) if name)
        return Preempted(
            f"stopped at epoch {epoch}, step {step} on request ({got}); checkpoint {checkpoint}; "
            "run the same command again (same run directory) to continue, as jobs/train.sbatch "
            "does after requeueing"
        )

    def close(self) -> None:
        """Collective: wait for the last posted flag allreduce, free the duplicate communicator and put
        back the signal handlers there were before."""
        if self._request is not None:
            self._request.Wait()
        self.comm.Free()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Preempted(Exception):  # noqa: N818 - not an error: the job stops on request
    """Every rank stopped at the same iteration and the checkpoint is written."""

    collective = True
