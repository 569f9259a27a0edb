"""DLIO's benchmark beside hpcshuffle's loaders on the namespace cluster (benchmarks/peers.py --peers dlio):
one dataset on /pfs that DLIO's own generator wrote (its unet3d npz layout, scaled to this machine), read
by DLIO's PyTorch workload and by hpcshuffle's runs (`dataset=dlio_npz`) with the same emulated compute
per step (`model=emulated`, DLIO's `computation_time`), batch, reader processes, nodes and epochs.

Per run and epoch: the epoch time, the bytes the storage node sent meanwhile (peers.measured: its link's
counters at the epoch's wall-clock window), and the run's AU by two formulas, each applied to both: the
AU column of `hpcshuffle report` (compute over the run's wall time less its first step's I/O) and DLIO's
(every epoch's first step left out), beside what DLIO says of itself (its AU, samples/s and MB/s).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hpcshuffle.analysis.intervals import spread
from hpcshuffle.studies.cluster import PFS, Cluster
from hpcshuffle.studies.peers import JobSpec, LinkCounter, hpcshuffle_epochs, measured
from hpcshuffle.studies.runs import REPO, records, train_arguments
from hpcshuffle.training.metrics import AU_THRESHOLDS, run_au

DLIO = REPO / ".venv-dlio" / "bin" / "dlio_benchmark"
# dlio: DLIO's benchmark; the others hpcshuffle's runs: global with DataLoader processes as DLIO's reader
# threads, global with one process fetching on as many threads (unordered, fetch.py), local (staged)
RUNS = ("dlio", "global", "global-unordered", "local")


@dataclass(frozen=True)
class DlioWorkload:
    """DLIO's unet3d_a100 workload scaled to this machine: its batch (7), reader threads (4) and compute per
    step (0.636 s) kept; 168 files as it has, of `record_bytes` each instead of its 147 ± 68 MB (sizes fixed:
    hpcshuffle batches samples of one shape); `eval_files` for hpcshuffle's validation (DLIO's workload
    does not evaluate)."""

    nodes: int = 2
    epochs: int = 3
    files: int = 168
    eval_files: int = 14
    record_bytes: int = 1 << 20
    batch: int = 7
    read_threads: int = 4
    compute_s: float = 0.636

    def __post_init__(self) -> None:
        if self.files % (self.nodes * self.batch) or self.eval_files < self.nodes:
            raise ValueError(f"{self.files} files must be a multiple of nodes × batch ({self.nodes} × {self.batch}), "
                             f"and {self.eval_files} evaluation files at least one a node: DLIO's PyTorch loader "
                             "hands the last rank indices past the end otherwise")

    @property
    def steps(self) -> int:
        """Steps a rank takes an epoch."""
        return self.files // (self.nodes * self.batch)

    @property
    def folder(self) -> Path:
        """The dataset's directory, relative to /pfs."""
        return Path("peers") / f"dlio-unet3d-{self.files}x{self.record_bytes >> 10}KiB"

    def dlio_overrides(self, folder: Path) -> list[str]:
        """DLIO's Hydra overrides for this workload with its data under `folder` (absolute)."""
        return ["workload=unet3d_a100", "++workload.framework=pytorch", "++workload.reader.data_loader=pytorch",
                "++workload.dataset.format=npz", f"++workload.dataset.data_folder={folder}",
                f"++workload.dataset.num_files_train={self.files}", f"++workload.dataset.num_files_eval={self.eval_files}",
                "++workload.dataset.num_samples_per_file=1", f"++workload.dataset.record_length={self.record_bytes}",
                "++workload.dataset.record_length_stdev=0", f"++workload.reader.batch_size={self.batch}",
                f"++workload.reader.read_threads={self.read_threads}", f"++workload.train.epochs={self.epochs}",
                f"++workload.train.computation_time={self.compute_s}", "++workload.workflow.checkpoint=False"]

    def train_overrides(self, run: str) -> list[str]:
        """hpcshuffle's overrides for `run` (a RUNS entry other than dlio), on the same files and compute."""
        loader = {"global": ["shuffle=global", f"loader.workers={self.read_threads}"],
                  "global-unordered": ["shuffle=global", "loader.workers=1", f"loader.io_threads={self.read_threads}"],
                  "local": ["shuffle=local", f"loader.workers={self.read_threads}"]}[run]
        return train_arguments([
            "dataset=dlio_npz", f"dataset.root={self.folder}", "dataset.synthesize=null", f"storage.shared_dir={PFS}",
            "model=emulated", f"model.step_s={self.compute_s}", f"batch_size={self.batch}", "audit=true", *loader,
        ], self.epochs)


