"""The order-statistics path (scale/order_stats.py) and the fit on it (studies/order_fit.py, issue 46): exact
extreme quantiles against the engine's own draws, agreement with SimGrid seed by seed and over seeds at a
modest size, the fit recovering known parameters, and what either refuses."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pytest

from hpcshuffle.scale import order_stats
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Distribution
from hpcshuffle.scale.platform_yaml import load_platform, platform_path
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.scale.storage import SharedQueues
from hpcshuffle.studies import order_fit

ABCI = load_platform("abci")
SMALL_WORKERS, SMALL_ITERATIONS = 64, 20  # 16 nodes, 20 iterations: under a second of SimGrid a seed


def small(shuffle: str = "global", seed: int = 0) -> Scenario:
    return Scenario(SMALL_WORKERS, shuffle, None, model="densenet161", seed=seed,
                    samples=SMALL_WORKERS * 32 * SMALL_ITERATIONS)


# ---- exact order statistics ------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [4, 32, 128])
def test_the_extreme_quantiles_are_those_of_the_engines_draws(nodes):
    """F_max⁻¹(p) = F⁻¹(p^{1/n}) and F_min⁻¹(p) = F⁻¹(1 − (1−p)^{1/n}): over 2,000 seeds of the engine's own
    draws (SharedQueues), the share below each exact quantile is p within sampling error (±0.035)."""
    spread = ABCI.shared.client_spread
    factors = np.array([SharedQueues(ABCI.shared, nodes, seed, 0).client for seed in range(2000)])
    for p in (0.1, 0.5, 0.9):
        assert np.mean(factors.max(axis=1) <= order_stats.extreme_quantile(spread, nodes, p)) == pytest.approx(p, abs=0.035)
        assert np.mean(factors.min(axis=1) <= order_stats.extreme_quantile(spread, nodes, p, largest=False)) == \
            pytest.approx(p, abs=0.035)


def test_the_slowest_of_m_grows_with_m_for_a_heavy_tail_and_not_for_identical_clients():
    heavy = [float(order_stats.extreme_quantile(ABCI.shared.client_spread, n, 0.5)) for n in (4, 32, 256)]
    assert heavy[0] < heavy[1] < heavy[2] and heavy[2] > 4 * heavy[0]
    assert {float(order_stats.extreme_quantile(Distribution("fixed", 1.0), n, 0.5)) for n in (4, 256)} == {1.0}
    pareto = Distribution("pareto", 1.0, shape=1.5)
    assert order_stats.extreme_quantile(pareto, 256, 0.5) > 10 * order_stats.extreme_quantile(pareto, 4, 0.5)


def test_processor_sharing_splits_the_resource_among_the_jobs_on_it():
    # two jobs of 1 s at once end together at 2 s; a third arriving at 3 s runs alone
    assert order_stats.processor_sharing(np.array([0.0, 0.0, 3.0]), 1.0).tolist() == pytest.approx([2.0, 2.0, 4.0])
    # the second arrives half way through the first: both share the next second
    assert order_stats.processor_sharing(np.array([0.0, 0.5]), 1.0).tolist() == pytest.approx([1.5, 2.0])


# ---- against SimGrid -------------------------------------------------------------------------------

TOLERANCE = {"io_s": 0.03, "io_min_s": 0.05, "io_max_s": 0.03, "allreduce_s": 0.03, "epoch_s": 0.03}


def test_the_fast_path_agrees_with_simgrid_seed_by_seed_and_over_seeds():
    """abci at 64 workers over 20 iterations, seeds 0-7: each phase within TOLERANCE of the simulation at the
    same seed's client factors, and LS exactly; over the seeds, the exact median of the slowest rank's I/O
    lies between the simulations' 2nd and 7th of 8 (where an 8-draw median's 93 % interval is)."""
    seeds = range(8)
    simulated = [simulate(ABCI, small(seed=seed)) for seed in seeds]
    for result, fast in zip(simulated, order_stats.at_seeds(ABCI, small(), seeds)):
        for field, tolerance in TOLERANCE.items():
            assert fast[field] == pytest.approx(getattr(result, field), rel=tolerance), (result.workers, field)
    io_max = sorted(result.io_max_s for result in simulated)
    assert io_max[1] <= order_stats.breakdown(ABCI, small()).io_max_s.median <= io_max[6]
    local, fast_local = simulate(ABCI, small("local")), order_stats.breakdown(ABCI, small("local"))
    assert fast_local.io_s.median == pytest.approx(local.io_s, rel=1e-3)
    assert fast_local.epoch_s.median == pytest.approx(local.epoch_s, rel=1e-3)


def test_the_mean_over_ranks_from_draws_matches_the_engines_draws_over_seeds():
    """The mean I/O and allreduce come from DRAWS seeded draws of the factors: their medians are those of
    the engine's own factors over 2,000 seeds (at the same io(c), so only the draws differ) within 2 %."""
    fast = order_stats.breakdown(ABCI, small())
    engine = order_stats.at_seeds(ABCI, small(), range(2000))
    for field in ("io_s", "allreduce_s", "epoch_s", "io_min_s"):
        assert getattr(fast, field).median == pytest.approx(statistics.median(row[field] for row in engine), rel=0.02)


