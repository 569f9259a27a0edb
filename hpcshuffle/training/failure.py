"""How a failing rank ends the run: it reports the error once, stops the other ranks with it, and
exits with the code the job script acts on (checkpoint.py defines the codes that requeue)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path

from hpcshuffle.comm.exchange import ExchangeError
from hpcshuffle.comm.world import World
from hpcshuffle.errors import ConfigError, PeerLost
from hpcshuffle.files import create_first
from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.storage.store import StoreError
from hpcshuffle.training.checkpoint import (
    EXIT_CODE_FILE,
    PEER_LOST_EXIT_CODE,
    PREEMPT_EXIT_CODE,
    Preempted,
)

USER_ERRORS = (ConfigError, DatasetError, StoreError, ExchangeError)
ABORT_GRACE_S = 0.5  # how long a failing rank waits, after printing its error, before MPI_Abort
QUIET_GRACE_S = 3.0  # ...and one that left the printing to another survivor: that one aborts first


def fail(world: World, err: BaseException, run_dir: Path | None = None) -> None:
    """Report an error and end this rank without leaving the others hanging.

    Exit codes: 75 preempted and 76 a peer lost (the job script requeues on both), 2 bad input,
    1 a bug (with its traceback). A rank that aborts the job also writes its code to
    `<run_dir>/.exit_code` (the first such rank: the cause, not the aborts that follow), since
    srun reports an aborted job's tasks as killed whatever code MPI_Abort was given.
    """
    collective = getattr(err, "collective", False)
    if isinstance(err, Preempted):
        if world.is_root:
            print(f"hpcshuffle: {err}", file=sys.stderr, flush=True)
        sys.exit(PREEMPT_EXIT_CODE)
    reporter = getattr(err, "reporter", True)
    if isinstance(err, PeerLost):  # before USER_ERRORS: an exchange's stall is both
        if reporter:
            print(f"hpcshuffle: peer lost, on rank {world.rank}: {err}", file=sys.stderr, flush=True)
        code = PEER_LOST_EXIT_CODE
    elif isinstance(err, USER_ERRORS):
        if world.is_root or not collective:
            where = "" if collective else f" on rank {world.rank}"
            print(f"hpcshuffle: error{where}: {err}", file=sys.stderr, flush=True)
        code = 2
    else:
        traceback.print_exc()
        code = 1
    if world.size > 1 and not collective:
        if run_dir is not None and run_dir.is_dir():
            record_exit_code(run_dir, code)
        # mpiexec kills every rank at once on an abort, and what a rank printed just before can be
        # lost in the launcher's forwarding (1 run in 12 here): give it time to pass the message on
        time.sleep(ABORT_GRACE_S if reporter else QUIET_GRACE_S)
        world.comm.Abort(code)  # the other ranks may be waiting in a collective: end them too
    if os.environ.get("SUBMITIT_EXECUTOR"):
        # a job of a Slurm sweep (hydra/launcher=slurm): submitit reports a raised error as the
        # job's result; after an exit it would have none and, without sacct, wait for one forever
        raise RuntimeError(f"hpcshuffle: {err}") from None
    sys.exit(code)


def record_exit_code(run_dir: Path, code: int) -> None:
    """Write `code` to <run_dir>/.exit_code unless a rank wrote one first (the first wins); a run
    directory that cannot be written leaves srun's code standing."""
    with contextlib.suppress(OSError):
        create_first(run_dir / EXIT_CODE_FILE, f"{code}\n")
