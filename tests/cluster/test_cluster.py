"""The mission across nodes: real `jobs/train.sbatch` jobs on the namespace cluster.

Every job reads the dataset from the storage node's volume (/pfs), stages node-local stores over
the links, and trains with `audit=true`; the tests check the audit against the plan, each node's
store against the plan's partition, each job's own node-local directory, and the links' byte
counters against what must (and must not) have crossed them. The faults are in test_faults.py.
"""

from __future__ import annotations

import re

import pytest
import yaml

from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.layout import rank_dir
from hpcshuffle.storage.store import Store
from tests.cluster.conftest import (
    BATCH,
    COMMON,
    DATASET,
    EPOCHS,
    NODES,
    PLS,
    SAMPLES,
    TWO_BY_ONE,
    TWO_BY_TWO,
    Q,
    Run,
    assert_audit_exact,
    between_nodes,
    sent_bytes,
)

pytestmark = pytest.mark.cluster
# a synthetic 32×32 JPEG is larger than this: the bytes that moving samples puts on the links, at least
SAMPLE_BYTES = 500
# what two runs of the same training may differ by on the links between nodes without moving a
# sample (Slurm's and GlusterFS's chatter, the jobs' output): far below one epoch's samples
CHATTER_BYTES = 32 * 1024


def test_node_scope_pls_on_two_nodes(nscluster, pls_run):
    (run, local) = pls_run
    assert run.job.exit_code == 0, run.job.log[-4000:]
    records = read_jsonl(run.run_dir / "metrics.jsonl")
    assert [(r["workers"], r["scope"], r["ranks_per_node"]) for r in records] == [(4, "node", 2)] * EPOCHS
    hosts = records[0]["hosts"]
    assert len(set(hosts)) == 2 and hosts[0] == hosts[1] != hosts[2] == hosts[3], hosts
    assert_audit_exact(run.run_dir)
    # each node's own /tmp holds its two ranks' stores, and they hold the plan's partition after the last epoch
    plans = list(plan_epochs(PlanSpec(SAMPLES, 4, BATCH, Q, 0, ranks_per_node=2), "partial", EPOCHS))
    final = plans[-1].next_held()
    for node in sorted(set(hosts)):
        ranks = [rank for rank, host in enumerate(hosts) if host == node]
        root = nscluster.node_tmp(node) / local.removeprefix("/tmp/")
        assert sorted(path.name for path in root.iterdir()) == [rank_dir(root, r).name for r in ranks]
        for rank in ranks:
            with Store(rank_dir(root, rank)) as store:
                assert store.ids() == set(final[rank].tolist()), f"{node}: rank {rank}'s store is not the plan's"
    # the exchange's samples crossed the two nodes' links (each image is > 500 bytes)
    exchanged = sum(r["samples"]["sent"] for r in records)
    assert exchanged > 0
    assert sent_bytes(run.before, run.after, set(hosts)) > exchanged * SAMPLE_BYTES


def test_gs_reads_every_epoch_from_the_storage_node(gs_run):
    run = gs_run
    assert run.job.exit_code == 0, run.job.log[-4000:]
    records = read_jsonl(run.run_dir / "metrics.jsonl")
    assert all(r["samples"]["read_shared"] == SAMPLES for r in records), [r["samples"] for r in records]
    assert len(set(records[0]["hosts"])) == 2
    assert records[0]["shared"]["fs"] == "fuse.glusterfs" and records[0]["shared"]["set"]["storage_link"] == "1gbit"
    assert_audit_exact(run.run_dir, stores=False)
    # every epoch's images came over the storage node's link
    assert sent_bytes(run.before, run.after, ["fs"]) > EPOCHS * SAMPLES * SAMPLE_BYTES


def test_mpiexec_inside_a_two_node_allocation(nscluster):
    """MPICH's mpiexec starts its proxies through srun (one task per node): not a wrong launch."""
    run_dir = nscluster.work / "mpiexec"
    command = (f"mpiexec -n 4 -ppn 2 python -m hpcshuffle.train hydra.run.dir={run_dir} "
               f"storage.local_dir=/tmp/hpcshuffle-mpiexec-$SLURM_JOB_ID {' '.join(COMMON)} {' '.join(PLS)} epochs=1")
    job = nscluster.sbatch("mpiexec", [*TWO_BY_TWO, "--wrap", command])
    assert job.exit_code == 0, job.log[-4000:]
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert record["workers"] == 4 and len(set(record["hosts"])) == 2


