"""Exact attention without the N x N matrix: an online softmax over blocks of keys.

The softmax of a row can be accumulated one block of keys at a time. Keep, for every
query, the running maximum ``m``, the running normaliser ``l = sum exp(s - m)`` and the
running weighted sum ``acc = sum exp(s - m) v``. When a new block raises the maximum to
``m'``, the old sums are rescaled by ``exp(m - m')``. At the end ``Y = acc / l``, which is
exactly ``Z^-1 A V``, and ``L = m + log l`` is the row's log-sum-exp. Only an
``N_Q x block_size`` slice of logits ever exists at once.

A row that sees no key (causal, more queries than keys) ends with ``m = -inf`` and
``l = 0``: its output is zeros, as :func:`attnlib.attention` gives, and its ``L`` is
``-inf``, the logarithm of an empty sum. :func:`attnlib.core.functional.online_softmax` is the one
loop; :func:`tiled_attention` and the tiled forward of :mod:`attnlib.kernels.backward` run it.

This is the algorithmic idea of FlashAttention (Dao et al., 2022); the speed of the real
kernels comes from keeping those blocks in on-chip memory, which plain PyTorch cannot
control. Here the point is the memory footprint and the exactness.
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import check_bool, check_optional_positive_float, check_positive_int, check_qkv
from attnlib.core.functional import online_softmax
from attnlib.core.masks import query_positions

__all__ = ["online_softmax", "tiled_attention"]  # online_softmax: attnlib.core.functional


def tiled_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    *,
    block_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention computed block by block over the keys (online softmax); exact.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        block_size: keys per block (>= 1).
        causal: bottom-right aligned causal mask, as :func:`attnlib.core.masks.causal_mask`.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``, equal to ``attention(Q, K, V, causal=causal)`` up to rounding;
        rows with no visible key are zeros.

    Equivalent to ``attention(Q, K, V, causal=causal, impl="explicit")`` with peak extra
    memory ``O(N_Q * block_size)`` instead of ``O(N_Q * N_KV)``.

    Example:
        >>> Q, K, V = torch.randn(5, 4), torch.randn(9, 4), torch.randn(9, 2)
        >>> torch.allclose(tiled_attention(Q, K, V, block_size=4),
        ...                torch.softmax(Q @ K.T / 2, dim=-1) @ V, atol=1e-6)
        True

    Lesson: 09_frontier.
    """
    _check_tiled(Q, K, V, block_size, causal, scale)
    s = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    positions = query_positions(n_q, n_kv, device=Q.device) if causal else None
    Y, _ = online_softmax(Q, K, V, scale=s, block_size=block_size, positions=positions)
    return Y.to(Q.dtype)


def _check_tiled(Q, K, V, block_size, causal, scale) -> None:
    check_qkv(Q, K, V)
    check_positive_int("block_size", block_size)
    check_bool("causal", causal)
    check_optional_positive_float("scale", scale)
