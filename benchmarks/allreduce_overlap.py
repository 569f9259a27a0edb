"""How much of the gradient allreduce DDP's buckets hide behind backward, on gloo, here.

Two ranks (torch.distributed, gloo over loopback, one process per rank started by this script),
one torchvision model, random images of a fixed batch. Per repeat, on the same processes, every
mode runs `--warmup` steps, then the modes take turns, `--steps` timed steps each between barriers,
`--rounds` times (so load from other work falls on all modes alike); a mode's time is the slower
rank's time per step:

    fwd        forward and loss only (the graph is built, then dropped)
    fwbw       forward + backward of the DDP model inside `no_sync()`: no communication
    plain      forward + backward of a plain (not DDP) copy of the model
    flat       forward + backward of a plain copy, then hpcshuffle's learner.average_gradients
               (flatten every gradient, one blocking all_reduce, divide, copy back): nothing overlaps
    ar_alone   that flat all_reduce alone, back to back, on a buffer of the gradients' size
    ddp<N>     forward + backward of DistributedDataParallel with bucket_cap_mb=N: a bucket's
               allreduce starts (asynchronously) as soon as its gradients are ready, during backward

Derived, per repeat:
    bwd        = fwbw - fwd
    ar         = flat - plain             the allreduce as the non-overlapped step pays it (flatten,
                                          copies, waiting for the other rank included)
    overlap    = (fwbw + ar - ddp) / ar   the fraction of ar hidden (fwbw and ddp: the same DDP
                                          object with and without communication)
    exposed    = ddp - fwbw               what is left on the critical path (and exposed / ar)
    ar_flat    the flat step's allreduce call as timed on the rank that reached it last
    overlap with ar_flat instead of ar is printed too (a smaller ar: rank skew taken out)

No optimizer step in any mode (it would be the same in all). DDP runs with broadcast_buffers=False
(hpcshuffle does not broadcast BatchNorm buffers each step either) and its default
gradient_as_bucket_view=False.

On a 2-core machine the two ranks' compute and gloo's own threads (the allreduce runs on the
process group's worker threads while the caller waits) share the same 2 cores: communication that
"overlaps" backward here competes with it for a core, so the overlap measured here is a floor for
hardware whose network progresses on its own (NIC, NCCL on a GPU's copy engines / SMs).

    flock /tmp/hpcshuffle-measure.lock python benchmarks/allreduce_overlap.py \
        [--model resnet18] [--image-size 64] [--batch 16] [--buckets 25 1] [--repeats 5] \
        [--steps 4] [--rounds 3] [--warmup 2] [--threads 1] [--out benchmarks/results/allreduce-overlap-DATE.txt]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import io
import os
import platform
import socket
import statistics
import sys
import time
import warnings

RANKS = 2


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def flat_allreduce(model, world_size: int) -> None:
    """hpcshuffle's own non-overlapped allreduce (learner.average_gradients)."""
    from hpcshuffle.training.learner import average_gradients

    average_gradients(model, world_size)


