"""Checkpoint files, resumability checks, preemption agreement on one rank, config checks."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from mpi4py import MPI

from hpcshuffle.config import CheckpointConfig, LoaderConfig
from hpcshuffle.errors import ConfigError
from hpcshuffle.files import append_jsonl, read_jsonl
from hpcshuffle.training import checkpoint
from hpcshuffle.training.checkpoint import (
    Preemption,
    RankState,
    check_resumable,
    restore_rng,
    rng_state,
)
from hpcshuffle.training.metrics import drop_epochs_from

PLAN = {"shuffle": "partial", "num_samples": 211, "num_ranks": 4, "batch_size": 8, "q": 0.5, "seed": 0,
        "partition": "random", "shard_samples": 1, "shuffle_buffer": 0, "dataset": "ab"}


def test_save_then_load_round_trips_and_leaves_no_temporaries(tmp_path):
    model = torch.nn.Linear(3, 2)
    state = RankState(rng_state())
    checkpoint.save(tmp_path, {"epoch": 2, "step": 0, "plan": PLAN, "model": model.state_dict(), "ranks": [state]})
    found = checkpoint.load(tmp_path)
    assert found["epoch"] == 2 and found["plan"] == PLAN
    assert torch.equal(found["model"]["weight"], model.weight.detach())
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint.FILE]
    assert checkpoint.load(tmp_path / "elsewhere") is None


def test_an_unreadable_checkpoint_is_named(tmp_path):
    (tmp_path / checkpoint.FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match=f"checkpoint {tmp_path}/checkpoint.pt is unreadable.*delete it"):
        checkpoint.load(tmp_path)


def test_rng_states_restore_exactly():
    state = rng_state()
    drawn = (torch.rand(3), np.random.rand(3), random.random())
    restore_rng(state)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(drawn[0], again[0]) and np.array_equal(drawn[1], again[1]) and drawn[2] == again[2]


def test_the_worker_count_may_change_but_nothing_else():
    check_resumable({"plan": PLAN, "epoch": 2}, {**PLAN, "num_ranks": 3}, epochs=4, where=Path("run"))
    with pytest.raises(ConfigError, match=r"belongs to another run \(q: 0.5 then, 0.3 now; seed: 0 then, 1 now\)"):
        check_resumable({"plan": PLAN, "epoch": 2}, {**PLAN, "q": 0.3, "seed": 1}, epochs=4, where=Path("run"))
    with pytest.raises(ConfigError, match="dataset: ab then, cd now"):
        check_resumable({"plan": PLAN, "epoch": 2}, {**PLAN, "dataset": "cd"}, epochs=4, where=Path("run"))


def test_the_partition_may_not_change_and_older_checkpoints_had_random_ones():
    with pytest.raises(ConfigError, match="partition: random then, contiguous now"):
        check_resumable({"plan": PLAN, "epoch": 2}, {**PLAN, "partition": "contiguous"}, epochs=4, where=Path("run"))
    older = {key: value for key, value in PLAN.items() if key != "partition"}
    check_resumable({"plan": older, "epoch": 2}, PLAN, epochs=4, where=Path("run"))
    with pytest.raises(ConfigError, match="partition: random then, contiguous now"):
        check_resumable({"plan": older, "epoch": 2}, {**PLAN, "partition": "contiguous"}, epochs=4, where=Path("run"))


def test_a_completed_run_asks_for_more_epochs():
    with pytest.raises(ConfigError, match="already completed 4 epochs; pass a larger epochs="):
        check_resumable({"plan": PLAN, "epoch": 4}, PLAN, epochs=4, where=Path("run"))


def test_drop_epochs_from_keeps_the_earlier_records(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert drop_epochs_from(path, 1) == 0  # no file yet
    for epoch in (0, 1, 1, 2):
        append_jsonl(path, {"epoch": epoch})
    assert drop_epochs_from(path, 1) == 3
    assert read_jsonl(path) == [{"epoch": 0}]
    assert drop_epochs_from(path, 1) == 0


def test_preemption_stops_at_the_next_poll_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGUSR1)
    preemption = Preemption(MPI.COMM_SELF)
    try:
        assert [preemption.poll() for _ in range(3)] == [False] * 3
        os.kill(os.getpid(), signal.SIGUSR1)
        # the poll after the signal posts the flag; the next one sees the agreed result
        assert preemption.poll() is False
        assert preemption.poll() is True
        assert preemption.signalled == "SIGUSR1"
    finally:
        preemption.close()
    assert signal.getsignal(signal.SIGUSR1) == before


@pytest.mark.parametrize(
    ("group", "change", "message"),
    [
        (CheckpointConfig, {"resume": "never"}, "checkpoint.resume must be 'auto' .* or 'require' .*, got 'never'"),
        (CheckpointConfig, {"every_epochs": -1}, r"checkpoint.every_epochs must be >= 0 \(0: off\), got -1"),
        (CheckpointConfig, {"every_steps": -2}, r"checkpoint.every_steps must be >= 0 \(0: off\), got -2"),
        (LoaderConfig, {"on_error": "ignore"}, "loader.on_error must be 'fail' or 'skip', got 'ignore'"),
    ],
)
def test_bad_reliability_settings_are_named(group, change, message):
    with pytest.raises(ConfigError, match=message):
        group(**change)
