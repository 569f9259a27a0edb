"""Training throughput: the hpcshuffle runner against a bare torch loop on the same device.

Both train the same model from `hpcshuffle.models.build` with the same batch, optimizer,
precision and memory format. The bare loop feeds one batch that already sits on the device;
the runner trains `dataset=synthetic-in-memory` (samples that cost nothing to read) through
its whole path — DataLoader, pinned host-to-device copies, the gradient allreduce, the
learning-rate schedule, the timers — as one MPI rank. The ratio runner/bare is the runner's
own overhead (the issue asks for >= 0.95 on an H100 with ResNet-50).

    python benchmarks/train_throughput.py                       # ResNet-50, bf16, on the GPU
    python benchmarks/train_throughput.py --device cpu --model small_cnn --image-size 32 --batch 32

Prints a table and, last, `runner/bare ratio: X`; with --out, also writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from hpcshuffle import models
from hpcshuffle.files import read_jsonl


def bare_loop(args: argparse.Namespace) -> float:
    """img/s of a plain training loop on one resident batch (the ceiling the runner is held to)."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = models.build(args.model, num_classes=args.classes).to(device, memory_format=memory_format(args))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format(args))
    labels = torch.randint(0, args.classes, (args.batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup_steps):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize(device)
    return args.steps * args.batch / (time.perf_counter() - start)


def runner(args: argparse.Namespace, work: Path) -> float:
    """img/s of `python -m hpcshuffle.train` over its last epoch (the first pays start-up)."""
    samples = args.steps * args.batch
    bin_dir = Path(sys.executable).parent
    command = [
        str(bin_dir / "mpiexec"), "-n", "1", sys.executable, "-m", "hpcshuffle.train",
        "dataset=synthetic-in-memory", f"dataset.root={work / 'memory'}",
        f"dataset.synthesize.samples={samples}", f"dataset.synthesize.val_samples={args.batch}",
        f"dataset.synthesize.classes={args.classes}", f"dataset.synthesize.size={args.image_size}",
        f"model={args.model}", "shuffle=global", f"device={args.device}", f"precision={args.precision}",
        f"channels_last={str(args.channels_last).lower()}", f"batch_size={args.batch}", "epochs=2",
        f"loader.workers={args.workers}", f"threads={args.threads}", "checkpoint.every_epochs=0",
        f"hydra.run.dir={work / 'run'}", f"storage.local_dir={work / 'store'}", "progress=false",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"the runner failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    last = read_jsonl(work / "run" / "metrics.jsonl")[-1]
    return last["num_samples"] / last["time"]["epoch"]["max"]


def memory_format(args: argparse.Namespace) -> torch.memory_format:
    return torch.channels_last if args.channels_last else torch.contiguous_format


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=256, help="images per step")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=50, help="timed steps (the runner's epoch length)")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--workers", type=int, default=8, help="the runner's loader workers")
    parser.add_argument("--threads", type=int, default=4, help="torch threads of the runner's rank")
    parser.add_argument("--out", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="hpcshuffle-bench-train-") as tmp:
        bare = bare_loop(args)
        ours = runner(args, Path(tmp))
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{args.model}, batch {args.batch}, {args.image_size}px, {args.precision}, "
          f"channels_last={args.channels_last}, on {device_name}")
    print(f"{'loop':<8} {'img/s':>10}")
    print(f"{'bare':<8} {bare:>10.1f}")
    print(f"{'runner':<8} {ours:>10.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps({**vars(args), "device_name": device_name, "bare_img_s": bare,
                                              "runner_img_s": ours, "ratio": ours / bare}, indent=2) + "\n")
    print(f"runner/bare ratio: {ours / bare:.2f}")


if __name__ == "__main__":
    main()
