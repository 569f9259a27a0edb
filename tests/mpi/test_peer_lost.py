"""A frozen rank ends the job within world.timeout_s and a short roll call, named, with exit code 76.

One rank of three stops itself (SIGSTOP, HPCSHUFFLE_CHAOS_STOP) before a step's gradient
allreduce, as a hung node would: its process and sockets stay, silent. The others must not wait
gloo's old fixed 600 s, nor print a gloo traceback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from hpcshuffle.comm.chaos import STOP_ENV
from hpcshuffle.comm.peers import GRACE_S
from hpcshuffle.training.checkpoint import PEER_LOST_EXIT_CODE
from tests.conftest import REPO, budget, mpi_env, train_args

pytestmark = pytest.mark.mpi
RANKS, FROZEN, STEP = 3, 0, 2  # rank 0 too hosts the rendezvous and prints the table: the hardest to lose
TIMEOUT_S = round(budget(8))  # a live rank late by more than this would be taken for lost
LIMIT_S = TIMEOUT_S + min(GRACE_S, TIMEOUT_S) + 30


def job_pids(marker: str) -> list[int]:
    """Every process whose command line holds `marker` (this test's run directory): the ranks."""
    return [proc.pid for proc in psutil.process_iter(["cmdline"]) if marker in " ".join(proc.info["cmdline"] or ())]


def test_a_frozen_rank_is_named_and_the_job_exits_for_requeue(small_dataset, tmp_path):
    run_dir = tmp_path / "run"
    args = train_args(small_dataset, run_dir, tmp_path / "store", "epochs=1", f"world.timeout_s={TIMEOUT_S}")
    command = ["timeout", "-s", "KILL", str(LIMIT_S), "mpiexec", "-n", str(RANKS), sys.executable, *args]
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO, env={**mpi_env(), STOP_ENV: f"{FROZEN}:0:iteration-{STEP}"},
                              capture_output=True, text=True, timeout=LIMIT_S + 10)
    finally:
        for pid in job_pids(str(run_dir)):  # SIGKILL ends a stopped process too: nothing lingers
            os.kill(pid, signal.SIGKILL)
    elapsed_s = time.monotonic() - started
    assert done.returncode == PEER_LOST_EXIT_CODE, (
        f"exit code {done.returncode} after {elapsed_s:.0f} s:\n{done.stderr[-3000:]}")
    assert elapsed_s < LIMIT_S
    assert f"rank {FROZEN} (node {socket.gethostname()}) did not answer" in done.stderr, done.stderr[-3000:]
    assert f"the gradient allreduce of epoch 0, step {STEP}" in done.stderr, done.stderr[-3000:]
    assert f"world.timeout_s={TIMEOUT_S}" in done.stderr
    assert "requeues and resumes from the last checkpoint" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # one survivor speaks for both: the first to end its roll call
    assert done.stderr.count("hpcshuffle: peer lost") == 1, done.stderr[-3000:]
