"""Virtual workers: one process trains exactly as synchronous SGD over M workers would.

`shuffle.virtual_workers=M` (or `hpcshuffle simulate M ...`) plans the run for M workers and
trains on the union of their local batches at each step. Two things make that the M-worker run
rather than one large batch:

- BatchNorm normalises each worker's local batch on its own ("ghost" batch norm with group =
  local batch): `GhostBatchNorm` replaces every BatchNorm layer. Its running statistics are
  updated with the mean over workers of the workers' batch statistics, which is what averaging
  M independently updated copies gives at validation (the update is linear).
- The loss is the mean over workers of each worker's mean loss, so its gradient is the mean of
  the per-worker gradients that the allreduce of a real run computes.

A step's local batch is b, or shorter at an epoch's last step (`set_local_batch` says which).
With `shuffle.virtual_chunk=k` the M workers go through forward/backward k at a time and their
gradients accumulate, so large M fits on one GPU; the result does not depend on k.
Dropout draws from one random stream instead of M, so runs with dropout agree in distribution,
not bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from hpcshuffle.plan import EpochPlan, PlanSpec
from hpcshuffle.training.norm import replace_batch_norm


def virtual_order(plan: EpochPlan, first_step: int) -> np.ndarray:
    """The global batches from step `first_step` on: step by step, rank 0's local batch, then
    rank 1's, and so on (every rank's order has the same length, so the same steps)."""
    bounds = plan.spec.steps_from(first_step)
    parts = [rank_order[start:end] for start, end in bounds for rank_order in plan.order]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def split_by_worker(trained: list[int], spec: PlanSpec) -> list[list[int]]:
    """A virtual run's trained ids of one epoch (global batches as `virtual_order` lays them out,
    from step 0) as each worker's order."""
    workers = spec.num_ranks
    orders: list[list[int]] = [[] for _ in range(workers)]
    for start, end in spec.steps_from(0):
        local = end - start
        for worker in range(workers):
            offset = start * workers + worker * local
            orders[worker] += trained[offset : offset + local]
    return orders


class GhostBatchNorm(_BatchNorm):
    """BatchNorm over groups of `local_batch` consecutive samples (one virtual worker's batch each).

    Keeps the wrapped layer's parameters and buffers under the same names, so state dicts move
    between a virtual and a real run. Running statistics are folded once per step
    (`fold_running_stats`), after every chunk of the step went through.
    """

    def __init__(self, layer: _BatchNorm, local_batch: int) -> None:
        super().__init__(layer.num_features, layer.eps, layer.momentum, layer.affine, layer.track_running_stats)
        self.load_state_dict(layer.state_dict())
        self.local_batch = local_batch
        # this step so far: the sums over the workers seen of their batch means and variances
        self.pending_mean: torch.Tensor | float = 0.0
        self.pending_var: torch.Tensor | float = 0.0
        self.pending_groups = 0

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"GhostBatchNorm expects (N, C, ...) input, got shape {tuple(x.shape)}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """In training, `x` (G·b, C, ...) normalised per worker: each of the G local batches of b with
        its own statistics, which `fold` later takes into the running ones. ValueError unless the batch
        is whole local batches. In evaluation, the running statistics."""
        if not self.training:
            return super().forward(x)
        batch, channels = x.shape[0], x.shape[1]
        if batch % self.local_batch:
            raise ValueError(f"a batch of {batch} is not whole local batches of {self.local_batch}")
        groups = batch // self.local_batch
        # (G·b, C, ...) -> (b, G·C, ...): one batch_norm call with per-(worker, channel) statistics
        rest = x.shape[2:]
        grouped = x.reshape(groups, self.local_batch, channels, *rest).transpose(0, 1)
        grouped = grouped.reshape(self.local_batch, groups * channels, *rest)
        means = torch.zeros(groups * channels, device=x.device, dtype=torch.float32)
        variances = torch.ones_like(means)
        out = F.batch_norm(
            grouped, means if self.track_running_stats else None, variances if self.track_running_stats else None,
            self.weight.repeat(groups) if self.affine else None, self.bias.repeat(groups) if self.affine else None,
            training=True, momentum=1.0, eps=self.eps,  # momentum 1: the buffers receive this batch's statistics
        )
        if self.track_running_stats:
            self.pending_mean = self.pending_mean + means.view(groups, channels).sum(0)
            self.pending_var = self.pending_var + variances.view(groups, channels).sum(0)
            self.pending_groups += groups
        out = out.reshape(self.local_batch, groups, channels, *rest).transpose(0, 1)
        return out.reshape(batch, channels, *rest)

    @torch.no_grad()
    def fold(self) -> None:
        """Update the running statistics once with the mean over this step's workers."""
        if not self.pending_groups:
            return
        mean, variance = self.pending_mean / self.pending_groups, self.pending_var / self.pending_groups
        self.pending_mean, self.pending_var, self.pending_groups = 0.0, 0.0, 0
        self.num_batches_tracked += 1
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(variance.to(self.running_var.dtype), alpha=factor)


def ghost_batch_norm(model: nn.Module, local_batch: int) -> int:
    """Replace every BatchNorm layer of `model` in place; returns how many were replaced."""
    return replace_batch_norm(model, GhostBatchNorm, lambda layer: GhostBatchNorm(layer, local_batch))


def set_local_batch(model: nn.Module, loss: WorkerMeanLoss, size: int) -> None:
    """The coming step's local batch (an epoch's last one may be short)."""
    loss.local_batch = size
    for module in model.modules():
        if isinstance(module, GhostBatchNorm):
            module.local_batch = size


def fold_running_stats(model: nn.Module) -> None:
    """`fold` every GhostBatchNorm layer of `model`: once per step, as each real worker's BatchNorm does."""
    for module in model.modules():
        if isinstance(module, GhostBatchNorm):
            module.fold()


class WorkerMeanLoss:
    """The mean over workers of each worker's mean loss, for a chunk of whole local batches.

    `per_element` is the task's loss with reduction="none"; class weights (DeepCAM) make a
    worker's mean a weighted one, as in `nn.CrossEntropyLoss(weight=...)`.
    """

    def __init__(self, per_element: nn.Module, weight: torch.Tensor | None, local_batch: int, workers: int) -> None:
        self.per_element, self.weight = per_element, weight
        self.local_batch, self.workers = local_batch, workers

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        losses = self.per_element(logits, labels).float()
        groups = labels.shape[0] // self.local_batch
        denominators = torch.ones_like(losses) if self.weight is None else self.weight[labels].float()
        per_worker = losses.reshape(groups, -1).sum(1) / denominators.reshape(groups, -1).sum(1)
        return per_worker.sum() / self.workers


__all__ = ["GhostBatchNorm", "WorkerMeanLoss", "fold_running_stats", "ghost_batch_norm", "set_local_batch",
           "split_by_worker", "virtual_order"]
