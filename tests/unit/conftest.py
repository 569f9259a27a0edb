"""Fixtures the unit tests share: stub Slurm clients (tests/unit/test_slurm_helper.py,
test_cluster_scaling.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

JOB = "4242"  # the job id the stub sbatch hands out


@pytest.fixture
def stubs(tmp_path, monkeypatch):
    """Stub Slurm clients first on PATH; they log every call to <tmp>/calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    scripts = {
        "sbatch": f"""echo "sbatch $*" >>{calls}
if [ -n "${{STUB_SBATCH_FAIL:-}}" ]; then echo "sbatch: error: $STUB_SBATCH_FAIL" >&2; exit 1; fi
for arg in "$@"; do case $arg in --output=*) echo "job output" >"${{arg#--output=}}" ;; esac; done
echo "{JOB};nscluster"
""",
        "scontrol": f"""echo "scontrol $*" >>{calls}
states={tmp_path}/states
line=$(head -1 "$states")
[ "$(wc -l <"$states")" -gt 1 ] && sed -i 1d "$states"
[ "$line" = unknown ] && {{ echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }}
echo "JobId={JOB} JobName=hpcshuffle-train $line Command=/repo/jobs/train.sbatch epochs=2"
""",
        "scancel": f'echo "scancel $*" >>{calls}\n',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def life(*states: str) -> Path:
        (tmp_path / "states").write_text("".join(f"{state}\n" for state in states))
        return calls

    return life
