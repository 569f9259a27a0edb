"""Validation scores: top-1/top-5 and the MLPerf-HPC mean IoU, checked against hand counts."""

from __future__ import annotations

import pytest
import torch

from hpcshuffle.training.evaluate import Scores


def test_top1_and_top5_accuracy():
    logits = torch.tensor([[9.0, 1, 2, 3, 4, 5, 0], [0.0, 9, 1, 2, 3, 4, 5], [5.0, 4, 3, 2, 1, 0, 9]])
    scores = Scores("classify", 7, torch.device("cpu"))
    scores.add(logits, torch.tensor([0, 6, 1]))  # right; in the top 5 (5.0); in the top 5 (4.0)
    scores.add(logits[:1], torch.tensor([1]))  # 1.0 is 6th of 7: a miss
    assert scores.summary() == pytest.approx({"val_top1": 25.0, "val_top5": 75.0})


def test_mean_iou_from_pixel_counts():
    # truth and prediction over 8 pixels of classes 0/1/2
    truth = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2]).reshape(1, 2, 4)
    predicted = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2]).reshape(1, 2, 4)
    logits = torch.nn.functional.one_hot(predicted, 3).permute(0, 3, 1, 2).float()
    scores = Scores("segment", 3, torch.device("cpu"))
    scores.add(logits, truth)
    # class 0: TP 3, union 4; class 1: TP 1, union 3; class 2: TP 2, union 3
    summary = scores.summary()
    assert summary["val_iou"] == pytest.approx((3 / 4 + 1 / 3 + 2 / 3) / 3)
    assert summary["val_pixel_accuracy"] == pytest.approx(75.0)


def test_classes_seen_nowhere_leave_the_mean():
    truth = torch.zeros(1, 2, 2, dtype=torch.long)
    scores = Scores("segment", 3, torch.device("cpu"))
    scores.add(torch.nn.functional.one_hot(truth, 3).permute(0, 3, 1, 2).float(), truth)
    assert scores.summary()["val_iou"] == 1.0


def test_counts_add_across_ranks_like_one_pass():
    logits, labels = torch.randn(10, 5, generator=torch.Generator().manual_seed(0)), torch.arange(10) % 5
    whole, first, second = (Scores("classify", 5, torch.device("cpu")) for _ in range(3))
    whole.add(logits, labels)
    first.add(logits[:4], labels[:4])
    second.add(logits[4:], labels[4:])
    first.counts += second.counts  # what the allreduce does
    assert first.summary() == whole.summary()


def test_unknown_task_is_named():
    with pytest.raises(ValueError, match="task must be 'classify' or 'segment'"):
        Scores("detect", 3, torch.device("cpu"))