def worker(rank: int, args: argparse.Namespace, port: int, queue) -> None:
    import torch
    import torch.distributed as dist
    import torchvision
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=RANKS)
    torch.manual_seed(0)
    base = getattr(torchvision.models, args.model)(num_classes=args.classes)
    base.train()
    generator = torch.Generator().manual_seed(1 + rank)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=generator)
    labels = torch.randint(0, args.classes, (args.batch,), generator=generator)
    loss_fn = nn.CrossEntropyLoss()

    plain = copy.deepcopy(base)
    with warnings.catch_warnings():  # broadcast_buffers is deprecated, but is what "no per-step sync" is named
        warnings.simplefilter("ignore", FutureWarning)
        ddps = {cap: DDP(copy.deepcopy(base), broadcast_buffers=False,
                         **({} if cap == "default" else {"bucket_cap_mb": float(cap)})) for cap in args.buckets}
    first_cap = args.buckets[0]
    grad_numel = sum(p.numel() for p in base.parameters() if p.requires_grad)
    grad_buffer = torch.zeros(grad_numel)

    def zero(module) -> None:
        for p in module.parameters():
            p.grad = None

    def step_fwd() -> None:
        with ddps[first_cap].no_sync():
            loss_fn(ddps[first_cap](images), labels)

    def step_fwbw() -> None:
        zero(ddps[first_cap])
        with ddps[first_cap].no_sync():
            loss_fn(ddps[first_cap](images), labels).backward()

    def step_plain() -> None:
        zero(plain)
        loss_fn(plain(images), labels).backward()

    in_allreduce = [0.0]  # seconds this rank spent in the flat step's allreduce (reset after the warm-up)

    def step_flat() -> None:
        zero(plain)
        loss_fn(plain(images), labels).backward()
        start = time.perf_counter()
        flat_allreduce(plain, RANKS)
        in_allreduce[0] += time.perf_counter() - start

    def step_ar_alone() -> None:
        dist.all_reduce(grad_buffer)

    def step_ddp(cap):
        def run() -> None:
            zero(ddps[cap])
            loss_fn(ddps[cap](images), labels).backward()  # the reducer waits for its buckets at the end
        return run

    modes = {"fwd": step_fwd, "fwbw": step_fwbw, "plain": step_plain, "flat": step_flat, "ar_alone": step_ar_alone}
    for cap in args.buckets:
        modes[f"ddp{cap}"] = step_ddp(cap)

    def timed(run) -> float:
        """The slower rank's time for `args.steps` steps of `run` (seconds, summed)."""
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            run()
        mine = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        return float(mine)

    results = []
    for repeat in range(args.repeats):
        # modes take turns, `--steps` steps each, `--rounds` times: load from other work on the
        # machine then falls on every mode alike instead of on whichever ran when it came
        for run in modes.values():
            for _ in range(args.warmup):
                run()
        totals = dict.fromkeys(modes, 0.0)
        in_allreduce[0] = 0.0
        for _ in range(args.rounds):
            for name, run in modes.items():
                totals[name] += timed(run)
        row = {name: total / (args.steps * args.rounds) for name, total in totals.items()}
        # the rank that reaches the allreduce last waits least: the smaller rank's time is the
        # allreduce call itself (flatten, copies and transfer), without the other's lateness
        mine = torch.tensor([in_allreduce[0] / (args.steps * args.rounds)], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MIN)
        row["ar_in_flat"] = float(mine)
        results.append(row)
        if rank == 0:
            print(f"  repeat {repeat + 1}/{args.repeats}: " + " ".join(f"{k} {v * 1e3:.1f}" for k, v in row.items()),
                  flush=True)
    buckets = {}
    for cap, model in ddps.items():  # after the first iterations, when DDP has rebuilt its buckets
        try:
            logged = model._get_ddp_logging_data()
            buckets[cap] = logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes", "?")
        except Exception:  # noqa: BLE001 - a private API: information only
            buckets[cap] = "?"
    if rank == 0:
        queue.put({"results": results, "grad_bytes": grad_numel * 4, "buckets": buckets,
                   "torch": torch.__version__, "torchvision": torchvision.__version__})
    dist.barrier()
    dist.destroy_process_group()


