"""One simulated epoch on real SimGrid (hpcshuffle/scale/engine.py) on the 16-node test platform,
and the recommendation built on its results (hpcshuffle/scale/recommend.py).

Each simulation here takes a fraction of a second; the results every test reads are simulated
once per module. SimGrid is installed by `make install` (CI has it): a missing SimGrid fails
here, as in test_sg.py, rather than skipping.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
from pathlib import Path

import pytest
import yaml

from hpcshuffle.plan import (
    HOME_SHARED,
    PATH_EXCHANGE,
    PATH_LOANS,
    PATH_SHARED,
    PATH_STORE,
    STRATEGIES,
)
from hpcshuffle.scale import engine
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Platform, PlatformError
from hpcshuffle.scale.platform_yaml import load_platform, platform_from_dict
from hpcshuffle.scale.recommend import affordable_q, recommendation_table, simulate_all
from hpcshuffle.scale.scenario import PHASES, Result, Scenario, result_row
from tests.conftest import can_plan, every_strategy_param

TINY = Path(__file__).resolve().parents[1] / "data" / "platform_tiny.yaml"
WORKERS = 16  # 8 nodes: two leaf switches of the tiny fat tree, so messages cross its top level
SAMPLES = 1024  # 64 per rank, 8 iterations of 8
BATCH = 8
every_strategy = pytest.mark.parametrize("strategy", every_strategy_param())


def tiny_platform(**changes) -> Platform:
    """The tiny platform with `section__key=value` (or `key=value`) changed."""
    raw = copy.deepcopy(yaml.safe_load(TINY.read_text()))
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        where = raw
        for part in path:
            where = where[part]
        where[last] = value
    return platform_from_dict(raw, str(TINY))


def scenario(shuffle: str, workers: int = WORKERS, samples: int = SAMPLES, **fields) -> Scenario:
    q = 0.3 if STRATEGIES[shuffle].fixed_q is None else None
    return Scenario(workers, shuffle, q, model="tiny", dataset="tiny", batch_size=BATCH, samples=samples, **fields)


@pytest.fixture(scope="module")
def tiny() -> Platform:
    return load_platform(str(TINY))


@pytest.fixture(scope="module")
def results(tiny) -> dict[str, Result]:
    """One epoch of every strategy at 16 workers."""
    return {name: simulate(tiny, scenario(name)) for name, strategy in STRATEGIES.items() if can_plan(strategy)}


def no_fork(monkeypatch) -> None:
    """Fail the test if `simulate` gets as far as starting a child."""
    def refuse(*args, **kwargs):
        raise AssertionError("simulate() forked a child for a scenario it should have refused")
    monkeypatch.setattr(engine.multiprocessing, "get_context", refuse)


# ---- every strategy at 16 workers ----------------------------------------------------------------

@every_strategy
def test_result_describes_the_scenario(results, strategy):
    result = results[strategy.name]
    assert (result.workers, result.shuffle) == (WORKERS, strategy.name)
    assert result.q == strategy.q_for(0.3 if strategy.fixed_q is None else None)
    assert result.iterations == SAMPLES // WORKERS // BATCH == 8
    assert result.wall_s > 0
    assert list(result.phases()) == list(PHASES) == ["io", "exchange", "fwbw", "allreduce"]


@every_strategy
def test_phases_are_finite_non_negative_and_add_up_to_the_epoch(results, strategy):
    result = results[strategy.name]
    phases = result.phases()
    for phase, seconds in phases.items():
        assert math.isfinite(seconds) and seconds >= 0, (phase, seconds)
    assert result.epoch_s > 0
    for seconds in phases.values():
        assert result.epoch_s >= seconds
    # every rank starts at 0 and leaves the final barrier at the same time, and the phases cover
    # its whole loop: the slowest rank's epoch is the sum of the phases' means
    assert result.epoch_s == pytest.approx(sum(phases.values()), rel=1e-9)


@every_strategy
def test_fwbw_is_the_epochs_samples_times_the_per_sample_time(tiny, results, strategy):
    # 2 ranks per node on 2 accelerators: nobody shares one
    expected = SAMPLES // WORKERS * tiny.model("tiny").fwbw_per_sample
    assert results[strategy.name].fwbw_s == pytest.approx(expected, abs=1e-6)


@every_strategy
def test_allreduce_is_at_least_the_alpha_beta_time_of_every_iteration(tiny, results, strategy):
    result = results[strategy.name]
    once = tiny.allreduce.seconds(WORKERS, tiny.model("tiny").gradient_bytes)
    assert once == pytest.approx(2 * 15 * 1e-5 + 2 * 15 / 16 * 1e6 / 1e9, rel=1e-12)
    assert result.allreduce_s >= result.iterations * once - 1e-12


@every_strategy
def test_exchange_only_where_samples_move(results, strategy):
    exchange_s = results[strategy.name].exchange_s
    if strategy.data_path in (PATH_EXCHANGE, PATH_LOANS):
        assert exchange_s > 0
    else:
        assert strategy.data_path in (PATH_STORE, PATH_SHARED)
        assert exchange_s == 0


def test_shared_storage_reads_cost_more_than_local_ones(results):
    """tiny: 1 ms per shared file vs 0.1 ms per local one, two files in flight, 8 files a batch."""
    shared = [name for name in results if STRATEGIES[name].home == HOME_SHARED]
    assert shared
    for name in shared:
        assert results[name].io_s > 2 * results["local"].io_s
        assert results[name].epoch_s > results["local"].epoch_s


def test_simulate_is_deterministic(tiny, results):
    again = simulate(tiny, scenario("partial"))
    assert dataclasses.replace(again, wall_s=0.0) == dataclasses.replace(results["partial"], wall_s=0.0)


def test_result_row_is_the_json_row(results):
    row = result_row(results["partial"])
    assert list(row) == ["workers", "shuffle", "q", "epoch_s", "io_s", "exchange_s", "fwbw_s", "allreduce_s", "scope",
                         "io_min_s", "io_max_s", "au"]
    assert row["scope"] == "rank"
    assert row["epoch_s"] == results["partial"].epoch_s and row["q"] == 0.3
    assert row["au"] == pytest.approx(row["fwbw_s"] / row["epoch_s"]) and 0 < row["au"] < 1


# ---- what the model charges, knob by knob -------------------------------------------------------

@pytest.mark.parametrize("accelerators, cores, share", [(2, 4, 1), (1, 4, 2), (0, 2, 1), (0, 1, 2)])
def test_ranks_sharing_a_compute_device_take_longer(accelerators, cores, share):
    """Two ranks on one node: FW+BW doubles where they share one accelerator (or, without any, one core)."""
    platform = tiny_platform(accelerators_per_node=accelerators, cpu_cores_per_node=cores)
    result = simulate(platform, scenario("local", workers=2, samples=256))
    assert result.fwbw_s == pytest.approx(share * 128 * 1e-4, abs=1e-6)


def test_shared_file_latency_slows_only_shared_reads():
    slow, slower = tiny_platform(shared__file_latency=1e-3), tiny_platform(shared__file_latency=1e-2)
    run = {(latency, name): simulate(platform, scenario(name, workers=4, samples=256))
           for latency, platform in ((1, slow), (10, slower)) for name in ("global", "local")}
    assert run[10, "global"].io_s > run[1, "global"].io_s
    assert run[10, "global"].epoch_s > run[1, "global"].epoch_s
    # 8 files per batch, 2 in flight: 4 latencies per iteration at least, 8 iterations
    assert run[10, "global"].io_s >= 8 * 4 * 1e-2 * 0.9
    assert run[10, "local"].io_s == run[1, "local"].io_s
    assert run[10, "local"].epoch_s == run[1, "local"].epoch_s


def test_star_network_carries_the_exchange():
    raw_network = {"topology": "star", "link_bandwidth": 1.25e9, "link_latency": 1e-6,
                   "intra_node_bandwidth": 1e10, "intra_node_latency": 1e-7}
    platform = tiny_platform(network=raw_network)
    assert platform.network.topology == "star"
    result = simulate(platform, scenario("partial", workers=8, samples=512))
    assert result.exchange_s > 0
    assert all(math.isfinite(value) and value >= 0 for value in result.phases().values())
    assert result.fwbw_s == pytest.approx(64 * 1e-4, abs=1e-6)


def test_a_later_epoch_replays_the_plan(tiny):
    result = simulate(tiny, scenario("partial", workers=4, samples=256, epoch=2))
    assert result.exchange_s > 0 and result.iterations == 8


def test_node_scope_moves_only_between_nodes_and_costs_less_exchange(tiny):
    """tiny runs 2 ranks per node: in node scope a rank never sends to its node's other rank, so the
    node's partition moves q of itself over the network only."""
    rank = simulate(tiny, scenario("partial", workers=8, samples=512))
    node = simulate(tiny, scenario("partial", workers=8, samples=512, scope="node"))
    assert (rank.scope, node.scope) == ("rank", "node")
    assert (rank.label, node.label) == ("partial-0.3", "partial-0.3-node")
    assert 0 < node.exchange_s < rank.exchange_s
    assert node.fwbw_s == pytest.approx(rank.fwbw_s) and node.iterations == rank.iterations
    local = simulate(tiny, scenario("local", workers=8, samples=512, scope="node"))
    assert local.exchange_s == 0 and local.label == "local-node"


