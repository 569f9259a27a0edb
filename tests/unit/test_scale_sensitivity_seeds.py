"""`hpcshuffle scale --sensitivity --seeds N` (hpcshuffle/scale/sensitivity.py, sensitivity_report.py): every
platform at seeds S..S+N−1, a scenario that draws nothing once; each knob's ratios the medians of the
ratios paired by seed; the base's p10 and p90 over the seeds a row (and a bar) of their own, ordered by
swing with the knobs; the JSON's fields over seeds. One seed's output is pinned in test_scale_sensitivity.

The logic runs under a made-up simulation; one test simulates the tiny platform with one knob on SimGrid."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from hpcshuffle.cli import main
from hpcshuffle.scale import sensitivity as sens
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.scenario import Result, Scenario
from hpcshuffle.scale.sensitivity import SeedSpread, knob_ranges, knob_variant
from hpcshuffle.scale.sensitivity_report import (
    plot_tornado,
    sensitivity_json,
    sensitivity_table,
)
from tests.conftest import cli_error
from tests.unit.test_scale_sensitivity import (
    ON_TINY,
    RANGES,
    fake_simulate,
    study_of,
    tiny,
    tiny_raw,
)

FIRST, SEEDS = 5, 3  # seeds 5, 6, 7
GROWTH = {"global": 0.3, "local": 0.0, "partial": 0.01}  # each seed after the first adds this share to the epoch


def seeded_fake(calls: list):
    """fake_simulate's epochs, GS's and PLS's growing with the seed (LS, which draws nothing on the tiny
    platform, does not): the base's GS/LS spreads more over the seeds than models.tiny.fwbw_per_sample
    moves it, less than shared.file_latency does."""
    flat = fake_simulate(calls)

    def run(platform: Platform, scenario: Scenario) -> Result:
        result = flat(platform, scenario)
        growth = 1 + GROWTH[scenario.shuffle] * (scenario.seed - FIRST)
        return dataclasses.replace(result, epoch_s=result.epoch_s * growth)
    return run


def epoch(platform: Platform, shuffle: str, seed: int) -> float:
    """The made-up epoch, computed here again, not read from the study."""
    return seeded_fake([])(platform, Scenario(2, shuffle, 0.1, "tiny", "tiny", 8, seed)).epoch_s


def paired(platform: Platform, shuffle: str) -> list[float]:
    """`shuffle`'s epoch over LS's at each seed."""
    return [epoch(platform, shuffle, seed) / epoch(platform, "local", seed) for seed in range(FIRST, FIRST + SEEDS)]


def tiny_file(tmp_path: Path) -> Path:
    """The tiny platform with test_scale_sensitivity's ranges, as a file for the command."""
    path = tmp_path / "sens.yaml"
    path.write_text(yaml.safe_dump(tiny_raw()))
    return path


@pytest.fixture(scope="module")
def faked():
    calls: list = []
    lines: list[str] = []
    study = study_of(tiny(), seed=FIRST, seeds=SEEDS, simulate_one=seeded_fake(calls), progress=lines.append)
    return study, calls, lines


def test_the_seed_row_is_the_bases_p10_and_p90_of_its_paired_ratios(faked):
    study, _, _ = faked
    row = study.seed_spread
    assert isinstance(row, SeedSpread) and row.name == "seed (5..7)" and row.seeds == (5, 6, 7)
    table = sensitivity_table(study).splitlines()
    (line,) = [line for line in table if line.startswith("seed (5..7) ")]
    columns = line.split()
    assert columns[2:5] == ["-", "-", "-"]
    for ratio, shuffle, at in (("gs_ls", "global", 5), ("pls_ls", "partial", 7)):
        p10, p90 = np.percentile(paired(tiny(), shuffle), [10, 90])
        spread = study.base.spread(ratio)
        assert (spread.p10, spread.p90) == pytest.approx((p10, p90), rel=1e-12)
        assert columns[at:at + 2] == [f"{p10:.3f}", f"{p90:.3f}"]
        assert row.swing(ratio) == pytest.approx(p90 - p10)
    assert line.endswith("  the base's p10 and p90 over 3 seeds: no knob moved")


