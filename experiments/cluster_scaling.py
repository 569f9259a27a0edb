"""Strong scaling on the namespace cluster of scripts/cluster.sh, measured: Nguyen et al. Fig. 9 in
miniature (one dataset, more nodes), GS against LS and PLS, beside what `hpcshuffle scale`
predicts for the same cluster.

- Reads the running cluster's settings from `bash scripts/cluster.sh status` (it starts none).
- Makes one dataset of ~107 KB JPEGs on /pfs once (`hpcshuffle synth imagefolder --size 352`,
  as benchmarks/shared_io.py's; run on the login node, so it is written through GlusterFS).
- Measures the cluster's rates (experiments/cluster_probe.py and `python -m
  hpcshuffle.scale.pingpong` under srun) and writes them as a platform, `conf/platform/nscluster.yaml`.
- Per node count, one jobs/train.sbatch job per strategy: GS reads every sample from /pfs every
  epoch, LS and PLS q = 0.1 / 0.3 train from node-local stores staged from /pfs before the first
  epoch (staging is not in the epoch time). small_cnn on the images resized to 32×32, so decoding
  and I/O, not FW+BW, carry the epoch; `audit=true`, and every run's audit is checked for lost or
  duplicated samples. The first epoch is left out of the times (start-up).
- Writes under --out: `scaling.json` (`hpcshuffle scale --json`'s rows plus `nodes`: `epoch_s`
  the slowest rank's epoch as scale's, each phase the mean over ranks, both the mean over the timed
  epochs), `predicted.json` (`hpcshuffle scale --platform nscluster --json`), `scaling.txt` (the
  tables printed) and `scaling.png`.

    python experiments/cluster_scaling.py [--nodes 1 2 3] [--ranks-per-node 1] [--epochs 3]
        [--samples 3000] [--out results/reference/cluster] [--platform-out conf/platform/nscluster.yaml]
    python experiments/cluster_scaling.py --quick --nodes 1 2     # the plumbing, in about 3 minutes

Completed runs under --out are reused; --quick writes under results/experiments/cluster_quick (and
its platform there) unless told otherwise. Each job runs on the machine's cores with whatever else
runs there: the progress line gives the load average before and during it and the other Slurm jobs
that ran meanwhile. For numbers worth keeping, run it while nothing else does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cluster_platform import write_platform

from hpcshuffle.analysis.audit import audit_problems
from hpcshuffle.analysis.plots import plot_curves
from hpcshuffle.analysis.report import steady_means
from hpcshuffle.formats.synthetic import GENERATOR_VERSION
from hpcshuffle.plan import run_label
from hpcshuffle.studies.runs import (
    REPO,
    completed,
    records,
    strategy_overrides,
    train_arguments,
)

BIN = Path(sys.executable).parent
PFS = Path("/pfs")  # where scripts/cluster.sh mounts the storage node's volume on every node
STRATEGIES = ["global", "local", "partial-0.1", "partial-0.3"]
JPEG_SIDE = 352  # ~107 KB synthetic JPEGs, ImageNet's ~110 KB mean (benchmarks/shared_io.py)
IMAGE_SIZE = 32  # what the model sees: decoding stays, FW+BW stays small
CLASSES = 10
BATCH = 32
MODEL = "small_cnn"
BIG_FILE_BYTES = 32 << 20  # the shared-storage streaming probe
JOB_MINUTES = 30
BUSY_LOAD = 0.5  # a load average above this before the first run: say the times will carry other work
HEAL_S = 600  # how long to wait for the cluster to be whole again after a fault
RETRIES = 2  # a run a fault of the cluster ended is run again at most this often
FAULT_SIGNS = {"Node failure": "a node failure", "shared storage went away": "shared storage going away",
               "Transport endpoint is not connected": "shared storage going away"}
# sbatch --wait sleeps 2, 8, 32, 32, ... s between looks at the job (Slurm 22.05): a 12 s job returned after 42 s.
# A look through cluster.sh costs ~0.1 s of CPU, so every 2 s.
POLL_S = 2.0
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}
PHASE_KEYS = ("epoch", "io", "exchange", "fwbw", "allreduce")


@dataclass
class Cluster:
    """The running cluster: its settings from `cluster.sh status`, and `run` for commands on its login node."""

    script: Path  # a copy of scripts/cluster.sh (see `snapshot`)
    settings: dict[str, int | str]
    needed: int  # nodes the largest run takes
    broken: tuple[str, ...] = ()  # nodes a fault took away: every job and step excludes them

    def placement(self) -> list[str]:
        return [f"--exclude={','.join(self.broken)}"] if self.broken else []

    def run(self, *command: str, check: bool = True, show: bool = False) -> subprocess.CompletedProcess:
        """`command` on the login node, its output kept (or, with `show`, passed through: progress)."""
        env = {key: value for key, value in os.environ.items() if key != "TMPDIR"}  # node-local: the nodes' /tmp
        env.update(PATH=f"{BIN}:{env['PATH']}", OMP_NUM_THREADS="1")
        done = subprocess.run(["bash", str(self.script), "run", "--", *command], cwd=REPO, env=env,
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


def ensure_dataset(cluster: Cluster, samples: int) -> Path:
    """The dataset's root relative to /pfs, synthesized there on the login node unless it exists;
    written under a temporary name and renamed, so a present root is a complete one."""
    relative = Path("cluster_scaling") / f"imagefolder-{samples}x{JPEG_SIDE}px-{CLASSES}c-seed0-v{GENERATOR_VERSION}"
    root = PFS / relative
    if cluster.run("test", "-d", str(root), check=False).returncode == 0:
        print(f"dataset: {root} (exists)", flush=True)
        return relative
    started = time.perf_counter()
    partial = f"{root}.partial"
    synth = (f"{BIN / 'hpcshuffle'} synth imagefolder --out {partial} --samples {samples} "
             f"--val-samples {max(CLASSES, samples // 30)} --classes {CLASSES} --size {JPEG_SIDE} --seed 0")
    print(f"dataset: {synth} (on the login node) ...", flush=True)
    cluster.run("bash", "-c", f"set -e; rm -rf {partial}; {synth}; mv {partial} {root}", show=True)
    print(f"dataset: {root} written in {time.perf_counter() - started:.0f} s", flush=True)
    return relative


def big_file(cluster: Cluster) -> Path:
    """A file of BIG_FILE_BYTES on /pfs for the streaming probe, written once."""
    path = PFS / "cluster_scaling" / f"probe-{BIG_FILE_BYTES >> 20}MiB.bin"
    cluster.run("bash", "-c", f"test -f {path} || {{ head -c {BIG_FILE_BYTES} /dev/urandom > {path}.partial "
                              f"&& mv {path}.partial {path}; }}")
    return path


def last_json(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def probe(cluster: Cluster, dataset: Path, quick: bool) -> dict:
    """The cluster's measured rates: one node's storage and compute, the MPI link between two nodes
    and inside one, the gradient allreduce between two nodes."""
    started = time.perf_counter()
    python = str(BIN / "python")
    files, repeats = (40, 3) if quick else (300, 20)
    node = last_json(cluster.step(
        "srun", *cluster.placement(), "--nodes=1", "--ntasks=1", "--cpus-per-task=1", python,
        "experiments/cluster_probe.py", "node", f"--root={PFS / dataset}", f"--big={big_file(cluster)}",
        f"--store=/tmp/cluster-probe-{os.getpid()}", f"--files={files}", f"--repeats={repeats}",
        f"--image-size={IMAGE_SIZE}", f"--batch={BATCH}", f"--model={MODEL}"))
    pingpong = [python, "-m", "hpcshuffle.scale.pingpong", str(4 << 20), str(repeats)]
    measured = {"node": node}
    if cluster.settings["nodes"] >= 2:
        two_nodes = ["srun", *cluster.placement(), "--nodes=2", "--ntasks-per-node=1", "--mpi=pmi2"]
        measured["link"] = last_json(cluster.step(*two_nodes, *pingpong))
        measured["allreduce"] = last_json(cluster.step(*two_nodes, python, "experiments/cluster_probe.py", "allreduce",
                                                      f"--model={MODEL}", f"--repeats={repeats}"))
    one_node = ["srun", *cluster.placement(), "--nodes=1", "--ntasks=2", "--mpi=pmi2"]
    measured["intra_node"] = last_json(cluster.step(*one_node, *pingpong))
    link = measured.get("link")
    between = f", MPI between nodes {link['bandwidth_Bps'] / 1e6:.0f} MB/s, {link['latency_s'] * 1e6:.0f} µs" \
        if link else ""
    print(f"probes: {time.perf_counter() - started:.0f} s: shared storage {node['shared_read_Bps'] / 1e6:.0f} MB/s "
          f"and {node['shared_file_s'] * 1e3:.1f} ms per file, loading {node['loaded_per_file_s'] * 1e3:.1f} ms "
          f"per file, FW+BW {node['fwbw_per_sample_s'] * 1e3:.2f} ms per sample{between}", flush=True)
    return measured


@dataclass(frozen=True)
class Run:
    """One measured run: its `hpcshuffle scale --json` row, its steady means, what its audit found, its job."""

    nodes: int
    label: str
    row: dict
    means: dict
    problems: list[str]
    how: str


@dataclass
class Job:
    job_id: str
    state: str
    exit_code: str
    queued_s: float
    others: dict[str, str]  # other jobs seen running meanwhile: id -> "name on nodes"
    load: float  # the machine's mean 1-minute load average while the job ran (its own ranks included)


def submit(cluster: Cluster, run_dir: Path, nodes: int, ranks_per_node: int, arguments: list[str]) -> str:
    """Submit jobs/train.sbatch (no requeue: a restarted run without checkpoints would append a second run)."""
    done = cluster.run(
        "sbatch", "--parsable", "--no-requeue", *cluster.placement(), "--job-name=cluster-scaling",
        f"--nodes={nodes}", f"--ntasks-per-node={ranks_per_node}", "--cpus-per-task=1", f"--time={JOB_MINUTES}",
        f"--output={run_dir}/job-%j.out", f"--export=ALL,RUN_DIR={run_dir},MAX_RESTARTS=0",
        "jobs/train.sbatch", *arguments)
    return done.stdout.strip().split(";")[0]


def wait_for(cluster: Cluster, job_id: str) -> Job:
    """Poll Slurm every POLL_S until the job ends; its state, exit code and the other jobs seen running."""
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
    return Job(job_id, fields.get("JobState", state), fields.get("ExitCode", "?"), queued, others, load)


def cluster_fault(job: Job, log: Path) -> str | None:
    """What fault of the cluster (not of the run) ended `job`, if one did."""
    if job.state == "NODE_FAIL":
        return "a node failure"
    if job.exit_code.startswith("76:"):
        return "a lost peer (exit 76)"
    return fault_named(log.read_text()) if log.exists() and job.state != "COMPLETED" else None


def measure(cluster: Cluster, run_dir: Path, nodes: int, ranks_per_node: int, overrides: list[str],
            epochs: int) -> tuple[list[dict], str]:
    """The run's records (reused when complete) and a word on how its job went."""
    done = completed(run_dir, epochs)
    if done is not None:
        return done, "reused"
    run_dir.mkdir(parents=True, exist_ok=True)
    # jobs/train.sbatch skips a RUN_DIR holding .complete (its mark for a requeue after the run finished),
    # whichever job wrote it: a run trained again must not inherit an earlier job's mark
    (run_dir / ".complete").unlink(missing_ok=True)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    failed = []  # jobs a fault of the cluster ended
    while True:
        job = wait_for(cluster, submit(cluster, run_dir, nodes, ranks_per_node, train_arguments(overrides, epochs)))
        log = run_dir / f"job-{job.job_id}.out"
        fault = cluster_fault(job, log)
        if fault is None or len(failed) == RETRIES:
            break
        failed.append(job.job_id)
        cluster.heal(f"job {job.job_id} ({run_dir}) ended by {fault}")
        completed(run_dir, epochs)  # the records of the cut-short run go
        (run_dir / ".complete").unlink(missing_ok=True)
    if job.state != "COMPLETED" or job.exit_code != "0:0" or len(records(run_dir)) < epochs:
        tail = log.read_text()[-3000:] if log.exists() else "(no job output)"
        sys.exit(f"job {job.job_id} into {run_dir} ended {job.state}, exit {job.exit_code}; {log}:\n{tail}")
    beside = ", ".join(f"{other} {what}" for other, what in sorted(job.others.items()))
    seconds = time.perf_counter() - started
    return records(run_dir), (f"job {job.job_id} in {seconds:.0f} s (queued {job.queued_s:.0f} s), load {load:.1f} "
                              f"before, {job.load:.1f} during" + (f"; ran beside {beside}" if beside else "")
                              + (f"; after a fault of the cluster ended job(s) {', '.join(failed)}" if failed else ""))


