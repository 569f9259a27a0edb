"""Tuning q from a results tree: run discovery, the summary rows and CSV, the recommendation per
worker count, and the `tune-q` / `report` commands — on fake run directories, no MPI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from hpcshuffle.analysis.report import (
    SUMMARY_COLUMNS,
    collect,
    find_runs,
    write_summary_csv,
)
from hpcshuffle.analysis.tune import predictor_record, tune_q, tune_table
from hpcshuffle.cli import main
from tests.conftest import cli_error

# final top-1 % per (workers, shuffle, q): with tolerance 1.0, workers 2 → q=0.1, workers 4 → q=0.3
SCORES = {
    (2, "global", 1.0): 76.1, (2, "local", 0.0): 70.0, (2, "partial", 0.1): 75.4, (2, "partial", 0.3): 75.9,
    (4, "global", 1.0): 80.0, (4, "local", 0.0): 74.0, (4, "partial", 0.1): 77.0, (4, "partial", 0.3): 79.5,
}
EPOCH_S = {"global": 20.0, "local": 10.0, "partial": 12.0}  # slowest rank, after the first epoch


def write_run(
    root: Path, name: str, *, shuffle: str, q: float, workers: int, final: float, epochs: int = 3,
    done: int | None = None, seed: int = 0, segmentation: bool = False, epoch_s: float | None = None,
    config: dict | None = None, partition: str | None = None, mixing: float | None = None,
) -> Path:
    """A run directory as training leaves it: config.yaml and `done` (default: all) epochs of metrics."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    if config is None:
        config = {
            "epochs": epochs, "seed": seed, "batch_size": 32,
            "model": {"name": "deepcam" if segmentation else "resnet50"},
            "dataset": {"format": "deepcam" if segmentation else "imagefolder"},
            "shuffle": {"name": shuffle, "q": q},
        }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    epoch_s = EPOCH_S[shuffle] if epoch_s is None else epoch_s
    sent = int(q * 1000) if shuffle == "partial" else 0
    lines = []
    for epoch in range(epochs if done is None else done):
        score = final - 10.0 * (epochs - 1 - epoch)  # rises to `final` at the last planned epoch
        seconds = 3 * epoch_s if epoch == 0 else epoch_s  # the first epoch pays start-up costs
        phase = {"min": seconds / 4, "mean": seconds / 2, "max": seconds}
        record = {
            "epoch": epoch, "shuffle": shuffle, "q": q, "workers": workers, "batch_size": 32, "num_samples": 4000,
            "iterations": 60, "lr": 0.1, "train_loss": 1.0,
            **({"val_iou": score / 100, "val_pixel_accuracy": 90.0} if segmentation
               else {"val_top1": score, "val_top5": min(score + 15, 100.0)}),
            "time": {name: dict(phase) for name in ("io", "exchange", "fwbw", "allreduce", "epoch")},
            "samples": {"read_local": 4000, "read_shared": 4000 if shuffle == "global" else 0, "sent": sent,
                        "received": sent, "store_peak": 2000, "skipped": 0, "store_peak_rank_max": 1000},
        }
        if partition is not None:
            record["partition"] = partition
        if mixing is not None:
            record["mixing"] = {"quality": mixing}
        lines.append(json.dumps(record) + "\n")
    (run_dir / "metrics.jsonl").write_text("".join(lines))
    return run_dir


def write_sweep(root: Path, scores: dict = SCORES, segmentation: bool = False) -> Path:
    """One Hydra-style sweep directory per worker count, jobs named <n>-<shuffle>-q<q>."""
    for number, ((workers, shuffle, q), final) in enumerate(sorted(scores.items())):
        write_run(root / f"M{workers}", f"{number}-{shuffle}-q{q}", shuffle=shuffle, q=q, workers=workers,
                  final=final, segmentation=segmentation)
    return root


def recommended(result) -> dict[int, float | None]:
    return {group.workers: group.recommended_q for group in result.groups}


@pytest.fixture
def sweep(tmp_path) -> Path:
    return write_sweep(tmp_path / "sweep")


# -- discovery and summary rows ------------------------------------------------------------------


