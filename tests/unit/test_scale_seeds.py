"""`hpcshuffle scale --seeds N` (hpcshuffle/scale/seeds.py): which scenarios cannot depend on the seed and are
simulated once, the median and 10–90 % range over seeds, the seed-paired ratio to LS, the slowest client's
factor growing with the node count, and bad input refused before anything is simulated.

Real simulations run only on the tiny platform at 16 workers (well under a second each); the rest stubs the
simulation or draws no epoch at all."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from hpcshuffle.cli import main
from hpcshuffle.scale import recommend, seeds
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Distribution, Platform
from hpcshuffle.scale.platform_yaml import load_platform, platform_from_dict
from hpcshuffle.scale.recommend import recommendation_table
from hpcshuffle.scale.scenario import Result, Scenario
from hpcshuffle.scale.seeds import (
    SeedRuns,
    Spread,
    is_deterministic,
    recommendation_over_seeds,
    simulate_seeds,
)
from hpcshuffle.scale.storage import SharedQueues
from tests.conftest import cli_error

TINY = Path(__file__).resolve().parents[1] / "data" / "platform_tiny.yaml"
ON_TINY = ["--model", "tiny", "--dataset", "tiny", "--batch", "8"]


def tiny_raw(**changes) -> dict:
    """The tiny platform's mapping with `section__key=value` changed."""
    raw = copy.deepcopy(yaml.safe_load(TINY.read_text()))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        raw[section][key] = value
    return raw


def tiny_platform(**changes) -> Platform:
    """The tiny platform with `section__key=value` changed."""
    return platform_from_dict(tiny_raw(**changes), str(TINY))


@pytest.fixture
def fixed_tiny(tmp_path) -> Path:
    """The tiny platform with nothing drawn at random: one shared-storage server (its 10 are chosen at random),
    fixed service, identical clients, no background load, no noise."""
    path = tmp_path / "fixed_tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(shared__servers=1)))
    return path


def scenario(shuffle: str, q: float | None = None, seed: int = 0) -> Scenario:
    return Scenario(16, shuffle, q, "tiny", "tiny", 8, seed)


def fake_result(platform: Platform, scenario: Scenario) -> Result:
    """A made-up epoch of `scenario`, growing with its seed (GS 10 + s, PLS 3 + s, LS 2 + s seconds)."""
    epoch_s = {"global": 10.0, "partial": 3.0, "local": 2.0}[scenario.shuffle] + scenario.seed
    q = {"global": 1.0, "local": 0.0}.get(scenario.shuffle, scenario.q)
    return Result(scenario.workers, scenario.shuffle, q, epoch_s, io_s=epoch_s / 2, exchange_s=0.0, fwbw_s=1.0,
                  allreduce_s=epoch_s / 2 - 1.0, iterations=16, wall_s=0.5, scope=scenario.scope)


def recorded(monkeypatch, run) -> list[Scenario]:
    """Route the CLI's simulations through `run`; the scenarios it was asked for, in order."""
    asked: list[Scenario] = []

    def record(platform, scenario):
        asked.append(scenario)
        return run(platform, scenario)
    monkeypatch.setattr(seeds, "simulate", record)
    return asked


@pytest.fixture
def simulations(monkeypatch) -> list[Scenario]:
    """Count what the CLI simulates; each simulation is still the real one."""
    return recorded(monkeypatch, simulate)


@pytest.fixture
def faked(monkeypatch) -> list[Scenario]:
    """Replace the CLI's simulation by `fake_result`; the scenarios it was asked for, in order."""
    return recorded(monkeypatch, fake_result)


@pytest.fixture
def nothing_simulated(monkeypatch):
    """Fail the test if the command simulates anything."""
    def refuse(platform, scenario):
        raise AssertionError(f"simulated {scenario} before refusing the command")
    monkeypatch.setattr(seeds, "simulate", refuse)
    monkeypatch.setattr(recommend, "simulate", refuse)


def scale_json(capsys, *args: str) -> dict:
    main(["scale", *args, "--json"])
    return json.loads(capsys.readouterr().out)


# ---- (a) a deterministic platform: one seed and twenty agree, each scenario simulated once -------------

