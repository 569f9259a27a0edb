"""MosaicML Streaming beside hpcshuffle's GS, LS and PLS on the namespace cluster of scripts/cluster.sh
(benchmarks/peers.py runs it): one dataset on /pfs, as an ImageFolder for hpcshuffle and as MDS shards
for Streaming, the same job shape (nodes, one rank each, one CPU), model, batch and epochs. Per run and
epoch: the slowest rank's epoch time, the bytes the storage node sent meanwhile (its link's counters,
sampled in a thread while the jobs run, read at the epoch's wall-clock window) and the exactness audit
(every sample once an epoch).

Streaming runs in the peers' venv (`make peers`) by jobs/streaming.sbatch; hpcshuffle's runs are
jobs/train.sbatch jobs as experiments/cluster_scaling.py's. Streaming's cache is unlimited, or (the
`-cached` variants) the bytes a PLS-0.1 node keeps, (1 + q)·N/nodes, with one batch of read-ahead so
that such a cache passes streaming_peer.py's read-ahead check.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpcshuffle.analysis.audit import audit_problems
from hpcshuffle.analysis.intervals import spread
from hpcshuffle.files import read_jsonl
from hpcshuffle.plan.streaming import PEERS_PYTHON
from hpcshuffle.studies.cluster import PFS, Cluster
from hpcshuffle.studies.cluster_runs import (
    BATCH,
    CLASSES,
    IMAGE_SIZE,
    MODEL,
    STRATEGIES,
    workload,
)
from hpcshuffle.studies.runs import records, strategy_overrides, train_arguments
from hpcshuffle.studies.sbatch_job import submit_and_wait

STREAMING = ("streaming-py1e", "streaming-py1br", "streaming-py1e-cached", "streaming-py1br-cached")
ALL_STRATEGIES = (*STRATEGIES, *STREAMING)
SHARD_BYTES = 1 << 20  # Streaming's default size_limit is 64 MiB: 1 MiB keeps ~10 images a shard here
CACHE_Q = 0.1  # the -cached variants keep what a PLS node of this q keeps
POLL_S = 0.5  # the storage link's counters are read this often while jobs run


@dataclass
class LinkCounter:
    """The bytes the storage node (`fs`) has sent on its link, sampled every POLL_S by a thread: a
    cumulative counter with the wall-clock time of each reading."""

    script: Path
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def read(self) -> tuple[float, int]:
        """One reading now, added to `samples`."""
        done = subprocess.run(["bash", str(self.script), "counters", "fs"], capture_output=True, text=True, check=True)
        _, _, sent = done.stdout.split()
        sample = (time.time(), int(sent))
        self.samples.append(sample)
        return sample

    def __enter__(self) -> LinkCounter:
        self.read()
        self._thread = threading.Thread(target=self._poll, name="link-counter", daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self.read()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def counter_at(samples: list[tuple[float, int]], when: float) -> float:
    """The cumulative counter at wall-clock time `when`, linear between the readings around it."""
    if not samples or not samples[0][0] <= when <= samples[-1][0]:
        span = f"{samples[0][0]:.1f}-{samples[-1][0]:.1f}" if samples else "no readings"
        raise ValueError(f"time {when:.1f} is outside the link's readings ({span})")
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t0 <= when <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (when - t0) / (t1 - t0)
    return samples[-1][1]  # a single reading, at exactly `when`


def window_bytes(samples: list[tuple[float, int]], start: float, end: float) -> float:
    """Bytes the counter grew by between `start` and `end`."""
    return counter_at(samples, end) - counter_at(samples, start)


@dataclass(frozen=True)
class Workload:
    """What every run of one benchmark shares: the dataset on /pfs in both layouts, nodes and epochs."""

    dataset: Path  # the ImageFolder, relative to /pfs
    mds: Path  # its training split as MDS shards
    nodes: int
    epochs: int
    cache_bytes: int  # the -cached variants' cache_limit per node

    @classmethod
    def sized(cls, dataset: Path, mds: Path, index: dict, nodes: int, epochs: int) -> Workload:
        """The workload with the cache of a PLS-CACHE_Q node: (1 + q) of its share of the bytes of the
        shards `index` (the MDS index.json) lists."""
        total = sum(shard["raw_data"]["bytes"] for shard in index["shards"])
        return cls(dataset, mds, nodes, epochs, int((1 + CACHE_Q) * total / nodes))


def streaming_arguments(strategy: str, work: Workload) -> list[str]:
    """jobs/streaming.sbatch's arguments for `strategy` (streaming-<algo>[-cached])."""
    algo = strategy.removeprefix("streaming-").removesuffix("-cached")
    cached = [f"--cache-limit={work.cache_bytes}", f"--predownload={BATCH}"] if strategy.endswith("-cached") else []
    return [f"--remote={work.mds}", f"--epochs={work.epochs}", f"--shuffle-algo={algo}", f"--model={MODEL}",
            f"--image-size={IMAGE_SIZE}", f"--batch={BATCH}", f"--classes={CLASSES}", *cached]