def report(args: argparse.Namespace, data: dict) -> str:
    out = io.StringIO()

    def say(text: str = "") -> None:
        print(text, file=out)

    caps = [f"ddp{cap}" for cap in args.buckets]
    say(f"allreduce_overlap: {args.model} {args.image_size}x{args.image_size}, batch {args.batch}/rank, "
        f"{RANKS} ranks, gloo over loopback, {args.threads} intra-op thread(s)/rank, "
        f"{args.repeats} repeats")
    say(f"machine: {platform.node()} {os.cpu_count()} cores, torch {data['torch']}, torchvision {data['torchvision']}, "
        f"{datetime.datetime.now().isoformat(timespec='seconds')}")
    say(f"gradients: {data['grad_bytes'] / 2**20:.1f} MiB fp32; DDP buckets as rebuilt after the first "
        "iteration (bytes, in launch order, from DDP's logging data):")
    for cap, sizes in data["buckets"].items():
        say(f"  bucket_cap_mb {cap}: {sizes}")
    say("load average (1, 5, 15 min) before / after: " + " / ".join(
        ", ".join(f"{x:.2f}" for x in load) for load in data["load"]) + " (other work on this machine shows here)")
    say(f"steps: per repeat, {args.warmup} warm-up steps per mode, then {args.rounds} turns of {args.steps} timed "
        "steps per mode, the modes taking turns; time = the slower rank's time per step, ms")
    say()
    header = ["rep", "fwd", "bwd", "fwbw", "plain", "flat", "ar", "ar_flat", "ar_alone"] + caps
    for cap in caps:
        short = cap[3:].replace("default", "D")
        header += [f"ovl{short}", f"exp{short}", f"x{short}"]
    say(" ".join(f"{h.replace('ddpdefault', 'ddpD'):>8}" for h in header))
    derived = []
    for index, row in enumerate(data["results"], 1):
        d = {"fwd": row["fwd"], "fwbw": row["fwbw"], "bwd": row["fwbw"] - row["fwd"], "plain": row["plain"],
             "flat": row["flat"], "ar": row["flat"] - row["plain"], "ar_alone": row["ar_alone"],
             "ar_in_flat": row["ar_in_flat"]}
        for cap in caps:
            d[cap] = row[cap]
            d[f"overlap_{cap}"] = (d["fwbw"] + d["ar"] - row[cap]) / d["ar"]
            d[f"overlap_alone_{cap}"] = (d["fwbw"] + d["ar_in_flat"] - row[cap]) / d["ar_in_flat"]
            d[f"exposed_{cap}"] = row[cap] - d["fwbw"]
            d[f"ratio_{cap}"] = row[cap] / row["flat"]
        derived.append(d)
        keys = ("fwd", "bwd", "fwbw", "plain", "flat", "ar", "ar_in_flat", "ar_alone")
        cells = [f"{index:>8}"] + [f"{d[k] * 1e3:>8.1f}" for k in keys] + [f"{d[cap] * 1e3:>8.1f}" for cap in caps]
        for cap in caps:
            cells += [f"{d[f'overlap_{cap}']:>8.2f}", f"{d[f'exposed_{cap}'] * 1e3:>8.1f}", f"{d[f'ratio_{cap}']:>8.3f}"]
        say(" ".join(cells))
    say()
    say("columns (ms unless a ratio): bwd = fwbw - fwd; ar = flat - plain (the allreduce as the flat step pays it: "
        "flatten, copies and waiting for the other rank included); ovlN = (fwbw + ar - ddpN) / ar, the fraction "
        "of ar hidden (D: bucket_cap_mb unset, DDP's default); expN = ddpN - fwbw, the exposed part; xN = ddpN / flat, the step against the "
        "non-overlapped baseline of the same repeat; ar_flat = the "
        "flat step's allreduce call on the rank that reached it last (no waiting for the other rank); "
        "ar_alone = the bare all_reduce of a buffer of the gradients' size, back to back")
    say()

    def span(values: list[float], scale: float = 1.0, fmt: str = ".2f") -> str:
        values = [v * scale for v in values]
        return f"median {statistics.median(values):{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"

    say(f"fwd  {span([d['fwd'] for d in derived], 1e3, '.1f')} ms; bwd {span([d['bwd'] for d in derived], 1e3, '.1f')} ms; "
        f"fwbw {span([d['fwbw'] for d in derived], 1e3, '.1f')} ms")
    say(f"plain {span([d['plain'] for d in derived], 1e3, '.1f')} ms; "
        f"flat {span([d['flat'] for d in derived], 1e3, '.1f')} ms; ar {span([d['ar'] for d in derived], 1e3, '.1f')} ms; "
        f"ar_flat {span([d['ar_in_flat'] for d in derived], 1e3, '.1f')} ms; "
        f"ar_alone {span([d['ar_alone'] for d in derived], 1e3, '.1f')} ms; "
        f"ar/bwd {span([d['ar'] / d['bwd'] for d in derived])}")
    for cap in caps:
        say(f"{cap}: step {span([d[cap] for d in derived], 1e3, '.1f')} ms; "
            f"overlap fraction {span([d[f'overlap_{cap}'] for d in derived])} "
            f"(with ar_flat for ar: {span([d[f'overlap_alone_{cap}'] for d in derived])}); "
            f"exposed {span([d[f'exposed_{cap}'] for d in derived], 1e3, '.1f')} ms "
            f"= {span([d[f'exposed_{cap}'] / d['ar'] for d in derived])} of ar; "
            f"{cap}/flat {span([d[f'ratio_{cap}'] for d in derived], 1.0, '.3f')}")
    say()
    say(f"note: {RANKS} ranks x {args.threads} thread(s) plus gloo's worker threads on {os.cpu_count()} core(s): "
        "the allreduce DDP overlaps with backward competes with that backward for the same cores here, "
        "so this overlap is a floor for a network that progresses without the host CPU.")
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--buckets", nargs="+", default=["default", "1"],
                        help="bucket_cap_mb values; 'default' leaves it unset (25 MB, and a 1 MB first bucket)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per mode per turn")
    parser.add_argument("--rounds", type=int, default=3, help="turns of every mode per repeat")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the report here")
    args = parser.parse_args()
    if min(args.repeats, args.steps, args.rounds) < 1:
        parser.error("--repeats, --steps and --rounds must be at least 1")

    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = free_port()
    print(f"allreduce_overlap: {RANKS} ranks, gloo on 127.0.0.1:{port}", flush=True)
    load_before = os.getloadavg()
    mp.start_processes(worker, args=(args, port, queue), nprocs=RANKS, join=True, start_method="spawn")
    data = queue.get()
    data["load"] = (load_before, os.getloadavg())
    text = report(args, data)
    print(text, end="")
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(f"$ {' '.join([os.path.basename(sys.executable)] + sys.argv)}\n{text}")
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
