"""`hpcshuffle scale calibrate` and `scale validate` on the real runs in results/reference/epoch_time/.

Calibration runs an `mpiexec -n 2` ping-pong, hence the mpi tier.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcshuffle.scale.calibrate import read_runs
from hpcshuffle.scale.platform import PlatformError
from hpcshuffle.scale.platform_yaml import load_platform
from hpcshuffle.scale.validate import TOLERANCE, validate
from tests.conftest import REPO, mpi_env

RUNS = sorted(str(path) for path in (REPO / "results/reference/epoch_time").glob("M*/*"))
SAMPLE_BYTES = "1520"  # the mean PNG of the runs' synthetic 32×32 set (not kept in the repository)


def scale(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "hpcshuffle.cli", "scale", *args]
    return subprocess.run(command, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.mpi
def test_calibrate_writes_a_platform_that_replays_the_runs(tmp_path: Path) -> None:
    out = tmp_path / "here.yaml"
    done = scale("calibrate", *RUNS, "--out", str(out), "--name", "here", "--sample-bytes", SAMPLE_BYTES, "--cores", "2")
    assert done.returncode == 0, done.stderr
    platform = load_platform(str(out))
    assert (platform.cpu_cores_per_node, platform.accelerators_per_node, platform.ranks_per_node) == (2, 0, 4)
    (model,) = platform.models.values()
    assert 0 < model.fwbw_per_sample < 0.01 and 0 < platform.loader.cpu_per_file < 0.01
    assert platform.shared.client_cpu_per_file > platform.loader.cpu_per_file  # GS read the FUSE mount
    assert platform.network.link_bandwidth > 1e8  # a real ping-pong, not a default
    rows = validate(platform, read_runs(RUNS), progress=lambda line: None, jobs=2)
    epochs = [row for row in rows if row["phase"] == "epoch"]
    assert len(epochs) == len(RUNS)
    for row in epochs:  # the whole epoch of every run within the tolerance
        assert abs(row["error"]) <= TOLERANCE, row


def test_runs_of_different_workloads_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(RUNS[0], other)
    config = yaml.safe_load((other / "config.yaml").read_text())
    config["model"]["name"] = "resnet50"
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(PlatformError, match="different workloads.*model 'small_cnn'.*'resnet50'"):
        read_runs([RUNS[0], str(other)])


def test_a_node_scope_run_is_refused(tmp_path: Path) -> None:
    """The platform models rank scope's traffic; a node-scope run (pretended nodes on one machine)
    would be fitted as if its ranks had exchanged with their node's peers."""
    node = tmp_path / "node"
    shutil.copytree(RUNS[0], node)
    metrics = node / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({**record, "scope": "node", "ranks_per_node": 2}) + "\n"
                               for record in records))
    with pytest.raises(PlatformError, match="ran with storage.scope=node .2 ranks per node.*storage.scope=rank"):
        read_runs([str(node)])


def test_a_directory_without_metrics_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match="not a run directory: config.yaml is missing"):
        read_runs([str(tmp_path)])


def test_validate_prints_every_phase_of_every_run() -> None:
    # this_machine is calibrated from the four runs under calibration/; the others were made the same hour
    made = REPO / "results/reference/epoch_time_oos"
    runs = sorted(str(path) for path in [*made.glob("calibration/*"), *made.glob("M*")])
    done = scale("validate", *runs, "--platform", "this_machine", "--jobs", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line[25:35].strip() == "epoch" for line in lines) == len(runs)  # the phase column
    # this_machine is calibrated from some of them: the rest are predicted, and said to be
    assert lines[0].startswith("in sample: the runs the platform was calibrated from")
    assert any(line.startswith("out of sample: runs the platform was not calibrated from") for line in lines)
    summaries = [line for line in lines if "phases agree" in line]
    assert len(summaries) == 2 and sum(int(line.split("/")[1].split()[0]) for line in summaries) == 5 * len(runs)
