"""The client factor's family (studies/tails.py, issue 46): the slowest-of-M factor grows with M under both
families and faster under a Pareto of the same mean, the matched Paretos match, the family comparison picks
the family the samples were drawn from, and bad input is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcshuffle.analysis import families
from hpcshuffle.scale.platform import Distribution
from hpcshuffle.studies import tails

LOGNORMAL = Distribution("lognormal", 1.0, cv=1.243)


@pytest.mark.parametrize("spread", [LOGNORMAL, tails.pareto_same_cv(1.0, 1.243),
                                    tails.pareto_same_slowest(LOGNORMAL, 512)])
def test_the_median_slowest_factor_grows_with_the_nodes(spread):
    medians = [tails.slowest(spread, nodes).median for nodes in tails.NODES]
    assert all(later > earlier for earlier, later in zip(medians, medians[1:]))
    for nodes in tails.NODES:
        found = tails.slowest(spread, nodes)
        assert found.p10 < found.median < found.p90


def test_the_slowest_factor_grows_faster_under_a_pareto_of_the_same_mean():
    """Matched on the mean and the cv, or on the mean and the median slowest of 512: the Pareto's median
    slowest grows by a larger factor from 4 to 512 nodes, and (same cv) passes the lognormal's at some M."""
    def growth(spread):
        return tails.slowest(spread, 512).median / tails.slowest(spread, 4).median
    for pareto in (tails.pareto_same_cv(1.0, 1.243), tails.pareto_same_slowest(LOGNORMAL, 512)):
        assert pareto.mean == LOGNORMAL.mean
        assert growth(pareto) > growth(LOGNORMAL)
    assert tails.crossing_nodes(LOGNORMAL, tails.pareto_same_cv(1.0, 1.243)) is not None


def test_the_matched_paretos_match():
    same_cv = tails.pareto_same_cv(1.0, 1.243)
    assert math.sqrt(same_cv.scv()) == pytest.approx(1.243, rel=1e-9)
    rng = np.random.default_rng(1)
    assert same_cv.sample(rng, 400_000).mean() == pytest.approx(1.0, rel=0.02)
    same_slowest = tails.pareto_same_slowest(LOGNORMAL, 512)
    assert tails.slowest(same_slowest, 512).median == pytest.approx(tails.slowest(LOGNORMAL, 512).median, rel=1e-6)
    assert same_slowest.shape > 2  # the lighter of the two matching shapes: a finite variance here


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_comparison_picks_the_family_the_samples_came_from(seed):
    rng = np.random.default_rng(seed)
    from_lognormal = LOGNORMAL.sample(rng, 2000)
    from_pareto = Distribution("pareto", 1.0, shape=2.5).sample(rng, 2000)
    assert families.compare_families(from_lognormal).better == "lognormal"
    assert families.compare_families(from_lognormal).vuong_z > 2
    assert families.compare_families(from_pareto).better == "pareto"
    assert families.compare_families(from_pareto).vuong_z < -2
    tail = families.compare_families(from_pareto * 1e-3, tail_quantile=0.5)
    assert tail.pareto["alpha"] == pytest.approx(2.5, rel=0.2)
    assert tail.ks_pareto < 0.1


def test_client_factors_are_each_readers_mean_over_the_readers_mean():
    factors = families.client_factors([[1.0, 3.0], [4.0], [6.0]])
    assert factors.tolist() == pytest.approx([0.5, 1.0, 1.5])


@pytest.mark.parametrize("bad", [[1.0], [1.0, -1.0, 2.0], [1.0, float("nan"), 2.0], [2.0, 2.0, 2.0]])
def test_bad_samples_are_refused(bad):
    with pytest.raises(ValueError):
        families.compare_families(bad)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="tail_quantile"):
        families.compare_families([1.0, 2.0, 3.0], tail_quantile=1.0)
    with pytest.raises(ValueError, match="at least 10"):
        families.compare_families(np.arange(1.0, 21.0), tail_quantile=0.9)
    with pytest.raises(ValueError, match="cv"):
        tails.pareto_same_cv(1.0, 0.0)
    with pytest.raises(ValueError, match="nodes"):
        tails.slowest(LOGNORMAL, 0)
    with pytest.raises(ValueError, match="nodes"):
        tails.pareto_same_slowest(LOGNORMAL, 1)
    with pytest.raises(ValueError, match="2 readers"):
        families.client_factors([[1.0]])
    with pytest.raises(ValueError, match="no fitted value"):
        tails.fitted_values("shared.file_latency 0.01 x\n")
    with pytest.raises(ValueError, match="no measured points"):
        tails.summarize_measurement([])


def test_fitted_values_read_fit_txt():
    text = ("knob  fitted  range\nshared.file_latency           0.01709          0.01482 - 0.04226    0.012\n"
            "shared.client_spread.cv         1.243           0.6987 - 2.728      4.5\n"
            "loader.cpu_per_file           0.01368           0.0118 - 0.01659    0.0127\n")
    assert tails.fitted_values(text) == {"shared.file_latency": 0.01709, "shared.client_spread.cv": 1.243,
                                         "loader.cpu_per_file": 0.01368}


def test_gs_over_ls_grows_with_the_nodes_on_abci():
    from hpcshuffle.scale.platform_yaml import load_platform
    platform = load_platform("abci")
    ratios = [tails.gs_over_ls(platform, LOGNORMAL, nodes).median for nodes in (4, 32)]
    assert 1 < ratios[0] < ratios[1]
