"""The mission across nodes: real `jobs/train.sbatch` jobs on the namespace cluster.

Every job reads the dataset from the storage node's volume (/pfs), stages node-local stores over
the links, and trains with `audit=true`; the tests check the audit against the plan, each node's
store against the plan's partition, and the links' byte counters against what must have crossed
them. One job loses a node mid-epoch and must be named, requeued and resumed bit-identically.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from hpcshuffle.comm.chaos import STOP_ENV
from hpcshuffle.files import read_jsonl
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.storage.layout import rank_dir
from hpcshuffle.storage.store import Store
from tests.cluster.conftest import NODES, cluster_sh
from tests.conftest import audit_by_epoch

pytestmark = pytest.mark.cluster
SAMPLES, BATCH, EPOCHS, Q = 256, 16, 3, 0.3
DATASET = "/pfs/cluster-tests/synthetic"
COMMON = [f"dataset.root={DATASET}", f"dataset.synthesize.samples={SAMPLES}", f"batch_size={BATCH}",
          f"epochs={EPOCHS}", "progress=false", "audit=true"]
PLS = ["shuffle=partial", f"shuffle.q={Q}", "storage.scope=node"]
TWO_BY_TWO = ["-N", "2", "--ntasks-per-node", "2", "--cpus-per-task", "1"]
LOST_EXIT_CODE = 76


def assert_audit_exact(run_dir, epochs: int = EPOCHS, stores: bool = True) -> None:
    """Every epoch trains on every sample once (the global batch divides SAMPLES) and, where the
    strategy keeps stores, the stores hold every sample once at the epoch's start."""
    audit = audit_by_epoch(run_dir)
    assert sorted(audit) == list(range(epochs))
    for epoch, rows in audit.items():
        trained = sorted(i for row in rows for i in row["trained"])
        assert trained == list(range(SAMPLES)), f"epoch {epoch}: a sample was skipped or trained on twice"
        if stores:
            held = sorted(i for row in rows for i in row["held"])
            assert held == list(range(SAMPLES)), f"epoch {epoch}: a sample is lost or held twice"


def sent_bytes(before: dict, after: dict, hosts) -> int:
    return sum(after[host][1] - before[host][1] for host in hosts)


@pytest.fixture(scope="module")
def pls_run(nscluster):
    """2 nodes × 2 ranks, node-scope PLS, uninterrupted; stores kept (LOCAL_DIR set) to be checked."""
    run_dir = nscluster.work / "pls"
    local = f"/tmp/hpcshuffle-test-{nscluster.work.name}"
    before = nscluster.counters()
    job = nscluster.sbatch("pls", [*TWO_BY_TWO, "jobs/train.sbatch", *COMMON, *PLS],
                           env={"RUN_DIR": str(run_dir), "LOCAL_DIR": local})
    after = nscluster.counters()
    yield job, run_dir, local, before, after
    for node in range(1, NODES + 1):
        subprocess.run(["rm", "-rf", str(nscluster.node_tmp(f"node{node}") / local.removeprefix("/tmp/"))])


