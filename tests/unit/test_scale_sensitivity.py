"""`hpcshuffle scale --sensitivity` (hpcshuffle/scale/sensitivity.py, hpcshuffle/cli/scale_sensitivity.py):
every mistake in a platform's `ranges:` is refused, naming the knob and the fix, before anything is
simulated; knobs come out largest GS/LS swing first; a variant the simulation cannot tell from
another is simulated once; and on the tiny platform the table, --json and the tornado PNG come out."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from hpcshuffle.cli import main
from hpcshuffle.scale import sensitivity as sens
from hpcshuffle.scale.platform import Platform, PlatformError
from hpcshuffle.scale.platform_yaml import platform_from_dict
from hpcshuffle.scale.scenario import Result
from hpcshuffle.scale.sensitivity import (
    RangeError,
    knob_ranges,
    knob_variant,
    sensitivity,
)
from hpcshuffle.scale.sensitivity_report import (
    plot_tornado,
    sensitivity_json,
    sensitivity_table,
)
from tests.conftest import cli_error

TINY = Path(__file__).resolve().parents[1] / "data" / "platform_tiny.yaml"
# round, made-up ranges; exchange.cpu_per_sample's low is the platform's value (no simulation of its own)
RANGES = {
    "shared.file_latency": {"low": 1.0e-4, "high": 1.0e-2, "source": "test: 10x either side"},
    "models.tiny.fwbw_per_sample": {"low": 5.0e-5, "high": 2.0e-4, "source": "test: 2x either side"},
    "exchange.cpu_per_sample": {"low": 1.0e-4, "high": 1.0e-3, "source": "test: the platform's value to 10x"},
}
WORKERS, BATCH = 2, 8
# the tiny platform with a quarter of its samples (32 iterations at 2 workers): each simulation ≈ 0.3 s
ON_TINY = ["--model", "tiny", "--dataset", "tiny", "--batch", str(BATCH), "--workers", str(WORKERS)]


def tiny_raw(ranges: dict | None = None) -> dict:
    """tests/data/platform_tiny.yaml (whatever its schema now) with 512 samples and `ranges`."""
    raw = copy.deepcopy(yaml.safe_load(TINY.read_text()))
    raw["datasets"]["tiny"]["samples"] = 512
    raw["ranges"] = copy.deepcopy(RANGES if ranges is None else ranges)
    return raw


def tiny(ranges: dict | None = None, source: str = "sens.yaml") -> Platform:
    return platform_from_dict(tiny_raw(ranges), source)


def study_of(platform: Platform, **kwargs):
    return sensitivity(platform, WORKERS, 0.1, "tiny", "tiny", BATCH, **kwargs)


@pytest.fixture
def nothing_simulated(monkeypatch):
    """Fail the test if anything is simulated."""
    def refuse(platform, scenario):
        raise AssertionError(f"simulated {scenario} before refusing")
    monkeypatch.setattr(sens, "simulate", refuse)


def fake_simulate(calls: list):
    """A simulation in microseconds: GS pays shared storage's latency, PLS the exchange's CPU, all FW+BW."""
    def simulate(platform: Platform, scenario) -> Result:
        calls.append((platform, scenario))
        fwbw = platform.model(scenario.model).fwbw_per_sample * 1e4
        extra = {"global": 1e3 * platform.shared.file_latency, "local": 0.0,
                 "partial": 1e2 * platform.exchange.cpu_per_sample}[scenario.shuffle]
        return Result(workers=scenario.workers, shuffle=scenario.shuffle, q=scenario.q, epoch_s=1.0 + fwbw + extra,
                      io_s=0.0, exchange_s=0.0, fwbw_s=fwbw, allreduce_s=0.0, iterations=1, wall_s=0.0)
    return simulate


# ---- ranges refused before anything is simulated --------------------------------------------------

def refused(ranges: dict) -> str:
    """The RangeError `ranges` on the tiny platform raise, nothing simulated."""
    with pytest.raises(RangeError) as caught:
        study_of(tiny(ranges), simulate_one=lambda *_: pytest.fail("simulated before refusing the ranges"))
    assert isinstance(caught.value, PlatformError) and isinstance(caught.value, ValueError)  # a usage error
    return str(caught.value)


def one(path: str = "shared.file_latency", **entry) -> dict:
    return {path: {"low": 1.0e-4, "high": 1.0e-2, "source": "test", **entry}}


def test_low_above_high_names_the_knob_both_numbers_and_the_fix():
    message = refused(one(low=0.05, high=0.005))
    assert "sens.yaml: ranges: shared.file_latency has low 0.05 above high 0.005" in message
    assert "swap them (low: 0.005, high: 0.05)" in message


@pytest.mark.parametrize("bound", [math.nan, math.inf, -1.0e-3, "fast", True, None, [1, 2]])
@pytest.mark.parametrize("end", ["low", "high"])
def test_a_bound_that_is_not_a_finite_non_negative_number(end, bound):
    message = refused(one(**{end: bound}))
    assert f"sens.yaml: ranges: shared.file_latency.{end} must be a finite number >= 0" in message
    assert f"got {bound!r}" in message


def test_a_bound_may_be_a_number_yaml_read_as_text():
    """YAML 1.1 reads 1e-2 (no dot) as a string; the platform's own numbers accept it, so ranges do."""
    (knob,) = knob_ranges(tiny(one(high="1e-2")))
    assert knob.high == 0.01