@pytest.fixture(scope="module")
def two_ls_jobs(nscluster):
    """Two LS jobs at once on the same two nodes, each with jobs/train.sbatch's default node-local
    directory (LOCAL_DIR unset: /tmp/hpcshuffle-job-<job id>, removed from every node at its end),
    and nothing else on the cluster meanwhile (the links' counters are theirs)."""
    names = ("ls-a", "ls-b")
    before = nscluster.counters()
    ids = {name: nscluster.submit(name, ["-w", "node1,node2", *TWO_BY_ONE, "jobs/train.sbatch", *COMMON,
                                         "shuffle=local"], env={"RUN_DIR": str(nscluster.work / name)})
           for name in names}
    jobs = {name: nscluster.wait(name, ids[name]) for name in names}
    after = nscluster.counters()
    return {name: Run(jobs[name], nscluster.work / name, before, after) for name in names}


def test_two_jobs_at_once_each_stage_into_a_directory_of_their_own(nscluster, two_ls_jobs):
    """Each job's stores live in its own node-local directory, named by its job id, which held
    every sample of its run (staged from nothing: neither job saw the other's store) and is gone
    from every node when the job ends, not only from the batch host."""
    directories = set()
    for name, run in two_ls_jobs.items():
        assert run.job.exit_code == 0, run.job.log[-4000:]
        local = f"/tmp/hpcshuffle-job-{run.job.job_id}"
        directories.add(local)
        config = yaml.safe_load((run.run_dir / "config.yaml").read_text())
        assert config["storage"]["local_dir"] == local
        staged = re.search(r"staged 2 ranks into (\S+): copied (\d+) samples .* removed (\d+), re-adopted (\d+)",
                           run.job.log)
        assert staged, f"{name}: no staging summary:\n{run.job.log[-3000:]}"
        assert staged.groups() == (local, str(SAMPLES), "0", "0"), f"{name} staged into a directory it shared"
        assert_audit_exact(run.run_dir)  # both nodes' stores held their partitions, every epoch
        for node in range(1, NODES + 1):
            left = nscluster.node_tmp(f"node{node}") / local.removeprefix("/tmp/")
            assert not left.exists(), f"node{node} keeps {name}'s {local}"
    assert len(directories) == 2


def test_ls_sends_nothing_between_nodes(gs_run, two_ls_jobs):
    """LS trains from node-local stores staged over the storage link: its nodes send each other
    gradients only, as GS's do (the same training, read from the storage node), and no sample;
    read from the links' byte counters, beside what the runs say of themselves."""
    for run in two_ls_jobs.values():
        records = read_jsonl(run.run_dir / "metrics.jsonl")
        assert len(set(records[0]["hosts"])) == 2
        assert all(r["samples"]["sent"] == 0 and r["samples"]["read_shared"] == 0 for r in records)
    gradients = between_nodes(gs_run.before, gs_run.after)
    run = next(iter(two_ls_jobs.values()))
    ls = between_nodes(run.before, run.after)  # both jobs' bytes: the counters are the links'
    print(f"between the nodes: the two LS jobs {ls / 1e6:.3f} MB, one GS job {gradients / 1e6:.3f} MB")
    assert gradients > 0
    assert abs(ls - 2 * gradients) < CHATTER_BYTES, (
        f"the two LS jobs' nodes sent each other {ls} bytes, two GS runs' gradients take {2 * gradients}")


@pytest.mark.parametrize("name, overrides", [
    ("locality", ["shuffle=locality"]),
    ("shards", ["dataset=synthetic_webdataset", f"dataset.root={DATASET}_wds", "dataset.synthesize.shard_samples=16",
                "shuffle=partial", "shuffle.q=0.5", "shuffle.unit=shard"]),
])
def test_the_strategies_that_move_samples_across_nodes(nscluster, gs_run, name, overrides):
    """Locality-aware loading lends samples across the nodes and PLS moves whole shards of a packed
    dataset: each with the audit exact and what moved seen on the links between the nodes, over
    the gradients that GS's run of the same training sent."""
    run_dir = nscluster.work / name
    before = nscluster.counters()
    job = nscluster.sbatch(name, [*TWO_BY_ONE, "jobs/train.sbatch", *COMMON, *overrides], env={"RUN_DIR": str(run_dir)})
    after = nscluster.counters()
    assert job.exit_code == 0, job.log[-4000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert len(set(records[0]["hosts"])) == 2
    assert_audit_exact(run_dir)
    moved = sum(r["samples"]["sent"] for r in records)
    assert all(r["samples"]["read_shared"] == 0 for r in records)
    beyond = between_nodes(before, after) - between_nodes(gs_run.before, gs_run.after)
    print(f"{name}: {moved} samples moved between the nodes; their links carried {beyond / 1e6:.3f} MB "
          "more between them than GS's")
    assert moved > 0 and beyond > moved * SAMPLE_BYTES
