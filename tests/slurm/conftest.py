"""A real Slurm for the `slurm` tests: the one running here, or one started (and stopped) for them.

`scripts/slurm_local.sh start` installs Debian's slurmctld/slurmd/munge when missing and starts
a single-node cluster; that needs root, as CI has, and there a Slurm that does not come up fails
the tests. Without root and without a running Slurm (`make test` on a workstation) they skip,
saying what they need.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO, budget


def slurm_answers() -> bool:
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=budget(10)).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def slurm():
    started = False
    if not slurm_answers():
        if os.geteuid() != 0:
            pytest.skip(f"the slurm tests need a running Slurm (sinfo does not answer here) or root to start a "
                        f"local one with scripts/slurm_local.sh (running as uid {os.geteuid()})")
        result = subprocess.run(["bash", "scripts/slurm_local.sh", "start"], cwd=REPO, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, f"could not start Slurm:\n{result.stdout}\n{result.stderr}"
        started = True
    yield
    if started:
        subprocess.run(["bash", "scripts/slurm_local.sh", "stop"], cwd=REPO, capture_output=True, timeout=120)