def test_find_runs_includes_root_and_orders_job_numbers_as_numbers(tmp_path):
    for name in ("10-local-q0.0", "2-local-q0.0", "a/b/1-global-q1.0"):
        write_run(tmp_path, name, shuffle="local", q=0.0, workers=2, final=50.0)
    (tmp_path / "not-a-run").mkdir()
    assert [p.relative_to(tmp_path).as_posix() for p in find_runs(tmp_path)] == [
        "2-local-q0.0", "10-local-q0.0", "a/b/1-global-q1.0",
    ]
    assert find_runs(tmp_path / "2-local-q0.0") == [tmp_path / "2-local-q0.0"]
    assert find_runs(tmp_path / "not-a-run") == []


def test_collect_row(tmp_path):
    write_run(tmp_path / "sweep", "3-partial-q0.3", shuffle="partial", q=0.3, workers=4, final=79.5, seed=7)
    write_run(tmp_path / "sweep", "4-local-q0.0", shuffle="local", q=0.0, workers=4, final=74.0)
    rows = collect(find_runs(tmp_path / "sweep"))
    assert [row["run"] for row in rows] == ["3-partial-q0.3", "4-local-q0.0"]
    row = rows[0]
    assert set(row) == set(SUMMARY_COLUMNS)
    assert row == pytest.approx({
        "run": "3-partial-q0.3", "shuffle": "partial", "q": 0.3, "workers": 4, "partition": None, "batch_size": 32,
        "model": "resnet50", "norm": "worker", "dataset": "imagefolder", "seed": 7, "epochs_done": 3, "epochs_planned": 3,
        "complete": True, "score_name": "val_top1", "final_score": 79.5, "best_score": 79.5, "mixing": None,
            "label_skew": None,
        "epoch_s": 12.0, "io_s": 6.0, "exchange_s": 6.0, "fwbw_s": 6.0, "allreduce_s": 6.0,  # epoch 0 left out
        "util": 1.0, "sent_per_epoch": 300.0, "read_shared_per_epoch": 0.0,
    })


def test_collect_single_epoch_missing_config_and_unfinished_runs(tmp_path):
    one = write_run(tmp_path, "one", shuffle="local", q=0.0, workers=2, final=60.0, epochs=1)
    bare = write_run(tmp_path, "bare", shuffle="local", q=0.0, workers=2, final=60.0, config={"seed": 1})
    started = write_run(tmp_path, "started", shuffle="partial", q=0.1, workers=2, final=60.0, done=0)
    rows = {row["run"]: row for row in collect([one, bare, started])}
    assert rows["one"]["epoch_s"] == 30.0  # a single epoch is all there is
    assert (rows["bare"]["epochs_planned"], rows["bare"]["complete"]) == (None, False)
    assert (rows["bare"]["model"], rows["bare"]["dataset"], rows["bare"]["seed"]) == (None, None, 1)
    assert rows["started"] | {"run": None} == {column: None for column in SUMMARY_COLUMNS} | {
        "shuffle": "partial", "q": 0.1, "batch_size": 32, "model": "resnet50", "norm": "worker", "dataset": "imagefolder",
        "seed": 0,
        "epochs_done": 0, "epochs_planned": 3, "complete": False,
    }
    assert collect([one])[0]["run"] == "one"  # a lone run is named by its own directory


def test_collect_tolerates_a_cut_off_last_line_only(tmp_path):
    run_dir = write_run(tmp_path, "killed", shuffle="local", q=0.0, workers=2, final=60.0)
    with open(run_dir / "metrics.jsonl", "a") as out:
        out.write('{"epoch": 3, "shuff')
    assert collect([run_dir])[0]["epochs_done"] == 3
    (run_dir / "metrics.jsonl").write_text('{"epoch": 0\n' + (run_dir / "metrics.jsonl").read_text())
    with pytest.raises(ValueError, match=r"metrics.jsonl:1 is not JSON"):
        collect([run_dir])


def test_summary_csv_header_and_rows(sweep, tmp_path):
    rows = collect(find_runs(sweep))
    path = write_summary_csv(rows, tmp_path / "out" / "summary.csv")
    with open(path, newline="") as table:
        header, *body = list(csv.reader(table))
    assert header == list(SUMMARY_COLUMNS)
    assert len(body) == len(SCORES) == len(rows)
    first = dict(zip(header, body[0]))
    assert first["run"] == "M2/0-global-q1.0"
    assert (first["final_score"], first["complete"], first["epoch_s"]) == ("76.1000", "True", "20.0000")


