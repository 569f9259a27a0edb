"""model.norm (training/norm.py): global BatchNorm in one process is torch's BatchNorm over the batch,
its knob is checked where it is set, and a model without BatchNorm is named."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpcshuffle.errors import ConfigError
from hpcshuffle.training.norm import GlobalBatchNorm, global_batch_norm
from tests.unit.test_config import run_config


def test_global_batch_norm_in_one_process_is_batch_norm_over_the_batch():
    torch.manual_seed(0)
    reference = nn.BatchNorm2d(3, momentum=0.2)
    reference.weight.data.uniform_(0.5, 1.5)
    layer = GlobalBatchNorm(reference)  # takes the wrapped layer's weights and buffers
    x = torch.randn(8, 3, 5, 5, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    out, expected = layer(x), reference(y)
    assert torch.allclose(out, expected, atol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-4)
    assert torch.allclose(layer.running_mean, reference.running_mean, atol=1e-6)
    assert torch.allclose(layer.running_var, reference.running_var, atol=1e-6)
    assert int(layer.num_batches_tracked) == int(reference.num_batches_tracked) == 1
    layer.eval()
    reference.eval()
    assert torch.allclose(layer(x), reference(x), atol=1e-5)


def test_every_batch_norm_is_replaced_and_a_model_without_one_is_named():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)))
    assert global_batch_norm(model, "tiny") == 2
    assert sum(isinstance(m, GlobalBatchNorm) for m in model.modules()) == 2
    with pytest.raises(ValueError, match="model.norm=global: model linear has no BatchNorm layer"):
        global_batch_norm(nn.Linear(3, 2), "linear")


@pytest.mark.parametrize("overrides, message", [
    (["model.norm=batch"], "model.norm='batch' is not known: 'worker'"),
    (["model.norm=global", "shuffle.virtual_workers=8", "shuffle.virtual_chunk=2"],
     "model.norm=global normalises over the step's whole global batch"),
])
def test_bad_norm_settings_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_config(*overrides)


def test_norm_defaults_to_each_workers_batch_and_takes_global():
    assert run_config().model.norm == "worker"
    config = run_config("model.norm=global", "shuffle.virtual_workers=8")
    assert config.model.norm == "global" and "norm" not in config.model.options
