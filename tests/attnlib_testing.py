"""Helpers shared by attnlib's tests (imported as a plain module, not a conftest)."""

from __future__ import annotations

import torch


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """``assert_close`` tolerances fitting each dtype's precision."""
    return {
        torch.float64: {"atol": 1e-10, "rtol": 1e-10},
        torch.float32: {"atol": 1e-5, "rtol": 1e-5},
        torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    }[dtype]
