"""One jobs/train.sbatch job on the namespace cluster, submitted and polled until it ends
(experiments/cluster_scaling.py, storage_latency.py cluster-runs), through the project's one Slurm
submit/poll helper (hpcshuffle/slurm.py), with what the experiment records beside the job: the
other jobs seen running and the machine's load while it ran."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle import slurm
from hpcshuffle.studies.cluster import Cluster
from hpcshuffle.studies.runs import REPO

JOB_MINUTES = 30
POLL_S = 2.0  # a look through cluster.sh costs ~0.1 s of CPU


@dataclass
class SlurmJob:
    """How a job ended: its state and exit code, seconds queued, the jobs beside it and the machine's load."""

    job_id: str
    state: str
    exit_code: str  # Slurm's ExitCode, "code:signal"
    queued_s: float
    others: dict[str, str]  # other jobs seen running meanwhile: id -> "name on nodes"
    load: float  # the machine's mean 1-minute load average while the job ran (its own ranks included)


def queued_seconds(fields: dict[str, str]) -> float:
    """Seconds from SubmitTime to StartTime of `scontrol show job` fields (0 when either is unknown)."""
    times = [fields.get(key, "") for key in ("SubmitTime", "StartTime")]
    if not all(value.startswith("20") for value in times):
        return 0.0
    submitted, started = (time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S")) for value in times)
    return started - submitted


def submit_and_wait(cluster: Cluster, run_dir: Path, nodes: int, ranks_per_node: int, arguments: list[str],
                    script: str = "jobs/train.sbatch", name: str = "cluster-scaling") -> SlurmJob:
    """Submit `script` (jobs/train.sbatch, or jobs/streaming.sbatch for the peer) as job `name`, with no
    requeue (a restarted run without checkpoints would append a second run), output and RUN_DIR in
    `run_dir`, then poll Slurm every POLL_S until the job ends; its state, exit code and the other jobs
    seen running. slurm.JobTimeout (the job cancelled) past its time limit."""
    others: dict[str, str] = {}
    loads: list[float] = []

    def look(fields: dict[str, str]) -> None:
        if fields.get("JobState") == "RUNNING":
            loads.append(os.getloadavg()[0])
        queue = cluster.run("squeue", "-h", "-t", "running", "-o", "%i|%j|%N", check=False)
        rows = [line.split("|") for line in queue.stdout.splitlines() if line.count("|") == 2]
        others.update({job: f"{name} on {hosts}" for job, name, hosts in rows if job != fields.get("JobId")})

    calls = {"prefix": cluster.prefix, "cwd": REPO, "env": cluster.environment()}
    job_id = slurm.submit(
        ["--no-requeue", *cluster.placement(), f"--job-name={name}", f"--nodes={nodes}",
         f"--ntasks-per-node={ranks_per_node}", "--cpus-per-task=1", f"--time={JOB_MINUTES}",
         f"--output={run_dir}/job-%j.out", f"--export=ALL,RUN_DIR={run_dir},MAX_RESTARTS=0",
         script, *arguments], **calls)
    end = slurm.wait(job_id, timeout_s=JOB_MINUTES * 60 + 300, poll_s=POLL_S, on_poll=look, **calls)
    load = sum(loads) / len(loads) if loads else float("nan")
    return SlurmJob(job_id, end.state, end.fields.get("ExitCode", "?"), queued_seconds(end.fields), others, load)
