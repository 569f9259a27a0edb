"""The knee's fast path (hpcshuffle/scale/knee.py): order statistics of per-rank noise at every barrier."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hpcshuffle.scale import knee
from hpcshuffle.scale.order_stats import breakdown, extreme_quantile
from hpcshuffle.scale.platform import Distribution
from hpcshuffle.scale.platform_yaml import load_platform, with_values
from hpcshuffle.scale.scenario import Scenario
from hpcshuffle.studies.scale_knee import agreement_case

PARETO = {"dist": "pareto", "mean": 1.0e-4, "shape": 1.5}


@pytest.fixture(scope="module")
def abci():
    return load_platform("abci")


def test_the_largest_of_m_heavy_tailed_draws_grows_with_m():
    noise = Distribution("pareto", 1.0e-4, shape=1.5)
    medians = [float(extreme_quantile(noise, m, 0.5)) for m in (512, 1024, 2048)]
    assert medians[0] < medians[1] < medians[2]
    assert medians[2] / medians[0] == pytest.approx(4 ** (1 / 1.5), rel=0.01)  # a Pareto max grows as M^(1/α)


def test_without_noise_the_ratio_is_deterministic_and_the_engines_arithmetic(abci):
    setting = with_values(abci, {"exchange.scheduler": "kakurenbo"})
    scenario = Scenario(512, "partial", 0.1, samples=10 * 512 * 32)
    spread = knee.ratio(setting, scenario, seeds=5)
    assert spread.p10 == spread.median == spread.p90
    local = breakdown(abci, replace(scenario, shuffle="local", q=None)).epoch_s.median
    barrier = math.ceil(math.log2(512)) * abci.allreduce.alpha
    slots = 32  # ⌈0.1 · 163,840 / 512⌉, 3 or 4 an iteration over 10 iterations, each followed by one barrier
    partial = local + slots * (abci.exchange.slot_cpu + barrier) + 10 * barrier
    assert spread.median == pytest.approx(partial / local, rel=1e-12)


def test_the_authors_scheduler_agrees_with_simgrid_at_q_1(abci):
    scenario, setting = agreement_case(abci)
    local, partial = knee.epochs(setting, scenario, seeds=1)
    assert local[0] == pytest.approx(1.941268403206521, rel=1e-6)  # SimGrid, seed 0 (engine.simulate, 2026-11-29)
    assert partial[0] == pytest.approx(2.673186403206553, rel=1e-6)


def test_hpcshuffles_exchange_agrees_with_simgrid(abci):
    scenario = Scenario(512, "partial", 0.1, samples=10 * 512 * 32)
    _, partial = knee.epochs(abci, scenario, seeds=1)
    assert partial[0] == pytest.approx(1.9607481058284346, rel=1e-4)  # SimGrid, seed 0 (engine.simulate, 2026-11-29)


def test_noise_widens_the_ratio_and_the_refit_hits_its_target(abci):
    setting = with_values(abci, {"exchange.scheduler": "kakurenbo", "exchange.noise": PARETO})
    scenario = Scenario(512, "partial", 1.0, samples=4 * 512 * 32)
    spread = knee.ratio(setting, scenario, seeds=20)
    assert spread.p10 < spread.median < spread.p90
    assert knee.refit_slot_cpu(setting, scenario, 1.37, seeds=20) is None  # this noise alone is above 1.37
    small = with_values(setting, {"exchange.noise": {**PARETO, "mean": 1.0e-6}})
    refit = knee.refit_slot_cpu(small, scenario, 1.37, seeds=20)
    assert knee.ratio(small, scenario, 20, slot_cpu=refit).median == pytest.approx(1.37, abs=1e-6)


@pytest.mark.parametrize("change, scenario, message", [
    ({}, Scenario(512, "local", None), "exchanges nothing"),
    ({}, Scenario(512, "partial", 0.0), "exchanges nothing"),
    ({"loader.prefetch": 2}, Scenario(512, "partial", 0.1), "loader.prefetch"),
    ({"accelerators_per_node": 0}, Scenario(512, "partial", 0.1), "accelerators_per_node"),
    ({}, Scenario(512, "partial", 0.1, scope="node"), "scenario.scope"),
])
def test_what_the_fast_path_does_not_model_is_refused(abci, change, scenario, message):
    with pytest.raises(ValueError, match=message):
        knee.epochs(with_values(abci, change) if change else abci, scenario, seeds=2)


def test_no_seeds_is_refused(abci):
    with pytest.raises(ValueError, match="seeds"):
        knee.epochs(abci, Scenario(512, "partial", 0.1, samples=512 * 32), seeds=0)
