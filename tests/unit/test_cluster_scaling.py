"""experiments/cluster_scaling.py's pieces (hpcshuffle/studies/) without a cluster: reading `cluster.sh
status` (a fake script), the platform it writes from measurements (it loads, and each number is the
measurement it names), and the tables it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcshuffle.plan import run_label
from hpcshuffle.scale.platform_yaml import load_platform
from hpcshuffle.studies import cluster as cluster_module
from hpcshuffle.studies import sbatch_job
from hpcshuffle.studies.cluster import CLUSTER_SOURCES, Cluster, connect, snapshot
from hpcshuffle.studies.cluster_platform import rate_bytes_per_s, write_platform
from hpcshuffle.studies.cluster_runs import cluster_fault
from hpcshuffle.studies.cluster_tables import comparison_table, scaling_table
from hpcshuffle.studies.runs import REPO
from hpcshuffle.studies.sbatch_job import SlurmJob, submit_and_wait
from tests.unit.conftest import JOB

STATUS = """nodes=3 link=10gbit storage_link=200mbit storage_latency_ms=2 
ctl    10.203.57.2  holder alive
fs     10.203.57.3  holder alive
node1  10.203.57.11 holder alive
NODELIST STATE CPUS(A/I/O/T)
node1 idle 0/16/0/16
ctl    /pfs mounted
node1  /pfs mounted
"""
MEASURED = {
    "node": {"shared_file_s": 0.006, "client_cpu_per_file_s": 0.002, "files": 40, "sample_bytes": 1.0e5,
             "big_bytes": 32 << 20, "shared_read_Bps": 1.0e8, "local_file_s": 1.0e-4, "local_write_Bps": 5.0e8,
             "local_read_Bps": 4.0e9, "loaded_per_file_s": 0.004, "fwbw_per_sample_s": 0.001,
             "gradient_bytes": 97384.0, "cpus": 2},
    "link": {"latency_s": 7.0e-5, "bandwidth_Bps": 3.0e8},
    "allreduce": {"allreduce_s": 0.004, "ranks": 2, "gradient_bytes": 97384.0},
    "intra_node": {"latency_s": 5.0e-6, "bandwidth_Bps": 3.0e9},
}


def fake_status(tmp_path: Path, text: str, code: int = 0) -> Path:
    script = tmp_path / "cluster.sh"
    (tmp_path / "status.txt").write_text(text)
    script.write_text(f'[ "$1" = status ] && cat {tmp_path / "status.txt"}\nexit {code}\n')
    return script


def test_the_settings_come_from_status_and_a_missing_or_broken_cluster_names_the_fix(tmp_path):
    cluster = connect(fake_status(tmp_path, STATUS), nodes_wanted=3)
    assert cluster.settings == {"nodes": 3, "link": "10gbit", "storage_link": "200mbit", "storage_latency_ms": 2}
    with pytest.raises(SystemExit, match="no cluster is up .*bash scripts/cluster.sh up"):
        connect(fake_status(tmp_path, "no cluster is up\n", code=1), nodes_wanted=1)
    node1_down = STATUS.replace("node1  /pfs mounted", "node1  /pfs NOT mounted")
    with pytest.raises(SystemExit, match=r"broken \(2 of 3 nodes usable, 3 wanted\):\nnode1  /pfs NOT mounted"):
        connect(fake_status(tmp_path, node1_down), nodes_wanted=3)
    assert connect(fake_status(tmp_path, node1_down), nodes_wanted=2).placement() == ["--exclude=node1"]
    with pytest.raises(SystemExit, match="fs     10.203.57.3  holder DEAD"):
        connect(fake_status(tmp_path, STATUS.replace("3  holder alive", "3  holder DEAD")), nodes_wanted=1)
    with pytest.raises(SystemExit, match="asks for 4 nodes, the cluster has 3"):
        connect(fake_status(tmp_path, STATUS), nodes_wanted=4)


def test_after_a_node_failure_it_waits_for_enough_usable_nodes_and_leaves_out_the_rest(tmp_path, monkeypatch):
    down = STATUS.replace("node1  /pfs mounted", "node1  /pfs NOT mounted")
    (tmp_path / "1.txt").write_text(STATUS.replace("3  holder alive", "3  holder DEAD"))  # storage gone: unusable
    (tmp_path / "2.txt").write_text(down)  # node1 gone: 2 of 3 nodes usable
    script = tmp_path / "cluster.sh"
    script.write_text(f"n=$(( $(cat {tmp_path}/calls 2>/dev/null || echo 0) + 1 )); echo $n > {tmp_path}/calls\n"
                      f"cat {tmp_path}/$(( n > 2 ? 2 : n )).txt\n")
    monkeypatch.setattr(cluster_module.time, "sleep", lambda seconds: None)
    cluster = Cluster(script, {"nodes": 3}, needed=2)
    cluster.heal("a node failed under job 7")
    assert (tmp_path / "calls").read_text().strip() == "2"
    assert cluster.placement() == ["--exclude=node1"]


def test_a_fault_of_the_cluster_is_told_from_a_failed_run(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("hpcshuffle: error on rank 0: shared storage went away during the run: /pfs/x cannot be read\n")
    job = SlurmJob("7", "FAILED", "2:0", 0.0, {}, 1.0)
    assert cluster_fault(job, log) == "shared storage going away"
    assert cluster_fault(SlurmJob("7", "NODE_FAIL", "0:15", 0.0, {}, 1.0), tmp_path / "none") \
        == "a node failure"
    log.write_text("hpcshuffle: error on rank 0: q must be in [0, 1], got 2\n")
    assert cluster_fault(job, log) is None


def test_a_job_goes_through_the_login_node_and_is_polled_to_its_end(stubs, tmp_path, monkeypatch):
    """submit_and_wait drives hpcshuffle.slurm through `cluster.sh run --` (a stand-in that runs the
    command), with the job's options, and records the other jobs running and its queue time."""
    login = tmp_path / "cluster.sh"
    login.write_text('#!/bin/bash\n[ "$1 $2" = "run --" ] && shift 2 && exec "$@"\nexit 9\n')
    squeue = tmp_path / "bin" / "squeue"
    squeue.write_text(f'#!/bin/bash\necho "{JOB}|cluster-scaling|node[1-2]"\necho "77|other|node3"\n')
    squeue.chmod(0o755)
    calls = stubs("JobState=PENDING ExitCode=0:0",
                  "JobState=RUNNING SubmitTime=2026-11-26T10:00:00 StartTime=2026-11-26T10:00:07 ExitCode=0:0",
                  "JobState=FAILED SubmitTime=2026-11-26T10:00:00 StartTime=2026-11-26T10:00:07 ExitCode=2:0")
    monkeypatch.setattr(sbatch_job, "POLL_S", 0.01)
    cluster = Cluster(login, {}, 2, broken=("node3",))
    job = submit_and_wait(cluster, tmp_path / "run", 2, 2, ["epochs=1"])
    assert (job.job_id, job.state, job.exit_code, job.queued_s) == (JOB, "FAILED", "2:0", 7.0)
    assert job.others == {"77": "other on node3"}
    sbatch = calls.read_text().splitlines()[0]
    assert sbatch.startswith("sbatch --parsable --no-requeue --exclude=node3 --job-name=cluster-scaling --nodes=2 ")
    assert sbatch.endswith("jobs/train.sbatch epochs=1")