def test_node_scope_pls_on_two_nodes(nscluster, pls_run):
    job, run_dir, local, before, after = pls_run
    assert job.rc == 0, job.log[-4000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [(r["workers"], r["scope"], r["ranks_per_node"]) for r in records] == [(4, "node", 2)] * EPOCHS
    hosts = records[0]["hosts"]
    assert len(set(hosts)) == 2 and hosts[0] == hosts[1] != hosts[2] == hosts[3], hosts
    assert_audit_exact(run_dir)
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
    assert sent_bytes(before, after, set(hosts)) > exchanged * 500


GS_ARGS = ["-N", "2", "--ntasks-per-node", "1", "--cpus-per-task", "1", "jobs/train.sbatch", *COMMON, "shuffle=global"]


@pytest.fixture(scope="module")
def gs_run(nscluster):
    run_dir = nscluster.work / "gs"
    before = nscluster.counters()
    job = nscluster.sbatch("gs", GS_ARGS, env={"RUN_DIR": str(run_dir)})
    return job, run_dir, before, nscluster.counters()


def test_gs_reads_from_the_storage_node_and_leaves_no_node_local_directory(nscluster, gs_run):
    job, run_dir, before, after = gs_run
    assert job.rc == 0, job.log[-4000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert all(r["samples"]["read_shared"] == SAMPLES for r in records), [r["samples"] for r in records]
    assert len(set(records[0]["hosts"])) == 2
    assert records[0]["shared"]["fs"] == "fuse.glusterfs" and records[0]["shared"]["set"]["storage_link"] == "1gbit"
    assert_audit_exact(run_dir, stores=False)
    # every epoch's images came over the storage node's link
    assert sent_bytes(before, after, ["fs"]) > EPOCHS * SAMPLES * 500
    # the job's own node-local directory is gone from every node, not only from the batch host
    for node in range(1, NODES + 1):
        left = list(nscluster.node_tmp(f"node{node}").glob(f"hpcshuffle-job-{job.job_id}"))
        assert not left, f"node{node} keeps {left}"


def test_mpiexec_inside_a_two_node_allocation(nscluster, pls_run):
    """MPICH's mpiexec starts its proxies through srun (one task per node): not a wrong launch."""
    run_dir = nscluster.work / "mpiexec"
    command = (f"mpiexec -n 4 -ppn 2 python -m hpcshuffle.train hydra.run.dir={run_dir} "
               f"storage.local_dir=/tmp/hpcshuffle-mpiexec-$SLURM_JOB_ID {' '.join(COMMON)} {' '.join(PLS)} epochs=1")
    job = nscluster.sbatch("mpiexec", [*TWO_BY_TWO, "--wrap", command])
    assert job.rc == 0, job.log[-4000:]
    (record,) = read_jsonl(run_dir / "metrics.jsonl")
    assert record["workers"] == 4 and len(set(record["hosts"])) == 2


def stopped_rank(node: str) -> bool:
    """Whether a process on `node` is stopped (SIGSTOP: state T)."""
    pids = subprocess.run(["ip", "netns", "pids", f"hpcs-{node}"], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T":
                return True
        except OSError:
            continue
    return False


def test_a_node_lost_mid_epoch_is_named_requeued_and_resumed(nscluster, pls_run):
    """The second node dies (slurmd, ranks, its mount, killed by pid) in the middle of epoch 1: the
    survivors name it within 60 s, the job is requeued, and it resumes from its checkpoint on the
    nodes it gets, training exactly as the uninterrupted run did. To crash at a known step, rank 2
    (the second node's first) freezes at epoch 1's third iteration (HPCSHUFFLE_CHAOS_STOP, first
    run of the job only), and the node is killed while it is frozen."""
    reference = read_jsonl(pls_run[1] / "metrics.jsonl")
    run_dir = nscluster.work / "crash"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(job=nscluster.sbatch(
        "crash", [*TWO_BY_TWO, "jobs/train.sbatch", *COMMON, *PLS, "world.timeout_s=30"],
        env={"RUN_DIR": str(run_dir), STOP_ENV: "2:1:iteration-2"}, timeout_s=600)))
    thread.start()
    deadline = time.monotonic() + 300
    try:
        victim = wait_for_epoch(run_dir, deadline)[0]["hosts"][2]
        while not stopped_rank(victim) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stopped_rank(victim), f"rank 2 on {victim} never reached epoch 1, iteration 2"
        named = Watch(nscluster.work / "crash.out", "hpcshuffle: peer lost")
        crashed = time.time()
        crash = cluster_sh("crash", victim)
        assert crash.returncode == 0, crash.stderr
        release_requeued(thread, deadline + 300)
    finally:
        revive = cluster_sh("up", "--nodes", str(NODES), timeout_s=300)
        assert revive.returncode == 0, revive.stderr
    job = result["job"]
    assert job.rc == 0, job.log[-6000:]
    assert "(restart 1)" in job.log, job.log[-4000:]
    lost = [line for line in job.log.splitlines() if line.startswith("hpcshuffle: peer lost") and victim in line]
    assert lost, f"no named error about {victim}:\n{job.log[-4000:]}"
    assert "epoch 1, step 2" in lost[0], lost[0]
    assert named.seen and named.seen - crashed < 60, "the lost node was not named within 60 s"
    print(f"named {named.seen - crashed:.1f} s after the crash: {lost[0]}")
    assert_audit_exact(run_dir)
    assert_same_training(run_dir, reference)

class Watch(threading.Thread):
    """When `text` first appears in the file at `path` (polled every 0.2 s), in time.time()."""

    def __init__(self, path, text: str, limit_s: float = 400) -> None:
        super().__init__(daemon=True)
        self.path, self.text, self.limit_s, self.seen = path, text, limit_s, None
        self.start()

    def run(self) -> None:
        end = time.monotonic() + self.limit_s
        while self.seen is None and time.monotonic() < end:
            if self.path.exists() and self.text in self.path.read_text(errors="replace"):
                self.seen = time.time()
            time.sleep(0.2)


def wait_for_epoch(run_dir, deadline: float) -> list[dict]:
    while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (run_dir / "metrics.jsonl").exists(), "epoch 0 never finished"
    return read_jsonl(run_dir / "metrics.jsonl")


def release_requeued(thread: threading.Thread, deadline: float) -> None:
    """Slurm delays a requeued job's start (about 2 minutes): start it at once (the resume is what is tested)."""
    while thread.is_alive() and time.monotonic() < deadline:
        cluster_sh("run", "--", "bash", "-c", "for job in $(squeue -h -t PD -n hpcshuffle-train -o %i); do "
                   "scontrol update JobId=$job StartTime=now; done")
        thread.join(timeout=5)


def assert_same_training(run_dir, reference: list[dict]) -> None:
    records = {r["epoch"]: r for r in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(records) == list(range(EPOCHS))
    for before in reference:  # bit-identical to the uninterrupted run
        after = records[before["epoch"]]
        assert (after["train_loss"], after["val_top1"]) == (before["train_loss"], before["val_top1"])


def test_a_link_down_during_the_exchange_is_named_requeued_and_resumed(nscluster, pls_run):
    """The second node's link goes down while its first rank is in epoch 1's exchange (frozen there
    a moment so the moment is known): its peers wait in the allreduce until world.timeout_s, name
    the node, the job is requeued, and once the link is back it resumes bit-identically. The run
    directory is on /pfs, as on a cluster: the cut-off node cannot answer the roll call there."""
    run_dir = f"/pfs/cluster-tests/{nscluster.work.name}/link"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(job=nscluster.sbatch(
        "link", [*TWO_BY_TWO, "jobs/train.sbatch", *COMMON, *PLS, "world.timeout_s=20"],
        env={"RUN_DIR": run_dir, STOP_ENV: "2:1:iteration-2"}, timeout_s=600)))
    thread.start()
    deadline = time.monotonic() + 300
    victim = None
    try:
        while cluster_sh("run", "--", "test", "-s", f"{run_dir}/metrics.jsonl").returncode and time.monotonic() < deadline:
            time.sleep(0.5)
        first = json.loads(cluster_sh("run", "--", "head", "-1", f"{run_dir}/metrics.jsonl").stdout)
        victim = first["hosts"][2]
        while not stopped_rank(victim) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stopped_rank(victim), f"rank 2 on {victim} never reached epoch 1, iteration 2"
        named = Watch(nscluster.work / "link.out", "hpcshuffle: peer lost")
        assert cluster_sh("link", victim, "down").returncode == 0
        cut = time.time()
        pids = subprocess.run(["ip", "netns", "pids", f"hpcs-{victim}"], capture_output=True, text=True).stdout.split()
        subprocess.run(["kill", "-CONT", *pids])
        named.join(timeout=120)
        time.sleep(30)  # the link stays down until Slurm has marked the node down (SlurmdTimeout)
        assert cluster_sh("link", victim, "up").returncode == 0
        release_requeued(thread, deadline + 300)
    finally:
        if victim:
            cluster_sh("link", victim, "up")
        assert cluster_sh("up", "--nodes", str(NODES), timeout_s=300).returncode == 0
    job = result["job"]
    assert job.rc == 0, job.log[-6000:]
    assert "(restart 1)" in job.log, job.log[-4000:]
    lost = [line for line in job.log.splitlines() if line.startswith("hpcshuffle: peer lost") and victim in line]
    assert lost and "world.timeout_s=20" in lost[0], job.log[-4000:]
    assert named.seen and named.seen - cut < 60, "the cut-off node was not named within 60 s"
    print(f"named {named.seen - cut:.1f} s after the link went down: {lost[0]}")
    local = nscluster.work / "link"
    assert cluster_sh("run", "--", "cp", "-r", run_dir, str(local)).returncode == 0
    assert_audit_exact(local)
    assert_same_training(local, read_jsonl(pls_run[1] / "metrics.jsonl"))


def test_the_storage_node_gone_during_gs_is_named_and_a_resubmission_resumes(nscluster, gs_run):
    """GlusterFS's server stops after GS's first epoch: the next read names the lost storage and the
    job ends (no requeue: it would fail again until the storage is back); once it is back, the same
    submission resumes from the checkpoint and trains exactly as the uninterrupted run did."""
    run_dir = nscluster.work / "storage"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(job=nscluster.sbatch(
        "storage", GS_ARGS, env={"RUN_DIR": str(run_dir)})))
    thread.start()
    try:
        wait_for_epoch(run_dir, time.monotonic() + 300)
        stopped = time.time()
        assert cluster_sh("storage", "stop").returncode == 0
        thread.join(timeout=300)
    finally:
        assert cluster_sh("up", "--nodes", str(NODES), timeout_s=300).returncode == 0  # the storage is back
    job = result["job"]
    assert job.rc == 2, job.log[-4000:]
    named = [line for line in job.log.splitlines() if "shared storage went away during the run" in line]
    assert named, job.log[-4000:]
    ended = os.path.getmtime(nscluster.work / "storage.out") - stopped
    assert ended < 60, f"the job ended {ended:.0f} s after the storage went away"
    print(f"{named[0]} (job over {ended:.0f} s after the storage stopped)")
    again = nscluster.sbatch("storage-again", GS_ARGS, env={"RUN_DIR": str(run_dir)})
    assert again.rc == 0, again.log[-4000:]
    assert "resume:" in again.log
    assert_audit_exact(run_dir, stores=False)
    assert_same_training(run_dir, read_jsonl(gs_run[1] / "metrics.jsonl"))


@pytest.mark.parametrize("name, overrides, crosses", [
    ("ls", ["shuffle=local"], False),
    ("locality", ["shuffle=locality"], True),
    ("shards", ["dataset=synthetic_webdataset", f"dataset.root={DATASET}_wds", "dataset.synthesize.shard_samples=16",
                "shuffle=partial", "shuffle.q=0.5", "shuffle.unit=shard"], True),
])
def test_the_other_strategies_across_nodes(nscluster, name, overrides, crosses):
    """LS trains from node-local stores staged over the storage link and sends nothing between
    nodes; locality-aware loading lends samples across them, and PLS moves whole shards of a packed
    dataset: each with the audit exact and what moved seen on the nodes' links."""
    run_dir = nscluster.work / name
    before = nscluster.counters()
    job = nscluster.sbatch(name, ["-N", "2", "--ntasks-per-node", "1", "--cpus-per-task", "1", "jobs/train.sbatch",
                                  *COMMON, *overrides], env={"RUN_DIR": str(run_dir)})
    after = nscluster.counters()
    assert job.rc == 0, job.log[-4000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    hosts = records[0]["hosts"]
    assert len(set(hosts)) == 2
    assert_audit_exact(run_dir)
    moved = sum(r["samples"]["sent"] for r in records)
    assert all(r["samples"]["read_shared"] == 0 for r in records)
    if crosses:
        assert moved > 0 and sent_bytes(before, after, hosts) > moved * 500
    else:
        assert moved == 0
    print(f"{name}: {moved} samples moved between the nodes; their links sent "
          f"{sent_bytes(before, after, hosts) / 1e6:.1f} MB")
