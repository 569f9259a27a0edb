"""The experiment scripts at a tiny scale, so they cannot rot: they train, reuse complete runs and
write their figures and tables."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, mpi_env

pytestmark = pytest.mark.e2e


def run(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], cwd=REPO, env=mpi_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def tiny_dataset(tmp_path) -> list[str]:
    return [f"dataset.root={tmp_path / 'data'}", "dataset.synthesize.samples=96", "batch_size=4"]


def test_shuffle_accuracy_sweep_plots_every_figure_and_reuses_runs(tmp_path):
    args = ["experiments/shuffle_accuracy.py", "--workers", "2", "4", "--strategies", "global", "locality",
            "--epochs", "1", "--out", str(tmp_path / "runs"), "--figures", str(tmp_path / "figures"),
            *tiny_dataset(tmp_path)]
    first = run(*args)
    names = {path.name for path in (tmp_path / "figures").iterdir()}
    assert {"nguyen_fig5_accuracy_M2.png", "nguyen_fig5_accuracy_M4.png", "nguyen_fig6_scaling.png",
            "shuffle_quality.png", "yang_table1.txt", "shuffle_accuracy.txt"} <= names
    rows = [line.split() for line in first.stdout.splitlines() if line.split()[:1] in (["2"], ["4"])]
    assert sorted((row[0], row[1]) for row in rows) == sorted(
        (m, s) for m in ("2", "4") for s in ("global", "locality"))
    assert all(0.0 <= float(row[2]) <= 100.0 for row in rows)
    # global shuffling's quality is 1 by definition of the estimate's baseline, give or take its noise
    assert all(abs(float(row[5]) - 1.0) < 0.2 for row in rows if row[1] == "global")
    again = run(*args)
    assert again.stdout.count("complete, reused") == 4


def test_epoch_time_and_cache_sweeps_write_their_figures(tmp_path):
    run("experiments/epoch_time.py", "--workers", "2", "--q", "0.5", "--epochs", "2",
        "--out", str(tmp_path / "runs"), "--figures", str(tmp_path / "figures"), *tiny_dataset(tmp_path))
    run("experiments/cache_hit_ratio.py", "--samples", "2000", "--epochs", "3", "--fractions", "0.1", "0.5",
        "--figures", str(tmp_path / "figures"))
    names = {path.name for path in (tmp_path / "figures").iterdir()}
    assert {"nguyen_fig9_epoch_time.png", "nguyen_fig10_breakdown.png", "epoch_time.txt",
            "lobster_hit_ratio.png", "cache_hit_ratio.txt"} <= names
    table = (tmp_path / "figures" / "epoch_time.txt").read_text().splitlines()
    assert [row.split()[1] for row in table[2:]] == ["partial-0.5", "global"]


def test_scale_study_quick_writes_every_figure_and_reuses_its_simulations(tmp_path):
    out = tmp_path / "scale"
    first = run("experiments/scale_study.py", "--quick", "--out", str(out))
    names = {path.name for path in out.iterdir()}
    assert {"nguyen_fig9_epoch_time.png", "nguyen_fig9.txt", "nguyen_fig10_breakdown.png", "nguyen_fig10.txt",
            "yang_fig8_loading.png", "yang_fig8.txt", "scale_study.json", "fit_check.txt", "pls_knee.txt",
            "pls_knee.png"} <= names, names
    rows = json.loads((out / "scale_study.json").read_text())
    assert rows, first.stdout
    cached = len(list((out / "cache").iterdir()))
    run("experiments/scale_study.py", "--quick", "--out", str(out))
    assert len(list((out / "cache").iterdir())) == cached  # nothing simulated twice


def test_accuracy_study_runs_hydra_multiruns_writes_the_study_and_reuses_seeds(tmp_path):
    out = tmp_path / "study"
    study_args = ["--workers", "2", "--strategies", "global", "local", "--seeds", "2", "--epochs", "1"]
    args = ["experiments/accuracy_study.py", *study_args, "--partitions", "random", "contiguous", "dirichlet-0.5",
            "--out", str(out), *tiny_dataset(tmp_path), "++dataset.synthesize.seed=0"]
    # the plans' predictions come first, from the configs alone, and name every cell that holds a partition
    preregistered = tmp_path / "study_preregistered.json"
    run(*args, "--preregister", str(preregistered))
    assert not out.exists() or not list(out.rglob("metrics.jsonl"))  # nothing trained
    cells = json.loads(preregistered.read_text())["cells"]
    assert [(c["partition"], c["workers"]) for c in cells] == [("random", 2), ("contiguous", 2), ("dirichlet-0.5", 2)]
    assert all(set(c["predicted_order"]) == {"global", "local"} for c in cells)
    first = run(*args, "--preregistered", str(preregistered))
    assert "4 cells" in first.stdout and first.stdout.count("seeds [0, 1] trained") == 4  # global has no partition
    assert (out / "contiguous" / "M2" / "local" / "multirun.yaml").exists()  # Hydra's multirun wrote the cell
    assert not (out / "contiguous" / "M2" / "global").exists()
    study = json.loads((tmp_path / "study.json").read_text())
    rows = {(r["partition"], r["strategy"]): r for r in study["rows"]}
    assert set(rows) == {(p, s) for p in ("random", "contiguous", "dirichlet-0.5") for s in ("global", "local")}
    assert rows["random", "global"]["top1"] == rows["contiguous", "global"]["top1"]  # the same runs
    assert all(r["seeds"] == [0, 1] and (r["dataset"], r["norm"]) == ("synthetic", "worker") for r in rows.values())
    assert all(r["ci95"][0] <= r["top1_mean"] <= r["ci95"][1] for r in study["rows"])
    names = {path.name for path in (out / "figures").iterdir()}
    assert {"accuracy_contiguous_M2.png", "q_recovery_contiguous.png", "quality_vs_gap.png",
            "accuracy_study.txt"} <= names
    assert "smallest q reaching global (paired gap's 90 % interval ends above -1)" in first.stdout
    assert "pre-registered (committed before training) against trained" in first.stdout
    assert len(study["preregistered"]["cells"]) == 3
    late = run(*args, "--preregister", str(tmp_path / "late.json"))
    assert "not pre-registered, they have runs already: random M=2, contiguous M=2, dirichlet-0.5 M=2" in late.stdout

    # a variant (real digits, BatchNorm over the global batch) is filed under the main study's variants; a
    # third seed where a cell's paired gap is wider than asked (here every one), and global's beside it
    variant = run("experiments/accuracy_study.py", *study_args, "--partitions", "contiguous", "--dataset", "digits",
                  "--out", str(tmp_path / "digits"), "--into", str(tmp_path / "study.json"), "model.norm=global",
                  f"dataset.root={tmp_path / 'data-digits'}", "dataset.synthesize.size=8", "batch_size=16",
                  "--seeds-where-wide", "3", "--wider-than", "-1")
    assert "filed as digits/global under" in variant.stdout
    assert "2 cells (with global shuffling at their M) get seeds up to 3" in variant.stdout
    assert variant.stdout.count("seeds [0, 1] trained") == variant.stdout.count("seeds [2] trained") == 2
    filed = json.loads((tmp_path / "study.json").read_text())["variants"]["digits/global"]
    assert {(r["partition"], r["strategy"], r["dataset"], r["norm"]) for r in filed["rows"]} == {
        ("contiguous", "global", "digits", "global"), ("contiguous", "local", "digits", "global")}
    assert {run["norm"] for run in filed["runs"]} == {"global"} and len(filed["runs"]) == 6
    assert all(r["seeds"] == [0, 1, 2] for r in filed["rows"])
    assert sorted(map(tuple, filed["setup"]["seeds_where_wide"]["cells"])) == [("contiguous", 2, "global"),
                                                                               ("contiguous", 2, "local")]

    again = run(*args)
    assert again.stdout.count("2 seeds complete, reused") == 4
    assert "digits/global" in json.loads((tmp_path / "study.json").read_text())["variants"]  # kept
    # collected part-way: an M with no trained cell yet is left out of the study, its setup and its figures
    part_way = run(*args, "--workers", "2", "8", "--collect-only")
    assert "no cell filed at M = 8; collected without it" in part_way.stdout
    assert json.loads((tmp_path / "study.json").read_text())["setup"]["batch_size"] == {"2": 4}
    # and a (partition, M) with a strategy short of its seeds is left out whole, not scored as if it failed
    shutil.rmtree(out / "contiguous" / "M2" / "local" / "seed1")
    (out / "figures" / "accuracy_contiguous_M2.png").unlink()  # drawn by the runs above
    part_way = run(*args, "--collect-only", "--preregistered", str(preregistered))
    assert "contiguous M = 2 left out until every strategy has its seeds (trained: global)" in part_way.stdout
    study = json.loads((tmp_path / "study.json").read_text())
    assert {r["partition"] for r in study["rows"]} == {"random", "dirichlet-0.5"}
    assert study["setup"]["partitions"] == ["random", "dirichlet-0.5"]
    assert study["preregistered"]["not_trained"] == [{"partition": "contiguous", "workers": 2}]
    assert not (out / "figures" / "accuracy_contiguous_M2.png").exists()


def test_accuracy_study_refuses_one_seed():
    result = subprocess.run([sys.executable, "experiments/accuracy_study.py", "--seeds", "1"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--seeds 1: a 95 % interval needs at least 2 seeds per point; use --seeds 3" in result.stderr
    result = subprocess.run([sys.executable, "experiments/accuracy_study.py", "--seeds-where-wide", "3"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--seeds-where-wide 3 adds no seed to --seeds 3; give more" in result.stderr


def test_accuracy_study_names_an_override_read_as_a_strategy():
    result = subprocess.run([sys.executable, "experiments/accuracy_study.py", "--strategies", "global", "local",
                             "batch_size=4"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--strategies batch_size=4: a Hydra override, not a strategy; put overrides after an option" \
        in result.stderr


def test_the_contention_probe_times_ranks_in_lockstep():
    """experiments/cluster_probe.py contention, as the probe → predict round runs it on a node: two ranks'
    FW+BW in lockstep print one JSON object that scale/jitter.py can fit."""
    done = run("experiments/cluster_probe.py", "contention", "--ranks", "2", "--iterations", "4", "--batch", "4")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert (measured["ranks"], measured["iterations"]) == (2, 4)
    # an iteration waits for the slower rank's step, and rank 0's clock runs from barrier to barrier
    assert measured["iteration_p10_s"] <= measured["iteration_s"] <= measured["iteration_p90_s"]
    assert 0 < measured["step_s"] <= measured["iteration_p90_s"]
