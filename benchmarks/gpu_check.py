"""The GPU check: how much of one GPU's training rate each way of decoding JPEGs feeds.

Run by `benchmarks/gpu_check.sh` (which installs what the lent machine lacks); on its own:

    python benchmarks/gpu_check.py --out DIR                 # on a GPU, sized to ~5 minutes (not yet run on one)
    python benchmarks/gpu_check.py --out DIR --cpu-dry-run   # the same steps at toy sizes on the CPU

Steps, each timed and printed as it ends:

1. synthesise an ImageNet-like ImageFolder on local disk (500x375 JPEGs of ~100 KB, trained at
   224-pixel crops), in parallel on every core;
2. the ceiling: the model (ResNet-50, bf16, channels_last) training on one resident batch
   (train_throughput.py's bare loop);
3. `python -m hpcshuffle.train` with LS from a staged node-local store: loader.decode=cpu (the
   workers decode, one per core but one) and loader.decode=gpu (nvjpeg on a side stream); if the
   GPU path alone feeds less than 95 % of the ceiling, a quick sweep of loader.gpu_fraction
   (the workers decode the rest) picks the best share;
4. GS for both, reading the dataset's directory (standing in for shared storage, uncached reads);
5. from each run's metrics.jsonl: img/s over the epochs after the first, FW+BW and io per step,
   the training loss per epoch, and the audit (every sample exactly once per epoch).

Writes `gpu.json` (the fields below) and the runs' logs under --out, and prints a table. The
dry run always sweeps one share, so every step's code runs in the test that calls it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from hpcshuffle.analysis.audit import audit_problems
from hpcshuffle.files import read_jsonl
from hpcshuffle.formats.synthetic import class_image, jpeg_bytes

sys.path.insert(0, str(Path(__file__).parent))
from train_throughput import bare_loop  # noqa: E402 - the ceiling, measured as that benchmark does

REPO = Path(__file__).resolve().parents[1]
FEED_TARGET = 0.95  # below this share of the ceiling, the GPU path alone is "not enough": sweep the split
# the sizes of a real check and of the dry run (same steps; the dry run only proves they work)
SIZES = {
    "gpu": dict(samples=12288, val_samples=512, classes=100, height=375, width=500, quality=70, image_size=224,
                batch=256, epochs=3, model="resnet50", precision="bf16", channels_last=True, steps=30, run_timeout_s=150),
    "dry": dict(samples=64, val_samples=16, classes=4, height=30, width=40, quality=70, image_size=32,
                batch=8, epochs=2, model="small_cnn", precision="fp32", channels_last=False, steps=3, run_timeout_s=300),
}


def write_image(job: tuple[Path, int, int, int, int, int, int, int]) -> int:
    """Write one synthetic JPEG; returns its size in bytes."""
    path, split, index, label, classes, height, width, quality = job
    rng = np.random.default_rng([split, index])
    data = jpeg_bytes(class_image(label, classes, max(height, width), rng)[:height, :width], quality)
    path.write_bytes(data)
    return len(data)


def synthesise(root: Path, size: dict, processes: int) -> dict:
    """An ImageFolder `root/{train,val}/class_NNN/*.jpg`; returns what it holds."""
    jobs = []
    for split_index, (split, count) in enumerate((("train", size["samples"]), ("val", size["val_samples"]))):
        for label in range(size["classes"]):
            (root / split / f"class_{label:03d}").mkdir(parents=True, exist_ok=True)
        jobs += [(root / split / f"class_{i % size['classes']:03d}" / f"{i:07d}.jpg", split_index, i,
                  i % size["classes"], size["classes"], size["height"], size["width"], size["quality"])
                 for i in range(count)]
    with ProcessPoolExecutor(processes) as pool:
        sizes = list(pool.map(write_image, jobs, chunksize=64))
    return {"train_samples": size["samples"], "val_samples": size["val_samples"], "classes": size["classes"],
            "stored_px": [size["height"], size["width"]], "trained_px": size["image_size"],
            "mean_jpeg_kb": round(statistics.mean(sizes) / 1000, 1)}


def ceiling(size: dict, device: str) -> float:
    """img/s of the model training on one resident batch (the rate every loader is held to)."""
    args = argparse.Namespace(device=device, model=size["model"], classes=size["classes"], batch=size["batch"],
                              image_size=size["image_size"], precision=size["precision"],
                              channels_last=size["channels_last"], warmup_steps=max(3, size["steps"] // 3),
                              steps=size["steps"])
    rate = bare_loop(args)
    if device == "cuda":
        torch.cuda.empty_cache()  # leave the GPU's memory to the training runs
    return rate


def train(name: str, out: Path, work: Path, size: dict, device: str, shuffle: str, workers: int,
          decode: str, gpu_fraction: float = 1.0) -> dict:
    """One `python -m hpcshuffle.train` run; its log under `out`, its numbers from metrics.jsonl.

    A run that fails or outlasts `run_timeout_s` is recorded with `failed` (why) and the check goes
    on: a lent GPU's minutes are too few to lose the other runs to one of them.
    """
    run_dir = work / "runs" / name
    command = [
        sys.executable, "-m", "hpcshuffle.train", f"shuffle={shuffle}", "dataset=imagefolder",
        f"dataset.root={work / 'dataset'}", f"dataset.image_size={size['image_size']}", f"model={size['model']}",
        f"device={device}", f"precision={size['precision']}", f"channels_last={str(size['channels_last']).lower()}",
        f"batch_size={size['batch']}", f"epochs={size['epochs']}", f"loader.workers={workers}",
        f"loader.decode={decode}", f"loader.gpu_fraction={gpu_fraction}", "threads=2", "audit=true",
        "checkpoint.every_epochs=0", "progress=false", f"storage.local_dir={work / 'store'}",
        f"hydra.run.dir={run_dir}",
    ]
    started = time.perf_counter()
    run = {"shuffle": shuffle, "decode": decode, "gpu_fraction": gpu_fraction if decode == "gpu" else 0.0,
           "loader_workers": workers}
    # a session of its own, so that a run past its time is ended with its loader workers
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True,
                          env={**os.environ, "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"}) as process:
        try:
            stdout, stderr = process.communicate(timeout=size["run_timeout_s"])
            failed = f"exit code {process.returncode}" if process.returncode != 0 else None
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            failed = f"ended after {size['run_timeout_s']} s"
    (out / f"{name}.log").write_text(f"$ {' '.join(command)}\n{stdout}\n{stderr}")
    run["wall_s"] = round(time.perf_counter() - started, 1)
    if failed:
        print(f"gpu_check: run {name} failed ({failed}); its log is {out / f'{name}.log'}:\n{stderr[-3000:]}",
              file=sys.stderr, flush=True)
        return {**run, "failed": failed, "stderr_tail": stderr[-1500:]}
    records = read_jsonl(run_dir / "metrics.jsonl")
    measured = records[1:] or records  # the first epoch pays for start-up
    iterations = records[-1]["iterations"]
    return {
        **run,
        "img_s": statistics.median(r["num_samples"] / r["time"]["epoch"]["max"] for r in measured),
        "img_s_per_epoch": [round(r["num_samples"] / r["time"]["epoch"]["max"], 1) for r in records],
        "fwbw_s_per_step": statistics.median(r["time"]["fwbw"]["mean"] / iterations for r in measured),
        "io_s_per_step": statistics.median(r["time"]["io"]["mean"] / iterations for r in measured),
        "train_loss": [round(r["train_loss"], 4) for r in records],
        "skipped": sum(r["samples"]["skipped"] for r in records),
        "audit_problems": audit_problems(run_dir),
    }


def sweep_fraction(out: Path, work: Path, size: dict, device: str, workers: int, full: dict, ceiling_img_s: float,
                   dry_run: bool) -> tuple[float, list[dict], dict | None]:
    """The share of each batch to decode on the GPU: 1 if that alone feeds the model, else the best of a
    few shares that leave the workers what they can decode meanwhile (the dry run always tries one).
    Returns the share, what each share fed, and the chosen share's run (None for 1)."""
    tried = [{"gpu_fraction": 1.0, "img_s": full["img_s"]}]
    if full["img_s"] >= FEED_TARGET * ceiling_img_s and not dry_run:
        return 1.0, tried, None
    candidates = {1.0: None}
    for fraction in (0.5,) if dry_run else (0.85, 0.7):
        run = train(f"sweep-gpu-{fraction}", out, work, size, device, "local", workers, "gpu", fraction)
        tried.append({"gpu_fraction": fraction, **{key: run[key] for key in ("img_s", "failed") if key in run}})
        if "failed" not in run:
            candidates[fraction] = run
    best = max((row for row in tried if "img_s" in row), key=lambda row: row["img_s"])
    return best["gpu_fraction"], tried, candidates[best["gpu_fraction"]]


