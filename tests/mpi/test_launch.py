"""A real MPICH mpiexec starts where the launch check used to refuse it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, mpi_env

pytestmark = pytest.mark.mpi


def test_a_real_mpiexec_inside_an_srun_step_starts():
    """The variables hydra really sets: 4 ranks whose inherited srun step counts 2 tasks (its proxies)."""
    env = {**mpi_env(), "SLURM_STEP_NUM_TASKS": "2"}
    script = ("from hpcshuffle.comm.world import discover; world = discover(); ranks = world.comm.allgather(world.rank); "
              "print(ranks if world.is_root else '', end='', flush=True)")
    result = subprocess.run(["mpiexec", "-n", "4", sys.executable, "-c", script], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0, 1, 2, 3]"
