"""hpcshuffle.slurm against stub `sbatch`, `scontrol` and `scancel` scripts: no Slurm needed.

The stub `scontrol` answers each look with the next line of a script of job states (the last one
repeats), so a test sets out a job's life (pending, running, requeued, ended) and checks what the
helper saw, what it returned and which commands it ran, through the prefix it was given.
"""

from __future__ import annotations

import pytest

from hpcshuffle import slurm
from tests.unit.conftest import JOB


def test_a_job_is_followed_through_a_requeue_to_its_end(stubs, tmp_path):
    calls = stubs("JobState=PENDING Restarts=0 ExitCode=0:0", "unknown",
                  "JobState=RUNNING Restarts=0 ExitCode=0:0", "JobState=PENDING Restarts=1 ExitCode=0:0",
                  "JobState=RUNNING Restarts=1 ExitCode=0:0", "JobState=COMPLETED Restarts=1 ExitCode=0:0")
    seen = []
    job_id = slurm.submit(["-N", "2", "jobs/train.sbatch"], log=tmp_path / "job.out")
    job = slurm.wait(job_id, log=tmp_path / "job.out", poll_s=0.01, on_poll=lambda f: seen.append(f["JobState"]))
    assert (job.job_id, job.state, job.exit_code, job.signal, job.restarts) == (JOB, "COMPLETED", 0, 0, 1)
    assert job.log == "job output\n"
    assert job.fields["JobName"] == "hpcshuffle-train"
    assert seen == ["PENDING", "RUNNING", "PENDING", "RUNNING", "COMPLETED"]  # the unknown look was skipped
    lines = calls.read_text().splitlines()
    assert lines[0] == f"sbatch --parsable --output={tmp_path / 'job.out'} -N 2 jobs/train.sbatch"
    assert lines[1:] == [f"scontrol show job -o {JOB}"] * 6


@pytest.mark.parametrize("line, state, exit_code, signum", [
    ("JobState=FAILED Restarts=0 ExitCode=76:0", "FAILED", 76, 0),
    ("JobState=CANCELLED Restarts=0 ExitCode=0:15", "CANCELLED", 1, 15),  # never ran: no code 0 for it
    ("JobState=NODE_FAIL Restarts=0 ExitCode=0:0", "NODE_FAIL", 1, 0),
])
def test_an_ended_job_gives_its_state_and_exit_code(stubs, line, state, exit_code, signum):
    stubs(line)
    job = slurm.run(["--wrap", "true"], poll_s=0.01)
    assert (job.state, job.exit_code, job.signal, job.log) == (state, exit_code, signum, "")


def test_every_command_goes_through_the_prefix(stubs, tmp_path):
    calls = stubs("JobState=COMPLETED Restarts=0 ExitCode=0:0")
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f'#!/bin/bash\n[ "$1" = -- ] && shift\necho "through the prefix" >>{calls}\nexec "$@"\n')
    slurm.run(["--wrap", "true"], prefix=["bash", str(wrapper), "--"], poll_s=0.01)
    assert calls.read_text().splitlines() == [
        "through the prefix", "sbatch --parsable --wrap true", "through the prefix", f"scontrol show job -o {JOB}"]


def test_a_job_that_does_not_end_in_time_is_cancelled_and_named(stubs, tmp_path):
    calls = stubs("JobState=RUNNING Restarts=0 ExitCode=0:0")
    with pytest.raises(slurm.JobTimeout, match=f"job {JOB} did not end within 0 s and was cancelled") as caught:
        slurm.run(["--wrap", "sleep 100"], log=tmp_path / "job.out", timeout_s=0.05, poll_s=0.01)  # expires by design
    assert caught.value.job_id == JOB and "job output" in str(caught.value)
    assert calls.read_text().splitlines()[-1] == f"scancel {JOB}"


def test_a_refused_submission_says_why(stubs, monkeypatch):
    stubs("JobState=COMPLETED")
    monkeypatch.setenv("STUB_SBATCH_FAIL", "Batch job submission failed: Invalid partition name specified")
    with pytest.raises(slurm.SlurmError, match="failed \\(exit 1\\): sbatch: error: Batch job submission failed"):
        slurm.submit(["-p", "nope", "--wrap", "true"])


def test_job_fields_reads_scontrols_one_line():
    fields = slurm.job_fields("JobId=7 JobName=x UserId=root(0) JobState=RUNNING Reason=None ExitCode=0:0 "
                              "Command=/r/jobs/train.sbatch dataset.root=/pfs/d epochs=2 StdOut=/r/x.out")
    assert fields["JobState"] == "RUNNING" and fields["StdOut"] == "/r/x.out" and "root" not in fields
