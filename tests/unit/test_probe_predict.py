"""Probe → predict (hpcshuffle/studies/probe_predict.py): a probe repeat's platform, the predicted
interval over repeats from real simulations, and the comparison with measured runs."""

from __future__ import annotations

import copy

import pytest
import yaml

from hpcshuffle.scale.jitter import mean_iteration
from hpcshuffle.scale.platform_yaml import platform_from_dict
from hpcshuffle.studies.cluster_runs import BATCH
from hpcshuffle.studies.probe_predict import (
    comparison,
    interval_score,
    model_errors,
    predict,
    repeat_text,
    round_errors,
    scenario_of,
    scores,
)
from tests.unit.test_cluster_scaling import MEASURED

SETTINGS = {"nodes": 3, "link": "10gbit", "storage_link": "200mbit", "storage_latency_ms": 0}


def probe(loaded_per_file_s: float, rates: tuple[float, float]) -> dict:
    """MEASURED as one probe repeat of one node: its loading cost per file, and the storage's rate with
    1 and 2 readers at once."""
    measured = copy.deepcopy(MEASURED)
    measured["node"]["loaded_per_file_s"] = loaded_per_file_s
    measured["node"]["concurrent"] = [{"readers": k + 1, "read_Bps": rate, "file_s": 0.006} for k, rate in
                                      enumerate(rates)]
    return measured


def test_a_repeat_platform_reads_at_the_rate_measured_with_as_many_readers_as_nodes():
    text = repeat_text(SETTINGS, probe(0.004, (1.0e8, 5.0e7)), ("data-256", 256), 2)
    platform = platform_from_dict(yaml.safe_load(text), "repeat")
    assert platform.shared.read_bandwidth == pytest.approx(5.0e7, rel=1e-4)
    # a single reader's 6 ms per file = 2 ms of bytes at the 2-reader rate + 2 ms client CPU + 2 ms latency
    assert platform.shared.file_latency == pytest.approx(0.002, rel=1e-3)
    assert "2 threads reading the dataset's files at once" in text
    with pytest.raises(ValueError, match=r"not 3: probe with --readers up to the largest node count"):
        repeat_text(SETTINGS, probe(0.004, (1.0e8, 5.0e7)), ("data-256", 256), 3)


def test_a_repeat_platform_carries_the_jitter_measured_with_as_many_ranks_as_nodes():
    measured = probe(0.004, (1.0e8, 5.0e7))
    assert platform_from_dict(yaml.safe_load(repeat_text(SETTINGS, measured, ("data-256", 256), 2)),
                              "old").exchange.noise.mean == 0  # a probe from before the contention probe
    step_s = measured["node"]["fwbw_per_sample_s"] * BATCH
    measured["contention"] = [{"ranks": k, "cpus": 2, "iteration_s": 3 * step_s, "iteration_p10_s": step_s,
                               "iteration_p90_s": 5 * step_s, "iterations": 60, "step_s": 3 * step_s} for k in (1, 2)]
    text = repeat_text(SETTINGS, measured, ("data-256", 256), 2)
    noise = platform_from_dict(yaml.safe_load(text), "repeat").exchange.noise
    assert noise.dist == "lognormal" and mean_iteration(step_s, noise, 2, 2) == pytest.approx(3 * step_s, rel=1e-6)
    assert "2 ranks' FW+BW in lockstep on the 2 cores" in text


def test_each_strategy_label_is_simulated_with_its_own_q():
    assert [scenario_of(label, 2, "d", 0).q for label in ("global", "local", "partial-0.3")] == [1.0, 0.0, 0.3]


def test_the_predicted_interval_spans_the_probe_repeats():
    probes = [probe(cost, (1.0e8, 1.0e8)) for cost in (0.002, 0.003, 0.004)]
    errors = model_errors([{"workers": 1, "shuffle": "local", "q": 0.0, "epoch_s": 9.0},
                           {"workers": 2, "shuffle": "local", "q": 0.0, "epoch_s": 11.0},
                           {"workers": 3, "shuffle": "local", "q": 0.0, "epoch_s": 5.0}],  # not simulated
                          [{"workers": w, "shuffle": "local", "q": 0.0, "epoch_s": 10.0} for w in (1, 2)])
    assert errors == [0.9, 1.1]
    cells = predict(SETTINGS, probes, ("data-256", 256), [2], ["local"], lambda line: None, jobs=1, errors=errors)
    (cell,) = cells
    epochs = [repeat["epoch_s"] for repeat in cell["repeats"]]
    assert epochs == sorted(epochs) and epochs[0] < epochs[-1]  # loading more per file, a longer epoch
    spread, wider = cell["epoch_s"], cell["with_model_error"]
    assert spread["median"] == pytest.approx(epochs[1]) and spread["p10"] < spread["median"] < spread["p90"]
    pooled = sorted(epoch * error for epoch in epochs for error in errors)  # 6 values: p90 between the top two
    assert wider["p10"] < spread["p10"] and wider["p90"] == pytest.approx(pooled[4] + 0.5 * (pooled[5] - pooled[4]))
    # the envelope beside it, over the same repeats: arithmetic on each repeat's platform, so it grows with
    # the loading cost too, and has no draw to spread it otherwise
    envelope = cell["envelope"]
    assert envelope["p10"] < envelope["median"] < envelope["p90"]