def test_one_seed_and_twenty_agree_on_a_deterministic_platform(capsys, fixed_tiny, simulations):
    run = ["--platform", str(fixed_tiny), *ON_TINY, "--workers", "16", "--shuffle", "global", "local"]
    one = scale_json(capsys, *run, "--seeds", "1")
    assert len(simulations) == 2
    twenty = scale_json(capsys, *run, "--seeds", "20")
    assert len(simulations) == 2 + 2  # GS and LS once each: nothing in either is drawn at random
    assert [s.seed for s in simulations] == [0, 0, 0, 0]
    assert (one["seeds"], twenty["seeds"]) == (1, 20)
    assert one["runs"] == twenty["runs"]  # identical numbers: SimGrid itself draws nothing
    for summary in twenty["scenarios"]:
        assert summary["deterministic"] is True and summary["simulated"] == 1
        assert summary["epoch_s"]["p10"] == summary["epoch_s"]["median"] == summary["epoch_s"]["p90"]
    ratio_one, ratio_twenty = (doc["ratios"][0]["ratios"]["global/local"] for doc in (one, twenty))
    assert ratio_twenty == ratio_one
    assert ratio_twenty["p10"] == ratio_twenty["median"] == ratio_twenty["p90"]
    assert one["scenarios"] == twenty["scenarios"]


def test_what_is_deterministic_is_the_same_at_every_seed_in_the_engine(fixed_tiny):
    """is_deterministic's claim, held against real simulations at two seeds (GS reads shared storage; LS
    and PLS at q = 0 move nothing); and a scenario it calls random does differ between them."""
    fixed = load_platform(str(fixed_tiny))
    for shuffle, q in (("global", None), ("local", None), ("partial", 0.0)):
        assert is_deterministic(fixed, scenario(shuffle, q))
        at_0, at_7 = (simulate(fixed, scenario(shuffle, q, seed)) for seed in (0, 7))
        assert {**vars(at_0), "wall_s": 0} == {**vars(at_7), "wall_s": 0}
    tiny = load_platform(str(TINY))  # 10 servers, each file's chosen at random
    assert not is_deterministic(tiny, scenario("global"))
    at_0, at_7 = (simulate(tiny, scenario("global", seed=seed)) for seed in (0, 7))
    assert at_0.io_s != at_7.io_s  # (its epoch may still agree: the loader's prefetch hides most of the I/O)


@pytest.mark.parametrize("changes, shuffle, q", [
    ({"shared__servers": 10}, "global", None),  # which server a file goes to is drawn
    ({"shared__service": {"dist": "lognormal", "mean": 1e-3, "cv": 0.5}}, "global", None),
    ({"shared__client_spread": {"dist": "lognormal", "mean": 1.0, "cv": 4.5}}, "global", None),
    ({"shared__background_load": 0.3}, "global", None),
    ({"exchange__noise": {"dist": "pareto", "mean": 1e-4, "shape": 1.5}}, "local", None),  # every FW+BW's jitter
    ({}, "partial", 0.1),  # the exchange's peers are drawn
    ({}, "locality", None),  # so are the lenders
])
def test_each_source_of_randomness_makes_a_scenario_seeded(changes, shuffle, q):
    platform = tiny_platform(**{"shared__servers": 1, **changes})
    assert not is_deterministic(platform, scenario(shuffle, q))


def test_shared_storage_draws_matter_only_to_a_strategy_that_reads_it():
    platform = tiny_platform(shared__client_spread={"dist": "lognormal", "mean": 1.0, "cv": 4.5})
    assert is_deterministic(platform, scenario("local"))
    assert not is_deterministic(platform, scenario("global"))


def test_a_lognormal_of_cv_0_or_mean_0_draws_nothing():
    assert not seeds.varies(Distribution("lognormal", 1.0, cv=0.0))
    assert not seeds.varies(Distribution("pareto", 0.0, shape=1.5))
    assert seeds.varies(Distribution("lognormal", 1.0, cv=0.1))


# ---- (b) the slowest of M clients --------------------------------------------------------------------

