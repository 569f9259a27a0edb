"""Models by name: `build(name, num_classes, in_channels)`."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from hpcshuffle.models.small import small_cnn

MODELS: dict[str, Callable[..., nn.Module]] = {
    "small_cnn": small_cnn,
}


def build(name: str, num_classes: int, in_channels: int = 3) -> nn.Module:
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}") from None
    return factory(num_classes=num_classes, in_channels=in_channels)
