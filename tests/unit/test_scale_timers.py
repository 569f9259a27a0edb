"""scale/timers.py: both bookings charge every second of each rank's epoch, they agree where the
script's timers and the engine's see the same thing, and the allreduce floor they imply."""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.scale.timers import (
    BOOKINGS,
    Step,
    allreduce_floor,
    book,
    epoch,
    read_times,
)

RANKS, ITERATIONS = 64, 20


def spread_reads(seed: int = 0) -> np.ndarray:
    return read_times(np.random.default_rng(seed), RANKS, ITERATIONS, base=0.05, spread=0.1, rank_cv=2.0,
                      batch_cv=0.5)


STEPS = [
    Step(gpu=0.2, ring=0.02),
    Step(gpu=0.2, ring=0.02, launch=0.05, copy=0.003, update=0.002, depth=8, startup=1.5, teardown=0.4),
    Step(gpu=0.05, ring=0.01, launch=0.08, workers=1, depth=0),
    Step(gpu=0.1, ring=0.0, workers=2, depth=1),
]


@pytest.mark.parametrize("how", sorted(BOOKINGS))
@pytest.mark.parametrize("step", STEPS)
def test_every_rank_buckets_sum_to_its_epoch(step, how):
    buckets = book(epoch(spread_reads(), step), how)
    assert set(buckets) == {*BOOKINGS[how], "epoch"}
    charged = sum(buckets[name] for name in BOOKINGS[how])
    np.testing.assert_allclose(charged, buckets["epoch"], rtol=1e-12)
    assert all(np.all(buckets[name] >= -1e-12) for name in BOOKINGS[how])


def test_without_spread_or_prefetch_the_bookings_agree():
    reads = np.full((RANKS, ITERATIONS), 0.3)
    step = Step(gpu=0.2, ring=0.02, copy=0.003, update=0.002, workers=1, depth=0, teardown=0.5)
    timeline = epoch(reads, step)
    ours, theirs = book(timeline, "simulator"), book(timeline, "paper")
    np.testing.assert_allclose(ours["io"], theirs["io"])
    np.testing.assert_allclose(ours["io"], ITERATIONS * 0.3)  # no one waits for anyone: io is the reads
    # the copy and the update are the GPU's work to one and their own timers to the other
    np.testing.assert_allclose(ours["fwbw"], theirs["staging"] + theirs["fwbw"] + theirs["log"])
    np.testing.assert_allclose(ours["allreduce"], theirs["allreduce"] + theirs["other"])
    np.testing.assert_allclose(theirs["allreduce"], ITERATIONS * 0.02)
    # launches quicker than the GPU: its remaining work lands in the script's optimizer.step()
    async_step = Step(gpu=0.2, ring=0.02, launch=0.05, workers=1, depth=0)
    theirs = book(epoch(reads, async_step), "paper")
    np.testing.assert_allclose(theirs["fwbw"], ITERATIONS * 0.05)
    np.testing.assert_allclose(theirs["allreduce"], ITERATIONS * (0.02 + 0.15))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prefetching_loader_waits_no_longer_than_reading_in_the_loop(seed):
    reads = spread_reads(seed)
    in_loop = book(epoch(reads, Step(gpu=0.2, ring=0.02, workers=1, depth=0)), "simulator")
    for workers, depth in [(1, 1), (4, 8), (2, 16)]:
        script = Step(gpu=0.2, ring=0.02, launch=0.05, copy=0.003, update=0.002, workers=workers, depth=depth)
        prefetched = book(epoch(reads, script), "paper")
        assert np.all(prefetched["io"] <= in_loop["io"] + 1e-9)
        assert prefetched["epoch"][0] <= in_loop["epoch"][0] + 1e-9
    assert np.mean(prefetched["io"]) < 0.5 * np.mean(in_loop["io"])


@pytest.mark.parametrize("how", sorted(BOOKINGS))
@pytest.mark.parametrize("step", STEPS)
def test_io_plus_allreduce_is_the_same_on_every_rank_and_bounds_the_allreduce(step, how):
    buckets = book(epoch(spread_reads(3), step), how)
    both = buckets["io"] + buckets["allreduce"]
    np.testing.assert_allclose(both, both[0], rtol=1e-12)
    assert np.mean(buckets["allreduce"]) >= allreduce_floor(buckets["io"], step, ITERATIONS, how) - 1e-9


def test_the_floor_is_reached_when_one_rank_is_slowest_every_iteration():
    reads = np.full((RANKS, ITERATIONS), 0.1)
    reads[5] = 0.9
    step = Step(gpu=0.2, ring=0.02, launch=0.05, depth=0, workers=1)
    buckets = book(epoch(reads, step), "paper")
    assert np.mean(buckets["allreduce"]) == pytest.approx(allreduce_floor(buckets["io"], step, ITERATIONS, "paper"))


def test_nguyens_five_numbers_break_the_floor():
    # any epoch whose ranks waited 19.6 s on average and 142 s at most books a mean allreduce of at
    # least 122.4 s, whatever the loader does; the paper reports 70 s
    io = np.array([142.0] + [(19.6 * 512 - 142.0 - 11.9) / 510] * 510 + [11.9])
    assert io.mean() == pytest.approx(19.6)
    no_ring = Step(gpu=0.2, ring=0.0)
    assert allreduce_floor(io, no_ring, 78) == pytest.approx(122.4)
    assert allreduce_floor(io, Step(gpu=0.2, ring=0.0, launch=0.05), 78, "paper") > 122.4


def test_bad_input():
    with pytest.raises(ValueError):
        epoch(np.ones(5), STEPS[0])
    with pytest.raises(ValueError):
        book(epoch(np.ones((2, 2)), STEPS[0]), "mine")
