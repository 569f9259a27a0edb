"""`scale validate`'s bookkeeping — each run simulated with its own loader, and split into the runs the
platform was calibrated from (in sample) and the rest (out of sample) — and calibration's use of
measured shared storage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcshuffle.scale.calibrate import MeasuredRun, fit_platform, measured_storage
from hpcshuffle.scale.platform import PlatformError
from hpcshuffle.scale.platform_yaml import platform_from_dict
from hpcshuffle.scale.validate import in_sample, platform_for, validation_table
from tests.unit.test_scale_platform import tiny_raw


def run(path: str, loader_workers: int = 0, io_threads: int = 1) -> MeasuredRun:
    return MeasuredRun(Path(path), "local", 0.0, 2, 8, 64, 4, 0, "tiny", "data/tiny", {}, 0.0,
                       loader_workers=loader_workers, io_threads=io_threads)


def test_a_run_is_simulated_with_its_own_loader():
    platform = platform_from_dict(tiny_raw())
    assert (platform_for(platform, run("a")).loader.workers, platform_for(platform, run("a")).loader.prefetch) == (1, 0)
    loader = platform_for(platform, run("a", loader_workers=2, io_threads=4)).loader
    assert (loader.workers, loader.prefetch) == (8, 4)  # 2 processes x 4 files in flight, 2 batches ahead each
    assert loader.cpu_per_file == platform.loader.cpu_per_file


def test_the_calibration_runs_are_in_sample_and_the_rest_out(tmp_path):
    raw = tiny_raw()
    raw["calibration"] = {"runs": [str(tmp_path / "M2" / "local")]}
    platform = platform_from_dict(raw)
    assert in_sample(platform, run(str(tmp_path / "M2" / ".." / "M2" / "local")))
    assert not in_sample(platform, run(str(tmp_path / "M4" / "local")))
    assert not in_sample(platform_from_dict(tiny_raw()), run(str(tmp_path / "M2" / "local")))


def test_the_table_has_a_part_for_each_sample():
    def row(name, sample, error):
        return {"run": name, "phase": "epoch", "in_sample": sample, "measured_s": 1.0, "simulated_s": 1.0 + error,
                "error": error, "agrees": abs(error) <= 0.25}
    table = validation_table([row("M2/local", True, 0.05), row("M4/local", False, -0.3), row("M3/local", False, 0.1)])
    inside, outside = table.split("\n\n")
    assert inside.startswith("in sample") and "M2/local" in inside and "M4/local" not in inside
    assert outside.startswith("out of sample") and "(2 runs)" in outside and "1/2 phases agree" in outside
    assert "largest 30%" in outside


def latency_json(tmp_path, rows) -> Path:
    path = tmp_path / "latency.json"
    path.write_text(json.dumps({"targets": {}, "rows": [
        {"target": "disk", "nodes": nodes, "readers": readers, "mean_s": mean, "files_per_s": rate,
         "lognormal": {"cv": 0.3}} for nodes, readers, mean, rate in rows]}))
    return path


def test_measured_storage_is_one_server_at_the_best_throughput_and_the_rest_latency(tmp_path):
    path = latency_json(tmp_path, [(1, 1, 0.004, 250.0), (1, 4, 0.008, 500.0), (2, 8, 0.02, 800.0)])
    storage = measured_storage(path, "disk")
    assert storage["servers"] == 1
    assert storage["service"] == {"dist": "lognormal", "mean": 1 / 800, "cv": 0.3}  # the busiest row's spread
    assert storage["file_latency"] == pytest.approx(0.004 - 1 / 800)


def test_measured_storage_names_a_missing_target(tmp_path):
    path = latency_json(tmp_path, [(1, 1, 0.004, 250.0)])
    with pytest.raises(PlatformError, match="no one-reader rows of target 'tape'; its targets are \\['disk'\\]"):
        measured_storage(path, "tape")


def test_calibration_with_measured_storage_leaves_the_client_cpu_what_the_reads_do_not_explain():
    def measured(shuffle: str, io: float) -> MeasuredRun:
        return MeasuredRun(Path(shuffle), shuffle, 0.0 if shuffle == "local" else 1.0, 2, 8, 64, 4, 0, "tiny",
                           "data/tiny", {"epoch": 1.0, "io": io, "exchange": 0.0, "fwbw": 0.1, "allreduce": 0.01}, 0.0)
    runs = [measured("local", 0.032), measured("global", 0.32)]  # 1 ms and 10 ms per file, 32 files a rank
    storage = {"servers": 1, "service": {"dist": "fixed", "mean": 0.002}, "file_latency": 0.003}
    with_storage = fit_platform(runs, "here", 2, 1e3, (1e-6, 1e9), 1e4, storage=storage)
    without = fit_platform(runs, "here", 2, 1e3, (1e-6, 1e9), 1e4)
    assert without["shared"]["client_cpu_per_file"] == pytest.approx(0.009)
    assert with_storage["shared"]["client_cpu_per_file"] == pytest.approx(0.009 - 0.005)
    assert with_storage["shared"]["servers"] == 1 and with_storage["shared"]["file_latency"] == 0.003
    platform_from_dict(with_storage)  # what calibration writes loads
