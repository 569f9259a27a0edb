"""`audit_problems`: what a run directory's metrics.jsonl and audit.jsonl say about lost or
duplicated samples — on fake run directories."""

from __future__ import annotations

import json

from hpcshuffle.analysis.audit import audit_problems, epoch_exactness

N = 5  # two ranks train ⌈5/2⌉ = 3 samples each: one sample may be trained twice


def write_run(run_dir, held, trained, sent=0, received=0, audit=True):
    """One epoch of a 2-rank run: `held` and `trained` per rank."""
    run_dir.mkdir()
    record = {"epoch": 0, "num_samples": N, "workers": len(held),
              "samples": {"sent": sent, "received": received}}
    (run_dir / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    if audit:
        rows = [{"epoch": 0, "rank": rank, "held": h, "trained": t} for rank, (h, t) in enumerate(zip(held, trained))]
        (run_dir / "audit.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run_dir


def test_a_clean_store_run_and_a_clean_global_run_have_no_problems(tmp_path):
    stores = write_run(tmp_path / "local", [[0, 1, 2], [3, 4]], [[2, 0, 1], [4, 3, 4]], sent=3, received=3)
    shared = write_run(tmp_path / "global", [[], []], [[4, 0, 2], [1, 3, 2]])
    assert audit_problems(stores) == []
    assert audit_problems(shared) == []


def test_a_sample_no_rank_trained_or_held_is_lost(tmp_path):
    run = write_run(tmp_path / "run", [[0, 1, 2], [3]], [[0, 1, 2], [3, 3, 3]])
    problems = audit_problems(run)
    assert any("1 of 5 samples trained on by no rank (lost)" in p for p in problems)
    assert any("1 samples in no store" in p for p in problems)


def test_a_sample_in_two_stores_or_trained_beyond_the_padding_is_duplicated(tmp_path):
    run = write_run(tmp_path / "run", [[0, 1, 2], [2, 3, 4]], [[0, 1, 2], [3, 4, 0, 1]])
    problems = audit_problems(run)
    assert any("2 samples trained again, 1 allowed (duplicated)" in p for p in problems)
    assert any("1 extra copies" in p for p in problems)


def test_sends_without_receipts_a_missing_rank_and_a_missing_audit_are_named(tmp_path):
    run = write_run(tmp_path / "run", [[0, 1, 2, 3, 4]], [[0, 1, 2, 3, 4]], sent=4, received=3)
    (run / "metrics.jsonl").write_text(json.dumps({"epoch": 0, "num_samples": N, "workers": 2,
                                                   "samples": {"sent": 4, "received": 3}}) + "\n")
    problems = audit_problems(run)
    assert any("4 samples sent, 3 received" in p for p in problems)
    assert any("audit rows of ranks [0], expected 0..1" in p for p in problems)
    no_audit = write_run(tmp_path / "no-audit", [[0]], [[0]], audit=False)
    assert audit_problems(no_audit) == [f"{no_audit}/audit.jsonl is missing: run with audit=true"]


def test_epoch_exactness_counts_missing_samples_and_second_sightings():
    assert epoch_exactness([3, 0, 1, 1, 1], 4) == (1, 2)  # 2 missing; 1 seen twice more
    assert epoch_exactness(range(5), 5) == (0, 0)
