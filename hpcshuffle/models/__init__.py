"""Models by name: `build(name, num_classes, in_channels, **options)`.

Each name maps to a factory `f(num_classes, in_channels, **options)`; its keyword options and their
defaults are the keys of `conf/model/<name>.yaml` besides `name`. Adding a model means one module,
one entry here and one YAML file.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from hpcshuffle.models.deepcam import deepcam, deepcam_small
from hpcshuffle.models.densenet import densenet161
from hpcshuffle.models.emulated import emulated
from hpcshuffle.models.inception import inceptionv4, inceptionv4_small
from hpcshuffle.models.options import positive_int
from hpcshuffle.models.resnet import resnet50
from hpcshuffle.models.small import small_cnn
from hpcshuffle.models.wide_resnet import wrn16_2, wrn28_10

MODELS: dict[str, Callable[..., nn.Module]] = {
    "small_cnn": small_cnn,
    "resnet50": resnet50,
    "densenet161": densenet161,
    "wrn28_10": wrn28_10,
    "wrn16_2": wrn16_2,
    "inceptionv4": inceptionv4,
    "inceptionv4_small": inceptionv4_small,
    "deepcam": deepcam,
    "deepcam_small": deepcam_small,
    "emulated": emulated,
}

_SHAPE_ARGUMENTS = ("num_classes", "in_channels")  # given by the data, not by conf/model/*.yaml


def _factory(name: str) -> Callable[..., nn.Module]:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}") from None


def default_options(name: str) -> dict[str, Any]:
    """The options model `name` accepts, with their defaults (what its conf/model YAML lists)."""
    parameters = inspect.signature(_factory(name)).parameters
    return {key: p.default for key, p in parameters.items() if key not in _SHAPE_ARGUMENTS}


def default_in_channels(name: str) -> int:
    """Input channels model `name` is built for when none are given (3, or 16 for DeepCAM)."""
    return inspect.signature(_factory(name)).parameters["in_channels"].default


def build(name: str, num_classes: int, in_channels: int | None = None, **options: Any) -> nn.Module:
    """Build model `name` with random weights.

    Args:
        name: A key of `MODELS`.
        num_classes: Output classes (per image, or per pixel for DeepCAM).
        in_channels: Input channels; None takes the model's default (3 for images, 16 for DeepCAM).
        **options: The model's options (see `default_options(name)`), e.g. `dropout=0.0`.

    Returns:
        The model, in training mode.

    Raises:
        ValueError: For an unknown name, an option the model does not have, or a bad value; the
            message names the choices, the option or the rule.
    """
    factory = _factory(name)
    accepted = default_options(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"model {name!r} has no option {', '.join(unknown)}; it accepts {sorted(accepted)}")
    num_classes = positive_int("num_classes", num_classes)
    in_channels = default_in_channels(name) if in_channels is None else positive_int("in_channels", in_channels)
    return factory(num_classes=num_classes, in_channels=in_channels, **options)
