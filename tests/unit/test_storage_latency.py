"""experiments/storage_latency.py's pure parts (hpcshuffle/analysis/read_times.py and the readers'
assignment in hpcshuffle/storage/read_latency.py): percentiles, the lognormal fit and what it says about
the tail, the ratios against k = 1, the files each reader reads, and the printed table."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from hpcshuffle.analysis.read_times import (
    lognormal_fit,
    percentile,
    span,
    summarize,
    table,
    with_ratios,
)
from hpcshuffle.storage.read_latency import assignment


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_is_numpys_linear_percentile(q):
    values = [random.Random(q).expovariate(1.0) for _ in range(101)] + [0.5, 0.5]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_one_value_and_of_none():
    assert percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_lognormal_fit_recovers_its_parameters():
    rng = random.Random(0)
    times = [rng.lognormvariate(math.log(0.003), 0.4) for _ in range(20_000)]
    fit = lognormal_fit(times)
    assert fit["mu"] == pytest.approx(math.log(0.003), abs=0.01)
    assert fit["sigma"] == pytest.approx(0.4, rel=0.02)
    assert fit["cv"] == pytest.approx(math.sqrt(math.exp(0.16) - 1), rel=0.03)
    assert fit["p50_s"] == pytest.approx(0.003, rel=0.01)
    assert fit["p99_over_p50"] == pytest.approx(math.exp(2.3263 * 0.4), rel=0.02)
    summary = summarize(times, window_s=10.0)
    # the sample's own p99/p50 is close to its fit's: at 20,000 draws the verdict may go either way
    assert summary["p99_over_p50"] == pytest.approx(fit["p99_over_p50"], rel=0.05)


def test_lognormal_fit_needs_two_positive_times():
    for bad in ([0.1], [0.1, 0.0], [0.2, -0.1]):
        with pytest.raises(ValueError):
            lognormal_fit(bad)


def test_summarize_numbers():
    times = [0.001] * 98 + [0.010, 0.100]
    summary = summarize(times, window_s=0.5)
    assert summary["files"] == 100 and summary["files_per_s"] == pytest.approx(200.0)
    assert summary["mean_s"] == pytest.approx(np.mean(times))
    assert summary["p50_s"] == pytest.approx(0.001)
    assert summary["p99_s"] == pytest.approx(np.percentile(times, 99))
    assert summary["max_s"] == 0.100
    assert summary["cv"] == pytest.approx(np.std(times) / np.mean(times))
    # almost all equal plus two outliers: a far heavier tail than the lognormal of the same log-moments
    assert summary["tail_heavier_than_lognormal"]


def test_a_light_tail_is_not_heavier_than_lognormal():
    rng = random.Random(1)
    times = [rng.uniform(0.009, 0.011) for _ in range(2000)]  # bounded: p99/p50 ~1.1, lognormal's larger
    summary = summarize(times, 1.0)
    assert not summary["tail_heavier_than_lognormal"]


def row(target, nodes, readers, repeat, mean, p99=None):
    return {"target": target, "nodes": nodes, "readers": readers, "repeat": repeat, "mean_s": mean,
            "p99_s": p99 if p99 is not None else 2 * mean}


def test_ratios_against_k1_of_the_same_target_nodes_and_repeat():
    rows = [row("a", 1, 1, 1, 1.0), row("a", 1, 4, 1, 3.0, 9.0), row("a", 1, 1, 2, 2.0), row("a", 1, 4, 2, 3.0),
            row("a", 2, 4, 1, 5.0), row("b", 1, 1, 1, 10.0)]
    by = {(r["target"], r["nodes"], r["readers"], r["repeat"]): r for r in with_ratios(rows)}
    assert by[("a", 1, 4, 1)]["mean_over_k1"] == 3.0 and by[("a", 1, 4, 1)]["p99_over_k1"] == 4.5
    assert by[("a", 1, 4, 2)]["mean_over_k1"] == 1.5
    assert by[("a", 1, 1, 1)]["mean_over_k1"] == 1.0
    assert by[("a", 2, 4, 1)]["mean_over_k1"] is None  # no k = 1 at 2 nodes
    assert by[("b", 1, 1, 1)]["mean_over_k1"] == 1.0


def test_every_file_is_read_once_per_point():
    nodes, readers, each = 3, 4, 25
    pieces = [assignment(500, nodes, node, readers, each, seed=7) for node in range(nodes)]
    files = [i for node in pieces for piece in node for i in piece]
    assert all(len(piece) == each for node in pieces for piece in node)
    assert len(files) == len(set(files)) == nodes * readers * each
    assert assignment(500, nodes, 1, readers, each, seed=7) == pieces[1]  # every node computes the same
    assert assignment(500, nodes, 1, readers, each, seed=8) != pieces[1]
    with pytest.raises(ValueError, match="pool has 100"):
        assignment(100, 3, 0, 4, 25, seed=0)


def test_span():
    assert span([2.314, 2.396], ".2f") == "2.31-2.40"
    assert span([2.0, 2.001], ".2f") == "2.00"


def test_table_merges_repeats_into_ranges():
    rows = []
    for repeat, scale in ((1, 1.0), (2, 1.1)):
        for readers, mean in ((1, 0.002), (4, 0.006)):
            times = [mean * scale * (0.8 + 0.4 * i / 99) for i in range(100)]
            summary = summarize(times, window_s=100 * mean * scale / readers)
            rows.append({"target": "gluster-1node", "nodes": 1, "readers": readers, "repeat": repeat, **summary})
    text = table(rows)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[1].split()[:3] == ["target", "N", "k"]
    k4 = lines[3].split()
    assert k4[:3] == ["gluster-1node", "1", "4"]
    assert k4[4] == "6.00-6.60"  # mean ms over the two repeats
    assert k4[10] == "3.00"  # mean(k)/mean(1), the same in both repeats
