"""A multi-node cluster for the `cluster` tests: namespace nodes, real Slurm, a GlusterFS storage node.

`scripts/cluster.sh up` brings up 3 compute nodes, a login node and a storage node on this
machine (root: namespaces, tc, mounts, daemons) and the fixture tears down what it brought up
when the package's tests are done. Jobs go in through `cluster.sh run -- sbatch ...` on the login
node, from the repository, which every node sees, and are polled there (hpcshuffle.slurm). Without
root the tests skip, saying why; so they do when the repository lies under /tmp, which is
node-local on the cluster's nodes.

The runs that several tests check (node-scope PLS, GS) are package fixtures, trained once.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcshuffle import slurm
from hpcshuffle.files import read_jsonl
from tests.conftest import REPO, audit_by_epoch, mpi_env

SCRIPT = REPO / "scripts" / "cluster.sh"
STATE = Path(os.environ.get("HPCSHUFFLE_CLUSTER_STATE", "/var/tmp/hpcshuffle-cluster"))
NODES = 3
SETTINGS = f"nodes={NODES} link=10gbit storage_link=1gbit storage_latency_ms=0"
LOGIN = ["bash", str(SCRIPT), "run", "--"]  # Slurm's clients run on the login node, inside the cluster
JOB_TIMEOUT_S = 180  # a job here takes 10-25 s

# what the jobs train: 2 epochs cross the epoch boundary that resumes and exchanges need
SAMPLES, BATCH, EPOCHS, Q = 256, 16, 2, 0.3
DATASET = "/pfs/cluster-tests/synthetic"
COMMON = [f"dataset.root={DATASET}", f"dataset.synthesize.samples={SAMPLES}", f"batch_size={BATCH}",
          f"epochs={EPOCHS}", "progress=false", "audit=true"]
PLS = ["shuffle=partial", f"shuffle.q={Q}", "storage.scope=node"]
TWO_BY_TWO = ["-N", "2", "--ntasks-per-node", "2", "--cpus-per-task", "1"]
TWO_BY_ONE = ["-N", "2", "--ntasks-per-node", "1", "--cpus-per-task", "1"]
GS_ARGS = [*TWO_BY_ONE, "jobs/train.sbatch", *COMMON, "shuffle=global"]


def cluster_sh(*args: str, timeout_s: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`bash scripts/cluster.sh ARGS` from the repository, its output kept."""
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env={**mpi_env(), **(env or {})},
                          capture_output=True, text=True, timeout=timeout_s)


@dataclass
class Cluster:
    """The running cluster, and a directory of this session every node sees (under results/)."""

    work: Path

    def submit(self, name: str, args: list[str], env: dict[str, str] | None = None) -> str:
        """Submit on the login node, output to <work>/<name>.out; the job id."""
        return slurm.submit(args, prefix=LOGIN, log=self.log(name), cwd=REPO, env={**mpi_env(), **(env or {})})

    def wait(self, name: str, job_id: str, timeout_s: float = JOB_TIMEOUT_S,
             on_poll: Callable[[dict[str, str]], None] | None = None) -> slurm.JobEnd:
        """Poll the job every second until it ends (through requeues); cancelled after `timeout_s`."""
        return slurm.wait(job_id, prefix=LOGIN, log=self.log(name), timeout_s=timeout_s, cwd=REPO, env=mpi_env(),
                          on_poll=on_poll)

    def sbatch(self, name: str, args: list[str], env: dict[str, str] | None = None,
               timeout_s: float = JOB_TIMEOUT_S) -> slurm.JobEnd:
        """Submit and wait for the job's end."""
        return self.wait(name, self.submit(name, args, env), timeout_s)

    def log(self, name: str) -> Path:
        """Where the job named `name` writes its output."""
        return self.work / f"{name}.out"

    def counters(self) -> dict[str, tuple[int, int]]:
        """Bytes (received, sent) on each host's link."""
        out = cluster_sh("counters").stdout.split("\n")
        return {host: (int(rx), int(tx)) for host, rx, tx in (line.split() for line in out if line)}

    def node_tmp(self, node: str) -> Path:
        """What `node` sees as /tmp (its node-local directory), seen from this machine."""
        return STATE / "nodes" / node / "tmp"


