"""Learning-rate schedules (the papers' numbers) and LARS / LAMB against their definitions."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hpcshuffle.config.optim import OptimConfig
from hpcshuffle.training.optim import (
    LAMB,
    LARS,
    build_optimizer,
    learning_rate,
    trust_ratio,
)


def test_goyal_linear_scaling_warmup_and_steps():
    # ResNet-50 on ImageNet, 256 workers × 32: lr 0.1 per 256 → 3.2, 5 warm-up epochs, ÷10 at 30/60/80
    config = OptimConfig(lr=0.1, reference_batch=256, schedule="step", warmup=5, milestones=(30, 60, 80))
    steps = 156  # iterations per epoch of 1.28 M images at a global batch of 8192
    def lr_at(epoch: float) -> float:
        return learning_rate(config, 8192, round(epoch * steps), steps, 90)
    assert config.peak_lr(8192) == pytest.approx(3.2)
    assert learning_rate(config, 8192, 0, steps, 90) == pytest.approx(3.2 / (5 * steps))
    assert lr_at(2.5) == pytest.approx(3.2 * (2.5 * steps + 1) / (5 * steps))
    assert [lr_at(e) for e in (5, 29.99, 30, 60, 80, 89.9)] == pytest.approx([3.2, 3.2, 0.32, 0.032, 0.0032, 0.0032])


def test_deepcam_multistep_counts_steps():
    # MLPerf-HPC DeepCAM: LAMB at 0.0055, 400 warm-up steps, × 0.1 from step 800
    config = OptimConfig(name="lamb", lr=0.0055, schedule="step", unit="step", warmup=400, milestones=(800,))
    lrs = [learning_rate(config, 2048, step, 60, 10) for step in (0, 199, 399, 799, 800)]
    assert lrs == pytest.approx([0.0055 / 400, 0.0055 / 2, 0.0055, 0.0055, 0.00055])


def test_cosine_and_poly_decay_to_zero():
    for schedule in ("cosine", "poly"):
        config = OptimConfig(lr=1.0, schedule=schedule, warmup=1)
        first, last = (learning_rate(config, 1, step, 10, 5) for step in (10, 49))
        assert first == pytest.approx(1.0)
        assert last < 0.01


def layer() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def set_grads(model: nn.Module) -> None:
    for param in model.parameters():
        param.grad = torch.linspace(-1, 2, param.numel()).reshape(param.shape)


def test_lars_step_matches_its_definition():
    model = layer()
    weight = model.weight.detach().clone()
    set_grads(model)
    grad = model.weight.grad.clone()
    LARS(model.parameters(), lr=0.5, trust_coefficient=0.02, weight_decay=1e-3).step()
    update = grad + 1e-3 * weight
    expected = weight - 0.5 * 0.02 * weight.norm() / update.norm() * update
    torch.testing.assert_close(model.weight.detach(), expected)


def test_lamb_first_step_moves_each_layer_by_lr_times_its_norm():
    # first step: r = m̂/(√v̂+ε) = g/|g| elementwise, so the trust ratio makes ‖Δw‖ = lr·‖w‖
    model = layer()
    before = [p.detach().clone() for p in model.parameters()]
    set_grads(model)
    LAMB(model.parameters(), lr=0.01, eps=1e-12).step()
    for old, new in zip(before, model.parameters()):
        assert (new.detach() - old).norm().item() == pytest.approx(0.01 * old.norm().item(), rel=1e-4)


def test_without_trust_ratio_lars_is_sgd_and_lamb_is_adam():
    for ours, reference in (
        (lambda p: LARS([{"params": p, "skip_trust": True}], lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
        (lambda p: LAMB([{"params": p, "skip_trust": True}], lr=0.1, eps=1e-8), lambda p: torch.optim.Adam(p, lr=0.1, eps=1e-8)),
    ):
        a, b = layer(), layer()
        opt_a, opt_b = ours(list(a.parameters())), reference(list(b.parameters()))
        for _ in range(3):
            for model, optimizer in ((a, opt_a), (b, opt_b)):
                model.zero_grad()
                model(torch.ones(2, 4)).square().sum().backward()
                optimizer.step()
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pa, pb)


def test_trust_ratio_is_one_for_zero_norms():
    assert trust_ratio(torch.tensor(0.0), torch.tensor(2.0)).item() == 1.0
    assert trust_ratio(torch.tensor(3.0), torch.tensor(0.0)).item() == 1.0
    assert trust_ratio(torch.tensor(3.0), torch.tensor(2.0), 0.1).item() == pytest.approx(0.15)


def test_no_decay_1d_exempts_biases():
    optimizer = build_optimizer(layer(), OptimConfig(name="lars", weight_decay=1e-4, no_decay_1d=True))
    decays = sorted((group["weight_decay"], len(group["params"])) for group in optimizer.param_groups)
    assert decays == [(0.0, 1), (1e-4, 1)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "adamw"}, "optim.name"),
        ({"schedule": "linear"}, "optim.schedule"),
        ({"unit": "iteration"}, "optim.unit"),
        ({"lr": 0.0}, "optim.lr"),
        ({"reference_batch": 0}, "optim.reference_batch"),
        ({"milestones": (60, 30)}, "optim.milestones"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OptimConfig(**kwargs)


def test_warmup_reaches_peak_exactly():
    config = OptimConfig(lr=0.4, schedule="cosine", warmup=2)
    assert learning_rate(config, 1, 2 * 7 - 1, 7, 10) == pytest.approx(0.4)
    assert not math.isnan(learning_rate(config, 1, 10**6, 7, 10))
