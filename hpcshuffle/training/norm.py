"""Where BatchNorm takes its statistics: each worker's own batch (`model.norm=worker`) or the step's
global batch (`model.norm=global`).

Data-parallel training normalises over each worker's local batch; that is the one place where
local or partial shuffling trains differently from global shuffling (Nguyen et al. 2022, §IV-A),
because a worker's batch holds the classes its partition holds. `model.norm=global` takes that
difference away to test it: `GlobalBatchNorm` normalises with the mean and variance of the whole
global batch, summed over the ranks by an all-reduce that backpropagates (what SyncBatchNorm does
on GPUs, written out so it runs over gloo on the CPU), and updates its running statistics with
them. Virtual workers use the same layer over their global batch in one pass, with nothing to
reduce, so a virtual run equals the `mpiexec` run (benchmarks/simulator_equivalence.py --norm global).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


def _sum_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """The sum over ranks, differentiable; the tensor itself in a single process."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist_nn.all_reduce(tensor)
    return tensor


class GlobalBatchNorm(_BatchNorm):
    """BatchNorm with the statistics of the global batch: every rank's samples of the step.

    Keeps the wrapped layer's parameters and buffers under the same names (state dicts move between
    norms). Two all-reduces per layer and forward: the sums (and the count) for the mean, then the
    squared deviations from it for the (biased) variance, as batch_norm computes them in one process.
    """

    def __init__(self, layer: _BatchNorm) -> None:
        super().__init__(layer.num_features, layer.eps, layer.momentum, layer.affine, layer.track_running_stats)
        self.load_state_dict(layer.state_dict())

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"GlobalBatchNorm expects (N, C, ...) input, got shape {tuple(x.shape)}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """In training, `x` (N, C, ...) normalised with the global batch's mean and variance: collective,
        every rank's layer must run it in the same order. In evaluation, the running statistics."""
        if not self.training:
            return super().forward(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)
        sums = _sum_over_ranks(torch.cat([x.sum(dims), count]))
        total = sums[-1]
        mean = sums[:-1] / total
        centered = x - mean.view(shape)
        variance = _sum_over_ranks((centered * centered).sum(dims)) / total
        out = centered * torch.rsqrt(variance + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:
            self.update_running(mean.detach(), variance.detach(), float(total.detach()))
        return out

    @torch.no_grad()
    def update_running(self, mean: torch.Tensor, variance: torch.Tensor, count: float) -> None:
        """As batch_norm does: momentum (or the cumulative average), the variance made unbiased."""
        self.num_batches_tracked += 1
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = variance * (count / max(count - 1.0, 1.0))
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)


def global_batch_norm(model: nn.Module, name: str) -> int:
    """Replace every BatchNorm layer of `model` in place; returns how many were replaced.

    Raises:
        ValueError: the model has no BatchNorm layer, so `model.norm=global` would change nothing.
    """
    replaced = replace_batch_norm(model, GlobalBatchNorm, GlobalBatchNorm)
    if not replaced:
        raise ValueError(f"model.norm=global: model {name} has no BatchNorm layer, so there are no statistics to "
                         "take over the global batch; leave model.norm=worker")
    return replaced


def replace_batch_norm(module: nn.Module, kind: type[_BatchNorm], make: Callable[[_BatchNorm], _BatchNorm]) -> int:
    """Replace, in place, every BatchNorm layer under `module` that is not a `kind` already by
    `make(layer)`; returns how many were replaced."""
    replaced = 0
    for child_name, child in module.named_children():
        if isinstance(child, _BatchNorm) and not isinstance(child, kind):
            setattr(module, child_name, make(child))
            replaced += 1
        else:
            replaced += replace_batch_norm(child, kind, make)
    return replaced
