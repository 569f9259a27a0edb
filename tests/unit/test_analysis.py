"""Yang & Cong (2019): the Fig. 6 imbalance simulation, the eqs. 1–8 model, and their commands."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcshuffle.analysis.imbalance import (
    BATCHES_PER_EPOCH,
    batch_counts,
    cache_directory,
    imbalance_pct,
    simulate,
    sweep,
    transfer_counts,
)
from hpcshuffle.analysis.model import (
    ModelParams,
    cache_io_time_s,
    crossover_nodes,
    loading_time_s,
    locality_io_time_s,
    predict,
    preprocessing_time_s,
    sample_io_time_s,
    simulated_balance_fraction,
    training_time_s,
    true_cost_s,
)
from hpcshuffle.cli import main

PAPER_MEDIANS_PCT = {32: 6.9, 64: 4.8, 128: 3.4}  # §V-C, read off Fig. 6
FIG6_NODES = (16, 64, 256)


@pytest.fixture(scope="module")
def fig6():
    return sweep(list(PAPER_MEDIANS_PCT), list(FIG6_NODES))


def test_fig6_medians_match_the_paper(fig6):
    assert [(r.batch_size, r.num_nodes) for r in fig6] == [(b, p) for b in PAPER_MEDIANS_PCT for p in FIG6_NODES]
    for result in fig6:
        assert result.median_pct == pytest.approx(PAPER_MEDIANS_PCT[result.batch_size], abs=0.3), (
            result.batch_size, result.num_nodes)


def test_fig6_transfers_at_most_p_minus_1_every_step(fig6):
    for result in fig6:
        assert len(result.transfers) == len(result.imbalance_pct) == 512
        assert result.transfers.max() <= result.num_nodes - 1
        assert result.max_transfers <= result.num_nodes - 1
        # with a few % imbalance most nodes are off by a sample or more, so balancing is not free
        assert result.median_transfers >= result.num_nodes / 2


def test_fig6_box_is_ordered(fig6):
    for result in fig6:
        first, third = result.quartiles_pct
        low, high = result.whiskers_pct
        values = result.imbalance_pct
        assert values.min() <= low <= first <= result.median_pct <= third <= high <= values.max()
        assert np.all((result.fliers_pct < low) | (result.fliers_pct > high))


def test_paper_fig5_example():
    # 3 learners, local batch 4: Red caches 2, Green 6, Blue 4 → Red loads 2 from Green, 2/12 of the batch
    counts = np.array([[2, 6, 4]])
    assert imbalance_pct(counts, 4) == pytest.approx([100 * 2 / 12])
    assert transfer_counts(counts, 4).tolist() == [1]


def test_counts_cover_every_global_batch():
    counts = batch_counts(batch_size=5, num_nodes=7, num_steps=30, seed=3, batches_per_epoch=4)
    assert counts.shape == (30, 7) and counts.dtype == np.int64
    assert np.all(counts.sum(axis=1) == 35)
    # an epoch is a permutation: over its 4 batches every node contributes all it caches, 4·5 samples
    assert np.all(counts[:28].reshape(7, 4, 7).sum(axis=1) == 20)


def test_partition_is_even_random_and_seeded():
    node_of = cache_directory(num_samples=600, num_nodes=6, seed=1, batch_size=4)
    assert np.bincount(node_of).tolist() == [100] * 6
    assert np.array_equal(node_of, cache_directory(600, 6, 1, 4))
    assert not np.array_equal(node_of, cache_directory(600, 6, 2, 4))
    assert not np.array_equal(node_of, np.arange(600) % 6)


def test_same_seed_same_steps_and_epoch_0_is_not_the_partition():
    first = batch_counts(16, 8, num_steps=40, seed=5)
    assert np.array_equal(first, batch_counts(16, 8, num_steps=40, seed=5))
    assert not np.array_equal(first, batch_counts(16, 8, num_steps=40, seed=6))
    # were the epoch's generator the partition's, every batch of epoch 0 would be perfectly balanced
    assert np.count_nonzero(imbalance_pct(first, 16)) > 30


def test_one_node_is_always_balanced():
    result = simulate(batch_size=8, num_nodes=1, num_steps=10)
    assert result.num_samples == BATCHES_PER_EPOCH * 8
    assert result.imbalance_pct.tolist() == [0.0] * 10
    assert result.transfers.tolist() == [0] * 10


@pytest.mark.parametrize(
    "batch_sizes, node_counts, steps, message",
    [([0], [4], 10, "local batch size b must be >= 1, got 0"),
     ([8], [0], 10, "number of nodes p must be >= 1, got 0"),
     ([8], [4], 0, "number of steps must be >= 1, got 0"),
     ([8], [10**6], 10, "use fewer nodes or a smaller batch")],
)
def test_bad_simulation_shape(batch_sizes, node_counts, steps, message):
    with pytest.raises(ValueError, match=message):
        sweep(batch_sizes, node_counts, steps)


def run_cli(capsys, *args) -> str:
    main(list(args))
    return capsys.readouterr().out


def run_cli_error(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def test_imbalance_json_shape(capsys):
    out = run_cli(capsys, "imbalance", "--batch", "8", "16", "--nodes", "4", "--steps", "64", "--seed", "2", "--json")
    doc = json.loads(out)
    assert "medians" in doc
    assert [list(entry) for entry in doc["medians"]] == [["batch", "nodes", "imbalance_pct"]] * 2
    assert [(e["batch"], e["nodes"]) for e in doc["medians"]] == [(8, 4), (16, 4)]
    for entry in doc["medians"]:
        expected = simulate(entry["batch"], entry["nodes"], num_steps=64, seed=2).median_pct
        assert entry["imbalance_pct"] == pytest.approx(expected)
    assert all(box["transfers_max"] <= 3 for box in doc["boxes"])


def test_imbalance_table_and_plot(capsys, tmp_path):
    png = tmp_path / "fig6.png"
    out = run_cli(capsys, "imbalance", "--batch", "8", "--nodes", "2", "4", "--steps", "32", "--plot", str(png))
    lines = out.splitlines()
    assert f"N = {BATCHES_PER_EPOCH}·p·b samples" in lines[0]
    rows = [line.split() for line in lines[3:5]]
    assert [row[:3] for row in rows] == [["8", "2", str(BATCHES_PER_EPOCH * 16)], ["8", "4", str(BATCHES_PER_EPOCH * 32)]]
    assert lines[-1] == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, message",
    [(["--batch", "0"], "local batch size b must be >= 1, got 0"),
     (["--nodes", "16", "-4"], "number of nodes p must be >= 1, got -4"),
     (["--steps", "0"], "number of steps must be >= 1, got 0")],
)
def test_imbalance_bad_input_exits_2(capsys, args, message):
    err = run_cli_error(capsys, "imbalance", *args)
    assert err.startswith("hpcshuffle imbalance: error:") and message in err


# D = 1000 samples, V = 10/s per node, R = 100/s, U = 50/s per node, α = 0.75, Rc = 400/s, Rb = 250/s
SMALL = ModelParams(num_samples=1000, train_samples_per_s=10, io_samples_per_s=100, preprocess_samples_per_s=50,
                    cached_fraction=0.75, cache_samples_per_s=400, balance_samples_per_s=250, balance_fraction=0.05)


def test_model_equations_by_hand():
    assert training_time_s(SMALL, 4) == pytest.approx(25.0)  # (1) 1000 / (4·10)
    assert sample_io_time_s(SMALL) == pytest.approx(10.0)  # (2) 1000 / 100
    assert preprocessing_time_s(SMALL, 4) == pytest.approx(5.0)  # (3) 1000 / (4·50)
    assert loading_time_s(SMALL, 4) == pytest.approx(15.0)  # (4) 10 + 5
    assert true_cost_s(SMALL, 4) == pytest.approx(25.0)  # (6) max(25, 15): training-bound
    assert true_cost_s(SMALL, 16) == pytest.approx(11.25)  # max(6.25, 10 + 1.25): loading-bound
    assert cache_io_time_s(SMALL, 4) == pytest.approx(3.90625)  # (7) 0.25·1000/100 + 0.75·1000/400 · 3/4
    assert cache_io_time_s(SMALL, 1) == pytest.approx(2.5)  # a single node's cache is local
    assert locality_io_time_s(SMALL, 0.05) == pytest.approx(2.65)  # (8) 2.5 + 0.75·1000/250 · 0.05


def test_balance_rate_defaults_to_cache_rate():
    params = ModelParams(1000, 10, 100, 50, cached_fraction=1.0, cache_samples_per_s=400)
    assert params.balance_rate == 400
    assert locality_io_time_s(params, 0.1) == pytest.approx(0.25)  # 1000/400 · 0.1


def test_crossover_is_r_over_v():
    # U ≫ V, as eq. (5) assumes: the epoch is D/(p·V) up to p = R/V = 10 nodes and ≈ D/R beyond
    params = ModelParams(1000, train_samples_per_s=10, io_samples_per_s=100, preprocess_samples_per_s=1e9,
                         balance_fraction=0.0)
    assert crossover_nodes(params) == pytest.approx(10.0)
    for row in predict(params, list(range(1, 21))):
        if row.num_nodes < 10:
            assert row.regular.dominant == "training"
            assert row.regular.epoch_s == pytest.approx(1000 / (10 * row.num_nodes))
        else:  # at p = 10 training (10 s) and storage (10 s + D/(p·U)) meet
            assert row.regular.epoch_s == pytest.approx(10.0, rel=1e-6)
        if row.num_nodes > 10:
            assert row.regular.dominant == "storage"


def test_predict_methods_and_bounds():
    by_nodes = {row.num_nodes: row for row in predict(SMALL, [4, 16])}
    four, sixteen = by_nodes[4], by_nodes[16]
    assert [four.regular.epoch_s, four.cache.epoch_s, four.locality.epoch_s] == pytest.approx([25.0] * 3)
    assert four.regular.dominant == four.locality.dominant == "training"
    assert sixteen.regular.epoch_s == pytest.approx(true_cost_s(SMALL, 16))
    assert sixteen.regular.dominant == "storage"
    assert sixteen.balance_fraction == 0.05
    assert sixteen.locality.io_s == pytest.approx(2.65)
    slow_preprocessing = ModelParams(1000, 10, 100, preprocess_samples_per_s=1)
    assert predict(slow_preprocessing, [4], batch_size=8)[0].regular.dominant == "preprocessing"


def test_beta_is_simulated_when_not_given():
    assert simulated_balance_fraction(32, 1) == 0.0
    assert 0.06 < simulated_balance_fraction(32, 64) < 0.075  # Fig. 6: b = 32 → ~6.9 %
    params = ModelParams(1000, 10, 100, 50)
    row = predict(params, [64], batch_size=32)[0]
    assert row.balance_fraction == simulated_balance_fraction(32, 64)


@pytest.mark.parametrize(
    "changes, message",
    [({"num_samples": 0}, "dataset size D must be >= 1"),
     ({"train_samples_per_s": 0}, "training rate V .* must be a positive finite number, got 0"),
     ({"io_samples_per_s": -5}, "storage rate R .* got -5"),
     ({"preprocess_samples_per_s": float("nan")}, "preprocessing rate U"),
     ({"cache_samples_per_s": 0}, "remote-cache rate Rc"),
     ({"balance_samples_per_s": float("inf")}, "balancing rate Rb"),
     ({"cached_fraction": 1.5}, r"cached fraction α must be in \[0, 1\], got 1.5"),
     ({"balance_fraction": -0.1}, r"balancing fraction β must be in \[0, 1\], got -0.1")],
)
def test_bad_model_parameters(changes, message):
    values = {"num_samples": 1000, "train_samples_per_s": 10, "io_samples_per_s": 100,
              "preprocess_samples_per_s": 50, **changes}
    with pytest.raises(ValueError, match=message):
        ModelParams(**values)


def test_bad_node_count_and_batch():
    with pytest.raises(ValueError, match="number of nodes p must be >= 1, got 0"):
        predict(SMALL, [4, 0])
    with pytest.raises(ValueError, match="local batch size b must be >= 1, got 0"):
        predict(SMALL, [4], batch_size=0)


SMALL_FLAGS = ["--samples", "1000", "--train-rate", "10", "--io-rate", "100", "--preprocess-rate", "50",
               "--alpha", "0.75", "--cache-rate", "400", "--balance-rate", "250", "--beta", "0.05"]


def test_model_json(capsys):
    doc = json.loads(run_cli(capsys, "model", *SMALL_FLAGS, "--nodes", "4", "16", "--json"))
    assert doc["crossover_nodes"] == pytest.approx(10.0)
    four, sixteen = doc["predictions"]
    assert four["nodes"] == 4 and four["training_s"] == pytest.approx(25.0)
    assert four["regular"] == {"io_s": pytest.approx(10.0), "epoch_s": pytest.approx(25.0), "dominant": "training"}
    assert four["cache"]["io_s"] == pytest.approx(3.90625)
    assert four["locality"]["io_s"] == pytest.approx(2.65)
    assert sixteen["regular"]["epoch_s"] == pytest.approx(11.25)


def test_model_table_and_plot(capsys, tmp_path):
    png = tmp_path / "model.png"
    out = run_cli(capsys, "model", "--nodes", "1", "16", "256", "--plot", str(png))
    lines = out.splitlines()
    assert lines[0].startswith("D = 1281167 samples")
    assert "p = R/V = 20.0 nodes" in lines[1]
    rows = [line.split() for line in lines[3:6]]
    assert [row[0] for row in rows] == ["1", "16", "256"]
    assert rows[2][3] == "storage"  # regular loading is storage-bound on 256 nodes
    assert lines[-1] == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, message",
    [(["--alpha", "1.5"], "cached fraction α must be in [0, 1], got 1.5"),
     (["--io-rate", "0"], "storage rate R (samples/s) must be a positive finite number, got 0.0"),
     (["--train-rate", "-1"], "training rate V"),
     (["--nodes", "1", "0"], "number of nodes p must be >= 1, got 0"),
     (["--batch", "0"], "local batch size b must be >= 1, got 0")],
)
def test_model_bad_input_exits_2(capsys, args, message):
    err = run_cli_error(capsys, "model", *args)
    assert err.startswith("hpcshuffle model: error:") and message in err
