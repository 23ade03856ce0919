"""Input checks shared by every module.

Each helper raises ``ValueError`` or ``TypeError`` with a message that names the
argument, states the rule, and shows the value that broke it. No bare asserts guard
user input anywhere in attnlib.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def check_tensor(name: str, x: object, *, min_dim: int = 1, floating: bool = True) -> torch.Tensor:
    """``x`` must be a tensor with at least ``min_dim`` dimensions (floating point by default)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions {_layout(min_dim)}; "
            f"got shape {tuple(x.shape)}"
        )
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype; got {x.dtype}")
    return x


def check_last_dim(name: str, x: torch.Tensor, expected: int, rule: str) -> None:
    """The last dimension of ``x`` must equal ``expected``; ``rule`` says why."""
    if x.shape[-1] != expected:
        raise ValueError(
            f"{name} must have last dimension {expected} ({rule}); got shape {tuple(x.shape)}"
        )


def check_like(name: str, x: torch.Tensor, like: torch.Tensor) -> None:
    """``x`` must share the dtype and device of ``like`` (a module's parameters)."""
    if x.dtype != like.dtype:
        raise TypeError(f"{name} must have the parameters' dtype {like.dtype}; got {x.dtype}")
    if x.device != like.device:
        raise ValueError(
            f"{name} must live on the parameters' device {like.device}; got {x.device}"
        )


def check_positive_int(name: str, value: object) -> int:
    """``value`` must be an integer >= 1 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int; got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1); got {value}")
    return value


def check_nonnegative_int(name: str, value: object) -> int:
    """``value`` must be an integer >= 0 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be a non-negative int; got {value!r} ({type(value).__name__})"
        )
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int (>= 0); got {value}")
    return value


def check_positive_float(name: str, value: object) -> float:
    """``value`` must be a real number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive number; got {value!r} ({type(value).__name__})")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite positive number (> 0); got {value}")
    return float(value)


def check_even(name: str, value: int, why: str) -> None:
    """``value`` must be even; ``why`` names the reason (for example RoPE's pairs)."""
    if value % 2 != 0:
        raise ValueError(f"{name} must be even ({why}); got {value}")


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}; got {value!r}")
    return value  # type: ignore[return-value]


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    """``value`` must be divisible by ``by``."""
    if value % by != 0:
        raise ValueError(
            f"{name} must be divisible by {by_name} ({by}); got {name}={value}"
        )


def _layout(min_dim: int) -> str:
    return {1: "(..., d)", 2: "(..., N, d)", 3: "(..., H, N, d)"}.get(min_dim, "")