def hpcshuffle_epochs(run_dir: Path) -> tuple[list[dict], list[str]]:
    """A jobs/train.sbatch run's epochs (time, phases: the slowest rank's; the first step's wait: the mean
    rank's; wall window) and its audit's problems."""
    epochs = [{"epoch": r["epoch"], **{f"{p}_s": r["time"][p]["max"] for p in ("epoch", "io", "fwbw", "allreduce")},
               "first_io_s": r["time"]["first_io"]["mean"], "wall": r["wall"]} for r in records(run_dir)]
    return epochs, audit_problems(run_dir)


def streaming_epochs(run_dir: Path) -> tuple[list[dict], list[str]]:
    """A jobs/streaming.sbatch run's epochs from its summary.json, and the epochs its audit faults."""
    summary = json.loads((run_dir / "summary.json").read_text())
    epochs = [{key: row[key] for key in ("epoch", "epoch_s", "io_s", "fwbw_s", "allreduce_s", "wall")}
              for row in summary["epochs"]]
    problems = [f"epoch {row['epoch']}: {row['lost']} samples lost, {row['repeated']} repeated"
                for row in summary["epochs"] if row["lost"] or row["repeated"]]
    return epochs, problems


def kept_fraction(ids: dict[tuple[int, int], list[int]]) -> float:
    """How much of what a rank trains on in an epoch it also had the epoch before, mean over ranks and
    epochs after the first: 1 for LS, less for PLS as q grows, about 1/M for GS over M ranks. `ids` maps
    (epoch, rank) to the ids the rank trained on."""
    shares = [len(set(trained) & set(ids[(epoch - 1, rank)])) / len(trained)
              for (epoch, rank), trained in ids.items() if (epoch - 1, rank) in ids and trained]
    return statistics.mean(shares)


def trained_ids(run_dir: Path, strategy: str) -> dict[tuple[int, int], list[int]]:
    """(epoch, rank) -> the ids the rank got: Streaming's rank files, or hpcshuffle's audit.jsonl."""
    if strategy in STREAMING:
        rows = [row for path in sorted(run_dir.glob("rank*.jsonl")) for row in read_jsonl(path)]
        return {(row["epoch"], row["rank"]): row["ids"] for row in rows}
    return {(row["epoch"], row["rank"]): row["trained"] for row in read_jsonl(run_dir / "audit.jsonl")}


@dataclass(frozen=True)
class JobSpec:
    """A Slurm job of one measured run: its script and name, the script's arguments, and how to read
    the run's epochs (each with `epoch_s` and its `wall` window) and audit problems from its directory."""

    script: str
    name: str
    arguments: list[str]
    read: Callable[[Path], tuple[list[dict], list[str]]]


def measured(cluster: Cluster, link: LinkCounter, run_dir: Path, strategy: str, nodes: int, job: JobSpec,
             extra: Callable[[list[dict]], dict]) -> dict:
    """Run `job` on `nodes` nodes (one rank each) into `run_dir`, reused when its result.json exists: per
    epoch its times and the bytes the storage node sent, the bytes before the first epoch (staging), the
    audit, and what `extra` adds (called after the job with the epochs `job.read` gave, e.g. `kept`);
    written to result.json."""
    done = run_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    # a job cut short earlier starts over: its records and its checkpoint (a cancelled training job
    # checkpoints on the signal, and the next would resume from it) go
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    submitted = time.time()
    ended = submit_and_wait(cluster, run_dir, nodes, 1, job.arguments, script=job.script, name=job.name)
    link.read()  # a reading after the job's end, so every epoch's window lies between readings
    if ended.state != "COMPLETED" or ended.exit_code != "0:0":
        log = run_dir / f"job-{ended.job_id}.out"
        tail = log.read_text()[-3000:] if log.exists() else "(no job output)"
        raise SystemExit(f"{strategy}: job {ended.job_id} into {run_dir} ended {ended.state}, exit {ended.exit_code}:\n{tail}")
    epochs, problems = job.read(run_dir)
    # sorted: the thread's readings and this one's may be appended out of order
    samples = sorted(s for s in link.samples if s[0] >= submitted - POLL_S * 4)
    for epoch in epochs:
        epoch["shared_bytes"] = window_bytes(samples, epoch["wall"]["start"], epoch["wall"]["end"])
    result = {"strategy": strategy, "job": ended.job_id, "load_during": ended.load,
              "others": ended.others, "before_first_epoch_bytes": window_bytes(samples, samples[0][0],
                                                                               epochs[0]["wall"]["start"]),
              "epochs": epochs, "audit_problems": problems, **extra(epochs)}
    done.write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_once(cluster: Cluster, link: LinkCounter, work: Workload, strategy: str, run_dir: Path) -> dict:
    """One job of `strategy` into `run_dir` (reused when its result.json exists): `measured`, with `kept`."""
    if strategy in STREAMING:
        job = JobSpec("jobs/streaming.sbatch", "streaming-peer", streaming_arguments(strategy, work), streaming_epochs)
    else:
        arguments = train_arguments([*workload(work.dataset), *strategy_overrides(strategy)], work.epochs)
        job = JobSpec("jobs/train.sbatch", "cluster-scaling", arguments, hpcshuffle_epochs)
    return measured(cluster, link, run_dir, strategy, work.nodes, job,
                    lambda _: {"kept": kept_fraction(trained_ids(run_dir, strategy))})