def test_the_slowest_clients_factor_grows_with_the_node_count_for_a_heavy_tail():
    """abci's client_spread (lognormal, cv 4.5) as the engine draws it, once per node per epoch: the median
    over seeds of the largest factor among M nodes grows with M. That is why GS/LS grows with M, and why
    one seed is not the answer: the largest factor is one draw from a wide distribution."""
    shared = load_platform("abci").shared
    medians = []
    for nodes in (4, 32, 256):
        slowest = [SharedQueues(shared, nodes, seed, epoch=0).client.max() for seed in range(300)]
        medians.append(float(np.median(slowest)))
    assert medians[0] < medians[1] < medians[2]
    assert medians[2] > 4 * medians[0]  # heavy-tailed: not a few per cent


def test_identical_clients_have_no_slowest():
    shared = tiny_platform(shared__servers=1).shared  # client_spread defaults to fixed 1.0
    assert {SharedQueues(shared, 256, seed, epoch=0).client.max() for seed in range(5)} == {1.0}


# ---- (c) percentiles, and the ratio paired seed by seed ------------------------------------------------

def test_spread_is_the_median_and_the_10th_and_90th_percentiles():
    # sorted 1 3 5 7 9: p10 lies 0.4 of the way from 1 to 3, p90 0.6 of the way from 7 to 9
    assert Spread.of([7, 1, 9, 3, 5]) == Spread(median=5.0, p10=1.8, p90=8.2)
    assert Spread.of([1, 2, 3, 4]) == Spread(median=2.5, p10=pytest.approx(1.3), p90=pytest.approx(3.7))
    assert Spread.of([2.5]) == Spread(2.5, 2.5, 2.5)
    assert Spread.of(list(range(1, 11))).as_dict() == {"median": 5.5, "p10": pytest.approx(1.9),
                                                        "p90": pytest.approx(9.1)}
    with pytest.raises(ValueError, match="at least one value"):
        Spread.of([])


def test_the_ratio_divides_each_seeds_epoch_by_ls_at_the_same_seed():
    def runs(epochs: list[float], deterministic: bool = False) -> SeedRuns:
        results = tuple(Result(16, "global", 1.0, e, 0, 0, 0, 0, iterations=1, wall_s=0) for e in epochs)
        return SeedRuns(scenario("global"), (0, 1, 2), results, deterministic)

    gs = runs([2.0, 4.0, 6.0])
    assert gs.ratio(runs([1.0, 2.0, 3.0])) == Spread(2.0, 2.0, 2.0)  # paired: not 4 / 2 of the medians by chance
    assert gs.ratio(runs([3.0, 2.0, 1.0])) == Spread.of([2 / 3, 2.0, 6.0])
    assert gs.ratio(runs([1.0], deterministic=True)) == Spread.of([2.0, 4.0, 6.0])  # LS simulated once
    assert gs.spread("epoch_s") == Spread(4.0, 2.4, 5.6)


def test_simulate_seeds_runs_each_seed_and_a_deterministic_scenario_once():
    fixed, asked = tiny_platform(shared__servers=1), []

    def fake(platform, scenario):
        asked.append((scenario.shuffle, scenario.seed))
        return fake_result(platform, scenario)
    lines: list[str] = []
    gs, ls, pls = simulate_seeds(fixed, [scenario("global", seed=3), scenario("local", seed=3),
                                         scenario("partial", 0.1, seed=3)], 4, lines.append, simulate_one=fake)
    assert asked == [("global", 3), ("local", 3), ("partial", 3), ("partial", 4), ("partial", 5), ("partial", 6)]
    assert gs.seeds == ls.seeds == pls.seeds == (3, 4, 5, 6)
    assert (gs.deterministic, ls.deterministic, pls.deterministic) == (True, True, False)
    assert [r.epoch_s for r in pls.results] == [6.0, 7.0, 8.0, 9.0]
    assert ls.at(6) is ls.at(3)
    assert pls.ratio(ls) == Spread.of([6 / 5, 7 / 5, 8 / 5, 9 / 5])
    assert lines[0].startswith("[1/6] every seed (nothing drawn): global")
    assert lines[3].startswith("[4/6] seed 4: partial")


