"""How a rank starts its DataLoader workers: from a forkserver, never by forking the rank itself.

A rank runs MPI, gloo and threads of its own (the exchange, the store's reader and writer), and a
child forked from it can hang inside os.fork before it runs a line: caught once in a CI run, where
the rank then waited forever for the worker's first batch. The forkserver is started by fork +
exec, forks nothing but workers, and imports the loader once, so a worker starts in moments.

Workers import their rank's main module (multiprocessing's rule for a forkserver child), and with
it mpi4py, whose import would start MPI: NOT_A_RANK in their environment makes hpcshuffle/__init__.py
switch that off. Slurm signals every process of a step; the server and the workers are started with
the stop signals blocked, so only the rank acts on them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from multiprocessing import forkserver

NOT_A_RANK = "HPCSHUFFLE_NOT_A_RANK"  # set in the environment of a process that must not start MPI
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
WORKERS_FROM = multiprocessing.get_context("forkserver")
WORKERS_FROM.set_forkserver_preload(["hpcshuffle.storage.loader"])


def start_worker_server() -> None:
    """Start the workers' forkserver, once per process (its ensure_running starts multiprocessing's
    resource tracker first).

    They inherit, across exec, NOT_A_RANK and a signal mask that blocks the stop signals; the rank
    receives any stop signal that arrived meanwhile once it unblocks them.
    """
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    os.environ[NOT_A_RANK] = "1"
    try:
        forkserver.ensure_running()
    finally:
        del os.environ[NOT_A_RANK]
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def ignore_stop_signals(worker_id: int) -> None:
    """Loader workers leave SIGUSR1 / SIGTERM to their rank (Slurm signals every process of a
    step); the rank stops them when it has checkpointed, and they exit if it dies."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
