"""Label skew (analysis/labels.py): hand-computed rates, the two local shufflings that pair mixing cannot
tell apart told apart, `hpcshuffle plan --quality`, and named errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcshuffle.analysis.labels import (
    LabelSkew,
    balanced_labels,
    labels_from_counts,
    predict_q,
    same_class_rate,
)
from hpcshuffle.cli import main
from hpcshuffle.plan import PlanSpec, plan_epochs


def test_rates_by_hand():
    skew = LabelSkew(np.array([0, 0, 1, 1]), batch_size=2)
    result = skew.epoch([np.array([0, 1]), np.array([2, 3])])
    # each local batch is one class; the global batch {0, 0, 1, 1} has 2 same-class pairs of 6
    assert result["same_class"] == 1.0 and result["global_batch"] == pytest.approx(1 / 3, abs=1e-6)
    assert result["excess"] == pytest.approx(2 / 3, abs=1e-6) and result["expected"] == pytest.approx(1 / 3, abs=1e-6)
    assert result["partition_tv"] == 0.5 and result["partition_tv_max"] == 0.5
    mixed = skew.epoch([np.array([0, 2]), np.array([1, 3])])
    assert mixed["same_class"] == 0.0 and mixed["excess"] == pytest.approx(-1 / 3, abs=1e-6)
    assert mixed["partition_tv"] == 0.0


def test_groups_of_one_sample_are_left_out():
    rate, groups = same_class_rate(np.array([0, 0, 1, 2, 2, 2]), np.array([3, 3, 1, 0, 0, 1]), 4)
    assert groups == 2 and rate == pytest.approx((1.0 + 2 / 6) / 2)


def test_contiguous_and_random_local_shuffling_mix_pairs_alike_but_not_labels():
    labels = balanced_labels(4096, 20)
    spec = dict(num_samples=4096, num_ranks=16, batch_size=8, q=0.0, seed=0)
    contiguous = [LabelSkew(labels, 8).epoch(plan.order) for plan in
                  plan_epochs(PlanSpec(**spec, partition="contiguous"), "local", 3)]
    random = [LabelSkew(labels, 8).epoch(plan.order) for plan in plan_epochs(PlanSpec(**spec), "local", 3)]
    assert all(epoch["excess"] > 0.5 for epoch in contiguous)  # 1-2 classes per worker
    assert all(abs(epoch["excess"]) < 0.01 for epoch in random)
    assert all(epoch["partition_tv"] > 0.85 for epoch in contiguous)


def test_global_shuffling_has_no_excess_and_partial_shuffling_decays_towards_it():
    labels = balanced_labels(4096, 20)
    skew = LabelSkew(labels, 8)
    plans = plan_epochs(PlanSpec(4096, 16, 8, 0.1, 0, partition="contiguous"), "partial", 12)
    excess = [skew.epoch(plan.order)["excess"] for plan in plans]
    assert excess[0] > 0.5 and excess[-1] < 0.1 and all(a > b for a, b in zip(excess, excess[1:]))
    gs = [skew.epoch(plan.order)["excess"] for plan in plan_epochs(PlanSpec(4096, 16, 8, 1.0, 0), "global", 4)]
    assert all(abs(value) < 0.01 for value in gs)


def test_balanced_labels_are_the_synthetic_listing():
    labels = balanced_labels(10, 3)  # synth: image i in class i mod 3, so classes of 4, 3, 3
    assert labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert labels_from_counts([2, 0, 1]).tolist() == [0, 0, 2]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="--classes must be between 1 and the samples"):
        balanced_labels(5, 6)
    with pytest.raises(ValueError, match="counts >= 0"):
        labels_from_counts([3, -1])
    with pytest.raises(ValueError, match="rank 1 trains on sample 9, outside 0..3"):
        LabelSkew(np.array([0, 0, 1, 1]), 2).epoch([np.array([0, 1]), np.array([9])])
    with pytest.raises(ValueError, match="1-D integer array"):
        LabelSkew(np.array([0.5, 1.0]), 2)


def plan_quality(capsys, *extra: str) -> str:
    main(["plan", "--samples", "4096", "--workers", "16", "--batch", "8", "--shuffle", "partial", "--q", "0.1",
          "--partition", "contiguous", "--epochs", "12", "--quality", *extra])
    return capsys.readouterr().out


def test_plan_quality_prints_the_measure_per_epoch(capsys, tmp_path):
    epochs = json.loads(plan_quality(capsys, "--classes", "20", "--json"))["epochs"]
    assert [epoch["epoch"] for epoch in epochs] == list(range(12))
    assert set(epochs[0]["mixing"]["labels"]) == {"same_class", "global_batch", "excess", "expected", "partition_tv",
                                        "partition_tv_max"}
    assert epochs[0]["mixing"]["labels"]["excess"] > 0.5 > 0.1 > epochs[-1]["mixing"]["labels"]["excess"]
    assert 0.3 < epochs[-1]["mixing"]["quality"] < 0.4
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps([205] * 16 + [204] * 4))  # the same 20 classes as counts
    assert json.loads(plan_quality(capsys, "--label-counts", str(counts), "--json"))["epochs"] == epochs
    table = plan_quality(capsys)
    assert "label skew: give the labels with --classes C or --label-counts FILE" in table


def test_plan_quality_names_label_counts_that_do_not_fit(capsys, tmp_path):
    counts = tmp_path / "counts.json"
    counts.write_text("[100, 100]")
    with pytest.raises(SystemExit) as exit_info:
        plan_quality(capsys, "--label-counts", str(counts))
    assert exit_info.value.code == 2
    assert "sums to 200 samples, --samples is 4096" in capsys.readouterr().err


def test_predict_q_names_the_smallest_q_whose_skew_reaches_global_shufflings():
    labels = balanced_labels(4096, 20)
    found = predict_q(PlanSpec(4096, 16, 8, 0.0, 0, partition="contiguous"), 12, labels, [0, 0.1, 0.3, 1], 0.01)
    assert found["by_epoch"] == 11 and abs(found["global"]) < 0.01
    assert found["skew"][0] > 0.5 and 0.01 < found["skew"][0.1] - found["global"] < 0.1
    assert found["q"] == 0.3
    # by epoch 11 q = 0.1 is within 0.1 of global's; random partitions need no exchange at all
    assert predict_q(PlanSpec(4096, 16, 8, 0.0, 0, partition="contiguous"), 12, labels, [0, 0.1], 0.1)["q"] == 0.1
    assert predict_q(PlanSpec(4096, 16, 8, 0.0, 0), 12, labels, [0, 0.1], 0.01)["q"] == 0
    with pytest.raises(ValueError, match="--by-epoch 12 is not one of the planned epochs 0..11"):
        predict_q(PlanSpec(4096, 16, 8), 12, labels, [0], 0.01, by_epoch=12)


def test_tune_q_predict_prints_q_per_worker_count_and_names_missing_input(capsys):
    main(["tune-q", "--predict", "--samples", "4096", "--classes", "20", "--workers", "16", "64", "--batch", "8",
          "--partition", "contiguous", "--epochs", "12"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[2:4]]
    assert [(row[0], row[-1]) for row in rows] == [("16", "0.3"), ("64", "0.3")]
    assert lines[4].startswith("its record where it was committed before training")  # then the record
    for argv, message in ((["--samples", "4096", "--workers", "16"], "--predict needs --classes or --label-counts"),
                          (["--classes", "20"], "--predict needs --samples, --workers"),
                          (["results/x", "--samples", "64", "--classes", "2", "--workers", "2"], "drop RESULTS_DIR")):
        with pytest.raises(SystemExit):
            main(["tune-q", "--predict", *argv])
        assert message in capsys.readouterr().err