@pytest.mark.parametrize("path, says", [
    ("shared.file_latncy", "shared has no 'file_latncy' (its keys: ["),
    ("sharde.file_latency", "the top level has no 'sharde'"),
    ("shared.file_latency.mean", "shared.file_latency is 0.001, not a mapping"),
    ("models.resnet50.fwbw_per_sample", "models has no 'resnet50' (its keys: ['tiny'])"),
])
def test_an_unknown_path_is_named_with_the_file(path, says):
    message = refused(one(path))
    assert message.startswith(f"sens.yaml: ranges: {path} names no key of the platform: ")
    assert says in message


def test_a_path_to_a_mapping_lists_its_numbers():
    message = refused(one("exchange"))
    assert "ranges: exchange is a mapping; name one of its numbers: exchange.cpu_per_sample" in message


def test_a_path_to_text_is_not_a_knob():
    message = refused(one("network.topology"))
    assert "ranges: network.topology is 'fat_tree', not a number: only numbers can be varied" in message


@pytest.mark.parametrize("low, high", [(2.0e-3, 1.0e-2), (1.0e-5, 5.0e-4)])
def test_the_platforms_value_outside_the_range(low, high):
    message = refused(one(low=low, high=high))
    assert (f"ranges: shared.file_latency: the platform's own value 0.001 lies outside [low, high] = "
            f"[{low:g}, {high:g}]; widen the range to include it, or correct the value") in message


@pytest.mark.parametrize("source", [None, "", "  "])
def test_a_range_without_its_source(source):
    ranges = one(source=source)
    if source is None:
        del ranges["shared.file_latency"]["source"]
    message = refused(ranges)
    assert "ranges: shared.file_latency has no source:; say where low 0.0001 and high 0.01 come from" in message


def test_a_missing_bound_and_an_unknown_entry_key():
    ranges = one()
    del ranges["shared.file_latency"]["high"]
    assert "ranges: shared.file_latency has no high:; an entry needs low:, high: and source:" in refused(ranges)
    assert "ranges: shared.file_latency has unknown key 'hi'; an entry's keys are" in refused(one(hi=2))
    assert "ranges: shared.file_latency must be a mapping {low: ..., high: ..., source: ...}" in refused(
        {"shared.file_latency": [1, 2]})


def test_a_platform_without_ranges_says_how_to_add_them():
    message = refused({})
    assert message.startswith("platform tiny (sens.yaml) has no ranges: to vary; add a top-level mapping")
    assert "ranges:\n  shared.file_latency: {low: 5.0e-3, high: 5.0e-2, source:" in message


def test_a_variant_the_platform_refuses_names_the_knob():
    # loader.workers is a capacity: 0 workers never read anything
    message = refused({"loader.workers": {"low": 0, "high": 4, "source": "test"}})
    assert message.startswith("ranges: loader.workers at its low 0 makes a platform that cannot be simulated (")
    assert "loader.workers must be > 0" in message and message.endswith("; narrow the range")


def test_a_variant_the_scenario_cannot_run_on_names_the_knob():
    # 8 samples over 2 workers is less than a batch of 8 per rank
    message = refused({"datasets.tiny.samples": {"low": 8, "high": 512, "source": "test"}})
    assert message.startswith("sens.yaml: ranges: datasets.tiny.samples=8 (its low) cannot run global at 2 workers: ")
    assert "batch size 8 is larger than a worker's share" in message


