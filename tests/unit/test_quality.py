"""Pair mixing (shuffle quality against global shuffling): hand-computed values, real plans, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcshuffle.analysis.quality import PairMixing, pair_count, sample_pairs
from hpcshuffle.plan import PlanSpec, plan_epochs


def ids(*values):
    return np.array(values, dtype=np.int64)


def run(spec: PlanSpec, shuffle: str, epochs: int, pairs: int, seed: int = 0) -> list[dict[str, float]]:
    mixing = PairMixing(spec.num_samples, spec.num_ranks, pairs=pairs, seed=seed)
    return [mixing.add_epoch(plan.order) for plan in plan_epochs(spec, shuffle, epochs)]


# -- exact values by hand ----------------------------------------------------------------------


def test_static_partition_n4_m2_keeps_two_of_six_pairs():
    mixing = PairMixing(4, 2)
    assert mixing.exact and mixing.num_pairs == 6
    p = 2 * 2 * 1 / (4 * 3)  # Σ s_r(s_r − 1) / (N(N − 1)) = 1/3
    for epoch in range(5):
        result = mixing.add_epoch([ids(1, 0), ids(3, 2)])
        gs = 1 - (1 - p) ** (epoch + 1)
        assert result["pairs_together"] == pytest.approx(2 / 6)
        assert result["gs_expected"] == pytest.approx(gs)
        assert result["quality"] == pytest.approx((2 / 6) / gs)
        assert result["stderr"] == 0.0
    assert result["quality"] == pytest.approx((1 / 3) / (1 - (2 / 3) ** 5))


def test_changing_partition_n4_m2_meets_every_pair_in_three_epochs():
    mixing = PairMixing(4, 2)
    first = mixing.add_epoch([ids(0, 1), ids(2, 3)])  # {0,1} {2,3}
    second = mixing.add_epoch([ids(2, 0), ids(3, 1)])  # + {0,2} {1,3}
    third = mixing.add_epoch([ids(0, 3), ids(1, 2)])  # + {0,3} {1,2}
    assert [r["pairs_together"] for r in (first, second, third)] == pytest.approx([2 / 6, 4 / 6, 1.0])
    assert first["quality"] == pytest.approx(1.0)
    assert second["quality"] == pytest.approx((4 / 6) / (1 - (2 / 3) ** 2))
    assert third["quality"] == pytest.approx(1.0 / (1 - (2 / 3) ** 3))  # 27/19: better than GS expects


def test_untrained_samples_are_on_no_worker_and_repeats_count_once():
    # N = 6, samples 4 and 5 dropped (their pair never met); rank 0 trains 0 twice (padding): s = (2, 2)
    mixing = PairMixing(6, 2)
    result = mixing.add_epoch([ids(0, 1, 0), ids(2, 3)])
    assert result["pairs_together"] == pytest.approx(2 / 15)
    assert result["gs_expected"] == pytest.approx((2 + 2) / (6 * 5))
    assert result["quality"] == pytest.approx(1.0)


def test_rank_with_nothing_to_train_is_allowed():
    mixing = PairMixing(4, 3)
    result = mixing.add_epoch([ids(0, 1, 2, 3), np.array([], dtype=np.int64), np.array([])])
    assert result["pairs_together"] == result["gs_expected"] == pytest.approx(1.0)


def test_one_sample_per_worker_has_no_quality():
    result = PairMixing(3, 3).add_epoch([ids(0), ids(1), ids(2)])
    assert result["pairs_together"] == result["gs_expected"] == 0.0
    assert math.isnan(result["quality"]) and math.isnan(result["stderr"])


# -- the pair set ------------------------------------------------------------------------------


def test_exact_mode_follows_every_pair_once():
    first, second = sample_pairs(6, 15, np.random.default_rng(0))
    want_first, want_second = np.triu_indices(6, k=1)
    assert first.tolist() == want_first.tolist() and second.tolist() == want_second.tolist()
    assert PairMixing(6, 2, pairs=15).exact and not PairMixing(6, 2, pairs=14).exact


def test_sampled_pairs_are_distinct_ordered_and_uniform():
    num_samples, budget = 1000, 10_000
    mixing = PairMixing(num_samples, 4, pairs=budget, seed=3)
    assert not mixing.exact and mixing.num_pairs == budget
    first, second = mixing.first, mixing.second
    assert np.all(0 <= first) and np.all(first < second) and np.all(second < num_samples)
    assert np.unique(first * num_samples + second).size == budget
    # a uniform pair has its smaller id in the lower half with probability 1 − C(500,2)/C(1000,2) ≈ 0.75
    low_half = 1 - pair_count(500) / pair_count(1000)
    assert np.mean(first < 500) == pytest.approx(low_half, abs=0.02)  # binomial sd 0.004


def test_pairs_near_the_budget_are_drawn_without_replacement():
    # 4950 pairs, 4900 wanted: a partial shuffle, not rejection sampling
    first, second = sample_pairs(100, 4900, np.random.default_rng(1))
    assert np.unique(first * 100 + second).size == 4900


def test_same_seed_same_numbers_other_seed_other_pairs():
    spec = PlanSpec(600, 4, 10, q=0.2, seed=5)
    assert run(spec, "partial", 4, pairs=5000, seed=9) == run(spec, "partial", 4, pairs=5000, seed=9)
    assert run(spec, "partial", 4, pairs=5000, seed=9) != run(spec, "partial", 4, pairs=5000, seed=10)
    one, other = PairMixing(600, 4, pairs=5000, seed=9), PairMixing(600, 4, pairs=5000, seed=10)
    assert not np.array_equal(one.first * 600 + one.second, other.first * 600 + other.second)


# -- real plans --------------------------------------------------------------------------------


def test_global_shuffling_has_quality_one():
    spec = PlanSpec(2000, 8, 10, seed=2)
    p = 8 * 250 * 249 / (2000 * 1999)
    for epoch, result in enumerate(run(spec, "global", 6, pairs=20_000)):
        assert result["gs_expected"] == pytest.approx(1 - (1 - p) ** (epoch + 1))
        assert 0 < result["stderr"] < 0.05
        assert abs(result["quality"] - 1) < 4 * result["stderr"], (epoch, result)


def test_local_shuffling_keeps_its_first_epoch_pairs_exactly():
    # N = 13 over M = 3: shares 5, 4, 4, the short ranks train one sample twice
    spec = PlanSpec(13, 3, 2, seed=4)
    p = (5 * 4 + 4 * 3 + 4 * 3) / (13 * 12)
    results = run(spec, "local", 20, pairs=100_000)
    for epoch, result in enumerate(results):
        assert result["pairs_together"] == pytest.approx(p, rel=1e-12)
        assert result["quality"] == pytest.approx(p / (1 - (1 - p) ** (epoch + 1)), rel=1e-12)
        assert result["stderr"] == 0.0
    assert results[0]["quality"] == pytest.approx(1.0)
    assert results[-1]["quality"] < 0.3  # → p ≈ 0.28 as global shuffling meets nearly every pair


def test_partial_shuffling_lies_between_local_and_global_and_grows_with_q():
    spec = dict(num_samples=2000, num_ranks=8, batch_size=10, seed=1)
    epochs, budget = 8, 20_000
    local = run(PlanSpec(**spec), "local", epochs, budget)[-1]
    partial = [run(PlanSpec(**spec, q=q), "partial", epochs, budget)[-1] for q in (0.05, 0.2, 0.5)]
    global_ = run(PlanSpec(**spec), "global", epochs, budget)[-1]
    ladder = [local, *partial, global_]
    for lower, upper in zip(ladder, ladder[1:]):
        gap = upper["quality"] - lower["quality"]
        assert gap > 4 * math.hypot(lower["stderr"], upper["stderr"]), [r["quality"] for r in ladder]
    assert local["quality"] < 0.3 and global_["quality"] == pytest.approx(1.0, abs=4 * global_["stderr"])


# -- errors ------------------------------------------------------------------------------------


def test_wrong_number_of_ranks():
    with pytest.raises(ValueError, match=r"orders for 3 ranks, expected num_ranks = 2"):
        PairMixing(10, 2).add_epoch([ids(0), ids(1), ids(2)])


@pytest.mark.parametrize("bad", [-1, 10])
def test_id_out_of_range(bad):
    with pytest.raises(ValueError, match=rf"rank 1 trains on sample {bad}, outside 0\.\.9"):
        PairMixing(10, 2).add_epoch([ids(0, 1), ids(2, bad)])


def test_a_sample_padded_onto_two_ranks_counts_on_the_last():
    # global shuffling pads when M does not divide N: fewer than M samples are on two ranks
    result = PairMixing(10, 3).add_epoch([ids(0, 1), ids(2, 3), ids(4, 3)])
    assert result["pairs_together"] == pytest.approx(2 / 45)  # {0, 1} and {3, 4}; 2 is alone
    assert result["gs_expected"] == pytest.approx((2 + 0 + 2) / 90)
    spec = PlanSpec(2001, 8, 10, seed=3)
    assert abs(run(spec, "global", 3, pairs=20_000)[-1]["quality"] - 1) < 0.1


def test_non_integer_or_nested_orders():
    with pytest.raises(ValueError, match="integer ids, got dtype float64"):
        PairMixing(10, 2).add_epoch([ids(0), np.array([1.0])])
    with pytest.raises(ValueError, match=r"rank 0's order must be 1-D, got shape \(1, 2\)"):
        PairMixing(10, 2).add_epoch([np.array([[0, 1]]), ids(2)])


@pytest.mark.parametrize(
    "args, message",
    [((1, 1), "at least 2 samples"), ((10, 0), "workers must be >= 1"), ((10, 2, 0), "pair budget"),
     ((10, 2, 5, -1), "seed must be >= 0")],
)
def test_constructor_checks(args, message):
    with pytest.raises(ValueError, match=message):
        PairMixing(*args)
