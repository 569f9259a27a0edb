"""`hpcshuffle scale` (hpcshuffle/cli/scale.py) on the 16-node test platform: the --json document's
exact shape, the table, --recommend, and usage errors that fail before anything is simulated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcshuffle.cli import main
from hpcshuffle.scale import recommend, seeds
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform_yaml import load_platform
from hpcshuffle.scale.scenario import Scenario, result_row
from tests.conftest import cli_error

TINY = Path(__file__).resolve().parents[1] / "data" / "platform_tiny.yaml"
# 2,048 samples of the tiny dataset: at 4 workers and b = 8, 64 iterations (≈ 0.2 s simulated each run)
ON_TINY = ["--platform", str(TINY), "--model", "tiny", "--dataset", "tiny", "--batch", "8"]
ROW_KEYS = ["workers", "shuffle", "q", "epoch_s", "io_s", "exchange_s", "fwbw_s", "allreduce_s", "scope", "io_min_s",
            "io_max_s", "au", "seed"]


def scale(capsys, *args: str) -> tuple[str, str]:
    main(["scale", *args])
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.fixture
def nothing_simulated(monkeypatch):
    """Fail the test if the command simulates anything."""
    def refuse(platform, scenario):
        raise AssertionError(f"simulated {scenario} before refusing the command")
    monkeypatch.setattr(recommend, "simulate", refuse)  # --recommend
    monkeypatch.setattr(seeds, "simulate", refuse)  # the table and --json


# ---- --json -----------------------------------------------------------------------------------

def test_json_has_one_row_per_run_with_exactly_the_documented_keys(capsys):
    out, err = scale(capsys, *ON_TINY, "--workers", "4", "--shuffle", "global", "local", "--json")
    doc = json.loads(out)
    assert list(doc) == ["platform", "seeds", "runs", "scenarios", "ratios"]
    assert doc["platform"] == "tiny"
    assert doc["seeds"] == 1
    assert [list(row) for row in doc["runs"]] == [ROW_KEYS, ROW_KEYS]
    runs = [(row["workers"], row["shuffle"], row["q"]) for row in doc["runs"]]
    assert runs == [(4, "global", 1.0), (4, "local", 0.0)]
    for row in doc["runs"]:
        assert all(isinstance(row[key], float) and row[key] >= 0 for key in ROW_KEYS[3:8])
        assert row["scope"] == "rank"
        assert row["epoch_s"] > 0
        assert row["seed"] == 0
    # one seed: each summary is that seed's number, p10 = median = p90
    (group,) = doc["ratios"]
    assert group["workers"] == 4 and group["scope"] == "rank" and list(group["ratios"]) == ["global/local"]
    gs_ls = doc["runs"][0]["epoch_s"] / doc["runs"][1]["epoch_s"]
    assert group["ratios"]["global/local"] == {"median": gs_ls, "p10": gs_ls, "p90": gs_ls}
    assert [s["epoch_s"]["median"] for s in doc["scenarios"]] == [row["epoch_s"] for row in doc["runs"]]
    # and beside each, the back-of-envelope (scale/envelope.py), worked by hand for tiny at M = 4: a rank
    # trains 512 samples in 64 steps. For GS the whole job's bound is 0.2048 s three ways (2,048 × 100 KB
    # at 1 GB/s; 2,048 opens at 10,000/s; 2,048 × 1 ms over 10 servers); one rank's own wait, 512 × 1 ms
    # over its 2 loaders, 0.256 s, is longer, and longer than FW+BW's 512 × 0.1 ms
    ring = 64 * (6 * 1e-5 + 6 / 4 * 1e6 / 1e9)
    assert doc["scenarios"][0]["envelope"] == {
        "epoch_s": pytest.approx(0.256 + ring), "io_s": pytest.approx(0.256), "exchange_s": 0.0,
        "fwbw_s": pytest.approx(512 * 1e-4), "allreduce_s": pytest.approx(ring), "bound": "io", "iterations": 64}
    local = doc["scenarios"][1]["envelope"]  # 512 × (0.1 ms + 100 KB at 1 GB/s) / 2 loaders: as long as FW+BW
    assert (local["io_s"], local["fwbw_s"]) == (pytest.approx(512 * 2e-4 / 2), pytest.approx(0.0512))
    # one progress line per run, on stderr
    assert [line.split(" ", 1)[0] for line in err.splitlines() if line.startswith("[")] == ["[1/2]", "[2/2]"]


def test_json_rows_are_what_simulate_returns(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "4", "--shuffle", "local", "--json")
    (row,) = json.loads(out)["runs"]
    direct = simulate(load_platform(str(TINY)), Scenario(4, "local", 0.0, "tiny", "tiny", 8, 0))
    assert row == {**json.loads(json.dumps(result_row(direct))), "seed": 0}


def test_json_has_one_row_per_workers_shuffle_and_q(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "2", "4", "--shuffle", "local", "partial", "--q", "0.1", "0.3",
                   "--json")
    runs = json.loads(out)["runs"]
    assert [(r["workers"], r["shuffle"], r["q"]) for r in runs] == [
        (2, "local", 0.0), (2, "partial", 0.1), (2, "partial", 0.3),
        (4, "local", 0.0), (4, "partial", 0.1), (4, "partial", 0.3),
    ]
    assert all(list(r) == ROW_KEYS for r in runs)
    assert all(r["exchange_s"] > 0 for r in runs if r["shuffle"] == "partial")
    assert all(r["exchange_s"] == 0 for r in runs if r["shuffle"] == "local")


def test_json_on_stdout_is_only_the_document_from_a_real_process():
    """SimGrid's own logging (from C++, in the simulating child) must stay off stdout."""
    done = subprocess.run([sys.executable, "-m", "hpcshuffle.cli", "scale", *ON_TINY, "--workers", "2",
                           "--shuffle", "local", "--json"], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [(r["workers"], r["shuffle"]) for r in doc["runs"]] == [(2, "local")]


def test_q_defaults_to_0_1_for_partial(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "2", "--shuffle", "partial", "--json")
    assert [(r["shuffle"], r["q"]) for r in json.loads(out)["runs"]] == [("partial", 0.1)]


# ---- the table -------------------------------------------------------------------------------------

def test_table_has_one_line_per_run_and_the_ratio_to_local(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "4", "--shuffle", "global", "local", "partial", "--q", "0.3")
    lines = out.splitlines()
    assert lines[0].startswith("platform tiny: tiny on tiny, b=8 per rank; seconds per epoch")
    assert lines[1].split()[:4] == ["workers", "run", "iters", "epoch"]
    rows = {line.split()[1]: line.split() for line in lines[2:]}
    assert list(rows) == ["global", "local", "partial-0.3"]
    assert all(row[0] == "4" and row[2] == "64" for row in rows.values())
    assert rows["local"][-2] == "1.00"  # vs LS
    assert float(rows["global"][-2]) > 1.0  # shared storage's 1 ms per file vs the SSD's 0.1 ms


def test_both_scopes_run_side_by_side_and_global_once(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "4", "--shuffle", "global", "local", "partial", "--q", "0.3",
                   "--scope", "rank", "node")
    rows = {line.split()[1]: line.split() for line in out.splitlines()[2:]}
    # GS has no partition for a node's ranks to share: it runs once, in rank scope
    assert list(rows) == ["global", "local", "partial-0.3", "local-node", "partial-0.3-node"]
    assert rows["local-node"][-2] == "1.00"  # each scope against its own LS
    exchange = 5  # workers run iters epoch io exchange
    assert 0 < float(rows["partial-0.3-node"][exchange]) < float(rows["partial-0.3"][exchange])


def test_recommend_per_scope(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "4", "--recommend", "--q", "0.3", "--tolerance", "100",
                   "--scope", "rank", "node")
    lines = [line.split() for line in out.splitlines() if line.split()[0].isdigit()]
    assert [line[:2] for line in lines] == [["4", "node"], ["4", "rank"]]
    assert all(line[3] == "0.3" for line in lines)


def test_node_scope_with_workers_that_do_not_fill_nodes_fails_before_simulating(capsys, nothing_simulated):
    err = cli_error(capsys, "scale", *ON_TINY, "--workers", "4", "3", "--shuffle", "local", "--scope", "node")
    assert "so 3 workers do not make whole nodes: use a multiple of 2, or rank scope" in err


# ---- --recommend ------------------------------------------------------------------------------

def test_recommend_prints_one_line_per_worker_count(capsys):
    out, err = scale(capsys, *ON_TINY, "--workers", "2", "4", "--recommend", "--q", "0.1", "0.3",
                     "--tolerance", "100")
    assert "within 10000% of local shuffling's" in out
    by_workers = {int(line.split()[0]): line.split() for line in out.splitlines() if line.split()[0].isdigit()}
    assert list(by_workers) == [2, 4]
    # any q fits within 100 × LS's epoch: the answer is the largest searched
    assert by_workers[2][1] == by_workers[4][1] == "rank"
    assert by_workers[2][3] == by_workers[4][3] == "0.3"
    assert [token.split(":")[0] for token in by_workers[4][4:]] == ["0.1", "0.3"]
    assert len([line for line in err.splitlines() if line.startswith("[")]) == 2 * 3  # local + 2 q per count


def test_recommend_with_a_tolerance_nothing_meets(capsys):
    out, _ = scale(capsys, *ON_TINY, "--workers", "4", "--recommend", "--q", "0.5", "--tolerance", "0")
    (line,) = [line for line in out.splitlines() if line.split()[0].isdigit()]
    assert line.split()[:2] + line.split()[3:4] == ["4", "rank", "none"]  # PLS at q=0.5 costs more than LS


# ---- usage errors -----------------------------------------------------------------------------

def test_unknown_platform_lists_the_known_ones(capsys, nothing_simulated):
    err = cli_error(capsys, "scale", "--platform", "nowhere", "--workers", "4")
    assert err.startswith("hpcshuffle scale: error: unknown platform 'nowhere'")
    assert "'abci'" in err and "'lassen'" in err


def test_missing_platform_file_is_named(capsys, nothing_simulated, tmp_path):
    err = cli_error(capsys, "scale", "--platform", str(tmp_path / "nowhere.yaml"), "--workers", "4")
    assert f"platform file {tmp_path / 'nowhere.yaml'} does not exist" in err


def test_workers_beyond_capacity_fail_before_simulating_anything(capsys, nothing_simulated):
    err = cli_error(capsys, "scale", *ON_TINY, "--workers", "4", "33", "--shuffle", "local")
    assert "holds at most 32 ranks" in err and "asked for 33" in err
    assert "[1/" not in err  # no progress line: nothing ran


def test_workers_beyond_abcis_capacity(capsys, nothing_simulated):
    err = cli_error(capsys, "scale", "--platform", "abci", "--workers", "5000")
    assert "holds at most 4352 ranks" in err


def test_zero_workers_is_refused(capsys, nothing_simulated):
    assert "workers must be >= 1, got 0" in cli_error(capsys, "scale", *ON_TINY, "--workers", "0")


@pytest.mark.parametrize("option, value, message", [
    ("--model", "bogus", "describes no model 'bogus'; choose one of ['tiny']"),
    ("--dataset", "bogus", "describes no dataset 'bogus'; choose one of ['tiny']"),
])
def test_unknown_model_or_dataset_is_refused(capsys, option, value, message):
    args = [*ON_TINY, "--workers", "4", "--shuffle", "local"]
    args[args.index(option) + 1] = value
    assert message in cli_error(capsys, "scale", *args)


def test_unknown_shuffle_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["scale", *ON_TINY, "--workers", "4", "--shuffle", "random"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'random'" in capsys.readouterr().err


# Both below are "before hours of simulation, not after": cmd_scale checks the worker counts up
# front, but not the rest of what a scenario needs.

def test_a_batch_too_large_for_one_worker_count_fails_before_simulating_anything(capsys, nothing_simulated):
    # 2,048 / 4 = 512 >= 100, but 2,048 / 32 = 64 < 100: the 4-worker runs must not be simulated first
    err = cli_error(capsys, "scale", *ON_TINY[:-1], "100", "--workers", "4", "32", "--shuffle", "local")
    assert "batch size 100 is larger than a worker's share ⌊N/M⌋ = ⌊2048/32⌋ = 64" in err


def test_a_negative_tolerance_fails_before_simulating_anything(capsys, nothing_simulated):
    err = cli_error(capsys, "scale", *ON_TINY, "--workers", "4", "--recommend", "--tolerance", "-0.1")
    assert "tolerance must be >= 0" in err
