"""Launch checks: processes that MPI sees as separate jobs are refused with the fix, by launcher."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcshuffle.comm.netmod import NETMOD, netmod_defaults
from hpcshuffle.comm.world import check_launch, launched_tasks
from hpcshuffle.errors import ConfigError
from tests.conftest import REPO, mpi_env


def test_launchers_are_told_apart():
    assert launched_tasks({"SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}) == ("srun", 4)
    assert launched_tasks({"SLURM_NTASKS": "4"}) == ("mpi", 0)  # the batch script, not a step
    assert launched_tasks({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2"}) == ("torchrun", 2)
    assert launched_tasks({}) == ("mpi", 0)
    # MPICH's mpiexec in a 2-node allocation: srun started its 2 proxies, they started 4 ranks
    hydra_via_srun = {"SLURM_STEP_NUM_TASKS": "2", "HYDI_CONTROL_FD": "7", "PMI_SIZE": "4", "PMI_RANK": "3"}
    assert launched_tasks(hydra_via_srun) == ("mpiexec", 4)


SRUN_PMI2 = {"PMI_FD": "11", "PMI_RANK": "0", "PMI_SIZE": "2", "SLURM_STEP_ID": "0"}


def test_srun_pmi2_starts_mpich_on_ofi_unless_the_user_chose():
    """Slurm's pmi2 plugin cuts PMI lines over 1,024 bytes, which UCX's business card may need
    (comm/netmod.py): a task srun started gets OFI; mpiexec's ranks and a user's choice are left alone."""
    assert netmod_defaults(SRUN_PMI2) == {NETMOD: "ofi"}
    assert netmod_defaults({**SRUN_PMI2, NETMOD: "ucx"}) == {}
    assert netmod_defaults({**SRUN_PMI2, "HYDI_CONTROL_FD": "7"}) == {}  # mpiexec's proxy under srun
    assert netmod_defaults({"PMI_FD": "11"}) == {}  # mpiexec alone
    assert netmod_defaults({"SLURM_STEP_ID": "0"}) == {}  # srun --mpi=none: a singleton, no PMI


def test_the_package_sets_the_netmod_before_any_mpi_import():
    """Importing hpcshuffle under srun's PMI-2 sets the variable and has not started MPI yet."""
    code = "import os, sys, hpcshuffle; print(os.environ.get('%s'), 'mpi4py.MPI' in sys.modules)" % NETMOD
    env = {key: value for key, value in mpi_env().items() if key != NETMOD}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, **SRUN_PMI2},
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["ofi", "False"], out.stderr


def test_matching_launches_pass():
    check_launch(4, {"SLURM_STEP_NUM_TASKS": "4"})
    check_launch(1, {"SLURM_STEP_NUM_TASKS": "1"})
    check_launch(3, {})


def test_srun_without_pmi2_names_the_flag():
    with pytest.raises(ConfigError, match=r"srun started 4 tasks but MPI sees a job of 1: .*srun --mpi=pmi2"):
        check_launch(1, {"SLURM_STEP_NUM_TASKS": "4"})


def test_mpiexec_whose_proxies_srun_started_passes():
    """Hydra starts one proxy per node through srun: each rank inherits a step of 2 tasks (the
    nodes) while MPI's job has 4 ranks, 2 per node."""
    check_launch(4, {"SLURM_STEP_NUM_TASKS": "2", "HYDI_CONTROL_FD": "7", "PMI_SIZE": "4", "PMI_RANK": "1"})
    # another MPI's launcher does the same without hydra's variables: a larger job is still sound
    check_launch(4, {"SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "4"})


def test_mpiexec_of_another_mpi_is_refused():
    """Hydra's ranks that MPI sees as jobs of one: mpi4py speaks another MPI than the mpiexec used."""
    with pytest.raises(ConfigError, match=r"mpiexec started 4 processes but MPI sees a job of 1: .*beside this python"):
        check_launch(1, {"HYDI_CONTROL_FD": "7", "PMI_SIZE": "4", "SLURM_STEP_NUM_TASKS": "2"})


def test_torchrun_is_refused_with_the_mpi_command():
    with pytest.raises(ConfigError, match=r"torchrun started 2 processes .* `mpiexec -n 2`"):
        check_launch(1, {"TORCHELASTIC_RUN_ID": "abc", "WORLD_SIZE": "2"})


def test_the_runner_says_it_once_and_exits_2():
    env = {**mpi_env(), "TORCHELASTIC_RUN_ID": "abc", "WORLD_SIZE": "2", "RANK": "0"}
    result = subprocess.run([sys.executable, "-m", "hpcshuffle.train"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("hpcshuffle: error: torchrun started 2 processes")



LEAVE = """
import atexit, sys, threading
from hpcshuffle.comm.world import leave_at_once
atexit.register(lambda: print("teardown", flush=True))
if sys.argv[1] == "thread":
    release = threading.Event()
    threading.Thread(target=release.wait, daemon=False).start()
    threading.Timer(0.2, release.set).start()
print("done", end="")
leave_at_once()
print(" returned", end="")
"""


@pytest.mark.parametrize(("case", "output"), [("clean", "done"), ("thread", "done returnedteardown\n")])
def test_a_finished_run_leaves_at_once_unless_a_thread_still_runs(case, output):
    """Nothing after leave_at_once runs, not even atexit, but its flushed output arrives; with a
    non-daemon thread alive it returns and the interpreter ends the ordinary way, waiting for it."""
    done = subprocess.run([sys.executable, "-c", LEAVE, case], cwd=REPO, env=mpi_env(), capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, output), done.stderr
