"""Benchmark 1: attnlib's attention against PyTorch's fused scaled_dot_product_attention.

``attention(impl="auto")`` hands softmax attention to SDPA after its own input checks, so
its time should stay close to SDPA's; ``impl="explicit"`` forms ``A``, ``Z`` and
``Z^-1 A V`` literally, as the book writes it, and pays for the ``N x N`` matrices.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from timing import median_seconds

from attnlib import attention

HEADS, D_HEAD = 8, 64


def run(device: torch.device, sizes: list[int], repeats: int) -> list[dict]:
    """Time SDPA, ``attention(impl="auto")`` and ``impl="explicit"`` at ``(1, 8, N, 64)``."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for n in sizes:
        Q, K, V = (torch.randn(1, HEADS, n, D_HEAD, generator=gen).to(device) for _ in range(3))
        fns = {
            "sdpa": partial(F.scaled_dot_product_attention, Q, K, V),
            "auto": partial(attention, Q, K, V, impl="auto"),
            "explicit": partial(attention, Q, K, V, impl="explicit"),
        }
        with torch.no_grad():
            seconds = median_seconds(fns, device, repeats=repeats)
            Y_ref = fns["sdpa"]()
            diff = max((fns[k]() - Y_ref).abs().max().item() for k in ("auto", "explicit"))
        rows.append({
            "N": n,
            "shape": [1, HEADS, n, D_HEAD],
            "seconds": seconds,
            "auto_over_sdpa": seconds["auto"] / seconds["sdpa"],
            "explicit_over_sdpa": seconds["explicit"] / seconds["sdpa"],
            "max_abs_diff": diff,
            "outputs_agree": diff <= 1e-4,
        })
    return rows
