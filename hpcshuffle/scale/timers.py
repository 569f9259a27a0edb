"""Where one synchronous-SGD epoch's seconds land: hpcshuffle's booking and the PLS authors' timers.

One epoch over M ranks is run as an event timeline, iteration by iteration (numpy, no SimGrid):

- **the loader**: `workers` processes, batch k handed to worker k mod workers, each reading a whole
  batch (`read[r, k]` seconds). Batch k is issued when the rank took batch k − `depth` (PyTorch's
  DataLoader issues workers × prefetch_factor indices up front and one more per batch taken); depth 0
  reads in the loop. Workers start `startup` seconds into the epoch (the iterator's processes).
- **the rank's loop**: wait for the batch, copy it to the GPU (`.cuda()` without non_blocking: the
  CPU waits for the copy), launch forward and backward (`launch` seconds of CPU; the GPU runs them
  in `max(gpu, launch)`), then Horovod's `optimizer.step()`, which returns when the ring allreduce
  (`ring`) has run on every rank's gradients, so every rank leaves it together. The update's
  kernels (`update`) are drained by the next sync, the loss's print. `teardown`: the untimed end
  (the last `next()`, a CUDA sync, a barrier).

`book` then charges each rank's epoch two ways:

- `"simulator"`, as hpcshuffle's engine does (scale/engine.py): io = the wait for the rank's own
  batch (the read itself with depth 0), fwbw = the GPU's work, allreduce = the barrier wait and the
  ring (and the epoch's end barrier).
- `"paper"`, as the authors' script times it (kakurenbo, ImageNet/pytorch_imagenet_resnet50_optim_v2.py
  at 15eb317, `train`): io = the wait on `next(train_loader)` (its timer also holds the iterator's
  start), staging = the copy, fwbw = the CPU's launches (its `torch.cuda.synchronize()` calls are
  commented out), allreduce = `optimizer.step()` (the GPU's remaining work, every rank's wait, the
  ring), log = the loss's print (a sync), other = the untimed end.

Both charge every second: the buckets of a rank sum to its epoch. Under both, io + allreduce of a
rank is the same for every rank (all leave the allreduce together and the rest costs each the
same), so mean allreduce ≥ io_max − io_mean + iterations × (ring (+ the GPU's unlaunched share under
"paper")): `allreduce_floor`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOOKINGS = {
    "simulator": ("io", "fwbw", "allreduce"),
    "paper": ("io", "staging", "fwbw", "allreduce", "log", "other"),
}


@dataclass(frozen=True)
class Step:
    """What one iteration costs a rank besides reading, the same on every rank (seconds)."""

    gpu: float                  # forward + backward on the GPU
    ring: float                 # the allreduce once every rank's gradients are ready
    launch: float | None = None  # the CPU's launches of forward + backward (None: = gpu)
    copy: float = 0.0           # the batch's host-to-GPU copy
    update: float = 0.0         # the optimizer's kernels after the allreduce
    workers: int = 4            # loader processes, each reading whole batches
    depth: int = 8              # batches issued ahead of the one taken; 0: read in the loop
    startup: float = 0.0        # before the loader's first read (inside io's first wait)
    teardown: float = 0.0       # the epoch's untimed end

    @property
    def launched(self) -> float:
        """The CPU's launch time of forward + backward."""
        return self.gpu if self.launch is None else self.launch


@dataclass(frozen=True)
class Timeline:
    """One epoch's events: per rank and iteration `taken` (the batch in hand), `ready` (read), and
    per iteration `start` (every rank begins it) and `reduced` (the allreduce done); `end` the epoch's."""

    step: Step
    read: np.ndarray
    ready: np.ndarray
    taken: np.ndarray
    start: np.ndarray
    reduced: np.ndarray
    end: float