def run_row(nodes: int, means: dict, last: dict) -> dict:
    """One measured run in `hpcshuffle scale --json`'s schema, plus the node count (`last`: its last record)."""
    return {"nodes": nodes, "workers": last["workers"], "shuffle": last["shuffle"], "q": last["q"],
            "scope": last["scope"], **{f"{phase}_s": means[phase] for phase in PHASE_KEYS}}


def predict(platform: Path, dataset: str, rows: list[dict]) -> dict | None:
    """`hpcshuffle scale --platform <platform> --json` for the measured worker counts and strategies."""
    workers = sorted({row["workers"] for row in rows})
    qs = sorted({row["q"] for row in rows if row["shuffle"] == "partial"}) or [0.1]
    shuffles = sorted({row["shuffle"] for row in rows})
    command = [str(BIN / "hpcshuffle"), "scale", "--platform", str(platform), "--workers", *map(str, workers),
               "--shuffle", *shuffles, "--q", *map(str, qs), "--model", MODEL, "--dataset", dataset,
               "--batch", str(BATCH), "--json"]
    print(f"predictions: {' '.join(command)}", flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"predictions: none, `hpcshuffle scale` failed: {done.stderr.strip()[-600:]}", flush=True)
        return None
    return json.loads(done.stdout)


def scaling_table(rows: list[dict], extras: dict[tuple[int, str], dict]) -> str:
    lines = ["seconds per epoch after the first (epoch: slowest rank; phases: mean over ranks); shared: samples "
             "read from /pfs per epoch, sent: samples exchanged per epoch",
             f"{'nodes':>5} {'M':>3} {'run':<12} {'epoch':>7} {'io':>7} {'exchange':>8} {'fwbw':>7} {'allreduce':>9} "
             f"{'vs LS':>6} {'shared':>7} {'sent':>6}"]
    local = {row["nodes"]: row["epoch_s"] for row in rows if row["shuffle"] == "local"}
    for row in rows:
        label, extra = run_label(row["shuffle"], row["q"]), extras[(row["nodes"], run_label(row["shuffle"], row["q"]))]
        ratio = f"{row['epoch_s'] / local[row['nodes']]:.2f}" if row["nodes"] in local else "-"
        lines.append(f"{row['nodes']:>5} {row['workers']:>3} {label:<12} {row['epoch_s']:>7.2f} {row['io_s']:>7.2f} "
                     f"{row['exchange_s']:>8.2f} {row['fwbw_s']:>7.2f} {row['allreduce_s']:>9.2f} {ratio:>6} "
                     f"{extra['read_shared']:>7.0f} {extra['sent']:>6.0f}")
    nodes = sorted({row["nodes"] for row in rows})
    labels = [label for label in STRATEGIES if label != "local"]
    lines += ["", "epoch against LS's at the same node count",
              f"{'nodes':>5} " + " ".join(f"{label + '/LS':>16}" for label in labels)]
    by = {(row["nodes"], run_label(row["shuffle"], row["q"])): row["epoch_s"] for row in rows}
    for count in nodes:
        cells = [f"{by[(count, l)] / by[(count, 'local')]:>16.2f}" if (count, l) in by and (count, "local") in by
                 else f"{'-':>16}" for l in labels]
        lines.append(f"{count:>5} " + " ".join(cells))
    return "\n".join(lines)


