"""Fault injection for the chaos tests: SIGKILL or SIGSTOP one rank at a named point of one epoch.

Inert unless the environment asks for it::

    HPCSHUFFLE_CHAOS_KILL=RANK:EPOCH:POINT   e.g. 1:2:iteration-5  or  3:2:mid_clean
    HPCSHUFFLE_CHAOS_STOP=RANK:EPOCH:POINT   the same points; the rank freezes instead of dying

Points, in the order an epoch reaches them: `iteration-<i>` (before iteration i's exchange
step and forward pass), `before_barrier` (received samples flushed, senders not yet told),
`mid_clean` (the manifest committed, half of the sent samples' files deleted, on the
exchange's writer thread while the training thread goes on),
`before_checkpoint` (stores committed for the next epoch, epoch recorded, checkpoint not written).
SIGKILL, not an exception: nothing gets to clean up, exactly as when a node dies. SIGSTOP: the
process and its sockets stay, silent, as a node that hangs (its peers must notice in world.timeout_s).
A Slurm job requeued after the fault (SLURM_RESTART_COUNT > 0) runs without it, as a job that
resumes after a real fault would.
"""

from __future__ import annotations

import os
import signal
from functools import cache

ENV = "HPCSHUFFLE_CHAOS_KILL"
STOP_ENV = "HPCSHUFFLE_CHAOS_STOP"
SIGNALS = {ENV: signal.SIGKILL, STOP_ENV: signal.SIGSTOP}


@cache
def _target(variable: str) -> tuple[int, int, str] | None:
    text = os.environ.get(variable)
    if not text or int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0:
        return None
    try:
        rank, epoch, point = text.split(":")
        return int(rank), int(epoch), point
    except ValueError:
        raise ValueError(f"{variable}={text!r}: expected RANK:EPOCH:POINT, e.g. 1:2:iteration-5") from None


def point(rank: int, epoch: int, name: str) -> None:
    """Kill or stop this process if the environment names this (rank, epoch, point)."""
    for variable, signum in SIGNALS.items():
        if _target(variable) == (rank, epoch, name):
            os.kill(os.getpid(), signum)