# -- the recommendation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tolerance, expected",
    [
        (1.0, {2: 0.1, 4: 0.3}),
        (0.5, {2: 0.3, 4: 0.3}),
        (3.0, {2: 0.1, 4: 0.1}),
        (6.1, {2: 0.0, 4: 0.0}),  # exactly at the boundary: local (76.1 - 6.1 = 70.0) qualifies
        (6.0, {2: 0.1, 4: 0.0}),
        (0.1, {2: None, 4: None}),
    ],
)
def test_smallest_q_within_tolerance_of_global(sweep, tolerance, expected):
    result = tune_q(collect(find_runs(sweep)), tolerance)
    assert recommended(result) == expected
    for group in result.groups:
        assert (group.reference, group.reference_score) == ("global", SCORES[(group.workers, "global", 1.0)])
        assert [row.recommended for row in group.rows].count(True) == (expected[group.workers] is not None)


def test_none_qualifies_says_how_far_and_what_to_do(sweep):
    group = tune_q(collect(find_runs(sweep)), 0.1).group(2)
    assert group.recommended_q is None
    assert group.reason == (
        "none within 0.10 of global (76.10): the best, q=0.3 (75.90), is 0.20 below; "
        "sweep larger q or raise --tolerance"
    )


def test_without_global_the_best_run_is_the_reference(tmp_path):
    no_global = {key: score for key, score in SCORES.items() if key[1] != "global"}
    rows = collect(find_runs(write_sweep(tmp_path, no_global)))
    for reference in ("auto", "best"):
        result = tune_q(rows, 1.0, reference)
        assert recommended(result) == {2: 0.1, 4: 0.3}  # within 1.0 of q=0.3's 75.9 and 79.5
        assert [g.reference_label for g in result.groups] == ["best (partial q=0.3)"] * 2
        assert [g.reference_score for g in result.groups] == [75.9, 79.5]
    result = tune_q(rows, 1.0, "global")
    assert recommended(result) == {2: None, 4: None}
    assert "no global run with 2 workers" in result.group(2).reason and "--reference best" in result.group(2).reason


def test_best_reference_ignores_global_when_asked(tmp_path):
    scores = dict(SCORES) | {(2, "partial", 0.3): 78.0}  # partial beats global at 2 workers
    rows = collect(find_runs(write_sweep(tmp_path, scores)))
    assert recommended(tune_q(rows, 1.0, "global")) == {2: 0.1, 4: 0.3}
    best = tune_q(rows, 1.0, "best")
    assert recommended(best) == {2: 0.3, 4: 0.3}
    assert best.group(2).reference_score == 78.0 and best.group(4).reference_label == "best (global)"


def test_seeds_are_averaged(sweep):
    write_run(sweep / "M2", "9-partial-q0.1", shuffle="partial", q=0.1, workers=2, final=76.0, seed=1,
              epoch_s=14.0)
    result = tune_q(collect(find_runs(sweep)), 0.5)
    # q=0.1: (75.4 + 76.0) / 2 = 75.7 >= 76.1 - 0.5; alone, 75.4 did not qualify (see the 0.5 case above)
    assert recommended(result) == {2: 0.1, 4: 0.3}
    row = next(row for row in result.group(2).rows if row.q == 0.1)
    assert (row.runs, row.final_score, row.epoch_s) == (2, pytest.approx(75.7), pytest.approx(13.0))
    assert row.score_sd == pytest.approx(0.4243, abs=1e-4)
    assert result.group(2).rows[0].runs == 1 and result.group(2).rows[0].score_sd is None