def comparison_table(rows: list[dict], predicted: dict) -> str:
    """Measured against simulated epochs and phases, with the epoch's error."""
    simulated = {(r["workers"], run_label(r["shuffle"], r["q"])): r for r in predicted["runs"]}
    lines = [f"`hpcshuffle scale --platform {predicted['platform']}` against the measured runs (seconds per epoch; "
             "each phase measured/simulated)",
             f"{'nodes':>5} {'run':<12} {'measured':>9} {'simulated':>9} {'error':>7}   "
             + " ".join(f"{p:>13}" for p in PHASE_KEYS[1:])]
    errors = []
    for row in rows:
        label = run_label(row["shuffle"], row["q"])
        twin = simulated.get((row["workers"], label))
        if twin is None:
            continue
        error = twin["epoch_s"] / row["epoch_s"] - 1
        errors.append(abs(error))
        lines.append(f"{row['nodes']:>5} {label:<12} {row['epoch_s']:>9.2f} {twin['epoch_s']:>9.2f} {error:>+7.0%}   "
                     + " ".join(f"{row[p + '_s']:>6.2f}/{twin[p + '_s']:<6.2f}" for p in PHASE_KEYS[1:]))
    if errors:
        lines.append(f"epoch error: median {sorted(errors)[len(errors) // 2]:.0%}, largest {max(errors):.0%} "
                     f"over {len(errors)} runs (the platform holds measured rates only: nothing fitted to these runs)")
    return "\n".join(lines)


