"""A real shared file system for the `gluster` tests: the GlusterFS volume mounted here, or one started
(and stopped) for them.

`scripts/shared_fs.sh start` installs Debian's glusterfs-server/glusterfs-client when missing, starts
glusterd, creates and starts the volume `hpcshuffle` and mounts it with the FUSE client; that needs
root, as CI has, and there a volume that does not come up fails the tests. Without root and without
a mounted volume (`make test` on a workstation) they skip, saying what they need. A volume that was
already mounted when the session began is left mounted.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = ["bash", "scripts/shared_fs.sh"]


def shared_fs_script(action: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRIPT, action], check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


def mounted_shared_fs() -> Path | None:
    """The mount `shared_fs.sh status` reports, or None when the volume is not mounted (or not answering)."""
    try:
        result = shared_fs_script("status", timeout_s=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(result.stdout.strip()) if result.returncode == 0 else None


@pytest.fixture(scope="session")
def shared_fs() -> Path:
    started = False
    mount = mounted_shared_fs()
    if mount is None:
        if os.geteuid() != 0:
            pytest.skip(f"the gluster tests need the GlusterFS volume mounted (scripts/shared_fs.sh status fails) "
                        f"or root to start it with scripts/shared_fs.sh start (running as uid {os.geteuid()})")
        result = shared_fs_script("start", timeout_s=600)
        assert result.returncode == 0, f"could not start the shared file system:\n{result.stdout}\n{result.stderr}"
        lines = result.stdout.splitlines()
        assert len(lines) == 1, f"shared_fs.sh start printed {lines!r}, not one line (the mount path)"
        mount = Path(lines[0])
        started = True
    yield mount
    if started:
        subprocess.run([*SCRIPT, "stop"], check=False, cwd=REPO, capture_output=True, timeout=120)