# ---- refused scenarios and failures in the child ------------------------------------------------

def test_batch_larger_than_a_share_is_refused_before_forking(tiny, monkeypatch):
    no_fork(monkeypatch)
    share = r"batch size 100 is larger than a worker's share ⌊N/M⌋ = ⌊256/4⌋ = 64"
    with pytest.raises(ValueError, match=share):
        simulate(tiny, Scenario(4, "local", None, "tiny", "tiny", batch_size=100, samples=256))


@pytest.mark.parametrize("change, message", [
    ({"workers": 33}, "at most 32 ranks"),
    ({"model": "resnet50"}, re.escape("describes no model 'resnet50'; choose one of ['tiny']")),
    ({"dataset": "imagenet1k", "samples": None},
     re.escape("describes no dataset 'imagenet1k'; choose one of ['tiny']")),
    ({"q": 1.5}, r"q must be in \[0, 1\], got 1.5"),
    ({"shuffle": "random"}, "unknown shuffle 'random'"),
    ({"scope": "rack"}, re.escape("scope must be one of ('rank', 'node'), got 'rack'")),
    ({"scope": "node", "shuffle": "global", "q": None},
     "shuffle=global reads shared storage and has no partition to share"),
    ({"scope": "node", "workers": 3}, "node scope fills nodes of 2 ranks on platform tiny, so 3 workers do not make "
                                      "whole nodes: use a multiple of 2, or rank scope"),
])
def test_bad_scenarios_are_refused_before_forking(tiny, monkeypatch, change, message):
    no_fork(monkeypatch)
    bad = dataclasses.replace(scenario("partial", workers=4, samples=256), **change)
    with pytest.raises(ValueError, match=message):
        simulate(tiny, bad)
    assert issubclass(PlatformError, ValueError)