def test_a_knobs_ends_are_the_medians_of_their_paired_ratios(faked):
    study, _, _ = faked
    platform = tiny()
    for effect in study.effects:
        for end in ("low", "high"):
            variant = knob_variant(platform, effect.knob, end)
            outcome = getattr(effect, end)
            assert outcome.gs_ls == pytest.approx(float(np.median(paired(variant, "global"))), rel=1e-12)
            assert outcome.pls_ls == pytest.approx(float(np.median(paired(variant, "partial"))), rel=1e-12)
    (line,) = [line for line in sensitivity_table(study).splitlines() if line.startswith("shared.file_latency ")]
    high = knob_variant(platform, knob_ranges(platform)[0], "high")
    assert line.split()[5] == f"{np.median(paired(high, 'global')):.3f}"


def test_the_seed_row_is_ordered_by_its_swing_among_the_knobs(faked):
    study, _, _ = faked
    names = [line.split()[0] for line in sensitivity_table(study).splitlines()[3:]]
    # GS/LS swings: file_latency ≈ 7 > the seed ≈ 0.72 > fwbw ≈ 0.43 > the exchange's 0
    assert names == ["shared.file_latency", "seed", "models.tiny.fwbw_per_sample", "exchange.cpu_per_sample"]
    assert [row.name for row in study.rows()] == ["shared.file_latency", "seed (5..7)", "models.tiny.fwbw_per_sample",
                                                  "exchange.cpu_per_sample"]
    assert [effect.knob.path for effect in study.effects] == ["shared.file_latency", "models.tiny.fwbw_per_sample",
                                                              "exchange.cpu_per_sample"]


def test_every_seed_is_simulated_except_where_nothing_is_drawn(faked):
    _, calls, lines = faked
    # 6 platforms (the exchange's low is the base): GS and PLS at 3 seeds, LS (nothing drawn) once
    assert len(calls) == len(lines) == 6 * (SEEDS + 1 + SEEDS)
    assert sorted(scenario.seed for _, scenario in calls if scenario.shuffle == "local") == [FIRST] * 6
    assert sorted({scenario.seed for _, scenario in calls}) == [5, 6, 7]
    assert "[1/42] base, seed 5: global q=1 at 2 workers: epoch " in lines[0]
    assert lines[3].startswith("[4/42] base, every seed (nothing drawn): local q=0 at 2 workers")


def test_the_header_and_base_line_say_the_seeds_and_the_medians(faked):
    study, _, _ = faked
    header, base = sensitivity_table(study).splitlines()[:2]
    assert ("2 workers, rank scope, seeds 5..7; GS/LS and PLS/LS (q=0.1): epoch over LS's epoch at the same seed"
            in header)
    assert header.endswith("low and high: medians over the 3 seeds, except in the row seed (5..7): the base's p10 and "
                           "p90 over them")
    gs = study.base.spread("gs_ls")
    assert base.startswith(f"base: GS/LS {gs.median:.3f} [{gs.p10:.3f}, {gs.p90:.3f}]  PLS/LS ")
    assert base.endswith(" (median [p10, p90] over the seeds)")