def test_incomplete_runs_are_skipped_and_reported(sweep):
    write_run(sweep / "M2", "8-partial-q0.05", shuffle="partial", q=0.05, workers=2, final=86.0, epochs=5, done=4)
    write_run(sweep / "M2", "9-partial-q0.02", shuffle="partial", q=0.02, workers=2, final=90.0, done=0)
    rows = collect(find_runs(sweep))
    result = tune_q(rows, 1.0)
    assert recommended(result) == {2: 0.1, 4: 0.3}
    assert result.skipped == [
        ("M2/8-partial-q0.05", "incomplete: 4/5 epochs"),
        ("M2/9-partial-q0.02", "no epochs recorded yet"),
    ]
    # counted at its last epoch (76.0 = 86 - 10·1) it qualifies
    with_incomplete = tune_q(rows, 1.0, include_incomplete=True)
    assert recommended(with_incomplete) == {2: 0.05, 4: 0.3}
    assert [row.q for row in with_incomplete.group(2).rows] == [0.0, 0.05, 0.1, 0.3, 1.0]
    assert with_incomplete.skipped == [("M2/9-partial-q0.02", "no epochs recorded yet")]


def test_segmentation_scores_are_iou_points(tmp_path):
    iou = {(2, "global", 1.0): 60.0, (2, "local", 0.0): 55.0, (2, "partial", 0.1): 59.5, (2, "partial", 0.3): 59.9}
    rows = collect(find_runs(write_sweep(tmp_path, iou, segmentation=True)))
    assert {row["score_name"] for row in rows} == {"val_iou"}
    assert sorted(row["final_score"] for row in rows) == pytest.approx([55.0, 59.5, 59.9, 60.0])
    result = tune_q(rows, 0.5)
    assert recommended(result) == {2: 0.1}
    assert result.group(2).score_name == "val_iou"
    assert "100·IoU" in tune_table(result)


def test_mixed_models_are_grouped_apart(sweep):
    write_run(sweep / "other", "0-local-q0.0", shuffle="local", q=0.0, workers=2, final=10.0, segmentation=True)
    result = tune_q(collect(find_runs(sweep)), 1.0)
    assert [(g.model, g.workers, g.recommended_q) for g in result.groups] == [
        ("deepcam", 2, 0.0), ("resnet50", 2, 0.1), ("resnet50", 4, 0.3),
    ]
    assert result.groups[0].reference_label == "best (local)"
    assert "resnet50/imagefolder workers 4: smallest q" in tune_table(result)


def test_nothing_to_compare(tmp_path):
    write_run(tmp_path, "0-local-q0.0", shuffle="local", q=0.0, workers=2, final=50.0, epochs=5, done=1)
    result = tune_q(collect(find_runs(tmp_path)), 1.0)
    assert result.groups == []
    assert tune_table(result).splitlines() == [
        "no runs to compare", "skipped 1 run:", "  0-local-q0.0: incomplete: 1/5 epochs",
        "  (--include-incomplete counts incomplete runs at their last epoch)",
    ]


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"tolerance must be >= 0 .* got -1"):
        tune_q([], -1.0)
    with pytest.raises(ValueError, match="reference must be one of auto, global, best, got 'gs'"):
        tune_q([], 1.0, "gs")


def test_table_marks_the_recommended_row(sweep):
    text = tune_table(tune_q(collect(find_runs(sweep)), 1.0))
    lines = text.splitlines()
    assert lines[2].split() == [
        "shuffle", "q", "M", "runs", "final", "sd", "95", "%", "epoch_s", "vs", "LS", "sent/epoch"]
    assert lines[3:7] == [
        "   local  0.00    2    1   70.00     -               -    10.00   1.00           0",
        " partial  0.10    2    1   75.40     -               -    12.00   1.20         100  <- recommended",
        " partial  0.30    2    1   75.90     -               -    12.00   1.20         300",
        "  global  1.00    2    1   76.10     -               -    20.00   2.00           0",
    ]
    assert "workers 2: smallest q within 1.00 of global (76.10): q=0.1 (75.40)" in lines
    assert "workers 4: smallest q within 1.00 of global (80.00): q=0.3 (79.50)" in lines


# -- the commands ------------------------------------------------------------------------------------


def test_tune_q_command(sweep, capsys):
    main(["tune-q", str(sweep), "--tolerance", "0.5"])
    out = capsys.readouterr().out
    assert "workers 2: smallest q within 0.50 of global (76.10): q=0.3 (75.90)" in out
    assert f"wrote {sweep / 'summary.csv'} (8 runs)" in out
    with open(sweep / "summary.csv", newline="") as table:
        assert len(list(csv.reader(table))) == 1 + len(SCORES)