def plot(rows: list[dict], predicted: dict | None, path: Path) -> None:
    """Epoch time against nodes per strategy: measured (solid) and simulated (dashed, the same colour)."""
    curves: dict[str, dict[int, float]] = {}
    styles: dict[str, dict] = {}
    colours = {label: f"C{index}" for index, label in enumerate(STRATEGIES)}
    for row in rows:
        label = run_label(row["shuffle"], row["q"])
        curves.setdefault(label, {})[row["nodes"]] = row["epoch_s"]
        styles[label] = {"color": colours.get(label)}
    per_node = {row["workers"]: row["nodes"] for row in rows}
    for twin in (predicted or {}).get("runs", []):
        label = run_label(twin["shuffle"], twin["q"])
        if twin["workers"] in per_node and label in curves:
            curves.setdefault(f"{label} (SimGrid)", {})[per_node[twin["workers"]]] = twin["epoch_s"]
            styles[f"{label} (SimGrid)"] = {"color": colours.get(label), "linestyle": "--", "marker": "x"}
    plot_curves(curves, "seconds per epoch (slowest rank)", path, xlabel="nodes",
                title="Strong scaling on the namespace cluster (one dataset on /pfs)", styles=styles)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3], metavar="K")
    parser.add_argument("--ranks-per-node", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None, help="default 3 (2 with --quick); the first is not timed")
    parser.add_argument("--samples", type=int, default=None, help="training images (default 3000, 256 with --quick)")
    parser.add_argument("--out", default=None,
                        help="default results/reference/cluster (--quick: results/experiments/cluster_quick)")
    parser.add_argument("--platform-out", default=None, help="the platform to write (default "
                        "conf/platform/nscluster.yaml; --quick: <out>/nscluster.yaml)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny version: the plumbing, not the numbers (trains every run again)")
    args = parser.parse_args()
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.samples = args.samples or (256 if args.quick else 3000)
    args.out = Path(args.out or ("results/experiments/cluster_quick" if args.quick else "results/reference/cluster"))
    args.platform_out = Path(args.platform_out or (args.out / "nscluster.yaml" if args.quick
                                                   else "conf/platform/nscluster.yaml"))
    for path in (args.out, args.platform_out):
        if path.resolve().is_relative_to("/tmp") or path.resolve().is_relative_to(PFS):
            parser.error(f"{path} is not seen both here and on the cluster's nodes (/tmp is node-local there, /pfs "
                         "is mounted only there): use a directory under the repository")
    if args.epochs < 2:
        parser.error(f"--epochs must be >= 2 (the first is not timed), got {args.epochs}")
    if min(args.nodes) < 1 or args.ranks_per_node < 1:
        parser.error("--nodes and --ranks-per-node must be >= 1")
    ranks = max(args.nodes) * args.ranks_per_node
    if args.samples < ranks * BATCH:
        parser.error(f"--samples {args.samples} leaves each of {ranks} ranks less than a batch of {BATCH}: give at "
                     f"least {ranks * BATCH}")
    return args