def rate(run: dict) -> str:
    """A run's img/s, or why it has none."""
    return f"FAILED ({run['failed']})" if "failed" in run else f"{run['img_s']:.0f} img/s"


def table(report: dict) -> str:
    """The runs side by side, with each one's share of the ceiling."""
    lines = [f"{report['gpu']}: ceiling {report['ceiling_img_s']:.0f} img/s ({report['model']}, "
             f"batch {report['batch']}, {report['precision']})",
             f"{'run':<10} {'decode':<8} {'img/s':>8} {'of ceiling':>10} {'fwbw/step':>10} {'io/step':>8} "
             f"{'loss first->last':>17} {'audit':>6}"]
    for name, run in report["runs"].items():
        decode = run["decode"] + (f" {run['gpu_fraction']:.2f}" if run["decode"] == "gpu" else "")
        if "failed" in run:
            lines.append(f"{name:<10} {decode:<8} FAILED: {run['failed']}")
            continue
        loss = f"{run['train_loss'][0]:.3f}->{run['train_loss'][-1]:.3f}"
        lines.append(f"{name:<10} {decode:<8} {run['img_s']:>8.0f} {run['img_s'] / report['ceiling_img_s']:>10.2f} "
                     f"{run['fwbw_s_per_step']:>10.3f} {run['io_s_per_step']:>8.3f} {loss:>17} "
                     f"{'exact' if not run['audit_problems'] else 'WRONG':>6}")
    ratio = report["feed_ratio"]
    lines.append(f"feed ratio (best decode / ceiling): {'none (no decode run finished)' if ratio is None else f'{ratio:.2f}'}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where gpu.json and the runs' logs go")
    parser.add_argument("--work", type=Path, default=None, help="scratch for the dataset, stores and runs "
                        "(default: a folder under the system's temporary directory, deleted at the end; never "
                        "under --out, whose files the device tool brings back)")
    parser.add_argument("--cpu-dry-run", action="store_true", help="the same steps at toy sizes on the CPU")
    parser.add_argument("--workers", type=int, default=None, help="loader workers (default: cores - 1)")
    args = parser.parse_args()
    dry_run = args.cpu_dry_run
    device = "cpu" if dry_run else "cuda"
    if not dry_run and not torch.cuda.is_available():
        sys.exit("gpu_check: no GPU is visible to torch; on a machine without one, run with --cpu-dry-run")
    size = SIZES["dry" if dry_run else "gpu"]
    cores = len(os.sched_getaffinity(0))
    workers = args.workers if args.workers is not None else (1 if dry_run else max(1, cores - 1))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work is not None and args.work.exists() and any(args.work.iterdir()):
        sys.exit(f"gpu_check: --work {args.work} is not empty; give a new folder (the check writes a dataset, "
                 "stores and runs there, and deletes nothing of yours)")
    work = args.work or Path(tempfile.gettempdir()) / "hpcshuffle-gpu-check"
    if args.work is None:  # its own folder: a run cut short left runs whose metrics.jsonl would be appended to
        shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()

    def step(message: str) -> None:
        """Print what ended, and keep what is known so far in gpu.json (a run cut short keeps it)."""
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)
        (args.out / "gpu.json").write_text(json.dumps({**report, "runs": runs, "complete": False}, indent=2) + "\n")

    report = {
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dry_run": dry_run,
        "torch": torch.__version__, "cores": cores, "model": size["model"], "batch": size["batch"],
        "precision": size["precision"], "channels_last": size["channels_last"], "epochs": size["epochs"],
    }
    runs: dict[str, dict] = {}
    report["dataset"] = synthesise(work / "dataset", size, cores)
    step(f"dataset: {report['dataset']}")
    report["ceiling_img_s"] = ceiling(size, device)
    step(f"ceiling: {report['ceiling_img_s']:.0f} img/s")
    runs["LS-cpu"] = train("LS-cpu", args.out, work, size, device, "local", workers, "cpu")
    step(f"LS, decode=cpu: {rate(runs['LS-cpu'])}")
    runs["LS-gpu"] = train("LS-gpu", args.out, work, size, device, "local", workers, "gpu")
    step(f"LS, decode=gpu: {rate(runs['LS-gpu'])}")
    fraction = 1.0
    if "failed" not in runs["LS-gpu"]:
        fraction, report["gpu_fraction_sweep"], split = sweep_fraction(
            args.out, work, size, device, workers, runs["LS-gpu"], report["ceiling_img_s"], dry_run)
        if split is not None:  # the sweep's run at the chosen share is the LS run at that share
            runs["LS-split"] = split
    report["gpu_fraction"] = fraction
    step(f"gpu_fraction: {fraction} of {report.get('gpu_fraction_sweep')}")
    runs["GS-cpu"] = train("GS-cpu", args.out, work, size, device, "global", workers, "cpu")
    step(f"GS, decode=cpu: {rate(runs['GS-cpu'])}")
    runs["GS-gpu"] = train("GS-gpu", args.out, work, size, device, "global", workers, "gpu", fraction)
    step(f"GS, decode=gpu: {rate(runs['GS-gpu'])}")

    finished = {name: run for name, run in runs.items() if "failed" not in run}
    cpu_run, gpu_run = finished.get("LS-cpu"), finished.get("LS-split", finished.get("LS-gpu"))
    decoded = [run["img_s"] for run in (cpu_run, gpu_run) if run is not None]
    report.update(runs=runs, loader_workers=workers, cpu_decode_img_s=cpu_run and cpu_run["img_s"],
                  gpu_decode_img_s=gpu_run and gpu_run["img_s"],
                  feed_ratio=max(decoded) / report["ceiling_img_s"] if decoded else None,
                  loss_falls=all(run["train_loss"][-1] < run["train_loss"][0] for run in finished.values()),
                  audit_exact=not any(run["audit_problems"] for run in finished.values()),
                  failed=sorted(set(runs) - set(finished)),
                  wall_s=round(time.perf_counter() - started, 1), complete=True)
    (args.out / "gpu.json").write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    if report["failed"]:
        sys.exit(f"gpu_check: {', '.join(report['failed'])} failed; gpu.json keeps what the others measured")


if __name__ == "__main__":
    main()
