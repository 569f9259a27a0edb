"""scripts/cluster.sh refuses what cannot work, with the fix, and leaves nothing half built.

The first tests need no cluster (they run before the package's fixture brings one up: pytest runs
this file first); the last ones need the running cluster.
"""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from tests.cluster.conftest import NODES, SCRIPT, STATE, cluster_sh
from tests.conftest import REPO, mpi_env

pytestmark = pytest.mark.cluster
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="cluster.sh up/run need root")


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_nodes_must_be_a_positive_count():
    result = cluster_sh("up", "--nodes", "0")
    assert result.returncode == 1
    assert "--nodes must be a whole number from 1 to 32, got '0'" in result.stderr


@needs_root
def test_run_without_a_cluster_names_the_fix():
    if cluster_sh("status").returncode == 0:
        pytest.skip("a cluster is up already")
    result = cluster_sh("run", "--", "sinfo")
    assert result.returncode == 1
    assert "no cluster is up: start one with 'bash" in result.stderr and "up' (as root)" in result.stderr


@needs_root
def test_a_rate_tc_refuses_is_named_before_anything_is_built():
    if cluster_sh("status").returncode == 0:
        pytest.skip("a cluster is up already")
    result = cluster_sh("up", "--nodes", "2", "--link", "10zbit")
    assert result.returncode == 1
    assert "tc refused --link '10zbit'" in result.stderr and "e.g. 1gbit" in result.stderr
    assert "hpcs-" not in namespaces()


DAEMONS = {"munged", "slurmctld", "slurmd", "slurmstepd", "glusterd", "glusterfsd", "glusterfs"}


def cluster_processes() -> dict[int, str]:
    """Processes a cluster may have started: its holders (cluster.sh _root/_holder, then `sleep
    infinity`) and daemons, by pid: the ones a test's cluster left are those not there before it."""
    found = {}
    for process in psutil.process_iter(["name", "cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:  # killed; PID 1 does not reap them here
            continue
        line = " ".join(process.info["cmdline"] or [])
        if process.info["name"] in DAEMONS or f"{SCRIPT} _" in line or line == "sleep infinity":
            found[process.pid] = line
    return found


@needs_root
def test_a_second_up_is_refused_and_a_failed_up_tears_down_what_it_built():
    """While one `up` builds a cluster, a second is refused at once, naming the first; the first
    then fails at its very end (HPCSHUFFLE_CLUSTER_UP_FAIL) and tears down everything it built:
    processes, namespaces, the route, its settings."""
    if cluster_sh("status").returncode == 0:
        pytest.skip("a cluster is up already")
    lock = STATE / "up.lock"
    before = cluster_processes()
    first = subprocess.Popen(["bash", str(SCRIPT), "up", "--nodes", "1"], cwd=REPO, text=True,
                             env={**mpi_env(), "HPCSHUFFLE_CLUSTER_UP_FAIL": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith(f"pid {first.pid},")):
            assert first.poll() is None and time.monotonic() < deadline, "the first up never took the lock"
            time.sleep(0.05)
        second = cluster_sh("up", "--nodes", "1")
        _, stderr = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
        left = {pid: line for pid, line in cluster_processes().items() if pid not in before}
        if left or "hpcs-" in namespaces():
            cluster_sh("down")
    assert second.returncode == 1
    assert f"another 'up' is running (pid {first.pid}, 'up --nodes 1' since " in second.stderr, second.stderr
    # the refused up touched nothing: the first got to its end
    assert first.returncode == 1
    assert "failing at the end on purpose" in stderr and "tearing down what it built" in stderr, stderr
    assert not left, left
    assert "hpcs-" not in namespaces()
    assert "10.203.57.0/24" not in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    assert not (STATE / "settings").exists()
    assert cluster_sh("status").returncode == 1


@needs_root
def test_up_with_other_settings_while_one_is_up(nscluster):
    result = cluster_sh("up", "--nodes", str(NODES - 1))
    assert result.returncode == 1
    assert "a cluster is already up with other settings (nodes=3 " in result.stderr
    assert "down' first" in result.stderr
    assert cluster_sh("status").returncode == 0, "the running cluster was touched"


def test_slurm_clients_outside_the_cluster_find_no_configuration_for_it(nscluster):
    """From the machine's own namespace the cluster's slurm.conf is not there (a tmpfs only its
    namespaces see), and its addresses are unreachable rather than routed out of the machine."""
    assert not (STATE / "etc" / "slurm.conf").exists()
    route = subprocess.run(["ip", "route", "get", "10.203.57.2"], capture_output=True, text=True)
    assert route.returncode != 0 or "unreachable" in route.stdout, route.stdout
    inside = cluster_sh("run", "--", "cat", "/etc/slurm/slurm.conf")
    assert "SlurmctldHost=ctl(10.203.57.2)" in inside.stdout