def run_all(cluster: Cluster, args: argparse.Namespace, out: Path, dataset: Path) -> list[Run]:
    """Every (nodes, strategy) run, each one job, with a progress line per run."""
    common = ["dataset=imagefolder", f"dataset.root={dataset}", f"storage.shared_dir={PFS}", "dataset.augment=flip",
              f"dataset.image_size={IMAGE_SIZE}", f"model={MODEL}", f"batch_size={BATCH}", "audit=true"]
    runs: list[Run] = []
    for nodes in args.nodes:
        for label in STRATEGIES:
            run_dir = out / "runs" / f"N{nodes}x{args.ranks_per_node}" / label
            run_records, how = measure(cluster, run_dir, nodes, args.ranks_per_node,
                                       [*common, *strategy_overrides(label)], args.epochs)
            means = steady_means(run_records, skip_first=True)
            run = Run(nodes, label, run_row(nodes, means, run_records[-1]), means,
                      [f"{run_dir}: {problem}" for problem in audit_problems(run_dir)], how)
            runs.append(run)
            phases = ", ".join(f"{phase} {means[phase]:.2f}" for phase in PHASE_KEYS[1:])
            audit = "ok" if not run.problems else "FAILED: " + "; ".join(run.problems)
            print(f"[{len(runs)}/{len(args.nodes) * len(STRATEGIES)}] {nodes} node(s) {label}: epoch "
                  f"{means['epoch']:.2f} s ({phases}); audit {audit}; {how}", flush=True)
    return runs


