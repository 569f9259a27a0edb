"""storage.scope=node on real `mpiexec` ranks, one machine pretending to be 2 nodes × 2 ranks.

The ranks of a node train on their node's partition dealt afresh each epoch (or, with
locality-aware loading, on their node's part of each global batch), reading each other's stores;
only moves and loans between nodes cross MPI. Checked from the audit against the plan.
"""

from __future__ import annotations

import sys

import pytest

from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from tests.conftest import (
    BATCH,
    EPOCHS,
    SHORT_EPOCHS,
    SMALL_SAMPLES,
    audit_by_epoch,
    run_mpi,
    train_args,
)
from tests.mpi.test_bad_input import fails_with

pytestmark = pytest.mark.mpi
RANKS, PER_NODE, Q = 4, 2, 0.3
NODES = ("storage.scope=node", f"storage.ranks_per_node={PER_NODE}")
RUNS = {  # shuffle: (overrides, epochs)
    "local": (("shuffle=local", "audit=true", f"epochs={SHORT_EPOCHS}"), SHORT_EPOCHS),
    "partial": (("shuffle=partial", f"shuffle.q={Q}", "audit=true"), EPOCHS),
    "locality": (("shuffle=locality", "audit=true", f"epochs={SHORT_EPOCHS}"), SHORT_EPOCHS),
}


@pytest.mark.parametrize("shuffle", sorted(RUNS))
def test_node_scope_trains_each_sample_once_and_moves_only_between_nodes(trained, shuffle):
    overrides, epochs = RUNS[shuffle]
    run_dir = trained(RANKS, *overrides, *NODES) / "run"
    plans = list(plan_epochs(PlanSpec(SMALL_SAMPLES, RANKS, BATCH, Q, 0, PER_NODE), shuffle, epochs))
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(epochs))
    for epoch, rows in audit.items():
        plan = plans[epoch]
        held = sorted(i for row in rows for i in row["held"])
        assert held == list(range(SMALL_SAMPLES)), f"epoch {epoch}: a sample is lost or duplicated"
        for rank, row in enumerate(rows):
            assert row["held"] == plan.held[rank].tolist()
            assert row["trained"] == plan.order[rank].tolist()
        for node in range(RANKS // PER_NODE if shuffle != "locality" else 0):  # locality trains GS batches
            mine = [rows[rank] for rank in range(node * PER_NODE, (node + 1) * PER_NODE)]
            node_held = {i for row in mine for i in row["held"]}
            assert {i for row in mine for i in row["trained"]} == node_held, "a node trained on another node's samples"

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert {(m["scope"], m["ranks_per_node"]) for m in metrics} == {("node", PER_NODE)}
    for record, plan in zip(metrics, plans):
        for moves in (plan.exchange, plan.loans):  # moved for good, or lent for one step
            assert moves is None or (moves.src // PER_NODE != moves.dst // PER_NODE).all()
        assert record["samples"]["sent"] == record["samples"]["received"] == sum(plan.sent_counts())
        assert record["samples"]["read_shared"] == 0


def test_node_scope_sends_less_and_mixes_more_than_rank_scope(trained):
    """At the same q, rank scope also sends between the two ranks of a node; node scope does not.
    Local shuffling over a node's partition mixes more than over a rank's."""
    overrides, _ = RUNS["partial"]
    node_sent = [m["samples"]["sent"] for m in read_jsonl(trained(RANKS, *overrides, *NODES) / "run" / "metrics.jsonl")]
    rank_plans = plan_epochs(PlanSpec(SMALL_SAMPLES, RANKS, BATCH, Q, 0), "partial", EPOCHS)
    rank_sent = [sum(plan.sent_counts()) for plan in rank_plans]
    assert 0.5 < sum(node_sent) / sum(rank_sent) < 0.85, (node_sent, rank_sent)

    overrides, _ = RUNS["local"]
    node = read_jsonl(trained(RANKS, *overrides, *NODES) / "run" / "metrics.jsonl")[-1]["mixing"]["quality"]
    rank = read_jsonl(trained(RANKS, *overrides) / "run" / "metrics.jsonl")[-1]["mixing"]["quality"]
    assert node > rank + 0.2, (node, rank)


def test_node_store_on_a_path_the_nodes_ranks_do_not_share_is_named(small_dataset, tmp_path):
    """MPMD launch: ranks 0 and 2 keep their stores under one directory, ranks 1 and 3 under
    another, as ranks with a per-process $TMPDIR would; each pretended node mixes the two."""
    def rank_args(local_dir: str) -> list[str]:
        args = train_args(small_dataset, tmp_path / "run", tmp_path / local_dir, "shuffle=local", *NODES)
        return [*args, "epochs=1"]

    args = [*rank_args("a"), ":", "-n", "1", sys.executable, *rank_args("b"),
            ":", "-n", "1", sys.executable, *rank_args("a"), ":", "-n", "1", sys.executable, *rank_args("b")]
    fails_with(run_mpi(1, args, timeout_s=120), "does not see rank", "must share storage.local_dir",
               "storage.scope=rank")


@pytest.mark.parametrize("scope", ["rank", "node"])
def test_store_in_use_by_another_job(small_dataset, tmp_path, scope):
    """Two concurrent jobs must not share a store directory: the second is refused, the first is untouched."""
    from hpcshuffle.storage.store import Store

    with Store(tmp_path / "store" / "rank00001"):
        args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", "shuffle=local",
                          f"storage.scope={scope}", f"storage.ranks_per_node={PER_NODE}")
        fails_with(run_mpi(RANKS, args, timeout_s=120), "is in use by another process", "storage.local_dir")


def test_nodes_that_do_not_divide_the_ranks_are_named(small_dataset, tmp_path):
    args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", "shuffle=local",
                      "storage.scope=node", "storage.ranks_per_node=3")
    fails_with(run_mpi(RANKS, args, timeout_s=120), "storage.scope=node needs every node",
               "4 ranks do not make nodes of 3", "storage.scope=rank")