def dlio_dataset(cluster: Cluster, work: DlioWorkload, logs: Path) -> int:
    """Generate the workload's files on /pfs with DLIO's own generator, once, on the login node (under a
    temporary name, then renamed: a present directory is a complete one; DLIO's output in `logs`);
    returns the bytes of its training files."""
    folder = PFS / work.folder
    if cluster.run("test", "-d", str(folder), check=False).returncode != 0:
        if not DLIO.exists():
            raise SystemExit(f"{DLIO} is missing: make DLIO's venv first (`make dlio`)")
        partial = f"{folder}.partial"
        cluster.run("rm", "-rf", partial)
        cluster.run(str(DLIO), *work.dlio_overrides(Path(partial)), "++workload.workflow.generate_data=True",
                    "++workload.workflow.train=False", f"hydra.run.dir={logs}",
                    f"++workload.checkpoint.checkpoint_folder={logs / 'checkpoints'}", show=True)
        cluster.run("mv", partial, str(folder))
    return int(cluster.run("du", "-sb", str(folder / "train")).stdout.split()[0])


def timestamp(text: str) -> float:
    """Seconds since the epoch of DLIO's timestamps (`datetime.now()` isoformat: this machine's local time)."""
    return datetime.fromisoformat(text).timestamp()


def dlio_epochs(run_dir: Path) -> tuple[list[dict], list[str]]:
    """A jobs/dlio.sbatch run's epochs: rank 0's wall-clock window (per_epoch_stats.json), the slowest
    rank's seconds waiting for batches (`io_s`), the mean rank's configured compute (`fwbw_s`) and its
    first step's wait (`first_io_s`). DLIO records no sample ids: no audit problems can be found."""
    windows = json.loads((run_dir / "per_epoch_stats.json").read_text())
    ranks = [json.loads(path.read_text()) for path in sorted(run_dir.glob("*_output.json"))]
    epochs = []
    for key in sorted(windows, key=int):
        start, end = timestamp(windows[key]["start"]), timestamp(windows[key]["end"])
        steps = [rank[key] for rank in ranks]  # per rank: {"load": {block: [...]}, "compute": {...}, ...}
        loads = [[t for block in rank["load"].values() for t in block] for rank in steps]
        computes = [[t for block in rank["compute"].values() for t in block] for rank in steps]
        epochs.append({"epoch": int(key) - 1, "epoch_s": end - start, "wall": {"start": start, "end": end},
                       "io_s": max(sum(load) for load in loads),
                       "fwbw_s": statistics.mean(sum(compute) for compute in computes),
                       "first_io_s": statistics.mean(load[0] for load in loads)})
    return epochs, []


def dlio_au(epochs: list[dict]) -> float:
    """`run_au`'s formula on a DLIO run's epochs: compute over the run's wall time less its first step's I/O."""
    wall = sum(epoch["epoch_s"] for epoch in epochs) - epochs[0]["first_io_s"]
    return min(sum(epoch["fwbw_s"] for epoch in epochs) / wall, 1.0)


def first_steps_out_au(epochs: list[dict], steps: int) -> float:
    """DLIO's own AU formula on an epoch's sums, for DLIO's runs and hpcshuffle's alike: the compute of every
    step but the first over the epoch's wall time less its first step (the step's wait and compute), mean
    over epochs. A step's compute is taken as the epoch's mean step's, exact for an emulated accelerator."""
    ratios = []
    for epoch in epochs:
        step = epoch["fwbw_s"] / steps
        ratios.append((epoch["fwbw_s"] - step) / (epoch["epoch_s"] - epoch["first_io_s"] - step))
    return statistics.mean(min(ratio, 1.0) for ratio in ratios)


def dlio_says(run_dir: Path) -> dict:
    """What DLIO's summary.json says of the run: its AU (a fraction), samples/s and MB/s, means over epochs."""
    metric = json.loads((run_dir / "summary.json").read_text())["metric"]
    return {"au_dlio": metric["train_au_mean_percentage"] / 100,
            "samples_per_s_dlio": metric["train_throughput_mean_samples_per_second"],
            "io_mb_per_s_dlio": metric["train_io_mean_MB_per_second"]}


def run_dlio_once(cluster: Cluster, link: LinkCounter, work: DlioWorkload, run: str, run_dir: Path) -> dict:
    """One job of `run` (a RUNS entry) into `run_dir`, reused when its result.json exists: `measured`, with
    the run's AU (one formula for all) and, for DLIO, what it says of itself."""
    if run == "dlio":
        job = JobSpec("jobs/dlio.sbatch", "dlio-peer", work.dlio_overrides(PFS / work.folder), dlio_epochs)
        return measured(cluster, link, run_dir, run, work.nodes, job,
                        lambda epochs: {"au": dlio_au(epochs), **dlio_says(run_dir)})
    job = JobSpec("jobs/train.sbatch", "dlio-workload", work.train_overrides(run), hpcshuffle_epochs)
    return measured(cluster, link, run_dir, run, work.nodes, job, lambda _: {"au": run_au(records(run_dir))})


