"""Fault injection for the chaos tests: SIGKILL one rank at a named point of one epoch.

Inert unless the environment asks for it::

    HPCSHUFFLE_CHAOS_KILL=RANK:EPOCH:POINT   e.g. 1:2:iteration-5  or  3:2:mid_clean

Points, in the order an epoch reaches them: `iteration-<i>` (before iteration i's exchange
step and forward pass), `before_barrier` (received samples flushed, senders not yet told),
`mid_clean` (the manifest committed, half of the sent samples' files deleted, on the
exchange's writer thread while the training thread goes on),
`before_checkpoint` (stores committed for the next epoch, epoch recorded, checkpoint not written).
SIGKILL, not an exception: nothing gets to clean up, exactly as when a node dies.
"""

from __future__ import annotations

import os
import signal
from functools import cache

ENV = "HPCSHUFFLE_CHAOS_KILL"


@cache
def _target() -> tuple[int, int, str] | None:
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        rank, epoch, point = text.split(":")
        return int(rank), int(epoch), point
    except ValueError:
        raise ValueError(f"{ENV}={text!r}: expected RANK:EPOCH:POINT, e.g. 1:2:iteration-5") from None


def point(rank: int, epoch: int, name: str) -> None:
    """Kill this process if the environment names this (rank, epoch, point)."""
    if _target() == (rank, epoch, name):
        os.kill(os.getpid(), signal.SIGKILL)
