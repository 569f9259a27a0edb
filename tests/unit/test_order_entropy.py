"""Streaming's simulator's shuffle quality, as hpcshuffle computes it on any plan (analysis/order_entropy.py):
the jump entropy's exact values on small orderings, the step-major reading order, and the harmonic mean
that needs both ids and shards to move. tests/e2e/test_streaming_orders.py compares it with the
simulator's own function on Streaming's orders."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcshuffle.analysis.order_entropy import entropy_quality, jump_entropy, step_major


def test_jump_entropy_is_the_entropy_of_the_absolute_jumps():
    assert jump_entropy(np.arange(10)) == 0.0  # every jump is 1
    assert jump_entropy([0, 1, 3, 4, 6]) == pytest.approx(1.0)  # jumps 1, 2, 1, 2: two equally likely values
    assert jump_entropy([5, 4, 3, 7]) == pytest.approx(-(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3))
    with pytest.raises(ValueError, match="needs at least 2"):
        jump_entropy([3])


def test_a_random_permutation_scores_near_log2_n_and_an_ordered_one_zero():
    ids = np.random.default_rng(0).permutation(4096)
    assert jump_entropy(ids) > 0.8 * math.log2(4096)
    assert entropy_quality([np.arange(4096)], batch_size=16, shard_samples=64) == 0.0


def test_the_epoch_is_read_step_by_step_and_worker_by_worker():
    orders = [np.array([0, 1, 2, 3, 4]), np.array([10, 11, 12, 13, 14])]
    assert step_major(orders, batch_size=2).tolist() == [0, 1, 10, 11, 2, 3, 12, 13, 4, 14]


def test_the_score_needs_the_shards_to_move_too():
    # samples shuffled within their shards only: the ids jump, the shards barely do
    rng = np.random.default_rng(1)
    within = np.concatenate([rng.permutation(np.arange(start, start + 100)) for start in range(0, 4000, 100)])
    across = rng.permutation(4000)
    assert jump_entropy(within) > 5
    assert entropy_quality([within], 10, 100) < 0.5 * entropy_quality([across], 10, 100)
    with pytest.raises(ValueError, match="shard_samples must be at least 1"):
        entropy_quality([across], 10, 0)
