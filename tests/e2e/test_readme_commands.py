"""The README's quick start, run as a user types it: `make demo` (and CI runs `make test`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcshuffle.files import read_jsonl
from tests.conftest import REPO, mpi_env

pytestmark = pytest.mark.e2e


def test_readme_quick_start_is_the_two_make_commands():
    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start")[1].split("\n## ")[0]
    assert re.findall(r"^make \w+$", quick_start, flags=re.M) == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_make_demo_runs_gs_ls_pls_and_prints_the_breakdown():
    # as a user types it: not as a sub-make of `make test` (no inherited MAKELEVEL/MAKEFLAGS)
    env = {k: v for k, v in mpi_env().items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    result = subprocess.run(["make", "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = result.stdout.split("== breakdown (make demo) ==")[1]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[3:] if len(line.split()) == 15}
    assert set(rows) == {"global", "local", "partial"}
    assert rows["local"][8] == "1.00"  # the "vs LS" column of LS itself
    for title in ("validation score per epoch", "shuffle quality per epoch"):  # each table once
        assert table.count(title) == 1, table
    runs = {name: read_jsonl(REPO / "results" / "demo" / name / "metrics.jsonl") for name in rows}
    assert all(len(records) == 4 for records in runs.values())
    assert all(r["samples"]["read_shared"] == 0 for r in runs["local"] + runs["partial"])
    assert all(r["samples"]["read_shared"] == 2048 for r in runs["global"])
    assert all(r["samples"]["sent"] == r["samples"]["received"] > 0 for r in runs["partial"])
    assert runs["partial"][-1]["q"] == 0.3 and runs["partial"][-1]["workers"] == 4
    # as root the demo reads the real GlusterFS mount (started for it if need be), else it says it cannot
    if os.geteuid() == 0:
        assert "== shared storage: GlusterFS at" in result.stdout, result.stdout[-3000:]
        assert all(r["shared"]["fs"] == "fuse.glusterfs" for rs in runs.values() for r in rs)
    else:
        assert "GS reads data/synthetic from this node's disk" in result.stdout or "GlusterFS at" in result.stdout
    assert all(0 < r["util"]["mean"] <= 1 for rs in runs.values() for r in rs)
    # AU from the stored run, by hand: FW+BW over the wall time less the first step's I/O
    for name, records in runs.items():
        wall = sum(r["time"]["epoch"]["mean"] for r in records) - records[0]["time"]["first_io"]["mean"]
        assert 0 < records[0]["time"]["first_io"]["mean"] < records[0]["time"]["io"]["mean"] + 1e-9
        assert rows[name][14] == f"{sum(r['time']['fwbw']['mean'] for r in records) / wall:.0%}"


def test_console_command_trains_from_any_directory(small_dataset, tmp_path):
    """`hpcshuffle train` (the console script) finds its config outside the repository too."""
    console = Path(sys.executable).with_name("hpcshuffle")
    command = [
        str(console), "train", "dataset=imagefolder", f"dataset.root={small_dataset}", "epochs=1",
        "batch_size=8", f"hydra.run.dir={tmp_path / 'run'}", f"storage.local_dir={tmp_path / 'store'}",
    ]
    result = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 1
