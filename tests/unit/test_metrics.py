"""Accelerator utilisation as DLIO defines it, (fwbw + allreduce) / epoch per rank, reduced over ranks
and printed in the per-epoch table, also for records written before `util` existed."""

from __future__ import annotations

import time

import pytest

from hpcshuffle.training.metrics import (
    TABLE_HEADER,
    RankEpoch,
    record_util,
    reduce_epoch,
    table_row,
    utilisation,
)


def rank(fwbw: float, allreduce: float, epoch: float) -> RankEpoch:
    row = RankEpoch()
    row.seconds.update(io=0.5, fwbw=fwbw, allreduce=allreduce, epoch=epoch)
    return row


def test_utilisation_is_compute_over_the_epochs_wall_time():
    assert utilisation(rank(2.0, 1.0, 4.0).seconds) == 0.75
    assert utilisation(rank(0.0, 0.0, 0.0).seconds) == 0.0  # an epoch that took no time


def test_reduce_epoch_gives_min_mean_max_utilisation_over_ranks():
    reduced = reduce_epoch([rank(2.0, 1.0, 4.0), rank(1.0, 0.0, 4.0), rank(3.0, 1.0, 4.0)])
    assert reduced["util"] == pytest.approx({"min": 0.25, "mean": 2 / 3, "max": 1.0})
    assert record_util(reduced) == pytest.approx(2 / 3)


def test_reduce_epoch_gives_the_epochs_wall_window_from_the_first_rank_to_start():
    early, late = RankEpoch(started_at=time.time() - 5.0), RankEpoch(started_at=time.time() - 1.0)
    wall = reduce_epoch([late, early])["wall"]
    assert wall["start"] == early.started_at
    assert late.started_at < wall["end"] <= time.time()


def epoch_record(**reduced) -> dict:
    return {"epoch": 3, "train_loss": 1.25, "val_top1": 61.5, **reduced}


def test_table_row_shows_the_mean_utilisation_in_percent_under_its_header():
    record = epoch_record(**reduce_epoch([rank(2.0, 1.0, 4.0), rank(1.0, 0.0, 4.0), rank(3.0, 1.0, 4.0)]))
    column = TABLE_HEADER.split().index("util")
    assert table_row(record).split()[column] == "67%"
    assert len(table_row(record)) == len(TABLE_HEADER)


def test_table_row_of_a_record_without_util_uses_the_mean_phase_times():
    record = epoch_record(**reduce_epoch([rank(2.0, 1.0, 4.0), rank(1.0, 0.0, 2.0)]))
    assert record_util(record) == pytest.approx(0.625)  # 75 % and 50 %
    del record["util"]  # as runs wrote them before
    assert record_util(record) == pytest.approx(2 / 3)  # (1.5 + 0.5) s of compute over 3 s, the mean times
    assert table_row(record).split()[TABLE_HEADER.split().index("util")] == "67%"