def test_variants_change_only_their_knob_and_keep_the_file():
    platform = tiny()
    (knob,) = [k for k in knob_ranges(platform) if k.path == "models.tiny.fwbw_per_sample"]
    high = knob_variant(platform, knob, "high")
    assert high.model("tiny").fwbw_per_sample == 2.0e-4 and platform.model("tiny").fwbw_per_sample == 1.0e-4
    assert high.source == platform.source
    assert high.extra["raw"]["models"]["tiny"]["fwbw_per_sample"] == 2.0e-4
    assert platform.extra["raw"]["models"]["tiny"]["fwbw_per_sample"] == 1.0e-4  # the base is untouched


# ---- what is simulated, and the order -------------------------------------------------------------

def test_knobs_come_largest_gs_ls_swing_first_and_identical_variants_run_once():
    raw = tiny_raw()
    raw["models"]["other"] = dict(raw["models"]["tiny"])  # a model not simulated: its knob cannot matter
    raw["ranges"]["models.other.fwbw_per_sample"] = {"low": 1.0e-5, "high": 1.0e-3, "source": "test"}
    calls: list = []
    study = study_of(platform_from_dict(raw, "sens.yaml"), simulate_one=fake_simulate(calls))
    # GS/LS swings: file_latency 1e3·(1e-2 − 1e-4) / (1 + 1) ≈ 4.95; fwbw moves both epochs: smaller;
    # the exchange and the other model do not move GS/LS, and the exchange moves PLS/LS
    order = [effect.knob.path for effect in study.effects]
    assert order == ["shared.file_latency", "models.tiny.fwbw_per_sample", "exchange.cpu_per_sample",
                     "models.other.fwbw_per_sample"]
    swings = [effect.swing("gs_ls") for effect in study.effects]
    assert swings == sorted(swings, reverse=True)
    assert study.effects[1].swing("gs_ls") > 0 == study.effects[2].swing("gs_ls")
    assert study.effects[2].swing("pls_ls") > 0 == study.effects[3].swing("pls_ls")
    # base, file_latency × 2, fwbw × 2, exchange's high: 6 platforms × 3 shuffles; the exchange's low is
    # the base, and the other model's variants are the base as the simulation of model tiny reads it
    assert len(calls) == 6 * 3
    assert study.effects[3].low.results == study.effects[3].high.results == study.base.results
    assert study.effects[2].low.results == study.base.results


def test_jobs_and_progress_give_one_line_per_simulation_in_any_completion_order():
    lines: list[str] = []
    study_of(tiny(), simulate_one=fake_simulate([]), jobs=3, progress=lines.append)
    assert sorted(int(line[1:].split("/")[0]) for line in lines) == list(range(1, 19))
    assert all(line.split(" ", 1)[0].endswith("/18]") for line in lines)
    assert "[1/18] base: global q=1 at 2 workers: epoch " in min(lines)
    assert any(line.startswith("[16/18] exchange.cpu_per_sample=0.001: global q=1") for line in lines)


# ---- simulated ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def simulated():
    """The study on the tiny platform, simulated (18 simulations, 2 at a time)."""
    return study_of(tiny(), jobs=2)


def test_a_shared_storage_knob_cannot_move_local_shuffling(simulated):
    (latency,) = [effect for effect in simulated.effects if effect.knob.path == "shared.file_latency"]
    local = [outcome.results["local"].epoch_s for outcome in (latency.low, simulated.base, latency.high)]
    assert local[0] == local[1] == local[2]
    assert latency.low.gs_ls < simulated.base.gs_ls < latency.high.gs_ls  # but it moves GS
    assert simulated.effects[0] is latency  # the largest swing of GS/LS on this platform


def test_the_exchange_moves_partial_shuffling_only(simulated):
    (exchange,) = [effect for effect in simulated.effects if effect.knob.path == "exchange.cpu_per_sample"]
    assert exchange.high.results["local"].epoch_s == simulated.base.results["local"].epoch_s
    assert exchange.high.results["global"].epoch_s == simulated.base.results["global"].epoch_s
    assert exchange.high.pls_ls > simulated.base.pls_ls == exchange.low.pls_ls


