"""Submit a Slurm batch job and wait for its end by polling: the one submit/poll loop of the
project's tests and experiments.

`sbatch --wait` looks at its job after 2, 8, 32, 32, ... s (Slurm 22.05): a 12 s job returned
after 42 s. `wait` asks `scontrol show job -o` every `poll_s` instead, and follows the job through
requeues (a requeued job goes back to PENDING, its id unchanged). Every Slurm command runs behind
a caller-given prefix, so the same code drives a Slurm reached directly (no prefix) or one whose
clients run inside a cluster's namespaces (`["bash", "scripts/cluster.sh", "run", "--"]`)::

    job = slurm.run(["-N", "2", "jobs/train.sbatch", "epochs=2"], log=Path("results/x.out"),
                    prefix=["bash", "scripts/cluster.sh", "run", "--"], timeout_s=300)
    assert job.exit_code == 0, job.log[-3000:]
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# a job's states that do not change any more (a requeued job goes back to PENDING instead)
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                   "BOOT_FAIL", "DEADLINE"})
POLL_S = 1.0  # a look through `cluster.sh run` costs ~0.1 s of CPU
COMMAND_TIMEOUT_S = 60.0  # one sbatch/scontrol/scancel call (slurmctld may be busy a moment)


class SlurmError(RuntimeError):
    """sbatch refused the job, or its answer held no job id."""


class JobTimeout(SlurmError):
    """The job did not end within the time given; it was cancelled.

    Attributes:
        job_id: the cancelled job.
        log: its output file's text so far ("" without one).
    """

    def __init__(self, job_id: str, timeout_s: float, log: str) -> None:
        super().__init__(f"job {job_id} did not end within {timeout_s:.0f} s and was cancelled "
                         f"(scancel {job_id}); its output so far ends:\n{log[-3000:]}")
        self.job_id, self.log = job_id, log


@dataclass(frozen=True)
class JobEnd:
    """How a job ended.

    Attributes:
        job_id: Slurm's id (the same through requeues).
        state: its final JobState, e.g. COMPLETED, FAILED, CANCELLED.
        exit_code: the batch script's exit code (ExitCode's first half); 1 for a job that ended
            otherwise than COMPLETED with code 0 (e.g. cancelled before it ran).
        signal: the signal that ended it (ExitCode's second half), 0 for none.
        restarts: how often it was requeued (Restarts).
        log: the text of its output file, "" when none was given or written.
        fields: every `Key=Value` of its last `scontrol show job -o`.
    """

    job_id: str
    state: str
    exit_code: int
    signal: int
    restarts: int
    log: str
    fields: Mapping[str, str]


def _call(prefix: Sequence[str], command: Sequence[str], cwd: Path | None,
          env: Mapping[str, str] | None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, *command], check=False, cwd=cwd, env=None if env is None else dict(env),
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


def job_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o`'s one line as {Key: Value} (values hold no spaces there, but for a
    few free-text fields such as Command's arguments, which are cut at the first space)."""
    return dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", text))


def submit(args: Sequence[str], *, prefix: Sequence[str] = (), log: Path | None = None, cwd: Path | None = None,
           env: Mapping[str, str] | None = None) -> str:
    """`sbatch --parsable [--output=log] *args` through `prefix`; returns the job id.

    Raises:
        SlurmError: sbatch failed (its message), or printed no job id.
    """
    output = [f"--output={log}"] if log is not None else []
    try:
        done = _call(prefix, ["sbatch", "--parsable", *output, *args], cwd, env)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"sbatch {' '.join(args)} did not answer in {COMMAND_TIMEOUT_S:.0f} s") from None
    job_id = done.stdout.strip().split(";")[0]
    if done.returncode != 0 or not job_id.isdigit():
        raise SlurmError(f"sbatch {' '.join(args)} failed (exit {done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return job_id


def show(job_id: str, *, prefix: Sequence[str] = (), cwd: Path | None = None,
         env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The job's `scontrol show job -o` fields, or None when scontrol did not answer (busy, or the
    job is no longer known)."""
    try:
        done = _call(prefix, ["scontrol", "show", "job", "-o", job_id], cwd, env)
    except subprocess.TimeoutExpired:
        return None
    fields = job_fields(done.stdout)
    return fields if done.returncode == 0 and fields.get("JobId") == job_id else None


def cancel(job_id: str, *, prefix: Sequence[str] = (), cwd: Path | None = None,
           env: Mapping[str, str] | None = None) -> None:
    """`scancel job_id` through `prefix` (a job that ended already is no error)."""
    try:
        _call(prefix, ["scancel", job_id], cwd, env)
    except subprocess.TimeoutExpired:
        pass


def _read(log: Path | None) -> str:
    try:
        return log.read_text(errors="replace") if log is not None else ""
    except OSError:
        return ""


def wait(job_id: str, *, prefix: Sequence[str] = (), log: Path | None = None, timeout_s: float = 600,
         poll_s: float = POLL_S, cwd: Path | None = None, env: Mapping[str, str] | None = None,
         on_poll: Callable[[dict[str, str]], None] | None = None) -> JobEnd:
    """Poll the job every `poll_s` until it ends (through requeues).

    Args:
        on_poll: called with the job's fields at every look that got an answer (e.g. to sample the
            machine's load while it runs).

    Raises:
        JobTimeout: it had not ended after `timeout_s`; it is cancelled first.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        fields = show(job_id, prefix=prefix, cwd=cwd, env=env)
        if fields is not None:
            if on_poll is not None:
                on_poll(fields)
            state = fields.get("JobState", "")
            if state in ENDED:
                code, _, signum = fields.get("ExitCode", "1:0").partition(":")
                exit_code = int(code) if code.isdigit() else 1
                if exit_code == 0 and state != "COMPLETED":
                    exit_code = 1
                return JobEnd(job_id, state, exit_code, int(signum) if signum.isdigit() else 0,
                              int(fields.get("Restarts", "0") or 0), _read(log), fields)
        if time.monotonic() >= deadline:
            cancel(job_id, prefix=prefix, cwd=cwd, env=env)
            raise JobTimeout(job_id, timeout_s, _read(log))
        time.sleep(poll_s)


def run(args: Sequence[str], *, prefix: Sequence[str] = (), log: Path | None = None, timeout_s: float = 600,
        poll_s: float = POLL_S, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> JobEnd:
    """`submit` then `wait`: the job's end, or JobTimeout (the job cancelled)."""
    job_id = submit(args, prefix=prefix, log=log, cwd=cwd, env=env)
    return wait(job_id, prefix=prefix, log=log, timeout_s=timeout_s, poll_s=poll_s, cwd=cwd, env=env)