def test_an_exception_in_the_child_is_raised_in_the_parent(tiny, monkeypatch):
    parent = os.getpid()

    def fail(platform, scenario):
        raise ValueError(f"failed in process {os.getpid()}")
    monkeypatch.setattr(engine, "_simulate_here", fail)
    with pytest.raises(ValueError, match="failed in process") as caught:
        simulate(tiny, scenario("local", workers=4, samples=256))
    assert str(caught.value) != f"failed in process {parent}"  # it ran in the child


def test_a_child_that_dies_is_reported_with_its_exit_code(tiny, monkeypatch):
    monkeypatch.setattr(engine, "_simulate_here", lambda platform, scenario: os._exit(3))
    with pytest.raises(RuntimeError, match=r"the simulation of Scenario\(workers=4.*died \(exit code 3\)"):
        simulate(tiny, scenario("local", workers=4, samples=256))


def test_an_exception_in_an_actor_is_raised_in_the_parent(tiny, monkeypatch):
    """A Python error inside a SimGrid actor (here: posting an exchange message) must reach the
    caller as itself, not as SimGrid's abort of the child."""
    def fail(self, node, messages):
        raise ValueError("posting failed")
    monkeypatch.setattr(engine.EpochSimulation, "_post", fail)
    with pytest.raises(ValueError, match="posting failed"):
        simulate(tiny, scenario("partial", workers=4, samples=256))


def test_a_simulation_that_cannot_finish_is_an_error_not_a_zero_epoch(tiny):
    """Shared storage that opens no file (metadata_rate 0) deadlocks SimGrid; that must not come back
    as an epoch of 0 s. (Built past SharedStorage's own check, which refuses a rate of 0 anyway.)"""
    shared = copy.copy(tiny.shared)
    shared.metadata_rate = 0.0
    platform = dataclasses.replace(tiny, shared=shared)
    try:
        result = simulate(platform, scenario("global", workers=4, samples=256))
    except (ValueError, RuntimeError):
        return
    pytest.fail(f"a deadlocked simulation returned {result}")


