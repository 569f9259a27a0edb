"""`scale validate`'s bookkeeping: each run simulated with its own loader, and split into the runs the
platform was calibrated from (in sample) and the rest (out of sample)."""

from __future__ import annotations

from pathlib import Path

from hpcshuffle.scale.calibrate import MeasuredRun
from hpcshuffle.scale.platform import platform_from_dict
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
