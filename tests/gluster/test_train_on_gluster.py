"""Training from the real GlusterFS mount: GS, LS and PLS audited against their plans, the page-cache
guard on a FUSE mount, and the mount going away mid-run (a named error within 30 s, then a resume
that ends with every sample trained every epoch and the stores holding the plan's partition)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.formats.imagefolder import scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.shared_io import direct_io
from tests.conftest import (
    BATCH,
    REPO,
    SHORT_EPOCHS,
    SMALL_IMAGE,
    SMALL_SAMPLES,
    audit_by_epoch,
    mpi_env,
    run_mpi,
    shared_fs_script,
    train_args,
)
from tests.unit.test_shared_io import durable, resident_pages

pytestmark = pytest.mark.gluster
RANKS = 3
STRATEGIES = {"global": ("shuffle=global",), "local": ("shuffle=local",),
              "partial": ("shuffle=partial", "shuffle.q=0.3")}
# where scripts/shared_fs.sh marks what it started
STATE = Path(os.environ.get("HPCSHUFFLE_SHARED_STATE", "/var/tmp/hpcshuffle-gluster"))
LONG_EPOCHS = 40  # long enough that the file system is stopped while the run still trains (~0.3 s an epoch)


@pytest.fixture(scope="module")
def gluster_dataset(shared_fs) -> Path:
    root = shared_fs / "tests" / f"small-{uuid.uuid4().hex[:8]}"
    synth_imagefolder(root, SMALL_SAMPLES, num_classes=4, num_val_samples=40, image_size=SMALL_IMAGE, progress=False)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def gluster_args(shared_fs: Path, dataset: Path, tmp_path: Path, *overrides: str) -> list[str]:
    return train_args(dataset, tmp_path / "run", tmp_path / "store", f"storage.shared_dir={shared_fs}",
                      "audit=true", *overrides)


def assert_every_sample_each_epoch(run_dir: Path, epochs: int, holds: bool) -> None:
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(epochs))
    for epoch, rows in audit.items():
        assert [row["rank"] for row in rows] == list(range(RANKS)), f"epoch {epoch}: a rank's record is missing"
        trained = {i for row in rows for i in row["trained"]}  # equal steps per rank: a few repeat
        assert trained == set(range(SMALL_SAMPLES)), f"epoch {epoch}: a sample was not trained on"
        if holds:
            assert sorted(i for row in rows for i in row["held"]) == list(range(SMALL_SAMPLES))


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_training_from_the_mount_is_audited_and_recorded(shared_fs, gluster_dataset, tmp_path, strategy):
    args = gluster_args(shared_fs, gluster_dataset, tmp_path, *STRATEGIES[strategy], f"epochs={SHORT_EPOCHS}")
    result = run_mpi(RANKS, args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "this node's own disk" not in result.stdout  # the run knows it reads a network file system
    assert_every_sample_each_epoch(tmp_path / "run", SHORT_EPOCHS, holds=strategy != "global")
    for record in read_jsonl(tmp_path / "run" / "metrics.jsonl"):
        assert record["shared"] == {"root": str(gluster_dataset), "mount": str(shared_fs), "fs": "fuse.glusterfs",
                                    "kind": "network", "reads": "uncached", "direct_io": direct_io(shared_fs)}
        reads = RANKS * PlanSpec(SMALL_SAMPLES, RANKS, BATCH, 1.0, 0).max_share  # equal steps per rank
        assert record["samples"]["read_shared"] == (reads if strategy == "global" else 0)
        assert 0 < record["util"]["min"] <= record["util"]["mean"] <= record["util"]["max"] <= 1


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux's fincore")
def test_no_guarded_read_leaves_pages_on_the_fuse_mount(shared_fs, gluster_dataset):
    catalog = scan(gluster_dataset, "train")
    path = catalog.path(5)
    durable(path)
    replace(catalog, uncached=False).read_bytes(5)
    # direct I/O: the mount itself caches nothing; otherwise its pages stay, as on any PFS client
    assert (resident_pages(path) == 0) == direct_io(shared_fs)
    catalog.read_bytes(5)
    assert resident_pages(path) == 0


def wait_for_epoch(metrics: Path, launcher: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if metrics.exists() and metrics.read_text().strip():
            return
        assert launcher.poll() is None, f"the run ended before its first epoch: {launcher.communicate()[1][-3000:]}"
        time.sleep(0.2)
    pytest.fail(f"no epoch finished within {timeout_s} s")


@pytest.mark.parametrize("strategy", ["global", "partial"])
def test_the_mount_going_away_is_named_within_30s_and_the_run_resumes(shared_fs, gluster_dataset, tmp_path, strategy):
    """GS reads the mount every step; PLS reads its store and only validates from the mount."""
    if not (STATE / "mounted").exists():
        pytest.skip("the volume was not mounted by scripts/shared_fs.sh here; this test stops and restarts it")
    args = gluster_args(shared_fs, gluster_dataset, tmp_path, *STRATEGIES[strategy], f"epochs={LONG_EPOCHS}")
    launcher = subprocess.Popen(["mpiexec", "-n", str(RANKS), sys.executable, *args], cwd=REPO, env=mpi_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_epoch(tmp_path / "run" / "metrics.jsonl", launcher)
        stopped_at = time.monotonic()
        assert shared_fs_script("stop", timeout_s=60).returncode == 0
        stdout, stderr = launcher.communicate(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
        restarted = shared_fs_script("start", timeout_s=300)
    assert restarted.returncode == 0, restarted.stderr
    output = f"exit status {launcher.returncode}\nstdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-3000:]}"
    assert launcher.returncode != 0, f"the run finished before the file system went away: raise LONG_EPOCHS\n{output}"
    assert took < 30, f"the run took {took:.0f} s to notice\n{output}"
    assert "shared storage went away during the run" in stderr, output
    assert f"{shared_fs} is no longer mounted" in stderr and "scripts/shared_fs.sh start" in stderr, output
    assert "Traceback" not in stderr, output

    resumed = run_mpi(RANKS, args, timeout_s=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "resume:" in resumed.stdout, resumed.stdout[-2000:]
    assert_every_sample_each_epoch(tmp_path / "run", LONG_EPOCHS, holds=strategy == "partial")
    if strategy == "partial":
        spec = PlanSpec(SMALL_SAMPLES, RANKS, BATCH, 0.3, 0)
        final = list(plan_epochs(spec, "partial", LONG_EPOCHS))[-1].next_held()
        for rank, rank_dir in enumerate(sorted((tmp_path / "store").iterdir())):
            manifest = json.loads((rank_dir / "manifest.json").read_text())
            assert sorted(int(i) for i in manifest["samples"]) == final[rank].tolist()