def summarize(results: list[dict], image_bytes: int) -> dict:
    """Per strategy over its repeats: the steady epochs' (all but the first) mean time and bytes from
    /pfs, the first epoch's, the bytes before it, each as median and range over repeats, and the audit."""
    table = {}
    for strategy in ALL_STRATEGIES:
        runs = [r for r in results if r["strategy"] == strategy]
        if not runs:
            continue
        steady = [r["epochs"][1:] for r in runs]
        table[strategy] = {
            "repeats": len(runs),
            "steady_epoch_s": spread([statistics.mean(e["epoch_s"] for e in s) for s in steady]),
            "steady_io_s": spread([statistics.mean(e["io_s"] for e in s) for s in steady]),
            "steady_shared_bytes": spread([statistics.mean(e["shared_bytes"] for e in s) for s in steady]),
            "first_epoch_s": spread([r["epochs"][0]["epoch_s"] for r in runs]),
            "first_epoch_shared_bytes": spread([r["epochs"][0]["shared_bytes"] for r in runs]),
            "before_first_epoch_bytes": spread([r["before_first_epoch_bytes"] for r in runs]),
            "steady_shared_per_dataset": statistics.median(
                statistics.mean(e["shared_bytes"] for e in s) / image_bytes for s in steady),
            "kept": spread([r["kept"] for r in runs]),
            "audit_exact": sum(not r["audit_problems"] for r in runs),
            "audit_problems": [p for r in runs for p in r["audit_problems"]],
        }
    return table


def table_text(table: dict, image_bytes: int) -> str:
    """`summarize`'s table as the text benchmarks/peers.py prints: medians with their ranges."""
    def cell(stats: dict, scale: float = 1.0, digits: int = 1) -> str:
        return f"{stats['median'] / scale:.{digits}f} ({stats['min'] / scale:.{digits}f}-{stats['max'] / scale:.{digits}f})"

    rows = [f"{'strategy':<22} {'n':>2} {'epoch s (steady)':>20} {'vs LS':>6} {'MB from /pfs/epoch':>22} "
            f"{'x data':>6} {'first epoch MB':>22} {'before MB':>20} {'kept':>5} {'audit':>6}"]
    local = table.get("local", {}).get("steady_epoch_s", {}).get("median")
    for strategy, row in table.items():
        versus = f"{row['steady_epoch_s']['median'] / local:.2f}" if local else "-"
        rows.append(f"{strategy:<22} {row['repeats']:>2} {cell(row['steady_epoch_s'], digits=2):>20} {versus:>6} "
                    f"{cell(row['steady_shared_bytes'], 1e6):>22} {row['steady_shared_per_dataset']:>6.2f} "
                    f"{cell(row['first_epoch_shared_bytes'], 1e6):>22} {cell(row['before_first_epoch_bytes'], 1e6):>20} "
                    f"{row['kept']['median']:>5.2f} {row['audit_exact']:>2}/{row['repeats']:<3}")
    return "\n".join(rows) + (f"\n\nx data: the steady epochs' bytes from /pfs over the dataset's {image_bytes / 1e6:.0f} MB "
                              "of images (median over repeats); kept: the share of a rank's samples it also had the epoch before "
                              "(1: the same samples every epoch, as LS; 1/ranks: as GS); audit: runs with every sample once "
                              "an epoch")


def mds_of(cluster: Cluster, dataset: Path) -> tuple[Path, dict, dict]:
    """The dataset's training split as MDS shards on /pfs, written once on the login node by the
    peers' venv (under a temporary name, then renamed: a present directory is a complete one); with
    its index.json and what streaming_peer.py write said of it (read on the login node: /pfs is
    mounted in the cluster's namespaces only)."""
    mds = PFS / "peers" / f"mds-{dataset.name}-{SHARD_BYTES >> 10}KiB"
    if cluster.run("test", "-f", str(mds / "index.json"), check=False).returncode != 0:
        write_mds(cluster, dataset, mds)
    return (mds, json.loads(cluster.run("cat", str(mds / "index.json")).stdout),
            json.loads(cluster.run("cat", f"{mds}.json").stdout))


def write_mds(cluster: Cluster, dataset: Path, mds: Path) -> None:
    """streaming_peer.py write of `dataset` into `mds` on the login node."""
    if not PEERS_PYTHON.exists():
        raise SystemExit(f"{PEERS_PYTHON} is missing: make the peers' venv first (`make peers`)")
    partial = f"{mds}.partial"
    cluster.run("bash", "-c", f"set -e; mkdir -p {mds.parent}; rm -rf {partial}; {PEERS_PYTHON} "
                              f"experiments/streaming_peer.py write --root {PFS / dataset} --out {partial} "
                              f"--shard-bytes {SHARD_BYTES} > {partial}.json; mv {partial} {mds}; "
                              f"mv {partial}.json {mds}.json", show=True)
