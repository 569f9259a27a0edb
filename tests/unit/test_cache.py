"""Invariants of the planned sample cache, checked by replaying its decisions independently.

Random traces are small (ids drawn from a few values, so reuse is frequent) and seeded; the
optimality check compares reuse_distance with an exhaustive search over every admit/evict choice.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.cache import POLICIES, Future, next_use
from hpcshuffle.storage.cache_sim import rank_trace, simulate

POLICY_NAMES = sorted(POLICIES)


def test_the_config_names_every_policy_and_no_other():
    """config/ checks cache.policy against its own names (it may not import storage/): they must be these."""
    from hpcshuffle.config.groups import CACHE_POLICIES

    assert sorted(CACHE_POLICIES) == POLICY_NAMES


def random_traces(count: int, max_length: int, max_ids: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        length = int(rng.integers(0, max_length + 1))
        distinct = int(rng.integers(1, max_ids + 1))
        yield rng.integers(0, distinct, length) * 7 + 3, int(rng.integers(0, distinct + 2))  # sparse ids


def replay(trace: np.ndarray, capacity: int, policy: str) -> int:
    """Apply the decisions to a plain set in the documented order; return the hits seen."""
    result = simulate(trace, capacity, policy, decisions=True)
    chosen = result.decisions
    assert np.all(np.diff(chosen.evict_pos) >= 0)
    cached: set[int] = set()
    for position, sample in enumerate(trace.tolist()):
        assert chosen.hit[position] == (sample in cached), (policy, position)
        assert not (chosen.hit[position] and chosen.admit[position])
        for victim in chosen.evicted_at(position).tolist():
            assert victim in cached, (policy, position, victim)
            cached.remove(victim)
        if chosen.admit[position]:
            cached.add(sample)
        assert len(cached) <= capacity, (policy, position, len(cached), capacity)
    assert chosen.hit.sum() == result.hits
    return result.hits


def optimal_hits(trace: list[int], capacity: int) -> int:
    """Most hits of any cache of `capacity` that may bypass, by trying every admit/evict choice."""

    @lru_cache(maxsize=None)
    def best(position: int, cached: frozenset) -> int:
        if position == len(trace):
            return 0
        sample = trace[position]
        if sample in cached:
            return 1 + best(position + 1, cached)
        choices = [best(position + 1, cached)]  # bypass
        if len(cached) < capacity:
            choices.append(best(position + 1, cached | {sample}))
        else:
            choices += [best(position + 1, (cached - {victim}) | {sample}) for victim in cached]
        return max(choices)

    return best(0, frozenset())


def test_next_use_on_a_known_trace():
    assert next_use(np.array([5, 1, 5, 5, 2, 1])).tolist() == [2, 5, 3, 6, 6, 6]
    assert next_use(np.array([], dtype=np.int64)).tolist() == []


def test_next_use_and_reads_left_match_a_direct_scan():
    for trace, _ in random_traces(50, 40, 6, seed=1):
        trace_list = trace.tolist()
        length = len(trace_list)
        expected_next = [
            next((q for q in range(p + 1, length) if trace_list[q] == trace_list[p]), length) for p in range(length)
        ]
        expected_left = [trace_list[p + 1:].count(trace_list[p]) for p in range(length)]
        assert next_use(trace).tolist() == expected_next
        assert Future.of(trace).reads_left.tolist() == expected_left


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_decisions_replay_consistently_within_capacity(policy):
    for trace, capacity in random_traces(150, 60, 12, seed=2):
        result = simulate(trace, capacity, policy, epoch_lengths=[len(trace)])
        assert result.hits + result.misses == result.accesses == len(trace)
        assert replay(trace, capacity, policy) == result.hits


def test_lru_inserts_every_miss():
    for trace, capacity in random_traces(50, 60, 12, seed=3):
        chosen = simulate(trace, max(capacity, 1), "lru", decisions=True).decisions
        assert np.array_equal(chosen.admit, ~chosen.hit)


def test_reuse_distance_is_optimal_against_exhaustive_search():
    for trace, capacity in random_traces(200, 14, 6, seed=4):
        capacity = min(capacity, 4)
        assert simulate(trace, capacity, "reuse_distance").hits == optimal_hits(trace.tolist(), capacity), (
            trace.tolist(), capacity
        )


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_capacity_zero_is_no_cache(policy):
    trace = np.array([1, 1, 2, 1, 2, 2])
    result = simulate(trace, 0, policy, decisions=True)
    assert result.hits == 0
    assert not result.decisions.admit.any() and len(result.decisions.evict_id) == 0


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_enough_capacity_leaves_only_compulsory_misses(policy):
    for trace, _ in random_traces(50, 60, 12, seed=5):
        distinct = len(np.unique(trace))
        result = simulate(trace, distinct, policy)
        assert result.hits == len(trace) - distinct


def test_rank_trace_is_the_plans_orders_concatenated():
    spec = PlanSpec(num_samples=103, num_ranks=4, batch_size=5, seed=11)
    trace, lengths = rank_trace(spec, "global", 3, rank=2)
    orders = [plan.order[2] for plan in plan_epochs(spec, "global", 3)]
    assert np.array_equal(trace, np.concatenate(orders))
    assert lengths.tolist() == [spec.max_share] * 3
    resumed, resumed_lengths = rank_trace(spec, "global", 3, rank=2, start_epoch=1)
    assert np.array_equal(resumed, np.concatenate(orders[1:]))
    assert resumed_lengths.tolist() == [spec.max_share] * 2


def test_per_epoch_counts_add_up():
    spec = PlanSpec(num_samples=400, num_ranks=2, batch_size=8, seed=3)
    trace, lengths = rank_trace(spec, "global", 4, rank=0)
    result = simulate(trace, 50, "reuse_distance", lengths, decisions=True)
    assert result.epoch_accesses.tolist() == lengths.tolist()
    assert result.epoch_hits.tolist() == [int(part.sum()) for part in np.split(result.decisions.hit, 4)]
    assert result.epoch_hits[0] == 0  # nothing is read twice within one GS epoch of an even split
    assert np.allclose(result.epoch_hit_ratio, result.epoch_hits / result.epoch_accesses)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reuse_distance_beats_lru_and_nopfs_on_global_shuffling(seed):
    spec = PlanSpec(num_samples=2000, num_ranks=4, batch_size=16, seed=seed)
    trace, lengths = rank_trace(spec, "global", 5, rank=seed % 4)
    capacity = spec.max_share // 4
    hits = {policy: simulate(trace, capacity, policy, lengths).hits for policy in POLICY_NAMES}
    assert hits["reuse_distance"] >= hits["lru"]
    assert hits["reuse_distance"] >= hits["nopfs"]
    assert hits["reuse_distance"] >= 1.3 * hits["lru"]


def test_bad_inputs_name_the_problem():
    trace = np.array([1, 2, 1])
    choices = r"'lru', 'nopfs', 'reuse_count', 'reuse_distance'"
    with pytest.raises(ValueError, match=rf"unknown cache policy 'fifo'; choose one of \[{choices}\]"):
        simulate(trace, 2, "fifo")
    with pytest.raises(ValueError, match=r"capacity must be an integer >= 0.*got -1"):
        simulate(trace, -1, "lru")
    with pytest.raises(ValueError, match=r"capacity must be an integer >= 0.*got 2.5"):
        simulate(trace, 2.5, "lru")
    with pytest.raises(ValueError, match=r"sum to the trace length 3, got sum 4"):
        simulate(trace, 2, "lru", epoch_lengths=[2, 2])
    with pytest.raises(ValueError, match=r"1-D array"):
        simulate(np.zeros((2, 2), dtype=np.int64), 2, "lru")
    with pytest.raises(ValueError, match=r"must be integers"):
        simulate(np.array([0.5, 1.0]), 2, "lru")
    spec = PlanSpec(num_samples=100, num_ranks=4, batch_size=5)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 4\), got 4"):
        rank_trace(spec, "global", 2, rank=4)


def test_decisions_only_when_asked():
    assert simulate(np.array([1, 1]), 1, "lru").decisions is None
    result = simulate(np.array([1, 1]), 1, "lru", decisions=True)
    assert result.decisions.hit.tolist() == [False, True] and result.decisions.admit.tolist() == [True, False]
    assert result.decisions.hit.dtype == bool and result.decisions.evict_pos.dtype == np.int64