def test_the_platform_holds_the_measurements_it_names(tmp_path):
    settings = {"nodes": 3, "link": "10gbit", "storage_link": "200mbit", "storage_latency_ms": 2}
    path = tmp_path / "nscluster.yaml"
    write_platform(path, settings, MEASURED, 1, "small_cnn", ("data-40", 40), 32, 32)
    platform = load_platform(str(path))
    node = MEASURED["node"]
    assert (platform.nodes, platform.ranks_per_node, platform.cpu_cores_per_node) == (3, 1, 2)
    assert platform.shared.read_bandwidth == pytest.approx(1.0e8, rel=1e-4)
    # per file: 6 ms measured = 1 ms of bytes at 100 MB/s + 2 ms of client CPU + 3 ms of latency
    assert platform.shared.file_latency == pytest.approx(0.003, rel=1e-4)
    assert platform.local.file_latency == pytest.approx(1.0e-4 - 1.0e5 / 4.0e9, rel=1e-4)
    assert platform.loader.cpu_per_file == pytest.approx(0.004 - 1.0e-4, rel=1e-4)
    assert platform.allreduce.alpha == pytest.approx((0.004 - 97384.0 / 3.0e8) / 2, rel=1e-4)
    assert platform.model("small_cnn").fwbw_per_sample == pytest.approx(node["fwbw_per_sample_s"], rel=1e-4)
    assert platform.dataset("data-40").samples == 40
    this_machine = load_platform("this_machine").exchange  # not measured on the cluster: taken, and said so
    assert platform.exchange.cpu_per_sample == pytest.approx(this_machine.cpu_per_sample, rel=1e-4)
    text = path.read_text()
    assert "storage_link=200mbit is 2.5e+07 B/s" in text and "storage_latency_ms=2" in text
    assert platform.extra["calibration"]["measured"] == MEASURED
    assert rate_bytes_per_s("10gbit") == 1.25e9 and rate_bytes_per_s("none") is None


def test_the_tables_give_each_strategy_against_ls_and_the_simulated_error():
    rows = [{"nodes": n, "workers": n, "shuffle": s, "q": q, "scope": "rank", "epoch_s": e * 2 / n, "io_s": 1.0,
             "exchange_s": 0.0, "fwbw_s": 0.5, "allreduce_s": 0.1}
            for n in (1, 2) for s, q, e in (("global", 1.0, 3.0), ("local", 0.0, 1.0), ("partial", 0.1, 1.1))]
    labels = [(row["nodes"], run_label(row["shuffle"], row["q"])) for row in rows]
    extras = {label: {"read_shared": 0, "sent": 0} for label in labels}
    table = scaling_table(rows, extras)
    assert "    1             3.00             1.10" in table
    predicted = {"platform": "nscluster", "runs": [{**row, "epoch_s": row["epoch_s"] * 1.5} for row in rows]}
    comparison = comparison_table(rows, predicted)
    assert comparison.count("+50%") == len(rows)
    assert "epoch error: median 50%, largest 50% over 6 runs" in comparison


def test_the_snapshot_holds_everything_cluster_sh_reads_beside_itself(tmp_path):
    """cluster.sh sources and reads files from its own directory; a copy without one fails."""
    import re

    script = (REPO / "scripts" / "cluster.sh").read_text()
    beside = set(re.findall(r'\$\(dirname "\$SELF"\)/([\w.]+)', script))
    assert beside == set(CLUSTER_SOURCES)
    copied = snapshot(tmp_path)
    assert {path.name for path in tmp_path.iterdir()} == {"cluster.sh", *beside} and copied.name == "cluster.sh"
