"""Golden file: the sbatch script that `hydra/launcher=slurm` makes submitit write for a given config.

The launcher's parameters go to submitit the way hydra-submitit-launcher passes them
(`SlurmLauncher.launch`); the script text must match tests/golden/slurm_launcher.sbatch.
Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/test_launcher_sbatch.py`.
Hermetic: no Slurm is needed (see `fake_srun`).
"""

from __future__ import annotations

import os

import pytest
import submitit
from hydra import compose, initialize_config_dir
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from hpcshuffle.train import CONFIG_DIR
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "slurm_launcher.sbatch"
OVERRIDES = [
    "hydra/launcher=slurm", "hydra.sweep.dir=/scratch/sweeps/wrn", "hydra.launcher.nodes=2",
    "hydra.launcher.tasks_per_node=4", "hydra.launcher.gpus_per_node=4", "hydra.launcher.partition=gpu",
    "hydra.launcher.timeout_min=360",
]


@pytest.fixture(autouse=True)
def fake_srun(tmp_path, monkeypatch):
    """An `srun` first on PATH that fails if run: submitit's SlurmExecutor refuses to be built unless
    `srun` is found (`SlurmExecutor.affinity`), though writing the script never runs it."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\necho "fake srun: this test only writes sbatch text" >&2\nexit 1\n')
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def sbatch_text(overrides: list[str]) -> str:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    # as hydra_submitit_launcher's SlurmLauncher.launch builds its executor
    executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    queue_keys = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{key if key in queue_keys else f"slurm_{key}": value for key, value in params.items()})
    return executor._executor._make_submission_file_text("python -u -m submitit.core._submit /scratch/sweeps/wrn/.submitit/%j", "UID")


def test_generated_sbatch_matches_the_golden_file():
    text = sbatch_text(OVERRIDES)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_the_preset_makes_one_mpi_job_per_run():
    text = sbatch_text(OVERRIDES)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --partition=gpu", "export SLURM_MPI_TYPE=pmi2"):
        assert line in text.splitlines(), line
    assert text.index("export SLURM_MPI_TYPE=pmi2") < text.index("\nsrun ")
