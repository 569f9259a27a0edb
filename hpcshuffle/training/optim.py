"""The papers' optimizers and learning-rate schedules.

- SGD with momentum and Goyal et al.'s recipe: the learning rate scales linearly with the global
  batch (`reference_batch`), reached by a linear warm-up, then decays in steps.
- LARS (You, Gitman & Ginsburg 2017), which the paper switches to beyond 512 workers: each
  layer's step is scaled by a trust ratio ‖w‖ / ‖g + λw‖.
- LAMB (You et al. 2019), the MLPerf-HPC DeepCAM optimizer: Adam moments with the same
  per-layer trust ratio.

The schedule is a pure function of the global step, so a resumed run needs no scheduler state:
it recomputes the learning rate from (epoch, iteration).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hpcshuffle.config.optim import OptimConfig


def learning_rate(config: OptimConfig, global_batch: int, step: int, steps_per_epoch: int, epochs: int) -> float:
    """The learning rate of global step `step` (0-based; steps_per_epoch iterations per epoch)."""
    per_unit = steps_per_epoch if config.unit == "epoch" else 1
    warmup_steps = round(config.warmup * per_unit)
    peak = config.peak_lr(global_batch)
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    if config.schedule == "step":
        passed = sum(step >= round(milestone * per_unit) for milestone in config.milestones)
        return peak * config.gamma**passed
    total_steps = max(epochs * steps_per_epoch - warmup_steps, 1)
    progress = min((step - warmup_steps) / total_steps, 1.0)
    if config.schedule == "cosine":
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))
    if config.schedule == "poly":
        return peak * (1.0 - progress) ** 2
    return peak


def parameter_groups(model: nn.Module, config: OptimConfig) -> list[dict]:
    """The optimizer's parameter groups: one with optim.weight_decay, or with `no_decay_1d` two,
    where biases and normalisation weights (1-D) take no decay and no trust ratio (`skip_trust`)."""
    if not config.no_decay_1d:
        return [{"params": list(model.parameters()), "weight_decay": config.weight_decay}]
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0, "skip_trust": True},
    ]


def build_optimizer(model: nn.Module, config: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer optim.name names (sgd, lars or lamb) over `parameter_groups`."""
    groups = parameter_groups(model, config)
    if config.name == "sgd":
        for group in groups:
            group.pop("skip_trust", None)
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, nesterov=config.nesterov)
    if config.name == "lars":
        return LARS(groups, lr=config.lr, momentum=config.momentum, trust_coefficient=config.trust_coefficient)
    return LAMB(groups, lr=config.lr, betas=config.betas, eps=config.eps)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every parameter group's learning rate to `lr`."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def trust_ratio(weight_norm: torch.Tensor, update_norm: torch.Tensor, coefficient: float = 1.0) -> torch.Tensor:
    """coefficient·‖w‖/‖u‖, or 1 when either norm is 0 (fresh zero-initialised layers)."""
    ratio = coefficient * weight_norm / update_norm
    return torch.where((weight_norm > 0) & (update_norm > 0), ratio, torch.ones_like(ratio))


class LARS(torch.optim.Optimizer):
    """SGD with momentum whose per-layer step is lr · η‖w‖ / ‖g + λw‖ (You et al. 2017, Alg. 1).

    Groups flagged `skip_trust` (biases, normalization weights) take plain momentum SGD steps.
    """

    def __init__(self, params, lr: float, momentum: float = 0.9, trust_coefficient: float = 0.001,
                 weight_decay: float = 0.0) -> None:
        defaults = dict(lr=lr, momentum=momentum, trust_coefficient=trust_coefficient,
                        weight_decay=weight_decay, skip_trust=False)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One LARS update of every parameter that has a gradient; `closure` is ignored."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                update = param.grad.add(param, alpha=group["weight_decay"])
                if not group["skip_trust"]:
                    update.mul_(trust_ratio(param.norm(), update.norm(), group["trust_coefficient"]))
                state = self.state[param]
                if "momentum" not in state:
                    state["momentum"] = update.clone()
                else:
                    state["momentum"].mul_(group["momentum"]).add_(update)
                param.add_(state["momentum"], alpha=-group["lr"])
        return None


class LAMB(torch.optim.Optimizer):
    """Adam moments, decoupled weight decay, per-layer trust ratio ‖w‖ / ‖r‖ (You et al. 2019, Alg. 2)."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, skip_trust=False)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One LAMB update of every parameter that has a gradient; `closure` is ignored."""
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                state["exp_avg"].mul_(beta1).add_(param.grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                first = state["exp_avg"] / (1 - beta1 ** state["step"])
                second = state["exp_avg_sq"] / (1 - beta2 ** state["step"])
                update = first / (second.sqrt() + group["eps"])
                update.add_(param, alpha=group["weight_decay"])
                if not group["skip_trust"]:
                    update.mul_(trust_ratio(param.norm(), update.norm()))
                param.add_(update, alpha=-group["lr"])
        return None
