"""scripts/shared_fs.sh: the GlusterFS volume it mounts, the options it sets, and its stdout contract."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from hpcshuffle.storage.shared_io import mount_of
from tests.conftest import REPO, shared_fs_script

pytestmark = pytest.mark.gluster

# what keeps reads honest: the client's own caches off, a dead server noticed within seconds
VOLUME_OPTIONS = {
    "performance.io-cache": "off",
    "performance.read-ahead": "off",
    "performance.quick-read": "off",
    "performance.stat-prefetch": "off",
    "performance.md-cache-timeout": "0",
    "performance.open-behind": "off",
    "performance.readdir-ahead": "off",
    "performance.write-behind": "off",
    "network.ping-timeout": "10",
}


def test_status_prints_the_glusterfs_mount(shared_fs):
    result = shared_fs_script("status", timeout_s=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(shared_fs)]
    assert os.path.ismount(shared_fs)
    mount = mount_of(shared_fs)
    assert (mount.point, mount.fs_type) == (shared_fs, "fuse.glusterfs")
    assert mount.source.endswith(":/hpcshuffle")


def test_a_file_written_there_reads_back(shared_fs):
    path = shared_fs / f"test-{uuid.uuid4().hex}.bin"
    data = os.urandom(100 * 1024)
    try:
        path.write_bytes(data)
        with open(path, "rb") as f:
            assert f.read() == data
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert path.read_bytes() == data  # from the brick again, over TCP
    finally:
        path.unlink(missing_ok=True)


def test_start_is_idempotent(shared_fs):
    for _ in range(2):
        result = shared_fs_script("start", timeout_s=120)
        if result.returncode != 0 and os.geteuid() != 0:
            pytest.skip(f"start needs root here: {result.stderr.strip()}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [str(shared_fs)]
    assert mount_of(shared_fs).fs_type == "fuse.glusterfs"


@pytest.mark.parametrize("option", sorted(VOLUME_OPTIONS))
def test_volume_option_is_set(shared_fs, option):
    result = subprocess.run(["gluster", "--mode=script", "volume", "get", "hpcshuffle", option], check=False,
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and os.geteuid() != 0:
        pytest.skip(f"gluster volume get needs root here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    values = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()
              if line.split() and line.split()[0] == option}
    assert values == {option: VOLUME_OPTIONS[option]}, result.stdout