def main() -> None:
    args = parse_args()
    out = args.out if args.out.is_absolute() else REPO / args.out  # jobs see the path from their own nodes
    platform = args.platform_out if args.platform_out.is_absolute() else REPO / args.platform_out
    if args.quick:  # it checks the plumbing: reused runs would check nothing
        shutil.rmtree(out / "runs", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cluster-scaling-") as workdir:
        cluster = connect(snapshot(Path(workdir)), max(args.nodes))
        print(f"cluster: {' '.join(f'{k}={v}' for k, v in cluster.settings.items())}", flush=True)
        if os.getloadavg()[0] > BUSY_LOAD:
            print(f"warning: the machine's load average is {os.getloadavg()[0]:.1f} before any run: other work "
                  f"shares its {os.cpu_count()} cores with every node, and the times will carry it", flush=True)
        dataset = ensure_dataset(cluster, args.samples)
        write_platform(platform, cluster.settings, probe(cluster, dataset, args.quick), args.ranks_per_node, MODEL,
                       (dataset.name, args.samples), IMAGE_SIZE, BATCH)
        print(f"platform: {platform}", flush=True)
        runs = run_all(cluster, args, out, dataset)
    rows = [run.row for run in runs]
    (out / "scaling.json").write_text(json.dumps({"platform": "nscluster", "cluster": cluster.settings,
                                                  "runs": rows}, indent=1) + "\n")
    predicted = predict(platform, dataset.name, rows)
    tables = [scaling_table(rows, {(run.nodes, run.label): run.means for run in runs})]
    if predicted is not None:
        (out / "predicted.json").write_text(json.dumps(predicted, indent=1) + "\n")
        tables.append(comparison_table(rows, predicted))
    text = "\n\n".join(tables)
    print(text)
    jobs = "\n".join(f"{run.nodes} node(s) {run.label}: {run.how}" for run in runs)
    heading = (f"the jobs (the machine's {os.cpu_count()} cores: the load average before each and during it, its "
               "own ranks included, and other Slurm jobs meanwhile)")
    (out / "scaling.txt").write_text(f"{text}\n\n{heading}\n{jobs}\n")
    plot(rows, predicted, out / "scaling.png")
    print(f"wrote {out / 'scaling.json'}, {out / 'scaling.txt'}, {out / 'scaling.png'}")
    problems = [problem for run in runs for problem in run.problems]
    if problems:
        sys.exit("samples lost or duplicated:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