def test_the_comparison_counts_measured_medians_inside_the_predicted_range():
    predicted = [{"nodes": 2, "run": "global", "epoch_s": {"median": 10.0, "p10": 9.0, "p90": 11.0}},
                 {"nodes": 2, "run": "local", "epoch_s": {"median": 4.0, "p10": 3.8, "p90": 4.2}},
                 {"nodes": 3, "run": "local", "epoch_s": {"median": 4.0, "p10": 3.8, "p90": 4.2}}]
    measured = [{"nodes": 2, "run": "global", "epoch_s": s} for s in (8.0, 10.5, 30.0)]  # median 10.5: inside
    measured += [{"nodes": 2, "run": "local", "epoch_s": s} for s in (4.1, 5.0, 5.0)]  # median 5.0: outside
    table, inside, cells = comparison(predicted, measured, "epoch_s")  # 3 nodes not measured: left out
    assert (inside, cells) == (1, 2)
    assert "10.50 (8.00-30.00, 3)" in table and "+25%  NO" in table
    assert table.endswith("1 of 2 cells have the measured median inside the predicted 10-90 % range")


def test_the_interval_score_is_the_width_plus_twenty_over_alpha_times_the_miss():
    assert interval_score(9.0, 11.0, 10.0) == pytest.approx(2.0)  # covered: the width alone
    assert interval_score(9.0, 11.0, 12.0) == pytest.approx(2.0 + 10 * 1.0)  # 2/alpha = 10 at alpha = 0.2
    assert interval_score(9.0, 11.0, 8.5) == pytest.approx(2.0 + 10 * 0.5)
    assert interval_score(9.0, 11.0, 8.5, alpha=0.5) == pytest.approx(2.0 + 4 * 0.5)


def test_the_model_and_the_envelope_are_scored_on_the_same_measured_cells():
    cells = [{"nodes": 2, "run": "global", "epoch_s": {"median": 10.0, "p10": 9.0, "p90": 11.0},
              "envelope": {"median": 8.0, "p10": 8.0, "p90": 8.0}},
             {"nodes": 2, "run": "local", "epoch_s": {"median": 4.0, "p10": 3.8, "p90": 4.2},
              "envelope": {"median": 5.0, "p10": 4.0, "p90": 6.0}},
             {"nodes": 3, "run": "local", "epoch_s": {"median": 1.0, "p10": 1.0, "p90": 1.0},
              "envelope": {"median": 1.0, "p10": 1.0, "p90": 1.0}}]  # not measured: not scored
    runs = [{"nodes": 2, "run": "global", "epoch_s": s} for s in (9.0, 10.0, 30.0)]
    runs += [{"nodes": 2, "run": "local", "epoch_s": s} for s in (5.0, 5.0, 4.0)]
    found = scores(cells, runs)
    assert found["cells"] == 2 and [row["measured_median"] for row in found["per_cell"]] == [10.0, 5.0]
    assert found["model_median_abs_err"] == pytest.approx((0.0 + 0.2) / 2)  # 10 vs 10, 4 vs 5
    assert found["envelope_median_abs_err"] == pytest.approx((0.2 + 0.0) / 2)
    assert found["model_coverage80"] == 0.5 and found["envelope_coverage80"] == 0.5
    assert found["model_interval_score"] == pytest.approx((2.0 + (0.4 + 10 * 0.8)) / 2)
    assert found["envelope_interval_score"] == pytest.approx((10 * 2.0 + 2.0) / 2)


def test_an_earlier_rounds_errors_are_out_of_sample_only_if_it_was_predicted_first():
    predicted = {"written": "2026-11-27 07:33 UTC",
                 "cells": [{"nodes": 2, "run": "global", "epoch_s": {"median": 10.0, "p10": 9.0, "p90": 11.0}},
                           {"nodes": 2, "run": "local", "epoch_s": {"median": 4.0, "p10": 3.9, "p90": 4.1}}]}
    measured = {"written": "2026-11-27 07:34 UTC", "runs": [{"nodes": 2, "run": "global", "epoch_s": 8.0},
                                                            {"nodes": 2, "run": "local", "epoch_s": 5.0},
                                                            {"nodes": 3, "run": "local", "epoch_s": 5.0}]}  # no cell
    assert round_errors(predicted, measured) == [0.8, 1.25]
    with pytest.raises(ValueError, match=r"predate the predictions .* not out of sample"):
        round_errors(predicted, {**measured, "written": "2026-11-26 12:00 UTC"})
