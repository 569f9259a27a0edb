"""Checks for model options: a bad value from a `conf/model/*.yaml` fails naming the option and the rule."""

from __future__ import annotations

from collections.abc import Callable

Scale = Callable[[int], int]  # a paper's channel count -> this model's, i.e. `scaled` with the width bound


def positive_int(option: str, value: object, minimum: int = 1) -> int:
    """Return `value` if it is an int >= `minimum`, else raise ValueError naming `option`."""
    # bool is an int subclass: `depth=True` is a typo, not a depth of 1
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{option} must be an integer >= {minimum}, got {value!r}")
    return value


def positive_float(option: str, value: object) -> float:
    """Return `value` as a float if it is a number > 0, else raise ValueError naming `option`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{option} must be a number > 0, got {value!r}")
    return float(value)


def probability(option: str, value: object) -> float:
    """Return `value` as a float if it is in [0, 1), else raise ValueError naming `option`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{option} must be a probability in [0, 1), got {value!r}")
    return float(value)


def boolean(option: str, value: object) -> bool:
    """Return `value` if it is a bool, else raise ValueError naming `option` (YAML writes true/false)."""
    if not isinstance(value, bool):
        raise ValueError(f"{option} must be true or false, got {value!r}")
    return value


def scaled(channels: int, width: float) -> int:
    """`channels` times the width multiplier, rounded, at least 1: how every `width` option scales layers."""
    return max(1, round(channels * width))