def test_tune_q_command_flags(sweep, tmp_path, capsys):
    write_run(sweep / "M2", "8-partial-q0.05", shuffle="partial", q=0.05, workers=2, final=76.0, epochs=5, done=4)
    main(["tune-q", str(sweep), "--reference", "best", "--csv", str(tmp_path / "elsewhere.csv")])
    out = capsys.readouterr().out
    assert "M2/8-partial-q0.05: incomplete: 4/5 epochs" in out and "--include-incomplete" in out
    assert (tmp_path / "elsewhere.csv").exists() and not (sweep / "summary.csv").exists()
    main(["tune-q", str(sweep), "--include-incomplete", "--tolerance", "0.2"])
    out = capsys.readouterr().out
    assert " partial  0.05    2    1   66.00" in out and "skipped" not in out
    assert "workers 2: smallest q within 0.20 of global (76.10): q=0.3 (75.90)" in out


def test_tune_q_command_errors(tmp_path, capsys):
    err = cli_error(capsys, "tune-q", str(tmp_path / "missing"))
    assert "missing does not exist" in err and "results/sweeps/<time>" in err
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    err = cli_error(capsys, "tune-q", str(tmp_path / "empty"))
    assert "no run directories under" in err and "metrics.jsonl" in err
    write_run(tmp_path / "one", "run", shuffle="local", q=0.0, workers=2, final=50.0)
    assert "tolerance must be >= 0" in cli_error(capsys, "tune-q", str(tmp_path / "one"), "--tolerance", "-1")


def test_report_takes_a_directory_of_runs_and_writes_csv(sweep, tmp_path, capsys):
    write_run(sweep / "M2", "9-partial-q0.02", shuffle="partial", q=0.02, workers=2, final=90.0, done=0)
    run_dirs = [d for d in find_runs(sweep) if "q0.02" not in d.name]
    main(["report", *map(str, run_dirs)])
    by_run = capsys.readouterr().out
    main(["report", str(sweep), "--csv", str(tmp_path / "report.csv")])
    captured = capsys.readouterr()
    assert captured.out == by_run + f"wrote {tmp_path / 'report.csv'} (8 runs)\n"
    assert "9-partial-q0.02 has no epochs yet; left out" in captured.err
    assert by_run.splitlines()[2].split() == [
        "global", "1.00", "2", "10.00", "10.00", "10.00", "10.00", "20.00", "2.00", "0", "4000", "76.10", "100%", "-", "-",
    ]
    with open(tmp_path / "report.csv", newline="") as table:
        assert len(list(csv.reader(table))) == 1 + len(SCORES)
    (tmp_path / "empty").mkdir()
    assert "no run directories under" in cli_error(capsys, "report", str(tmp_path / "empty"))
    assert "does not exist" in cli_error(capsys, "report", str(tmp_path / "missing"))


def test_the_predictors_record_counts_the_constants_on_the_same_cells():
    def cell(predicted, trained):
        return {"predicted_q": predicted, "trained_q": trained}

    checks = {
        "digits/worker": {"q_hits": 2, "cells": [cell(0.0, 0.0), cell(0.3, None), cell(0.3, 0.1)],
                          "baselines": {"always LS": 1, "always 0.1": 1, "always 0.3": 2}},
        "fashion/worker": {"q_hits": 2, "cells": [cell(0.0, 0.0), cell(0.3, 0.3)],
                           "baselines": {"always LS": 1, "always 0.1": 0, "always 0.3": 1}},
    }
    lines = predictor_record(checks)
    assert lines[0] == "digits/worker: the q right in 2 of 3 cells (always LS 1, always 0.1 1, always 0.3 2)"
    # 2 ties 2 in the digits study: beaten only in fashion; LS safe where predicted 0 and trained 0, unsafe
    # where neither is 0: every cell here
    assert lines[-1] == ("it beats every constant at choosing q in 1 of 2 studies: do not take its q as the one to "
                         "use; whether LS is safe, it is right in 5 of 5 cells (LS always: 2, LS never: 3)")


def test_tune_q_predict_says_how_it_fared_on_the_stored_studies(capsys):
    main(["tune-q", "--predict", "--samples", "200", "--classes", "4", "--workers", "4", "--epochs", "2"])
    out = capsys.readouterr().out
    assert "its record where it was committed before training" in out and "beats every constant" in out