def summarize_dlio(results: list[dict], work: DlioWorkload, image_bytes: int) -> dict:
    """Per run kind over its repeats: the steady epochs' (all but the first) time, samples/s and bytes from
    /pfs (median and range over repeats), the AU, and DLIO's own figures beside its runs."""
    table = {}
    for run in RUNS:
        runs = [r for r in results if r["strategy"] == run]
        if not runs:
            continue
        steady = [r["epochs"][1:] for r in runs]
        epoch_s = [statistics.mean(e["epoch_s"] for e in s) for s in steady]
        shared = [statistics.mean(e["shared_bytes"] for e in s) for s in steady]
        row = {"repeats": len(runs), "steady_epoch_s": spread(epoch_s),
               "samples_per_s": spread([work.files / seconds for seconds in epoch_s]),
               "au": spread([r["au"] for r in runs]),
               "au_first_steps_out": spread([first_steps_out_au(r["epochs"], work.steps) for r in runs]),
               "steady_shared_bytes": spread(shared),
               "steady_shared_per_dataset": statistics.median(shared) / image_bytes,
               "link_mb_per_s": spread([b / 1e6 / seconds for b, seconds in zip(shared, epoch_s)]),
               "before_first_epoch_bytes": spread([r["before_first_epoch_bytes"] for r in runs]),
               "audit_exact": None if run == "dlio" else sum(not r["audit_problems"] for r in runs)}
        if run == "dlio":
            row.update({key: spread([r[key] for r in runs])
                        for key in ("au_dlio", "samples_per_s_dlio", "io_mb_per_s_dlio")})
        table[run] = row
    return table


def dlio_table_text(table: dict, work: DlioWorkload, image_bytes: int) -> str:
    """`summarize_dlio`'s table as benchmarks/peers.py prints it: medians with their ranges."""
    def cell(stats: dict, digits: int = 1, scale: float = 1.0) -> str:
        return (f"{stats['median'] / scale:.{digits}f} ({stats['min'] / scale:.{digits}f}-"
                f"{stats['max'] / scale:.{digits}f})")

    rows = [f"{'run':<17} {'n':>2} {'epoch s (steady)':>19} {'samples/s':>18} {'AU %':>12} {'AU % DLIO':>12} "
            f"{'MB/s at link':>18} {'x data':>6} {'before MB':>18} {'audit':>6}"]
    for run, row in table.items():
        audit = "-" if row["audit_exact"] is None else f"{row['audit_exact']}/{row['repeats']}"
        rows.append(f"{run:<17} {row['repeats']:>2} {cell(row['steady_epoch_s'], 2):>19} {cell(row['samples_per_s']):>18} "
                    f"{cell(row['au'], 0, 0.01):>12} {cell(row['au_first_steps_out'], 0, 0.01):>12} "
                    f"{cell(row['link_mb_per_s']):>18} {row['steady_shared_per_dataset']:>6.2f} "
                    f"{cell(row['before_first_epoch_bytes'], 1, 1e6):>18} {audit:>6}")
        if run == "dlio":
            rows.append(f"{'  as DLIO says':<17} {'':>2} {'':>19} {cell(row['samples_per_s_dlio']):>18} {'':>12} "
                        f"{cell(row['au_dlio'], 0, 0.01):>12} {cell(row['io_mb_per_s_dlio']):>18}")
    threshold = AU_THRESHOLDS["unet3d"]
    return "\n".join(rows) + (
        f"\n\n{work.files} files of {work.record_bytes / 2**20:g} MiB ({image_bytes / 1e6:.0f} MB), batch {work.batch}, "
        f"{work.compute_s} s of emulated compute a step, {work.nodes} nodes × 1 rank, {work.epochs} epochs (the first "
        f"left out of the steady columns). AU: compute over the run's wall time less its first step's I/O (the AU "
        f"column of the report command; a unet3d run qualifies at {threshold:.0%}); AU % DLIO: DLIO's formula, each epoch's compute but its "
        "first step's over its wall time less that step, mean over epochs (from each epoch's sums; DLIO's own figure, "
        "from its per-step times, below it). MB/s at link: what the storage node sent in the steady epochs over their "
        "time; x data: those bytes per epoch over the dataset's (hpcshuffle's epochs end after a validation pass over "
        f"{work.eval_files} files, LS's only reads); audit: hpcshuffle's runs with every sample once an epoch (DLIO records no ids)")