def test_json_is_the_table_as_a_document(simulated):
    doc = json.loads(json.dumps(sensitivity_json(simulated)))
    assert list(doc) == ["platform", "source", "workers", "q", "model", "dataset", "batch", "seed", "scope",
                         "base", "knobs"]
    assert (doc["platform"], doc["workers"], doc["q"], doc["batch"], doc["scope"]) == ("tiny", 2, 0.1, 8, "rank")
    assert list(doc["base"]) == ["gs_ls", "pls_ls", "epoch_s"]
    assert list(doc["base"]["epoch_s"]) == ["global", "local", "partial"]
    knob = doc["knobs"][0]
    assert list(knob) == ["knob", "low", "mid", "high", "source", "at_low", "at_high"]
    assert (knob["knob"], knob["low"], knob["mid"], knob["high"]) == ("shared.file_latency", 1e-4, 1e-3, 1e-2)
    assert knob["at_high"]["gs_ls"] == knob["at_high"]["epoch_s"]["global"] / knob["at_high"]["epoch_s"]["local"]
    assert [k["knob"] for k in doc["knobs"]] == [effect.knob.path for effect in simulated.effects]


def test_the_table_and_the_tornado(simulated, tmp_path):
    lines = sensitivity_table(simulated).splitlines()
    assert lines[0].startswith("platform tiny (sens.yaml): tiny on tiny, b=8 per rank, 2 workers, rank scope, seed 0")
    assert lines[1] == f"base: GS/LS {simulated.base.gs_ls:.3f}  PLS/LS {simulated.base.pls_ls:.3f}"
    assert lines[2].split() == ["knob", "low", "mid", "high", "GS/LS", "low", "GS/LS", "high", "PLS/LS", "low",
                                "PLS/LS", "high", "source"]
    assert [line.split()[0] for line in lines[3:]] == [effect.knob.path for effect in simulated.effects]
    plot_tornado(simulated, tmp_path / "tornado.png")
    assert (tmp_path / "tornado.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- the command --------------------------------------------------------------------------------

@pytest.fixture
def tiny_file(tmp_path) -> Path:
    path = tmp_path / "sens.yaml"
    path.write_text(yaml.safe_dump(tiny_raw()))
    return path


def test_command_prints_the_table_and_draws_the_tornado(capsys, tiny_file, tmp_path):
    main(["scale", "--platform", str(tiny_file), *ON_TINY, "--sensitivity", "--plot", str(tmp_path / "t.png"),
          "--jobs", "2"])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"platform tiny ({tiny_file}): tiny on tiny, b=8 per rank, 2 workers")
    assert lines[1].startswith("base: GS/LS ")
    assert lines[3].split()[0] == "shared.file_latency"
    assert sorted(line.split()[0] for line in lines[3:]) == sorted(RANGES)
    assert lines[3].endswith("  test: 10x either side")
    assert len([line for line in captured.err.splitlines() if line.startswith("[")]) == 18  # progress, on stderr
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_json(capsys, tiny_file, monkeypatch):
    monkeypatch.setattr(sens, "simulate", fake_simulate([]))
    main(["scale", "--platform", str(tiny_file), *ON_TINY, "--sensitivity", "--json", "--q", "0.3"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["q"] == 0.3 and doc["knobs"][0]["knob"] == "shared.file_latency"


@pytest.mark.parametrize("extra, says", [
    (["--workers", "2", "4"], "--sensitivity compares ratios at one workers, got --workers 2 4; pass one value"),
    (["--q", "0.1", "0.3"], "--sensitivity compares ratios at one q, got --q 0.1 0.3; pass one value"),
    (["--scope", "rank", "node"], "at one scope, got --scope rank node"),
    (["--recommend"], "--sensitivity and --recommend are separate studies; pass one of them"),
    (["--plot", "/nowhere/t.png"], "--plot /nowhere/t.png: the directory /nowhere does not exist"),
])
def test_command_refuses_before_simulating(capsys, tiny_file, nothing_simulated, extra, says):
    err = cli_error(capsys, "scale", "--platform", str(tiny_file), *ON_TINY, "--sensitivity", *extra)
    assert says in err


def test_plot_without_sensitivity_is_refused(capsys, tiny_file, nothing_simulated, tmp_path):
    err = cli_error(capsys, "scale", "--platform", str(tiny_file), *ON_TINY, "--plot", str(tmp_path / "t.png"))
    assert "--plot draws the tornado of --sensitivity; add --sensitivity" in err


def test_command_names_a_bad_range_as_a_usage_error(capsys, tmp_path, nothing_simulated):
    path = tmp_path / "sens.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(one(low=0.05, high=0.005))))
    err = cli_error(capsys, "scale", "--platform", str(path), *ON_TINY, "--sensitivity")
    assert err.startswith(f"hpcshuffle scale: error: {path}: ranges: shared.file_latency has low 0.05 above high")


# ---- --seeds 1 prints what it printed before --seeds N existed ---------------------------------------

ONE_SEED_TABLE = """\
platform tiny ({path}): tiny on tiny, b=8 per rank, 2 workers, rank scope, seed 0; GS/LS and PLS/LS (q=0.1): \
epoch over LS's epoch, with one knob at its low or high and every other number at the platform's value
base: GS/LS 1.500  PLS/LS 1.005
knob                               low        mid       high   GS/LS low  GS/LS high  PLS/LS low PLS/LS high  source
shared.file_latency             0.0001      0.001       0.01       1.050       6.000       1.005       1.005  test: 10x either side
models.tiny.fwbw_per_sample      5e-05     0.0001     0.0002       1.667       1.333       1.007       1.003  test: 2x either side
exchange.cpu_per_sample         0.0001     0.0001      0.001       1.500       1.500       1.005       1.050  test: the platform's value to 10x
"""


def one_seed_document(path: str) -> dict:
    """--sensitivity --json at one seed under fake_simulate, as printed before --seeds N existed."""
    def outcome(gs_ls, pls_ls, epochs):
        return {"gs_ls": gs_ls, "pls_ls": pls_ls, "epoch_s": dict(zip(("global", "local", "partial"), epochs))}

    base = outcome(1.5, 1.005, (3.0, 2.0, 2.01))
    return {"platform": "tiny", "source": path, "workers": 2, "q": 0.1, "model": "tiny", "dataset": "tiny", "batch": 8,
            "seed": 0, "scope": "rank", "base": base, "knobs": [
                {"knob": "shared.file_latency", "low": 0.0001, "mid": 0.001, "high": 0.01,
                 "source": "test: 10x either side", "at_low": outcome(1.05, 1.005, (2.1, 2.0, 2.01)),
                 "at_high": outcome(6.0, 1.005, (12.0, 2.0, 2.01))},
                {"knob": "models.tiny.fwbw_per_sample", "low": 5e-05, "mid": 0.0001, "high": 0.0002,
                 "source": "test: 2x either side",
                 "at_low": outcome(1.6666666666666667, 1.0066666666666666, (2.5, 1.5, 1.51)),
                 "at_high": outcome(1.3333333333333333, 1.0033333333333332, (4.0, 3.0, 3.01))},
                {"knob": "exchange.cpu_per_sample", "low": 0.0001, "mid": 0.0001, "high": 0.001,
                 "source": "test: the platform's value to 10x", "at_low": base,
                 "at_high": outcome(1.5, 1.05, (3.0, 2.0, 2.1))}]}


@pytest.mark.parametrize("seeds", [[], ["--seeds", "1"]])
def test_one_seed_prints_byte_for_byte_what_it_printed_before(capsys, tiny_file, monkeypatch, seeds):
    monkeypatch.setattr(sens, "simulate", fake_simulate([]))
    main(["scale", "--platform", str(tiny_file), *ON_TINY, "--sensitivity", *seeds])
    captured = capsys.readouterr()
    assert captured.out == ONE_SEED_TABLE.format(path=tiny_file)
    progress = sorted(line.split(" simulated in")[0] for line in captured.err.splitlines())
    assert len(progress) == 18 and progress[:3] == ["[1/18] base: global q=1 at 2 workers: epoch 3.0 s",
                            "[10/18] models.tiny.fwbw_per_sample=0.0002: global q=1 at 2 workers: epoch 4.0 s",
                            "[11/18] models.tiny.fwbw_per_sample=0.0002: local q=0 at 2 workers: epoch 3.0 s"]
    main(["scale", "--platform", str(tiny_file), *ON_TINY, "--sensitivity", "--json", *seeds])
    assert capsys.readouterr().out == json.dumps(one_seed_document(str(tiny_file))) + "\n"
