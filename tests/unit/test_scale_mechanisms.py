"""The mechanisms behind `hpcshuffle scale`'s headline, each pinned on its own: shared storage as
queues (scale/storage.py), the allreduce that waits for the slowest rank, prefetch that hides I/O
up to FW+BW and no more, the bucketed allreduce that never ends before backward, and the
distributions' parameters refused before anything is simulated."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Allreduce, Distribution, SharedStorage
from hpcshuffle.scale.storage import SharedQueues
from tests.unit.test_scale_engine import scenario, tiny_platform
from tests.unit.test_scale_platform import refused, tiny_raw

DISK = Distribution("lognormal", 8e-3, cv=0.4)


def storage(**changes) -> SharedStorage:
    values = {"read_bandwidth": 1e12, "metadata_rate": 1e12, "servers": 16, "service": DISK, "file_latency": 1e-3,
              "client_cpu_per_file": 0.0, **changes}
    return SharedStorage(**values)


def batch_times(shared: SharedStorage, readers: int, seed: int = 0, batches: int = 20) -> list[float]:
    """Seconds per 32-file batch (4 in flight) when `readers` clients read at once, batch after batch."""
    queues = SharedQueues(shared, nodes=readers, seed=seed, epoch=0)
    clock, times = [0.0] * readers, []
    for _ in range(batches):
        for reader in sorted(range(readers), key=clock.__getitem__):  # as SimGrid runs them: by their clock
            took = queues.read(clock[reader], reader, 32, 4)
            clock[reader] += took
            times.append(took)
    return times


# ---- shared storage as queues ---------------------------------------------------------------------

def test_a_queue_under_more_load_gives_a_longer_mean_and_a_wider_spread():
    light, heavy = batch_times(storage(), readers=1), batch_times(storage(), readers=64)
    assert statistics.mean(heavy) > 3 * statistics.mean(light)
    assert statistics.stdev(heavy) > 3 * statistics.stdev(light)


def test_other_jobs_load_lengthens_the_wait():
    idle = statistics.mean(batch_times(storage(), readers=4))
    busy = statistics.mean(batch_times(storage(background_load=0.8), readers=4))
    assert busy > 1.5 * idle


def test_alone_a_batch_costs_its_chains_of_rpc_and_service():
    """One reader, servers never busy: 8 files per worker, each file latency + its service draw."""
    fixed = storage(service=Distribution("fixed", 8e-3), servers=100_000)
    (took,) = batch_times(fixed, readers=1, batches=1)
    assert took == pytest.approx(8 * (1e-3 + 8e-3))


def test_a_slow_client_stays_slow_for_the_whole_epoch():
    spread = storage(client_spread=Distribution("lognormal", 1.0, cv=2.0), file_latency=5e-2, servers=10_000)
    queues = SharedQueues(spread, nodes=8, seed=3, epoch=0)
    slowest = int(np.argmax(queues.client))
    for _ in range(5):
        times = [queues.read(0.0, node, 32, 4) for node in range(8)]
        assert int(np.argmax(times)) == slowest


def test_the_draws_are_seeded():
    shared = storage(client_spread=Distribution("pareto", 1.0, shape=2.5))
    assert batch_times(shared, 8, seed=1) == batch_times(shared, 8, seed=1)
    assert batch_times(shared, 8, seed=1) != batch_times(shared, 8, seed=2)


@pytest.mark.parametrize("dist", [Distribution("lognormal", 2.0, cv=0.7), Distribution("pareto", 2.0, shape=3.0),
                                  Distribution("fixed", 2.0)])
def test_a_distribution_has_the_mean_it_is_given(dist):
    draws = dist.sample(np.random.default_rng(0), 200_000)
    assert draws.mean() == pytest.approx(2.0, rel=0.02)
    if dist.dist == "pareto":
        assert draws.min() >= 2.0 * 2 / 3  # x_m = mean (α − 1) / α


# ---- the engine: the allreduce waits for the slowest, prefetch hides what FW+BW covers -------------

def test_the_allreduce_waits_for_the_slowest_ranks_io():
    platform = tiny_platform(shared__client_spread={"dist": "lognormal", "mean": 1.0, "cv": 2.0},
                             shared__file_latency=1e-2, loader__prefetch=0)
    result = simulate(platform, scenario("global"))
    assert result.io_max_s > 2 * result.io_min_s  # the ranks drift apart
    # every rank's iteration ends together, so the others wait (in the allreduce) what the slowest read longer
    assert result.allreduce_s >= 0.9 * (result.io_max_s - result.io_s)


def test_identical_clients_and_idle_servers_read_alike():
    platform = tiny_platform(shared__servers=100_000, loader__prefetch=0,
                             shared__service={"dist": "fixed", "mean": 1e-3})
    result = simulate(platform, scenario("global"))
    assert result.io_max_s == pytest.approx(result.io_min_s, rel=0.05)


@pytest.mark.parametrize("cpu_per_file, hidden", [(2e-5, True), (4e-4, False)])
def test_prefetch_hides_io_up_to_fwbw_and_no_more(cpu_per_file, hidden):
    """Batches of 8 from a store that costs nothing but CPU, 2 in flight: loading is 4·cpu_per_file a
    batch, FW+BW 8e-4 s, the allreduce nothing. Read ahead, a rank waits only for what loading takes
    beyond FW+BW."""
    def io(prefetch: int) -> float:
        platform = tiny_platform(loader__cpu_per_file=cpu_per_file, loader__prefetch=prefetch, local__file_latency=0.0,
                                 local__read_bandwidth=1e15, allreduce__alpha=0.0, models__tiny__gradient_bytes=0.0)
        return simulate(platform, scenario("local")).io_s

    iterations, load, fwbw = 8, 4 * cpu_per_file, 8 * 1e-4
    in_loop, ahead = io(0), io(2)
    assert in_loop == pytest.approx(iterations * load, rel=0.05)
    if hidden:
        assert ahead <= load * 1.05  # only the first batch is waited for
    else:
        assert ahead == pytest.approx(load + (iterations - 1) * (load - fwbw), rel=0.15)
        assert ahead < in_loop


# ---- the allreduce in buckets ------------------------------------------------------------------------

@pytest.mark.parametrize("overlap", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("backward_s", [0.0, 1e-3, 0.05, 1.0])
@pytest.mark.parametrize("gradient_bytes", [1e5, 1.0e8, 4.4e8])
def test_bucketed_overlap_never_ends_an_iteration_before_its_backward(overlap, backward_s, gradient_bytes):
    allreduce = Allreduce(alpha=1e-5, bandwidth=1e10, overlap=overlap)
    total = allreduce.seconds(64, gradient_bytes)
    exposed = allreduce.exposed(64, gradient_bytes, backward_s)
    buckets = math.ceil(gradient_bytes / allreduce.bucket_bytes)
    assert exposed >= total / buckets - 1e-12  # the last bucket is ready only when backward ends
    assert exposed <= total + 1e-12
    assert exposed >= total - overlap * backward_s - 1e-12  # at most `overlap` of backward's time is hidden


def test_more_overlap_hides_more_and_none_hides_nothing():
    exposed = [Allreduce(1e-5, 1e10, overlap=o).exposed(512, 1.0e8, 0.1) for o in (0.0, 0.25, 0.5, 1.0)]
    assert exposed[0] == Allreduce(1e-5, 1e10).seconds(512, 1.0e8)
    assert exposed == sorted(exposed, reverse=True) and exposed[-1] < exposed[0]


# ---- bad distributions are named before anything is simulated --------------------------------------

@pytest.mark.parametrize("service, message", [
    ({"dist": "lognormal", "mean": -1e-3, "cv": 0.3}, "shared.service.mean must be >= 0, got -0.001"),
    ({"dist": "lognormal", "mean": float("nan"), "cv": 0.3}, "shared.service.mean must be a finite number"),
    ({"dist": "lognormal", "mean": 1e-3, "cv": -0.3}, "shared.service.cv must be >= 0"),
    ({"dist": "pareto", "mean": 1e-3, "shape": 1.0}, "shared.service.shape must be > 1"),
    ({"dist": "gauss", "mean": 1e-3}, "shared.service.dist 'gauss' is not one of"),
    ({"dist": "lognormal", "mean": 1e-3},
     "shared.service.cv is missing: a lognormal distribution takes exactly ['cv', 'mean'] (e.g. {dist: lognormal"),
    ({"dist": "fixed", "mean": 1e-3, "shape": 2.0},
     "shared.service.shape is not a parameter here: a fixed distribution takes exactly ['mean']"),
    ({"mean": 1e-3, "cv": 0.3}, "missing shared.service.dist"),
    (8e-3, "shared.service: Invalid type assigned: float is not a subclass of Distribution. value: 0.008"),
])
def test_a_bad_distribution_is_refused_with_its_key(service, message):
    raw = tiny_raw()
    raw["shared"]["service"] = service
    assert message in refused(raw)


@pytest.mark.parametrize("section, key, value, message", [
    ("shared", "background_load", 1.0, "shared.background_load must be <= 0.99"),
    ("allreduce", "overlap", 1.5, "allreduce.overlap must be <= 1.0"),
])
def test_a_share_above_one_is_refused(section, key, value, message):
    raw = tiny_raw()
    raw[section][key] = value
    assert message in refused(raw)


# ---- the PLS authors' scheduler: a barrier per exchanged sample ------------------------------------

def slots_platform(scheduler: str, noise: float):
    return tiny_platform(exchange__scheduler=scheduler, exchange__slot_cpu=1e-4,
                         exchange__noise={"dist": "lognormal", "mean": noise, "cv": 1.0})


def test_every_exchanged_sample_costs_the_authors_scheduler_its_slot():
    """16 ranks, q = 0.3 of 64 samples each: ⌈19.2⌉ = 20 slots of 1e-4 s of CPU, each behind a barrier."""
    result = simulate(slots_platform("kakurenbo", 0.0), scenario("partial"))
    assert result.exchange_s >= 20 * 1e-4
    assert result.exchange_s < 20 * 1e-4 + 0.01


def test_noise_costs_the_authors_scheduler_more_with_more_ranks_and_hpcshuffles_exchange_nothing():
    def exchange(scheduler: str, workers: int, noise: float) -> float:
        platform = slots_platform(scheduler, noise)
        return simulate(platform, scenario("partial", workers=workers, samples=64 * workers)).exchange_s

    def cost_of_noise(scheduler: str, workers: int) -> float:
        return exchange(scheduler, workers, 1e-3) - exchange(scheduler, workers, 0.0)

    assert cost_of_noise("kakurenbo", 32) > 1.2 * cost_of_noise("kakurenbo", 4) > 0  # each barrier waits for the slowest
    for workers in (4, 32):  # hpcshuffle's exchange has no barrier: noise waits in the allreduce, not here
        assert cost_of_noise("hpcshuffle", workers) == pytest.approx(0.0, abs=1e-3)


def test_an_unknown_scheduler_is_refused():
    raw = tiny_raw()
    raw["exchange"]["scheduler"] = "mpi"
    assert "exchange.scheduler 'mpi' is not one of ['hpcshuffle', 'kakurenbo']" in refused(raw)