def epoch(read: np.ndarray, step: Step) -> Timeline:
    """Run one epoch: `read[r, k]` the seconds one loader worker takes to read rank r's batch k."""
    read = np.asarray(read, dtype=float)
    if read.ndim != 2 or min(read.shape) < 1 or np.any(read < 0):
        raise ValueError(f"read must be a non-negative (ranks, iterations) array, got shape {read.shape}")
    if step.workers < 1 or step.depth < 0:
        raise ValueError(f"workers must be >= 1 and depth >= 0, got {step.workers} and {step.depth}")
    ranks, iterations = read.shape
    ready, taken = np.empty_like(read), np.empty_like(read)
    start, reduced = np.empty(iterations), np.empty(iterations)
    free = np.full((ranks, step.workers), step.startup)  # when each worker can take its next batch
    now = 0.0
    for k in range(iterations):
        start[k] = now
        if step.depth == 0:  # read in the loop, once asked
            ready[:, k] = max(now, step.startup) + read[:, k]
        else:
            issued = step.startup if k < step.depth else taken[:, k - step.depth]
            worker = k % step.workers
            ready[:, k] = np.maximum(issued, free[:, worker]) + read[:, k]
            free[:, worker] = ready[:, k]
        taken[:, k] = np.maximum(now, ready[:, k])
        gradients = taken[:, k] + step.copy + max(step.gpu, step.launched)
        reduced[k] = gradients.max() + step.ring
        now = reduced[k] + step.update
    return Timeline(step, read, ready, taken, start, reduced, now + step.teardown)


def book(timeline: Timeline, how: str = "simulator") -> dict[str, np.ndarray]:
    """Each rank's epoch split into the buckets of `BOOKINGS[how]` (seconds per rank), plus `epoch`."""
    if how not in BOOKINGS:
        raise ValueError(f"how must be one of {sorted(BOOKINGS)}, got {how!r}")
    step, iterations = timeline.step, timeline.read.shape[1]
    start, reduced = timeline.start[None, :], timeline.reduced[None, :]
    io = (timeline.taken - start).sum(axis=1)
    staged = timeline.taken + step.copy
    ranks = np.ones(timeline.read.shape[0])
    if how == "simulator":
        buckets = {"io": io, "fwbw": iterations * (step.copy + step.gpu + step.update) * ranks,
                   "allreduce": (reduced - staged - step.gpu).sum(axis=1) + step.teardown}
    else:
        buckets = {"io": io, "staging": iterations * step.copy * ranks,
                   "fwbw": iterations * step.launched * ranks,
                   "allreduce": (reduced - staged - step.launched).sum(axis=1),
                   "log": iterations * step.update * ranks, "other": step.teardown * ranks}
    buckets["epoch"] = timeline.end * ranks
    return buckets


def allreduce_floor(io: np.ndarray, step: Step, iterations: int, how: str = "simulator") -> float:
    """The least mean allreduce an epoch whose ranks waited `io` for their batches can book.

    io_r + allreduce_r is one number K for every rank, and K ≥ io_max + iterations × (ring + the
    GPU's work past its launches under "paper", the launches past the GPU's work under "simulator"),
    so mean allreduce ≥ io_max − io_mean + that (equal when one rank waits longest at every iteration)."""
    io = np.asarray(io, dtype=float)
    past = step.gpu - step.launched if how == "paper" else step.launched - step.gpu  # the GPU's or CPU's lag
    per_iteration = step.ring + max(past, 0.0)
    return float(io.max() - io.mean() + iterations * per_iteration)


def read_times(rng: np.random.Generator, ranks: int, iterations: int, base: float, spread: float,
               rank_cv: float, batch_cv: float) -> np.ndarray:
    """Seconds per batch: `base` (the loader's CPU) + `spread` × a per-rank and a per-batch lognormal
    factor of mean 1 and coefficients of variation `rank_cv` and `batch_cv` (a slow client stays slow)."""
    def factor(cv: float, shape: tuple[int, ...]) -> np.ndarray:
        sigma = np.sqrt(np.log1p(cv * cv))
        return np.exp(sigma * rng.standard_normal(shape) - sigma * sigma / 2)
    return base + spread * factor(rank_cv, (ranks, 1)) * factor(batch_cv, (ranks, iterations))
