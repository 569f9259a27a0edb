"""The namespace cluster of scripts/cluster.sh as the experiments use it (it starts none): its settings
from `cluster.sh status`, commands on its login node, srun steps run again after a fault of the cluster
(a node failing, /pfs going away: someone testing faults on the same cluster), and waiting for it to
be whole again."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.studies.runs import REPO, launch_environment

PFS = Path("/pfs")  # where scripts/cluster.sh mounts the storage node's volume on every node
HEAL_S = 600  # how long to wait for the cluster to be whole again after a fault
FAULT_SIGNS = {"Node failure": "a node failure", "shared storage went away": "shared storage going away",
               "Transport endpoint is not connected": "shared storage going away"}


@dataclass
class Cluster:
    """The running cluster: its settings from `cluster.sh status`, and `run` for commands on its login node."""

    script: Path  # a copy of scripts/cluster.sh (see `snapshot`)
    settings: dict[str, int | str]
    needed: int  # nodes the largest run takes
    broken: tuple[str, ...] = ()  # nodes a fault took away: every job and step excludes them

    def placement(self) -> list[str]:
        """The srun/sbatch options that keep every job and step off the broken nodes."""
        return [f"--exclude={','.join(self.broken)}"] if self.broken else []

    @property
    def prefix(self) -> list[str]:
        """What runs a command on the login node (Slurm's clients live there): `cluster.sh run --`."""
        return ["bash", str(self.script), "run", "--"]

    @staticmethod
    def environment() -> dict[str, str]:
        """This process's environment for a login-node command: this venv first, one thread, no TMPDIR."""
        env = launch_environment()
        env.pop("TMPDIR", None)  # node-local: the nodes' /tmp
        return env

    def run(self, *command: str, check: bool = True, show: bool = False) -> subprocess.CompletedProcess:
        """`command` on the login node, its output kept (or, with `show`, passed through: progress)."""
        done = subprocess.run([*self.prefix, *command], cwd=REPO, env=self.environment(),
                              capture_output=not show, text=True)
        if check and done.returncode != 0:
            sys.exit(f"on the cluster's login node, `{' '.join(command)}` failed (exit {done.returncode}):\n"
                     f"{(done.stdout or '')[-2000:]}{(done.stderr or '')[-2000:]}")
        return done

    def step(self, *command: str) -> subprocess.CompletedProcess:
        """`command` (an srun step) on the login node, run once more after a fault of the cluster ended it."""
        done = self.run(*command, check=False)
        fault = fault_named(done.stdout + done.stderr) if done.returncode != 0 else None
        if fault is not None:
            self.heal(f"`{' '.join(command[:6])} ...` ended by {fault}")
            done = self.run(*command, check=False)
        if done.returncode != 0:
            sys.exit(f"on the cluster's login node, `{' '.join(command)}` failed (exit {done.returncode}):\n"
                     f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done

    def heal(self, why: str) -> None:
        """Wait (up to HEAL_S) until the cluster has `needed` usable nodes again, and leave out the others.
        Nodes fail here when someone tests faults on the same cluster (`cluster.sh crash`)."""
        print(f"cluster: {why}; waiting for {self.needed} usable nodes", flush=True)
        deadline = time.monotonic() + HEAL_S
        while True:
            try:
                self.broken = connect(self.script, self.needed).broken
                return
            except SystemExit as err:
                if time.monotonic() > deadline:
                    sys.exit(f"{why}, and the cluster did not come back within {HEAL_S} s: {err}")
            time.sleep(10)


def fault_named(output: str) -> str | None:
    """The fault of the cluster a failed command's output names, if any: what `cluster.sh crash NODE`
    and `cluster.sh storage stop` do to jobs on it (someone may be testing faults on this cluster)."""
    return next((fault for sign, fault in FAULT_SIGNS.items() if sign in output), None)


# what cluster.sh reads beside itself ($(dirname "$SELF")/...): a snapshot without one fails at its first call
CLUSTER_SOURCES = ("gluster_options.sh", "processes.sh", "slurm_common.conf")


def snapshot(workdir: Path) -> Path:
    """A copy of scripts/cluster.sh (and what it sources) to run for the whole experiment: bash
    reads a script while running it, and an edit of cluster.sh during a long call made bash fail
    after the job ended ("unexpected EOF"), losing the job's exit code."""
    for name in ("cluster.sh", *CLUSTER_SOURCES):
        shutil.copy2(REPO / "scripts" / name, workdir / name)
    return workdir / "cluster.sh"



def connect(script: Path, nodes_wanted: int) -> Cluster:
    """The cluster that is up, or a clear exit naming the fix."""
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True)
    fix = ("start one as root with `bash scripts/cluster.sh up` (3 nodes, 10gbit links, a 1gbit storage link; "
           "--storage-link 200mbit makes /pfs the bottleneck), or ask whoever runs it")
    if status.returncode != 0:
        sys.exit(f"no cluster is up ({(status.stdout + status.stderr).strip()}): {fix}")
    lines = status.stdout.splitlines()
    settings = {k: int(v) if v.isdigit() else v for k, v in (item.split("=", 1) for item in lines[0].split())}
    if nodes_wanted > settings["nodes"]:
        sys.exit(f"--nodes asks for {nodes_wanted} nodes, the cluster has {settings['nodes']} ({lines[0].strip()})")
    broken: dict[str, list[str]] = {}  # host -> its status lines that say so
    for line in lines[1:]:
        words = line.split()
        if "DEAD" in line or "NOT mounted" in line or (len(words) > 1 and re.match(r"(down|drain|fail)", words[1])):
            broken.setdefault(words[0], []).append(line.strip())
    why = "\n".join(line for host_lines in broken.values() for line in host_lines)
    again = f"`bash scripts/cluster.sh up` with its settings ({lines[0].strip()}) brings back what a fault took away"
    healthy = settings["nodes"] - sum(host.startswith("node") for host in broken)
    if any(not host.startswith("node") for host in broken) or healthy < nodes_wanted:
        sys.exit(f"the cluster is up but broken ({healthy} of {settings['nodes']} nodes usable, {nodes_wanted} "
                 f"wanted):\n{why}\n{again}")
    if broken:
        print(f"cluster: leaving out {', '.join(sorted(broken))} ({again}):\n{why}", flush=True)
    return Cluster(script, settings, nodes_wanted, tuple(sorted(broken)))