def test_json_over_seeds_adds_fields_and_keeps_the_others(faked):
    study, _, _ = faked
    doc = json.loads(json.dumps(sensitivity_json(study)))
    assert list(doc) == ["platform", "source", "workers", "q", "model", "dataset", "batch", "seed", "seeds", "scope",
                         "base", "knobs", "rows"]
    assert (doc["seed"], doc["seeds"]) == (5, 3)
    assert doc["rows"] == [row.name for row in study.rows()]
    base = doc["base"]
    assert list(base) == ["gs_ls", "pls_ls", "epoch_s", "over_seeds"]
    assert list(base["over_seeds"]) == ["gs_ls", "pls_ls", "epoch_s", "simulated"]
    assert base["over_seeds"]["simulated"] == {"global": 3, "local": 1, "partial": 3}
    p10, median, p90 = np.percentile(paired(tiny(), "global"), [10, 50, 90])
    assert base["over_seeds"]["gs_ls"] == pytest.approx({"median": median, "p10": p10, "p90": p90}, rel=1e-12)
    assert base["gs_ls"] == base["over_seeds"]["gs_ls"]["median"]
    assert base["epoch_s"]["global"] == pytest.approx(epoch(tiny(), "global", 6))  # the median seed's
    knob = doc["knobs"][0]
    assert list(knob) == ["knob", "low", "mid", "high", "source", "at_low", "at_high"]
    assert knob["at_high"]["gs_ls"] == knob["at_high"]["over_seeds"]["gs_ls"]["median"]
    assert set(knob["at_low"]["over_seeds"]["pls_ls"]) == {"median", "p10", "p90"}


def test_command_over_seeds(capsys, monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(sens, "simulate", seeded_fake(calls))
    main(["scale", "--platform", str(tiny_file(tmp_path)), *ON_TINY, "--sensitivity", "--seed", "5", "--seeds", "3",
          "--json", "--plot", str(tmp_path / "t.png")])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["seeds"] == 3 and doc["rows"][1] == "seed (5..7)" and len(calls) == 42
    assert len([line for line in captured.err.splitlines() if line.startswith("[")]) == 42
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags, message", [
    (["--seeds", "0"], "--seeds must be >= 1 (how many seeds to simulate each scenario at"),
    (["--seed", "-1", "--seeds", "2"], "--seed must be >= 0 (the first seed; numpy's seeds are non-negative)"),
])
def test_bad_seeds_are_refused_before_anything_is_simulated(capsys, tmp_path, monkeypatch, flags, message):
    monkeypatch.setattr(sens, "simulate", lambda *_: pytest.fail("simulated before refusing"))
    err = cli_error(capsys, "scale", "--platform", str(tiny_file(tmp_path)), *ON_TINY, "--sensitivity", *flags)
    assert message in err
    with pytest.raises(ValueError, match="--seeds must be >= 1"):
        study_of(tiny(), seeds=0, simulate_one=lambda *_: pytest.fail("simulated before refusing"))


def test_simgrid_over_two_seeds_on_the_tiny_platform(tmp_path):
    """One knob, 3 platforms × (GS, PLS at 2 seeds + LS once) = 15 SimGrid simulations of ≈ 0.3 s."""
    records: dict[tuple[int, str, int], Result] = {}
    platform = tiny({"shared.file_latency": RANGES["shared.file_latency"]})

    def recorded(variant: Platform, scenario: Scenario) -> Result:
        result = simulate(variant, scenario)
        records[id(variant), scenario.shuffle, scenario.seed] = result
        return result
    study = study_of(platform, seeds=2, jobs=2, simulate_one=recorded)
    assert len(records) == 15
    base = {(shuffle, seed): result for (at, shuffle, seed), result in records.items() if at == id(platform)}
    assert sorted(base) == [("global", 0), ("global", 1), ("local", 0), ("partial", 0), ("partial", 1)]
    gs_ls = [base["global", seed].epoch_s / base["local", 0].epoch_s for seed in (0, 1)]
    assert gs_ls[0] != gs_ls[1]  # the server each file goes to is drawn
    p10, p90 = np.percentile(gs_ls, [10, 90])
    lines = sensitivity_table(study).splitlines()
    (row,) = [line for line in lines if line.startswith("seed (0..1) ")]
    assert row.split()[5:7] == [f"{p10:.3f}", f"{p90:.3f}"]
    assert [line.split()[0] for line in lines[3:]] == ["shared.file_latency", "seed"]  # 10× latency moves GS more
    plot_tornado(study, tmp_path / "tornado.png")
    assert (tmp_path / "tornado.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