def sent_bytes(before: dict, after: dict, hosts) -> int:
    """Bytes the hosts' links sent between two `counters()`."""
    return sum(after[host][1] - before[host][1] for host in hosts)


def between_nodes(before: dict, after: dict) -> int:
    """Bytes the compute nodes sent each other between two `counters()`: all they sent, less what
    the storage and login nodes received (from them; what those two send each other is small)."""
    received = {host: after[host][0] - before[host][0] for host in after}
    nodes = [host for host in after if host.startswith("node")]
    return sent_bytes(before, after, nodes) - received["fs"] - received["ctl"]


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


def assert_same_training(run_dir, reference: list[dict]) -> None:
    """The run's losses and accuracies are bit-identical to the uninterrupted reference's."""
    records = {r["epoch"]: r for r in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(records) == list(range(EPOCHS))
    for before in reference:
        after = records[before["epoch"]]
        assert (after["train_loss"], after["val_top1"]) == (before["train_loss"], before["val_top1"])


# down before the other tiers run: their single-node Slurm and GlusterFS then meet no cluster daemons
@pytest.fixture(scope="package")
def nscluster():
    """The cluster, brought up for the package's tests (and down after them, if they brought it up)."""
    if os.geteuid() != 0:
        pytest.skip(f"the cluster tests need root to bring up namespace nodes with scripts/cluster.sh "
                    f"(running as uid {os.geteuid()})")
    if str(REPO).startswith("/tmp/"):
        pytest.skip(f"the repository {REPO} lies under /tmp, which is node-local on the cluster's nodes: "
                    "clone it elsewhere to run the cluster tests")
    status = cluster_sh("status")
    started = status.returncode != 0
    if not started and not status.stdout.startswith(SETTINGS):
        pytest.skip(f"a cluster with other settings is up ({status.stdout.splitlines()[0]}); "
                    "bash scripts/cluster.sh down, then rerun")
    up = cluster_sh("up", "--nodes", str(NODES), timeout_s=900)  # also repairs a running one
    assert up.returncode == 0, f"could not bring the cluster up:\n{up.stdout}\n{up.stderr}"
    work = REPO / "results" / "cluster-tests" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    yield Cluster(work)
    if started:
        down = cluster_sh("down", timeout_s=120)
        assert down.returncode == 0, down.stderr


@dataclass
class Run:
    """A finished job with its run directory and the links' byte counters around it."""

    job: slurm.JobEnd
    run_dir: Path
    before: dict[str, tuple[int, int]]
    after: dict[str, tuple[int, int]]


@pytest.fixture(scope="package")
def pls_run(nscluster):
    """2 nodes × 2 ranks, node-scope PLS, uninterrupted; stores kept (LOCAL_DIR set) to be checked:
    the reference the fault tests' resumed runs must match."""
    run_dir = nscluster.work / "pls"
    local = f"/tmp/hpcshuffle-test-{nscluster.work.name}"
    before = nscluster.counters()
    job = nscluster.sbatch("pls", [*TWO_BY_TWO, "jobs/train.sbatch", *COMMON, *PLS],
                           env={"RUN_DIR": str(run_dir), "LOCAL_DIR": local})
    yield Run(job, run_dir, before, nscluster.counters()), local
    for node in range(1, NODES + 1):
        subprocess.run(["rm", "-rf", str(nscluster.node_tmp(f"node{node}") / local.removeprefix("/tmp/"))])


@pytest.fixture(scope="package")
def gs_run(nscluster):
    """2 nodes × 1 rank of GS: every sample read from the storage node, nothing sent between nodes
    but gradients (the other strategies' runs of the same shape are held against its link bytes)."""
    run_dir = nscluster.work / "gs"
    before = nscluster.counters()
    job = nscluster.sbatch("gs", GS_ARGS, env={"RUN_DIR": str(run_dir)})
    return Run(job, run_dir, before, nscluster.counters())
