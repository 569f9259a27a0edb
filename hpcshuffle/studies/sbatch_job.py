"""One jobs/train.sbatch job on the namespace cluster, submitted and polled until it ends
(experiments/cluster_scaling.py, storage_latency.py cluster-runs): `submit_and_wait` is this
project's Slurm submit/poll loop for those experiments, in one place."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.studies.cluster import Cluster

JOB_MINUTES = 30
# sbatch --wait sleeps 2, 8, 32, 32, ... s between looks at the job (Slurm 22.05): a 12 s job returned after 42 s.
# A look through cluster.sh costs ~0.1 s of CPU, so every 2 s.
POLL_S = 2.0
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}


@dataclass
class SlurmJob:
    """How a job ended: its state and exit code, seconds queued, the jobs beside it and the machine's load."""

    job_id: str
    state: str
    exit_code: str
    queued_s: float
    others: dict[str, str]  # other jobs seen running meanwhile: id -> "name on nodes"
    load: float  # the machine's mean 1-minute load average while the job ran (its own ranks included)


def submit_and_wait(cluster: Cluster, run_dir: Path, nodes: int, ranks_per_node: int, arguments: list[str]) -> SlurmJob:
    """Submit jobs/train.sbatch (no requeue: a restarted run without checkpoints would append a second run),
    output and RUN_DIR in `run_dir`, then poll Slurm every POLL_S until the job ends; its state, exit
    code and the other jobs seen running."""
    done = cluster.run(
        "sbatch", "--parsable", "--no-requeue", *cluster.placement(), "--job-name=cluster-scaling",
        f"--nodes={nodes}", f"--ntasks-per-node={ranks_per_node}", "--cpus-per-task=1", f"--time={JOB_MINUTES}",
        f"--output={run_dir}/job-%j.out", f"--export=ALL,RUN_DIR={run_dir},MAX_RESTARTS=0",
        "jobs/train.sbatch", *arguments)
    job_id = done.stdout.strip().split(";")[0]
    others: dict[str, str] = {}
    state, loads = "PENDING", []
    while True:
        queue = cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%T|%j|%N", check=False)
        if queue.returncode != 0:  # slurmctld busy or restarting: look again
            time.sleep(POLL_S)
            continue
        rows = [line.split("|") for line in queue.stdout.splitlines() if line.count("|") == 3]
        mine = [row for row in rows if row[0] == job_id]
        others.update({row[0]: f"{row[2]} on {row[3]}" for row in rows if row[0] != job_id and row[1] == "RUNNING"})
        state = mine[0][1] if mine else state
        if state == "RUNNING":
            loads.append(os.getloadavg()[0])
        if not mine or state in TERMINAL:
            break
        time.sleep(POLL_S)
    info = cluster.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
    fields = dict(re.findall(r"(\w+)=(\S+)", info))
    queued = 0.0
    if fields.get("StartTime", "").startswith("20") and fields.get("SubmitTime", "").startswith("20"):
        queued = (time.mktime(time.strptime(fields["StartTime"], "%Y-%m-%dT%H:%M:%S"))
                  - time.mktime(time.strptime(fields["SubmitTime"], "%Y-%m-%dT%H:%M:%S")))
    load = sum(loads) / len(loads) if loads else float("nan")
    return SlurmJob(job_id, fields.get("JobState", state), fields.get("ExitCode", "?"), queued, others, load)