# ---- the CLI over seeds -----------------------------------------------------------------------------

def test_json_over_seeds(capsys, faked):
    doc = scale_json(capsys, "--platform", str(TINY), *ON_TINY, "--workers", "16", "32", "--shuffle", "global",
                     "local", "partial", "--q", "0.1", "--seeds", "5", "--seed", "10")
    assert doc["seeds"] == 5
    # tiny: GS reads shared storage from 10 servers (drawn), PLS exchanges (drawn), LS neither: simulated once
    per_count = [("global", s) for s in range(10, 15)] + [("local", 10)] + [("partial", s) for s in range(10, 15)]
    assert [(row["shuffle"], row["seed"]) for row in doc["runs"]] == per_count * 2
    assert [(s.workers, s.shuffle, s.seed) for s in faked] == [(m, shuffle, seed) for m in (16, 32)
                                                                for shuffle, seed in per_count]
    assert [(g["workers"], g["scope"], list(g["ratios"])) for g in doc["ratios"]] == [
        (workers, "rank", ["global/local", "partial-0.1/local"]) for workers in (16, 32)]
    # fake_result: GS at seed s takes 10 + s seconds, LS 2 + s, simulated once at seed 10: 12 s at every seed
    assert doc["ratios"][0]["ratios"]["global/local"] == Spread.of([(20 + s) / 12 for s in range(5)]).as_dict()
    global_summary = doc["scenarios"][0]
    assert (global_summary["label"], global_summary["deterministic"], global_summary["simulated"]) == ("global",
                                                                                                       False, 5)
    assert global_summary["epoch_s"] == {"median": 22.0, "p10": pytest.approx(20.4), "p90": pytest.approx(23.6)}
    assert list(global_summary)[7:] == [*seeds.SPREAD_FIELDS, "envelope"]


def test_table_over_seeds_shows_median_and_range(capsys, faked):
    main(["scale", "--platform", str(TINY), *ON_TINY, "--workers", "16", "--shuffle", "global", "local",
          "--seeds", "5"])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].endswith("over seeds 0..4: median [p10, p90], phases median")
    assert lines[1].split()[-4:] == ["LS", "seeds", "sim", "wall"]
    assert lines[2].split()[:6] == ["16", "global", "16", "12.00", "[10.40,", "13.60]"]
    assert lines[2].split()[-5:-1] == ["6.00", "[5.20,", "6.80]", "5"]  # (10 + s) / 2 over seeds 0..4
    assert lines[3].split()[:6] == ["16", "local", "16", "2.00", "[2.00,", "2.00]"]
    assert lines[4].startswith("simulated once (local): nothing in it is drawn at random")
    assert len([line for line in err.splitlines() if line.startswith("[")]) == 6


def test_one_seed_keeps_the_one_draw_table(capsys, faked):
    main(["scale", "--platform", str(TINY), *ON_TINY, "--workers", "16", "--shuffle", "global", "local"])
    lines = capsys.readouterr().out.splitlines()
    assert "over seeds" not in lines[0] and "seeds" not in lines[1].split()
    assert lines[2].split()[3] == "10.00" and lines[2].split()[-2] == "5.00"


# ---- --recommend over seeds ---------------------------------------------------------------------------

def over_three_seeds(shuffle: str, q: float, epochs: list[float]) -> SeedRuns:
    """A scenario at 16 workers whose epochs at seeds 0, 1, 2 are `epochs`."""
    results = tuple(Result(16, shuffle, q, epoch, 0, 0, 0, 0, iterations=1, wall_s=0) for epoch in epochs)
    return SeedRuns(scenario(shuffle, q), (0, 1, 2), results, deterministic=False)


