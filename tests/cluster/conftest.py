"""A multi-node cluster for the `cluster` tests: namespace nodes, real Slurm, a GlusterFS storage node.

`scripts/cluster.sh up` brings up 3 compute nodes, a login node and a storage node on this
machine (root: namespaces, tc, mounts, daemons) and the fixture tears down what it brought up
when the package's tests are done. Jobs go in through `cluster.sh run -- sbatch --wait ...` on the login node, from the
repository, which every node sees. Without root the tests skip, saying why; so they do when the
repository lies under /tmp, which is node-local on the cluster's nodes.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, mpi_env

SCRIPT = REPO / "scripts" / "cluster.sh"
STATE = Path(os.environ.get("HPCSHUFFLE_CLUSTER_STATE", "/var/tmp/hpcshuffle-cluster"))
NODES = 3
SETTINGS = f"nodes={NODES} link=10gbit storage_link=1gbit storage_latency_ms=0"
# a job's states that do not change any more (a requeued job goes back to PENDING instead)
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL")


def cluster_sh(*args: str, timeout_s: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env={**mpi_env(), **(env or {})},
                          capture_output=True, text=True, timeout=timeout_s)


@dataclass
class Job:
    rc: int
    log: str
    job_id: str


@dataclass
class Cluster:
    work: Path  # a directory of this session every node sees (under the repository's results/)

    def sbatch(self, name: str, args: list[str], env: dict[str, str] | None = None, timeout_s: float = 420) -> Job:
        """Submit on the login node and wait for the job's end (through requeues); its output goes to
        <work>/<name>.out. Polled every second: `sbatch --wait` notices an end up to 32 s late."""
        log = self.work / f"{name}.out"
        submitted = cluster_sh("run", "--", "sbatch", "--parsable", f"--output={log}", *args, env=env)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = cluster_sh("run", "--", "scontrol", "show", "job", "-o", job_id).stdout
            found = dict(field.split("=", 1) for field in state.split() if "=" in field)
            if found.get("JobState") in ENDED:
                rc = int(found["ExitCode"].split(":")[0]) or (0 if found["JobState"] == "COMPLETED" else 1)
                return Job(rc, log.read_text() if log.exists() else "", job_id)
            time.sleep(1)
        cluster_sh("run", "--", "scancel", job_id)
        pytest.fail(f"job {name} ({job_id}) did not finish in {timeout_s} s:\n{log.read_text() if log.exists() else ''}")

    def counters(self) -> dict[str, tuple[int, int]]:
        """Bytes (received, sent) on each host's link."""
        out = cluster_sh("counters").stdout.split("\n")
        return {host: (int(rx), int(tx)) for host, rx, tx in (line.split() for line in out if line)}

    def node_tmp(self, node: str) -> Path:
        """What `node` sees as /tmp (its node-local directory), seen from this machine."""
        return STATE / "nodes" / node / "tmp"


# down before the other tiers run: their single-node Slurm and GlusterFS then meet no cluster daemons
@pytest.fixture(scope="package")
def nscluster():
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
