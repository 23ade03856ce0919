"""How attnlib's modules initialise their weight matrices (shared by gqa, mla and layers).

Weights multiply from the right (``Q = X @ W_Q``), so a matrix is stored as
``(d_in, d_out)``: the transpose of ``nn.Linear.weight``. It is drawn as ``nn.Linear``
draws its weight, uniformly in ``[-1/sqrt(d_in), 1/sqrt(d_in)]``, which keeps the
variance of ``X @ W`` close to that of ``X`` whatever ``d_in`` is.

This is a private module with public names: any attnlib module may import from it.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def init_weight(
    d_in: int,
    d_out: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Parameter:
    """A ``(d_in, d_out)`` parameter drawn from ``U(-1/sqrt(d_in), 1/sqrt(d_in))``.

    Example:
        >>> W = init_weight(16, 4)
        >>> W.shape, bool(W.abs().max() <= 0.25)
        (torch.Size([16, 4]), True)
    """
    bound = 1.0 / math.sqrt(d_in)
    W = torch.empty(d_in, d_out, device=device, dtype=dtype)
    return nn.Parameter(nn.init.uniform_(W, -bound, bound))
