"""The second pre-registration's measures (hpcshuffle/studies/accuracy_peers.py) on a small synthetic
dataset: label skew and Streaming's entropy score rank the strategies of a class-sorted cell as they
should, the shared-storage reads are the plans', and the study names the strategies it can train."""

from __future__ import annotations

import pytest

from hpcshuffle.studies.accuracy_peers import (
    peer_check_text,
    peer_preregistered,
    peer_preregistration_check,
    peers_of,
)
from hpcshuffle.studies.accuracy_readme import peers_line, shared_reads_lines
from hpcshuffle.studies.runs import strategy_overrides

OVERRIDES = ["dataset=synthetic", "dataset.synthesize.samples=400", "dataset.synthesize.classes=10", "batch_size=5"]


def test_a_contiguous_cell_ranks_local_last_and_partial_before_it():
    # the synthetic labels cycle through the classes id by id: contiguous parts are mildly skewed, and
    # CorgiPile's blocks of 10 consecutive ids hold every class, so it mixes as well as global shuffling
    cell = peer_preregistered(OVERRIDES, "contiguous", 4, 3, ["global", "local", "partial-0.3", "corgipile"], shard=10)
    measures = cell["measures"]
    assert cell["order_by_skew"][-2:] == cell["order_by_entropy"][-2:] == ["partial-0.3", "local"]
    assert measures["local"]["skew"] > measures["partial-0.3"]["skew"] > max(measures["global"]["skew"],
                                                                               measures["corgipile"]["skew"])
    # global and CorgiPile read every sample from shared storage every epoch, local and partial none
    assert measures["global"]["shared_reads"] == measures["corgipile"]["shared_reads"] == [400, 400, 400]
    assert measures["local"]["shared_reads"] == measures["partial-0.3"]["shared_reads"] == [0, 0, 0]


def test_the_peers_are_the_strategies_without_a_partition_besides_global():
    assert peers_of(["global", "local", "partial-0.1", "corgipile", "streaming_py1e"]) == ["corgipile", "streaming_py1e"]


def test_a_strategy_is_named_by_the_table_or_as_partial_q():
    assert strategy_overrides("streaming_py1br") == ["shuffle=streaming_py1br"]
    assert strategy_overrides("partial-0.3") == ["shuffle=partial", "shuffle.q=0.3"]
    with pytest.raises(ValueError, match=r"unknown strategy 'streaming-py1e': use partial-<q> .* streaming_py1e"):
        strategy_overrides("streaming-py1e")


def test_the_second_preregistration_is_scored_by_rank_correlation_within_cell_and_partition():
    def measures(**skews):
        return {s: {"skew": skew, "entropy": 11.0 - 10 * skew} for s, skew in skews.items()}

    preregistered = {"score_shard": 100, "cells": [
        {"partition": "contiguous", "workers": 32,
         "measures": measures(**{"global": 0.0, "local": 0.8, "partial-0.3": 0.01, "corgipile": 0.09})},
        {"partition": "contiguous", "workers": 256,
         "measures": measures(**{"global": 0.0, "local": 0.9, "corgipile": 0.09})},
        {"partition": "random", "workers": 256, "measures": measures(**{"global": 0.0, "local": 0.0})},
    ]}
    gaps = [("contiguous", 32, "local", 0.0, -57.0), ("contiguous", 32, "partial", 0.3, 0.2),
            ("contiguous", 32, "corgipile", 1.0, -2.0), ("contiguous", 256, "local", 0.0, -60.0),
            ("contiguous", 256, "corgipile", 1.0, 1.0)]  # corgipile above GS: the measures rank it below
    result = {"gaps": [{"partition": p, "workers": m, "strategy": s, "q": q, "gap_mean": g} for p, m, s, q, g in gaps]}
    check = peer_preregistration_check(result, preregistered)
    first, second = check["cells"][:2]
    assert first["trained_order"] == ["partial-0.3", "global", "corgipile", "local"]
    assert first["rho_skew"] == first["rho_entropy"] == pytest.approx(0.8)  # partial and global swapped
    assert second["rho_skew"] == pytest.approx(0.5)  # 3 points, one pair swapped
    # random M = 256: local's gap is not trained, one strategy is too few to rank
    assert len(check["cells"]) == 2
    assert check["by_partition"]["contiguous"]["skew"]["points"] == 7
    assert "contiguous M=32: skew +0.80, entropy +0.80 (trained order partial-0.3 > global > corgipile > local)" \
        in peer_check_text(check)
    line = peers_line(check)  # the README's: per cell, then per partition
    assert "shards of 100 consecutive samples" in line
    assert "per cell: contiguous M = 32 +0.80 and +0.80; contiguous M = 256 +0.50 and +0.50; within partitions: " \
           "contiguous" in line


def test_the_readme_says_each_strategys_shared_reads_per_m_from_the_plans():
    cells = [{"workers": 32, "partition": "random",
              "plan_measures": {"global": {"shared_reads": [60000] * 3}, "local": {"shared_reads": [0] * 3},
                                "streaming_py1e": {"shared_reads": [62400, 0, 0]}}},
             {"workers": 32, "partition": "contiguous", "plan_measures": {}}, {"workers": 256, "partition": "random"}]
    assert shared_reads_lines({"cells": cells}) == [
        "- Samples read from shared storage per epoch at M = 32 (seed 0's plans; LS and PLS stage theirs once "
        "before): GS 60,000; LS 0; Streaming py1e 62,400 in the first epoch, 0 after."]
