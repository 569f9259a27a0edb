"""`hpcshuffle report`'s curves per epoch (Fig. 5 style) and its --plot figures, on hand-written
metrics.jsonl files: validation score and shuffle quality tables, run labels, PNGs, errors; and the
breakdown's accelerator utilisation."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hpcshuffle.analysis.report import (
    breakdown_table,
    collect,
    curve_tables,
    load_runs,
    write_summary_csv,
)
from hpcshuffle.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(epoch: int, shuffle: str, q: float, score: float, workers: int = 4, epoch_s: float = 10.0, **extra) -> dict:
    """One epoch as training writes it: every phase `epoch_s / 4` s on average, `epoch_s` on the slowest rank."""
    phase = {"min": epoch_s / 8, "mean": epoch_s / 4, "max": epoch_s / 2}
    return {
        "epoch": epoch, "shuffle": shuffle, "q": q, "workers": workers, "train_loss": 1.0, "val_top1": score,
        "time": {**{name: dict(phase) for name in ("io", "exchange", "fwbw", "allreduce")},
                 "epoch": {"min": epoch_s / 2, "mean": epoch_s * 0.75, "max": epoch_s}},
        "samples": {"read_local": 100, "read_shared": 0, "sent": 0, "received": 0, "store_peak": 50},
        **extra,
    }


def write_run(root: Path, name: str, records: list[dict]) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    """GS, LS and PLS q=0.3 on 4 workers; LS stopped after two epochs, PLS records the mixing quality."""
    return [
        write_run(tmp_path, "gs", [record(e, "global", 1.0, s) for e, s in enumerate([40.0, 60.5, 70.25])]),
        write_run(tmp_path, "ls", [record(e, "local", 0.0, s) for e, s in enumerate([38.0, 55.0])]),
        write_run(tmp_path, "pls", [record(e, "partial", 0.3, s, mixing={"quality": m, "sent_fraction": 0.3})
                                    for e, (s, m) in enumerate([(39.0, 0.5), (59.0, 0.75), (69.125, 0.875)])]),
    ]


def test_accuracy_table_has_one_column_per_run_and_a_dash_past_a_runs_last_epoch(runs):
    accuracy = curve_tables(runs[:2]).splitlines()
    assert accuracy == [
        "validation score per epoch (top-1 %)",
        "epoch   global    local",
        "    0    40.00    38.00",
        "    1    60.50    55.00",
        "    2    70.25        -",
    ]


def test_quality_table_follows_when_any_run_records_mixing(runs):
    accuracy, quality = curve_tables(runs).split("\n\n")
    assert accuracy.splitlines()[1].split() == ["epoch", "global", "local", "partial-0.3"]
    assert accuracy.splitlines()[4].split() == ["2", "70.25", "-", "69.12"]
    assert quality.splitlines() == [
        "shuffle quality per epoch (mixing.quality)",
        "epoch   global    local partial-0.3",
        "    0        -        -       0.500",
        "    1        -        -       0.750",
        "    2        -        -       0.875",
    ]


def test_labels_show_workers_only_when_runs_differ_and_repeat_labels_get_the_directory(tmp_path):
    four = write_run(tmp_path, "a", [record(0, "partial", 0.1, 50.0)])
    eight = write_run(tmp_path, "b", [record(0, "partial", 0.1, 51.0, workers=8)])
    virtual = write_run(tmp_path, "c", [record(0, "partial", 0.1, 52.0, workers=8, virtual_workers=True)])
    again = write_run(tmp_path, "d", [record(0, "partial", 0.1, 53.0, workers=8)])
    assert list(load_runs([four])) == ["partial-0.1"]
    assert list(load_runs([four, eight, virtual, again])) == [
        "partial-0.1-M4", "partial-0.1-M8 (b)", "partial-0.1-M8v", "partial-0.1-M8 (d)",
    ]


def test_deepcam_iou_is_shown_in_percent(tmp_path):
    records = []
    for epoch, iou in enumerate([0.25, 0.5]):
        r = record(epoch, "local", 0.0, 0.0)
        del r["val_top1"]
        records.append({**r, "val_iou": iou})
    table = curve_tables([write_run(tmp_path, "deepcam", records)]).splitlines()
    assert table[0] == "validation score per epoch (mean IoU %)"
    assert [line.split() for line in table[2:]] == [["0", "25.00"], ["1", "50.00"]]


def test_report_prints_curves_after_the_breakdown_and_writes_valid_pngs(runs, tmp_path, capsys):
    plot_dir = tmp_path / "figures" / "new"  # created, parents too
    main(["report", *map(str, runs), "--plot", str(plot_dir)])
    out = capsys.readouterr().out
    breakdown, accuracy, quality, *_ = out.split("\n\n")
    # steady means over epochs after the first: every phase 2.5 s, the slowest rank's epoch 10 s
    global_row = breakdown.splitlines()[2].split()
    assert global_row[:9] == ["global", "1.00", "4", "2.50", "2.50", "2.50", "2.50", "10.00", "1.00"]
    assert accuracy.startswith("validation score per epoch") and quality.startswith("shuffle quality per epoch")
    names = ["breakdown.png", "accuracy.png", "quality.png"]
    assert out.endswith("".join(f"wrote {plot_dir / name}\n" for name in names))
    for name in names:
        assert (plot_dir / name).read_bytes()[:8] == PNG_MAGIC


def test_report_without_mixing_writes_no_quality_figure(runs, tmp_path, capsys):
    main(["report", *map(str, runs[:2]), "--plot", str(tmp_path / "figures")])
    out = capsys.readouterr().out
    assert "shuffle quality" not in out and "quality.png" not in out
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["accuracy.png", "breakdown.png"]


def test_report_plot_into_a_file_fails_before_printing(runs, tmp_path, capsys):
    (tmp_path / "taken").write_text("not a directory")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(runs[0]), "--plot", str(tmp_path / "taken")])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot create {tmp_path / 'taken'}" in captured.err
    assert "pass --plot with a writable directory" in captured.err


def test_breakdown_shows_utilisation_with_its_rank_range_and_runs_without_util_still_work(runs, tmp_path):
    # epochs after the first: mean util 60 % and 70 %, the least utilised rank 50 % and 60 %, the most 80 %
    utils = [{"min": 0.1, "mean": 0.2, "max": 0.3}, {"min": 0.5, "mean": 0.6, "max": 0.8},
             {"min": 0.6, "mean": 0.7, "max": 0.8}]
    measured = write_run(tmp_path, "measured", [record(e, "partial", 0.3, 50.0, util=u) for e, u in enumerate(utils)])
    lines = breakdown_table([runs[1], measured]).splitlines()
    header = lines[1].split()
    assert header[-3:] == ["util", "ranks", "AU"]
    # written before util: (2.5 + 2.5) s of compute over the mean rank's 7.5 s epoch, no range over ranks;
    # and before first_io: no AU
    assert lines[2].split()[-3:] == ["67%", "-", "-"]
    assert lines[3].split()[-3:] == ["65%", "55-80%", "-"]
    rows = {row["run"]: row for row in collect([runs[1], measured])}
    assert (rows["ls"]["util"], rows["measured"]["util"]) == pytest.approx((2 / 3, 0.65))
    path = write_summary_csv(list(rows.values()), tmp_path / "summary.csv")
    with open(path, newline="") as table:
        assert [row["util"] for row in csv.DictReader(table)] == ["0.6667", "0.6500"]
    main(["report", str(runs[1]), str(measured), "--plot", str(tmp_path / "figures")])
    assert (tmp_path / "figures" / "breakdown.png").read_bytes()[:8] == PNG_MAGIC


def test_label_skew_table_follows_when_runs_record_labels(tmp_path):
    skews = [0.55, 0.3, 0.1]
    run = write_run(tmp_path, "pls", [record(e, "partial", 0.1, 50.0, mixing={"quality": 0.5, "labels": {"excess": x}})
                                      for e, x in enumerate(skews)])
    tables = curve_tables([run]).split("\n\n")
    assert len(tables) == 3 and tables[2].splitlines() == [
        "label skew per epoch (mixing.labels.excess; 0: as global shuffling)",
        "epoch partial-0.1",
        "    0       0.550",
        "    1       0.300",
        "    2       0.100",
    ]


def test_au_is_fwbw_over_the_runs_wall_time_less_its_first_steps_io(tmp_path):
    # three epochs of 7.5 s mean wall time and 2.5 s of FW+BW; the first step waited 1.5 s for its batch:
    # AU = 3 × 2.5 / (3 × 7.5 − 1.5) = 7.5 / 21 (the allreduce is not compute); util stays (2.5 + 2.5) / 7.5
    first = {"min": 1.0, "mean": 1.5, "max": 2.0}
    records = [record(e, "local", 0.0, 50.0) for e in range(3)]
    for epoch, entry in enumerate(records):
        entry["time"]["first_io"] = first if epoch == 0 else {"min": 0.1, "mean": 0.2, "max": 0.3}
    lines = breakdown_table([write_run(tmp_path, "ls", records)]).splitlines()
    assert lines[2].split()[-3:] == ["67%", "-", f"{7.5 / 21:.0%}"]
    assert lines[-1].startswith("AU: MLPerf Storage's accelerator utilisation") and "90% (resnet50)" in lines[-1]
