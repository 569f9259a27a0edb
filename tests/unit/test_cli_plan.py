"""`hpcshuffle plan`: the dry-run command's JSON, its summary table and its usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcshuffle.cli import main
from hpcshuffle.plan import PlanSpec, plan_epochs
from tests.conftest import cli_error

REPO = Path(__file__).resolve().parents[2]


def run_plan(capsys, *args):
    main(["plan", *args])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "shuffle, q_args",
    [("partial", ["--q", "0.3"]), ("local", []), ("global", []), ("global", ["--q", "1"]), ("local", ["--q", "0"])],
)
def test_plan_json_shapes(capsys, shuffle, q_args):
    out = run_plan(capsys, "--samples", "103", "--workers", "4", "--shuffle", shuffle, *q_args,
                   "--batch", "5", "--epochs", "3", "--seed", "4", "--json")
    doc = json.loads(out)
    assert list(doc) == ["epochs"]
    epochs = doc["epochs"]
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    for entry in epochs:
        assert {"epoch", "held", "order", "sent", "received", "store_peak", "reads_shared"} <= set(entry)
        assert len(entry["held"]) == len(entry["order"]) == 4
        assert all(len(order) == 26 for order in entry["order"])
        assert all(isinstance(i, int) for order in entry["order"] for i in order)
        if shuffle == "global":
            assert entry["held"] == [[], [], [], []]
            assert entry["reads_shared"] == [26] * 4
        else:
            assert sorted(i for held in entry["held"] for i in held) == list(range(103))
            assert sorted(len(h) for h in entry["held"]) == [25, 26, 26, 26]  # 103 = 4·25 + 3
            assert entry["reads_shared"] == [0] * 4
            for order, held in zip(entry["order"], entry["held"]):
                assert set(order) == set(held)
        assert len(entry["sent"]) == len(entry["received"]) == len(entry["store_peak"]) == 4
    if shuffle == "partial":
        assert any(sum(e["sent"]) > 0 for e in epochs)


def test_plan_json_matches_library(capsys):
    out = run_plan(capsys, "--samples", "50", "--workers", "3", "--shuffle", "partial", "--q", "0.5",
                   "--batch", "4", "--epochs", "2", "--seed", "17", "--json")
    doc = json.loads(out)
    plans = list(plan_epochs(PlanSpec(50, 3, 4, 0.5, 17), "partial", 2))
    for entry, plan in zip(doc["epochs"], plans, strict=True):
        assert entry["held"] == [a.tolist() for a in plan.held]
        assert entry["order"] == [a.tolist() for a in plan.order]
        assert entry["sent"] == plan.sent_counts()
        assert entry["received"] == plan.received_counts()
        assert entry["store_peak"] == plan.store_peak()


def test_plan_json_defaults(capsys):
    # defaults: 3 epochs, batch 32, seed 0
    doc = json.loads(run_plan(capsys, "--samples", "200", "--workers", "2", "--shuffle", "local", "--json"))
    assert len(doc["epochs"]) == 3
    plans = list(plan_epochs(PlanSpec(200, 2, 32, 0.0, 0), "local", 3))
    assert doc["epochs"][2]["order"] == [a.tolist() for a in plans[2].order]


@pytest.mark.parametrize("epochs", [1, 4])
def test_plan_summary_one_line_per_epoch(capsys, epochs):
    out = run_plan(capsys, "--samples", "103", "--workers", "4", "--shuffle", "partial", "--q", "0.3",
                   "--batch", "5", "--epochs", str(epochs))
    lines = out.rstrip("\n").split("\n")
    assert lines[0].startswith("N=103 samples, M=4 workers, b=5, q=0.3")
    assert "6 iterations/epoch" in lines[0] and "partitions 25..26" in lines[0]
    assert lines[1].split()[0] == "epoch"
    rows = lines[2:]
    assert len(rows) == epochs
    for epoch, row in enumerate(rows):
        cols = row.split()
        assert cols[0] == str(epoch)
        assert cols[1] == "25..26"  # held min..max
        peak, bound, shared = int(cols[4]), int(cols[5]), int(cols[6])
        assert peak <= bound == 34  # ⌈1.3·103/4⌉ = ⌈33.475⌉
        assert peak <= 26 + 7
        assert shared == 0


def test_plan_summary_global_reads_shared(capsys):
    out = run_plan(capsys, "--samples", "10", "--workers", "3", "--shuffle", "global", "--batch", "2",
                   "--epochs", "2")
    rows = out.rstrip("\n").split("\n")[2:]
    assert len(rows) == 2
    for row in rows:
        cols = row.split()
        assert cols[1] == "0..0" and cols[4] == "0"
        assert cols[6] == "12"  # 3 ranks × ⌈10/3⌉ reads


def test_plan_summary_bound_is_exact(capsys):
    out = run_plan(capsys, "--samples", "100", "--workers", "10", "--shuffle", "partial", "--q", "0.1",
                   "--batch", "5", "--epochs", "1")
    cols = out.rstrip("\n").split("\n")[2].split()
    assert int(cols[4]) == 11  # peak = 10 + ⌊0.1·10⌋
    assert int(cols[5]) == 11  # ⌈1.1 · 100/10⌉


def test_plan_summary_per_node(capsys):
    """1000 samples on 2 nodes × 4 ranks: node partitions of 500, k = ⌊0.3·500⌋ = 150 slots, a node
    sends in a slot when the 2-node permutation swaps; the bound is ⌈1.3·1000/2⌉ = 650."""
    out = run_plan(capsys, "--samples", "1000", "--workers", "8", "--shuffle", "partial", "--q", "0.3",
                   "--batch", "10", "--epochs", "1", "--ranks-per-node", "4")
    lines = out.rstrip("\n").split("\n")
    assert "2 nodes of 4 ranks sharing a partition" in lines[0] and "partitions 500..500" in lines[0]
    assert lines[1].split()[3:6] == ["sent/node", "recv/node", "peak/node"]
    cols = lines[2].split()
    assert cols[1] == "500..500" and cols[2] == cols[3] and int(cols[2].split("..")[0]) <= 150
    assert int(cols[4]) == 500 + int(cols[3].split("..")[0]) <= int(cols[5]) == 650


def test_contiguous_partition_in_json(capsys):
    out = run_plan(capsys, "--samples", "12", "--workers", "3", "--shuffle", "local", "--batch", "2", "--epochs", "1",
                   "--partition", "contiguous", "--json")
    assert json.loads(out)["epochs"][0]["held"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    summary = run_plan(capsys, "--samples", "12", "--workers", "3", "--shuffle", "local", "--batch", "2",
                       "--partition", "contiguous")
    assert "seed=0, contiguous partition:" in summary.splitlines()[0]


def test_shard_plan_sends_whole_shards(capsys):
    """1000 samples, 4 ranks, shards of 20: k = ⌊0.3·250⌋ = 75 samples allow 3 shards per rank."""
    out = run_plan(capsys, "--samples", "1000", "--workers", "4", "--shuffle", "partial", "--q", "0.3", "--batch", "10",
                   "--epochs", "1", "--shard-samples", "20", "--buffer", "40")
    lines = out.splitlines()
    assert "random partition of shards of 20, a shuffle buffer of 40:" in lines[0]
    sent = [int(count) for count in lines[2].split()[2].split("..")]
    assert all(count % 20 == 0 and count <= 60 for count in sent)


def test_a_shard_larger_than_the_budget_exits_2(capsys):
    err = cli_error(capsys, "plan", "--samples", "1000", "--workers", "4", "--shuffle", "partial", "--q", "0.01",
                    "--batch", "10", "--shard-samples", "20")
    assert "a shard of 20 samples is more than the 2 samples a node may move per epoch" in err


def test_ranks_per_node_that_does_not_divide_exits_2(capsys):
    err = cli_error(capsys, "plan", "--samples", "100", "--workers", "8", "--shuffle", "local", "--batch", "5",
                    "--ranks-per-node", "3")
    assert "8 workers cannot be split into nodes of 3 ranks" in err


def test_partial_without_q_exits_2(capsys):
    err = cli_error(capsys, "plan", "--samples", "100", "--workers", "4", "--shuffle", "partial", "--batch", "5")
    assert "--q" in err
    assert err.startswith("hpcshuffle plan: error:")
    assert "Traceback" not in err


@pytest.mark.parametrize("shuffle", ["local", "global"])
def test_fixed_q_shuffle_with_q_exits_2(capsys, shuffle):
    err = cli_error(capsys, "plan", "--samples", "100", "--workers", "4", "--shuffle", shuffle, "--q", "0.3",
                         "--batch", "5")
    assert "partial" in err and "0.3" in err


@pytest.mark.parametrize("q", ["2", "-0.5"])
def test_q_out_of_range_exits_2(capsys, q):
    err = cli_error(capsys, "plan", "--samples", "100", "--workers", "4", "--shuffle", "partial", "--q", q,
                         "--batch", "5")
    assert "q must be in [0, 1]" in err


def test_more_workers_than_samples_exits_2(capsys):
    err = cli_error(capsys, "plan", "--samples", "3", "--workers", "5", "--shuffle", "local", "--batch", "1")
    assert "more workers (5) than samples (3)" in err


def test_batch_too_large_exits_2(capsys):
    err = cli_error(capsys, "plan", "--samples", "100", "--workers", "4", "--shuffle", "local")  # default b=32 > 25
    assert "batch size 32 is larger" in err


def test_unknown_shuffle_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--samples", "10", "--workers", "2", "--shuffle", "random"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "partial" in err


def test_console_entry_point_json():
    proc = subprocess.run(
        [sys.executable, "-m", "hpcshuffle.cli", "plan", "--samples", "40", "--workers", "4", "--shuffle",
         "partial", "--q", "0.5", "--batch", "2", "--epochs", "2", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [e["epoch"] for e in doc["epochs"]] == [0, 1]
    assert sorted(i for held in doc["epochs"][1]["held"] for i in held) == list(range(40))


def test_console_entry_point_error_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "hpcshuffle.cli", "plan", "--samples", "40", "--workers", "4", "--shuffle",
         "partial", "--batch", "2"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 2
    assert "--q" in proc.stderr and "Traceback" not in proc.stderr