def test_recommend_over_seeds_takes_the_median_of_the_paired_ratios():
    """LS takes 10, 20, 30 s at seeds 0..2. PLS-0.1's ratios, paired by seed, are 1.05, 1.05, 2.0: median 1.05,
    within 10 % (their mean, 1.37, is not). PLS-0.3's are 1.5, 1.25, 0.67: median 1.25, not within (its median
    epoch over LS's median epoch, 20 / 20, would be). So the answer is 0.1; at 30 %, 0.3."""
    runs = [over_three_seeds("local", 0.0, [10, 20, 30]), over_three_seeds("partial", 0.1, [10.5, 21, 60]),
            over_three_seeds("partial", 0.3, [15, 25, 20])]
    lines = recommendation_over_seeds(runs, 0.10).splitlines()
    assert lines[0].startswith("largest q whose simulated epoch is within 10% of local shuffling's, by the median "
                               "over seeds 0..2 of epoch / LS paired by seed")
    assert lines[1].split()[6:] == ["median", "epoch", "/", "LS", "per", "q", "[p10,", "p90]"]
    # LS epoch: its median; per q the median ratio and [p10, p90] of (1.05, 1.05, 2.0) and (1.5, 1.25, 0.67)
    assert lines[2].split() == ["16", "rank", "20.0", "0.1", "0.1:1.05", "[1.05,", "1.81]", "0.3:1.25", "[0.78,",
                                "1.45]"]
    assert lines[3].startswith("tune-q names the q accuracy needs")
    assert recommendation_over_seeds(runs, 0.30).splitlines()[2].split()[3] == "0.3"
    assert recommendation_over_seeds(runs, 0.01).splitlines()[2].split()[3] == "none"


def test_recommend_over_seeds_from_the_cli(capsys, faked):
    """fake_result: LS 2 s, simulated once (nothing drawn); PLS 3 + s s at seed s, for each q: ratios 1.5..3.5."""
    main(["scale", "--platform", str(TINY), *ON_TINY, "--workers", "16", "--recommend", "--q", "0.1", "0.3",
          "--seeds", "5", "--tolerance", "1.5"])
    out, err = capsys.readouterr()
    assert [(s.shuffle, s.q, s.seed) for s in faked] == [("local", 0.0, 0)] + [
        ("partial", q, seed) for q in (0.1, 0.3) for seed in range(5)]
    assert out.splitlines()[2].split() == ["16", "rank", "2.0", "0.3", "0.1:2.50", "[1.70,", "3.30]", "0.3:2.50",
                                           "[1.70,", "3.30]"]
    assert len([line for line in err.splitlines() if line.startswith("[")]) == 11


def test_recommend_at_one_seed_prints_the_one_draw_table(capsys, faked):
    """--seeds 1 (or no --seeds) is the table of one draw, as recommendation_table prints it."""
    args = ["scale", "--platform", str(TINY), *ON_TINY, "--workers", "16", "--recommend", "--q", "0.1", "0.3"]
    main(args)
    out = capsys.readouterr().out
    main([*args, "--seeds", "1"])
    assert capsys.readouterr().out == out
    one_draw = [fake_result(None, s) for s in faked[:3]]
    assert out == recommendation_table(one_draw, 0.10) + "\n"
    assert out.splitlines() == [
        "largest q whose simulated epoch is within 10% of local shuffling's",
        "workers scope  LS epoch s      q   epoch / LS per q",
        "     16  rank         2.0   none   0.1:1.50  0.3:1.50",
        "tune-q names the q accuracy needs (hpcshuffle tune-q RUNS...); run the larger of the two only if this "
        "cluster affords it",
    ]


# ---- (d) bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--seeds", "0"], "--seeds must be >= 1 (how many seeds to simulate each scenario at: --seeds 1 for one "
                       "draw, --seeds 20 for a median and its 10-90 % range), got 0"),
    (["--seeds", "-3"], "--seeds must be >= 1"),
    (["--seed", "-1", "--seeds", "4"], "--seed must be >= 0 (the first seed; numpy's seeds are non-negative), got -1"),
])
def test_bad_seeds_are_refused_before_anything_is_simulated(capsys, nothing_simulated, flags, message):
    err = cli_error(capsys, "scale", "--platform", str(TINY), *ON_TINY, *flags)
    assert message in err


def test_seeds_must_be_a_whole_number(capsys):
    with pytest.raises(SystemExit):
        main(["scale", "--platform", str(TINY), *ON_TINY, "--seeds", "2.5"])
    assert "--seeds: invalid int value: '2.5'" in capsys.readouterr().err