# ---- the fit --------------------------------------------------------------------------------------

KNOWN = {"shared.file_latency": 8e-3, "shared.client_spread.cv": 2.0, "loader.cpu_per_file": 9e-3}


def test_the_fit_recovers_known_parameters_from_data_made_with_them():
    """Targets made by the fast path at KNOWN (64 workers, 500 draws to keep it quick); the fit, started at
    abci's values, finds KNOWN again within 1 %."""
    made = order_fit.predict(ABCI, KNOWN, SMALL_WORKERS, draws=500)
    targets = {key: made[key].median for key in order_fit.TARGETS}
    found = order_fit.fit(ABCI, targets, [order_fit.START], workers=SMALL_WORKERS, draws=500)
    assert found.error < 1e-6
    for knob, value in KNOWN.items():
        assert found.values[knob] == pytest.approx(value, rel=0.01), knob


def test_the_fit_is_deterministic():
    made = order_fit.predict(ABCI, KNOWN, SMALL_WORKERS, draws=200)
    targets = {key: made[key].median * 1.1 for key in order_fit.TARGETS}
    first, again = (order_fit.fit(ABCI, targets, [order_fit.START], workers=SMALL_WORKERS, draws=200) for _ in range(2))
    assert first.values == again.values


# ---- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, knob", [
    ({"loader": dataclasses.replace(ABCI.loader, prefetch=2)}, "loader.prefetch"),
    ({"shared": dataclasses.replace(ABCI.shared, background_load=0.2)}, "shared.background_load"),
    ({"exchange": dataclasses.replace(ABCI.exchange, noise=Distribution("pareto", 1e-4, shape=1.5))}, "exchange.noise"),
    ({"accelerators_per_node": 0}, "accelerators_per_node"),
    ({"machine_cores": 8}, "machine_cores"),
    ({"shared": dataclasses.replace(ABCI.shared, servers=4)}, "shared.servers"),
])
def test_a_platform_outside_the_assumptions_is_refused_by_its_knob(changes, knob):
    with pytest.raises(ValueError, match=knob):
        order_stats.breakdown(dataclasses.replace(ABCI, **changes), small())


def test_a_shuffle_that_moves_samples_is_refused():
    with pytest.raises(ValueError, match="moves samples"):
        order_stats.breakdown(ABCI, dataclasses.replace(small(), shuffle="partial", q=0.1))


@pytest.mark.parametrize("targets, message", [
    ({}, "at least one target"),
    ({("global", "io_s"): -1.0}, "positive seconds"),
    ({("global", "fwbw_s"): 3.0}, "no such target"),
])
def test_bad_targets_are_refused(targets, message):
    with pytest.raises(ValueError, match=message):
        order_fit.fit(ABCI, targets, workers=SMALL_WORKERS, draws=100)


def test_a_knob_that_is_not_free_is_refused():
    with pytest.raises(ValueError, match="not a free knob"):
        order_fit.with_free(ABCI, {"shared.servers": 3})


def test_write_platform_sets_the_free_knobs_with_a_comment_and_nothing_else(tmp_path):
    path = tmp_path / "abci.yaml"
    path.write_text(platform_path("abci").read_text())
    values = {"shared.file_latency": 1.5e-2, "shared.client_spread.cv": 2.25, "loader.cpu_per_file": 1.1e-2}
    order_fit.write_platform(path, values, "a test")
    written = load_platform(str(path))
    assert written.shared.file_latency == 1.5e-2 and written.shared.client_spread.cv == 2.25
    assert written.loader.cpu_per_file == 1.1e-2 and written.local.file_latency == ABCI.local.file_latency
    assert path.read_text().count("FITTED by experiments/scale_fit.py to a test") == 3
    assert dataclasses.replace(written, source="", extra={}) == dataclasses.replace(
        order_fit.with_free(ABCI, values), source="", extra={})
    copy = tmp_path / "abci_fit.yaml"  # a new platform: the source keeps its values
    order_fit.write_platform(copy, values, "a test", source=platform_path("abci"))
    fitted = load_platform(str(copy))
    assert fitted.name == "abci_fit" and fitted.shared.client_spread.cv == 2.25
    assert load_platform("abci").shared.client_spread.cv == ABCI.shared.client_spread.cv
