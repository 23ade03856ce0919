"""Exact attention without the N x N matrix: an online softmax over blocks of keys.

The softmax of a row can be accumulated one block of keys at a time. Keep, for every
query, the running maximum ``m``, the running normaliser ``l = sum exp(s - m)`` and the
running weighted sum ``acc = sum exp(s - m) v``. When a new block raises the maximum to
``m'``, the old sums are rescaled by ``exp(m - m')``. At the end ``Y = acc / l``, which is
exactly ``Z^-1 A V``. Only an ``N_Q x block_size`` slice of logits ever exists at once.

This is the algorithmic idea of FlashAttention (Dao et al., 2022); the speed of the real
kernels comes from keeping those blocks in on-chip memory, which plain PyTorch cannot
control. Here the point is the memory footprint and the exactness.
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import check_bool, check_optional_positive_float, check_positive_int, check_qkv
from attnlib.core.masks import query_positions
from attnlib.device import work_dtype

__all__ = ["tiled_attention"]


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
    work = work_dtype(Q.dtype)  # half precision: work in float32
    Qw = Q.to(work) * s
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    m = torch.full((*batch, n_q, 1), -math.inf, dtype=work, device=Q.device)  # running max
    l = torch.zeros((*batch, n_q, 1), dtype=work, device=Q.device)  # running normaliser
    acc = torch.zeros((*batch, n_q, V.shape[-1]), dtype=work, device=Q.device)
    pos_q = query_positions(n_q, n_kv, device=Q.device)[:, None]  # bottom-right
    for start in range(0, n_kv, block_size):
        stop = min(start + block_size, n_kv)
        S = Qw @ K[..., start:stop, :].to(work).transpose(-2, -1)  # (..., N_Q, block)
        if causal:
            visible = torch.arange(start, stop, device=Q.device)[None, :] <= pos_q
            S = S.masked_fill(~visible, -math.inf)
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))
        # A row that has seen no visible key yet keeps m = -inf; shift it by 0 instead.
        shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp(m - shift)  # rescales the old sums; exp(-inf) = 0 at the start
        P = torch.exp(S - shift)
        l = l * alpha + P.sum(dim=-1, keepdim=True)
        acc = acc * alpha + P @ V[..., start:stop, :].to(work)
        m = m_new
    Y = acc / torch.where(l > 0, l, torch.ones_like(l))
    return Y.to(Q.dtype)


def _check_tiled(Q, K, V, block_size, causal, scale) -> None:
    check_qkv(Q, K, V)
    check_positive_int("block_size", block_size)
    check_bool("causal", causal)
    check_optional_positive_float("scale", scale)