# ---- recommend: which q can the cluster afford -------------------------------------------------------

def run(workers: int, shuffle: str, q: float, epoch_s: float) -> Result:
    return Result(workers, shuffle, q, epoch_s, 0.0, 0.0, 0.0, 0.0, iterations=10, wall_s=0.0)


HAND_MADE = [
    run(4, "local", 0.0, 10.0),
    run(4, "partial", 0.1, 10.5),
    run(4, "partial", 0.3, 10.9),
    run(4, "partial", 0.5, 11.5),
    run(8, "partial", 0.1, 6.0),
    run(8, "local", 0.0, 5.0),
    run(16, "local", 0.0, 4.0),
    run(16, "partial", 0.1, 4.5),
    run(16, "partial", 0.3, 4.1),  # a larger q may be cheaper (a different random exchange)
]


def test_affordable_q_is_the_largest_q_within_the_tolerance():
    def answer(*per_workers):
        return {(workers, "rank"): value for workers, value in zip((4, 8, 16), per_workers)}

    assert affordable_q(HAND_MADE, 0.10) == answer((0.3, 10.0), (None, 5.0), (0.3, 4.0))
    assert affordable_q(HAND_MADE, 0.20) == answer((0.5, 10.0), (0.1, 5.0), (0.3, 4.0))
    assert affordable_q(HAND_MADE, 0.01) == answer((None, 10.0), (None, 5.0), (None, 4.0))
    assert [workers for workers, _ in affordable_q(HAND_MADE, 0.1)] == [4, 8, 16]


def test_affordable_q_compares_each_scope_with_its_own_local_run():
    runs = [*HAND_MADE[:4], dataclasses.replace(run(4, "local", 0.0, 8.0), scope="node"),
            dataclasses.replace(run(4, "partial", 0.5, 8.5), scope="node")]
    answer = affordable_q(runs, 0.10)
    assert answer[4, "rank"] == (0.3, 10.0)
    assert answer[4, "node"] == (0.5, 8.0)  # 8.5 s is within 10 % of node LS's 8 s, not of rank LS's 10 s


def test_affordable_q_at_zero_tolerance_accepts_an_equal_epoch():
    assert affordable_q([run(2, "local", 0.0, 3.0), run(2, "partial", 0.2, 3.0)], 0.0) == {(2, "rank"): (0.2, 3.0)}


def test_affordable_q_needs_a_local_run_per_worker_count():
    with pytest.raises(ValueError, match="no local run at 8 workers in rank scope to compare with"):
        affordable_q([run(4, "local", 0.0, 1.0), run(8, "partial", 0.1, 1.0)], 0.1)


def test_affordable_q_refuses_a_negative_tolerance():
    with pytest.raises(ValueError, match=r"tolerance must be >= 0 .*got -0.1"):
        affordable_q(HAND_MADE, -0.1)


def test_recommendation_table_has_one_line_per_worker_count_with_its_q():
    table = recommendation_table(HAND_MADE, 0.10)
    assert "within 10% of local shuffling's" in table
    by_workers = {int(line.split()[0]): line.split() for line in table.splitlines() if line.split()[0].isdigit()}
    assert list(by_workers) == [4, 8, 16]
    assert by_workers[4][1:4] == ["rank", "10.0", "0.3"]
    assert by_workers[8][1:4] == ["rank", "5.0", "none"]
    assert by_workers[16][1:4] == ["rank", "4.0", "0.3"]
    assert by_workers[4][4:] == ["0.1:1.05", "0.3:1.09", "0.5:1.15"]
    assert "tune-q" in table


def test_simulate_all_keeps_the_order_and_reports_progress(tiny):
    lines: list[str] = []
    scenarios = [scenario("global", workers=4, samples=256), scenario("local", workers=2, samples=256)]
    results = simulate_all(tiny, scenarios, lines.append, jobs=2)
    assert [(r.shuffle, r.workers) for r in results] == [("global", 4), ("local", 2)]
    assert sorted(line.split(" ", 1)[0] for line in lines) == ["[1/2]", "[2/2]"]
    assert any(line.startswith("[1/2] global q=1 at 4 workers: epoch ") for line in lines)
