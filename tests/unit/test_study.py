"""The accuracy study's statistics: Student-t intervals over seeds, paired gaps to global shuffling,
the one "reaches global" rule (an equivalence test: the paired gap's 90 % interval ends at most 1
point below 0), the quality-vs-gap correlations
(Pearson and Spearman, overall and within partitions and families), and `tune-q` on a
study's results tree — on fake run directories; and the stored studies scored again from their runs."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from hpcshuffle.analysis.intervals import (
    REACH_LEVEL,
    interval95,
    paired_gap,
    reaches_global,
)
from hpcshuffle.analysis.report import collect, find_runs
from hpcshuffle.analysis.study import correlation, points, study_table, summary
from hpcshuffle.cli import main
from hpcshuffle.studies.accuracy_peers import peer_preregistration_check
from hpcshuffle.studies.accuracy_readme import heading
from hpcshuffle.studies.accuracy_report import preregistration_check, rescored
from hpcshuffle.studies.accuracy_runs import trained_seeds, wide_cells
from tests.unit.test_tune import write_run

# final top-1 per (partition, strategy, q) and seed 0, 1, 2, at M = 16
STUDY = {
    ("contiguous", "global", 1.0): [80.0, 81.0, 82.0],
    ("contiguous", "local", 0.0): [50.0, 52.0, 51.0],
    ("contiguous", "partial", 0.3): [79.0, 81.0, 83.0],  # paired gaps -1, 0, +1: contain 0, too wide to reach
    ("contiguous", "partial", 0.6): [79.5, 80.5, 81.5],  # -0.5 at every seed: below 0, within δ = 1: reaches
    ("random", "global", 1.0): [80.0, 81.0, 82.0],
    ("random", "local", 0.0): [80.2, 81.1, 81.9],
    ("random", "partial", 0.3): [81.0, 80.0, 81.5],
}


def write_study(root):
    for (partition, shuffle, q), finals in STUDY.items():
        for seed, final in enumerate(finals):
            # a mixing quality that falls with the paired gap, exactly linearly: Pearson r = 1 over all runs
            mixing = 1.0 + (final - STUDY[partition, "global", 1.0][seed]) / 100
            write_run(root / partition / "M16" / f"{shuffle}-{q}", f"seed{seed}", shuffle=shuffle, q=q, workers=16,
                      final=final, seed=seed, partition=partition, mixing=mixing)
    return root


def test_the_interval_uses_the_exact_t_quantile():
    # Student's t's 97.5 % quantile: 4.3027 at 2 degrees of freedom, 2.0211 at 40
    mean, low, high = interval95([1.0, 2.0, 3.0], "x")
    assert mean == 2.0
    assert high - mean == pytest.approx(4.302653 / math.sqrt(3)) and mean - low == pytest.approx(4.302653 / math.sqrt(3))
    values = [float(v % 7) for v in range(41)]
    mean, low, high = interval95(values, "x")
    assert high - mean == pytest.approx(2.021075 * statistics.stdev(values) / math.sqrt(41))


def test_an_interval_of_one_seed_is_a_named_error():
    with pytest.raises(ValueError, match=r"a 95 % interval of local q=0 needs at least 2 seeds, got 1.*seed=0,1,2"):
        interval95([70.0], "local q=0")


def test_summary_gaps_reach_and_correlation(tmp_path):
    result = summary(collect(find_runs(write_study(tmp_path / "study"))))
    rows = {(r["partition"], r["strategy"], r["q"]): r for r in result["rows"]}
    assert set(rows) == set(STUDY)
    local = rows["contiguous", "local", 0.0]
    assert set(local) >= {"partition", "workers", "strategy", "q", "top1_mean", "ci95", "seeds"}
    assert (local["workers"], local["top1_mean"], local["seeds"]) == (16, 51.0, [0, 1, 2])
    assert local["ci95"] == pytest.approx([51.0 - 4.303 / math.sqrt(3), 51.0 + 4.303 / math.sqrt(3)], abs=1e-3)
    cells = {c["partition"]: c for c in result["cells"]}
    # contiguous: paired gaps -30, -29, -31 -> mean -30, sd 1; the interval excludes 0
    assert cells["contiguous"]["local_gap"] == -30.0
    assert cells["contiguous"]["local_gap_ci95"] == pytest.approx([-30 - 4.303 / math.sqrt(3),
                                                                  -30 + 4.303 / math.sqrt(3)], abs=1e-3)
    assert cells["contiguous"]["local_gap_excludes_0"] is True
    assert cells["contiguous"]["local_reaches_global"] is False
    # q 0.3's gaps -1, 0, +1 contain 0 but their 90 % interval ends 1.69 below it; q 0.6 is 0.5 below at
    # every seed: it excludes 0 and reaches GS all the same
    found = {(g["partition"], g["q"]): g for g in result["gaps"]}
    assert found["contiguous", 0.3]["ci95"][0] < 0 < found["contiguous", 0.3]["ci95"][1]
    assert found["contiguous", 0.3]["ci90"][0] == pytest.approx(-2.919986 / math.sqrt(3), abs=1e-3)
    assert not found["contiguous", 0.3]["reaches_global"] and found["contiguous", 0.6]["reaches_global"]
    assert cells["contiguous"]["smallest_q_reaching_global"] == 0.6
    assert cells["random"]["local_gap_excludes_0"] is False and cells["random"]["local_reaches_global"] is True
    assert cells["random"]["smallest_q_reaching_global"] == 0.0
    assert result["reach_rule"] == {"level": REACH_LEVEL, "margin": 1.0}
    assert result["quality_vs_gap"]["runs"] == 15  # every run but global's
    assert result["quality_vs_gap"]["pearson_r"] == pytest.approx(1.0)
    assert result["quality_vs_gap"]["spearman_rho"] == pytest.approx(1.0)
    text = study_table(result)
    assert "contiguous M=16: local - global = -30.00 points" in text and "(excludes 0)" in text
    assert "smallest q reaching global (paired gap's 90 % interval ends above -1): 0.6" in text
    assert "gap to global vs final mixing quality: r +1.00, ρ +1.00 (15 runs); within contiguous" in text


def test_reaching_global_is_equivalence_within_the_margin(tmp_path):
    # unpaired, q's [83.0, 87.0] and global's [84.5, 89.5] overlap; paired, q is 2 below at every seed
    mean, low, high, seeds = paired_gap({0: 84.0, 1: 86.0, 2: 85.0, 7: 99.0}, {0: 86.0, 1: 88.0, 2: 87.0}, "q",
                                        REACH_LEVEL)
    assert (mean, low, high, seeds) == (-2.0, -2.0, -2.0, 3) and not reaches_global((low, high))
    # the interval's lower end against -δ: a wide one that holds 0 fails, a tight one just below 0 passes
    assert not reaches_global((-3.0, 0.5)) and reaches_global((-0.9, -0.1)) and reaches_global((4.3, 5.5))
    assert reaches_global((-1.0, 2.0)) and reaches_global((-3.0, -0.5), margin=3.0)
    with pytest.raises(ValueError, match=r"needs at least 2 seeds, got 1"):
        paired_gap({0: 1.0, 1: 2.0}, {1: 2.0, 2: 3.0}, "q")
    # as contiguous M = 16 of the synthetic study: q 0.1 beats global at every seed, and counts
    for shuffle, q, finals in (("global", 1.0, [90.0, 91.0, 90.5]), ("local", 0.0, [25.0, 28.0, 22.0]),
                               ("partial", 0.1, [95.0, 95.5, 95.2])):
        for seed, final in enumerate(finals):
            write_run(tmp_path / "study" / f"{shuffle}-{q}", f"seed{seed}", shuffle=shuffle, q=q, workers=16,
                      final=final, seed=seed, partition="contiguous")
    cell, = summary(collect(find_runs(tmp_path / "study")))["cells"]
    assert cell["smallest_q_reaching_global"] == 0.1


def test_two_runs_of_one_seed_are_refused(tmp_path):
    root = write_study(tmp_path / "study")
    write_run(root / "contiguous" / "M16" / "local-0.0", "again", shuffle="local", q=0.0, workers=16, final=50.0,
              seed=1, partition="contiguous")
    with pytest.raises(ValueError, match=r"contiguous M=16 local q=0 has two runs of one seed \(\[0, 1, 1, 2\]\)"):
        points(collect(find_runs(root)))


def test_tune_q_prints_the_interval_rule_per_partition_and_workers(tmp_path, capsys):
    root = write_study(tmp_path / "study")
    main(["tune-q", str(root)])
    out = capsys.readouterr().out
    assert "-- model resnet50, dataset imagefolder, partition contiguous" in out
    rule = "paired gap's 90 % interval ends above -1"
    assert (f"partition contiguous, workers 16: smallest q reaching global ({rule}): "
            "q=0.6, gap -0.50 [-0.50, -0.50] over 3 seeds") in out
    assert f"partition random, workers 16: smallest q reaching global ({rule}): q=0," in out
    # the tolerance rule still answers, with q 0.3's noisy mean: within 1.0 of 81.00 means >= 80.00
    assert "partition contiguous, workers 16: smallest q within 1.00 of global (81.00): q=0.3 (81.00)" in out


def test_tune_q_with_one_seed_says_why_there_is_no_interval(tmp_path, capsys):
    for shuffle, q, final in (("global", 1.0, 80.0), ("local", 0.0, 79.5)):
        write_run(tmp_path / "sweep", shuffle, shuffle=shuffle, q=q, workers=4, final=final)
    main(["tune-q", str(tmp_path / "sweep")])
    out = capsys.readouterr().out
    assert "workers 4: smallest q within 1.00 of global (80.00): q=0 (local, 79.50)" in out
    assert "95 % interval" not in out.split("\n\n")[-1]


def test_correlation_is_none_where_r_is_not_defined():
    constant_gap = [(0.1, 0.0, "random", "local", "a"), (0.2, 0.0, "random", "partial", "b"),
                    (0.3, 0.0, "random", "partial", "c")]
    undefined = {"runs": 3, "pearson_r": None, "spearman_rho": None}
    assert correlation(constant_gap) == {**undefined, "by_partition": {"random": undefined},
                                         "by_family": {"local": {**undefined, "runs": 1},
                                                       "partial": {**undefined, "runs": 2}}}
    two = [(0.1, -5.0, "contiguous", "local", "d"), (0.5, -50.0, "contiguous", "local", "e")]
    found = correlation(constant_gap + two)
    assert found["by_partition"]["contiguous"]["pearson_r"] is None and found["pearson_r"] == -0.839  # all 5 runs
    # ranks, ties at their mean: x 1.5, 3, 4, 1.5, 5 against gaps 4, 4, 4, 2, 1
    assert found["spearman_rho"] == -0.344
    # local: x ranks 1.5, 1.5, 3 against gap ranks 3, 2, 1: -1.5 / √(1.5 · 2)
    assert found["by_family"]["local"] == {"runs": 3, "pearson_r": -0.996, "spearman_rho": -0.866}


def test_a_run_standing_for_two_partitions_counts_once_outside_them():
    # a peer's run (no partition) is in both partitions' cells: in each partition's ρ, once overall and in its family
    own = [(0.1, -1.0, "random", "local", "r0"), (0.2, -2.0, "random", "local", "r1"),
           (0.5, -9.0, "contiguous", "local", "c0"), (0.6, -8.0, "contiguous", "local", "c1")]
    peer = [(0.3, -3.0, partition, "corgipile", f"peer{seed}") for partition in ("random", "contiguous")
            for seed in range(2)]
    found = correlation(own + peer)
    assert found["runs"] == 6 and found["by_family"]["corgipile"]["runs"] == 2
    assert found["by_partition"]["random"]["runs"] == found["by_partition"]["contiguous"]["runs"] == 4


def test_preregistered_predictions_are_scored_against_the_trained_cells():
    seeds = [0, 1, 2]
    finals = {"global": [90.0, 91.0, 92.0], "local": [60.0, 61.0, 62.0], "partial-0.1": [85.0, 86.0, 87.5],
              "partial-0.3": [89.0, 91.5, 91.5]}
    rows = [{"partition": "contiguous", "workers": 16, "strategy": strategy, "q": q, "seeds": seeds,
             "top1": finals[f"partial-{q:g}" if strategy == "partial" else strategy]}
            for strategy, q in (("global", 1.0), ("local", 0.0), ("partial", 0.1), ("partial", 0.3))]
    result = {"rows": rows, "cells": [{"partition": "contiguous", "workers": 16, "smallest_q_reaching_global": 0.3}]}
    skew = {"global": 0.0, "local": 0.6, "partial-0.1": 0.05, "partial-0.3": 0.005}
    cell = {"partition": "contiguous", "workers": 16, "skew": skew, "predicted_order": sorted(skew, key=skew.get)}
    # q 0.3 is the trained answer: predicting it is the same q; 0.1 does not reach GS (−5 at every seed)
    for predicted, hit, same in ((0.3, True, True), (0.1, False, False)):
        check = preregistration_check(result, {"cells": [{**cell, "predicted_q": predicted}]})
        assert (check["q_hits"], check["q_same"]) == (hit, same)
    # pairs skews set apart by >= 0.01: all but (global, q 0.3); training agrees with every one of the 5
    assert (check["pairs_claimed"], check["pairs_against"]) == (5, 0)
    # the constants under the same rule, whatever was predicted: only "always 0.3" is right here
    assert check["baselines"] == {"always LS": 0, "always 0.1": 0, "always 0.3": 1}
    assert check["baselines_exact"] == {"always LS": 0, "always 0.1": 0, "always 0.3": 1}
    # a cell where q 0.1 reaches GS and so does q 0.3: "always 0.3" is right by the rule, not exactly
    close = {"partial-0.1": [89.8, 91.0, 92.1], "partial-0.3": [90.0, 91.2, 91.9]}
    reached = {"rows": [*rows[:2], *({**row, "top1": close[f"partial-{row['q']:g}"]} for row in rows[2:])],
               "cells": [{"partition": "contiguous", "workers": 16, "smallest_q_reaching_global": 0.1}]}
    check = preregistration_check(reached, {"cells": [{**cell, "predicted_q": 0.3}]})
    assert (check["q_hits"], check["q_same"]) == (1, 0)
    assert check["baselines"] == {"always LS": 0, "always 0.1": 1, "always 0.3": 1}
    assert check["baselines_exact"] == {"always LS": 0, "always 0.1": 1, "always 0.3": 0}
    # a cell whose q 0.3 trains worse than q 0.1 at every seed: one pair against, beyond the noise
    result["rows"][3] = {**rows[3], "top1": [84.0, 85.0, 86.0]}
    check = preregistration_check(result, {"cells": [{**cell, "predicted_q": 0.3}]})
    assert (check["pairs_against"], check["pairs_against_beyond_noise"]) == (1, 1)
    # a registered cell with no runs yet is named apart, not scored
    later = {**cell, "workers": 256, "predicted_q": 0.1}
    check = preregistration_check(result, {"cells": [{**cell, "predicted_q": 0.3}, later]})
    assert len(check["cells"]) == 1 and check["not_trained"] == [{"partition": "contiguous", "workers": 256}]


def test_cells_whose_gap_interval_is_wider_than_two_points_get_more_seeds_with_global_beside_them():
    gaps = [{"partition": "random", "workers": 256, "strategy": "local", "q": 0.0, "ci90": [-3.3, 0.8]},
            {"partition": "random", "workers": 256, "strategy": "partial", "q": 0.1, "ci90": [-1.2, -0.5]},
            {"partition": "contiguous", "workers": 256, "strategy": "partial", "q": 0.1, "ci90": [-11.8, 1.5]},
            {"partition": "contiguous", "workers": 32, "strategy": "partial", "q": 0.3, "ci90": [-1.0, 1.0]},
            # a peer's runs lie under the first partition and stand for both: one cell, however many rows
            {"partition": "random", "workers": 32, "strategy": "corgipile", "q": 1.0, "ci90": [-3.0, 0.0]},
            {"partition": "contiguous", "workers": 32, "strategy": "corgipile", "q": 1.0, "ci90": [-3.0, 0.0]}]
    assert wide_cells(gaps, "random") == [("random", 256, "local"), ("random", 256, "global"),
                                          ("contiguous", 256, "partial-0.1"), ("random", 32, "corgipile"),
                                          ("random", 32, "global")]  # exactly 2 points wide is not wider


def test_the_readme_heading_names_the_wide_cells_trained_and_those_still_to_train():
    setup = {"dataset": "fashion", "samples": 60000, "classes": 10, "model": "small_cnn", "epochs": 10, "seeds": 3,
             "batch_size": {"32": 16}, "seeds_where_wide": {
                 "seeds": 5, "wider_than": 2.0, "cells": [["contiguous", 32, "local"], ["random", 32, "global"]],
                 "still_to_train": [["random", 32, "corgipile"]]}}
    line = heading({"setup": setup, "rows": [{"norm": "worker"}]}, "the study")
    assert line.endswith("3 seeds a cell, 5 where the paired gap's interval was wider than 2 points: contiguous M = 32 "
                         "LS, and GS at their M; still at 3, to train: random M = 32 CorgiPile).")


def test_collect_only_takes_the_complete_seeds_and_leaves_a_run_in_progress_alone(tmp_path):
    def runs(strategy: str, epochs: list[int]) -> tuple:
        for seed, done in enumerate(epochs):
            run = tmp_path / "random" / "M4" / strategy / f"seed{seed}"
            run.mkdir(parents=True)
            (run / "metrics.jsonl").write_text("".join(f'{{"epoch": {e}}}\n' for e in range(done)))
        return "random", 4, strategy

    five, three, short = runs("global", [2] * 5), runs("local", [2, 2, 2, 1]), runs("partial-0.3", [2, 2, 1])
    found, left_out = trained_seeds(tmp_path, [five, three, short], [3, 5], epochs=2)
    assert found == {five: 5, three: 3} and left_out == [short]
    assert (tmp_path / "random/M4/partial-0.3/seed2/metrics.jsonl").read_text() == '{"epoch": 0}\n'  # untouched


REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"


@pytest.mark.parametrize("stem", ["accuracy_fashion", "accuracy_study"])
def test_a_stored_study_scored_again_from_its_runs_is_what_it_stores(stem):
    # the rule has not changed since these were filed, so re-scoring (experiments/accuracy_rescore.py)
    # must give them back: the gaps, the correlations (a peer's run counted once for both partitions'
    # cells) and both pre-registration checks
    stored = json.loads((REFERENCE / f"{stem}.json").read_text())
    again = rescored(stored, json.loads((REFERENCE / f"{stem}_preregistered.json").read_text()))
    for key in ("rows", "cells", "gaps", "quality_vs_gap", "preregistered"):
        assert again[key] == stored[key], key
    if "preregistered_peers" in stored:
        peers = json.loads((REFERENCE / f"{stem}_peers_preregistered.json").read_text())
        assert peer_preregistration_check(again, peers) == stored["preregistered_peers"]
