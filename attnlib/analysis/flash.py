"""Exact attention without the N x N matrix: an online softmax over blocks of keys.

The softmax of a row can be accumulated one block of keys at a time. Keep, for every
query, the running maximum ``m``, the running normaliser ``l = sum exp(s - m)`` and the
running weighted sum ``acc = sum exp(s - m) v``. When a new block raises the maximum to
``m'``, the old sums are rescaled by ``exp(m - m')``. At the end ``Y = acc / l``, which is
exactly ``Z^-1 A V``, and ``L = m + log l`` is the row's log-sum-exp. Only an
``N_Q x block_size`` slice of logits ever exists at once.

A row that sees no key (causal, more queries than keys) ends with ``m = -inf`` and
``l = 0``: its output is zeros, as :func:`attnlib.attention` gives, and its ``L`` is
``-inf``, the logarithm of an empty sum. :func:`online_softmax` is the one loop;
:func:`tiled_attention` and the tiled forward of :mod:`attnlib.kernels.backward` run it.

This is the algorithmic idea of FlashAttention (Dao et al., 2022); the speed of the real
kernels comes from keeping those blocks in on-chip memory, which plain PyTorch cannot
control. Here the point is the memory footprint and the exactness.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlib._checks import check_bool, check_optional_positive_float, check_positive_int, check_qkv
from attnlib.core.masks import query_positions
from attnlib.device import work_dtype

__all__ = ["online_softmax", "tiled_attention"]


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


def online_softmax(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    *,
    scale: float,
    block_size: int,
    positions: torch.Tensor | None = None,
    on_tile: Callable[..., None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The online softmax over blocks of keys: ``(Y, L)``, with no ``N_Q x N_KV`` matrix.

    It checks nothing: :func:`tiled_attention` and :func:`attnlib.kernels.tiled_forward`
    check their arguments and call it.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries, ``K`` ``(..., N_KV, d_QK)`` keys and ``V``
            ``(..., N_KV, d_V)`` values, whose batch dimensions broadcast.
        scale: multiplies ``Q K^T``.
        block_size: keys per block.
        positions: ``(N_Q,)`` the queries' positions for a causal mask (a query at ``p``
            sees the keys ``j <= p``; the key blocks after the last query's position are
            skipped), or None for no mask.
        on_tile: called after each key block as ``on_tile(j0, m, l, acc)``: its first key,
            then the running max ``(..., N_Q, 1)``, running sum ``(..., N_Q, 1)`` and
            unnormalised output ``(..., N_Q, d_V)`` (the loop's own tensors).

    Returns:
        ``Y (..., N_Q, d_V)`` and the row log-sum-exp of the scaled scores ``L (..., N_Q)``,
        both in ``work_dtype(Q.dtype)`` (float32 for half precision); a row that sees no key
        has ``Y = 0`` and ``L = -inf``.

    Example:
        >>> Q, K, V = torch.randn(3, 4, 2, dtype=torch.float64).unbind(0)
        >>> Y, L = online_softmax(Q, K, V, scale=1.0, block_size=3)
        >>> torch.allclose(L, torch.logsumexp(Q @ K.T, -1))
        True

    Lesson: 09_frontier (the loop), 13_attention_as_a_kernel (``L`` and the tiles).
    """
    work = work_dtype(Q.dtype)  # half precision: work in float32
    Qs = Q.to(work) * scale
    n_kv = K.shape[-2]
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    rows = (*batch, Q.shape[-2], 1)
    m = torch.full(rows, -math.inf, dtype=work, device=Q.device)  # running max
    l = torch.zeros(rows, dtype=work, device=Q.device)  # running normaliser
    acc = torch.zeros((*batch, Q.shape[-2], V.shape[-1]), dtype=work, device=Q.device)
    stop = n_kv if positions is None else min(n_kv, int(positions.max()) + 1)
    for start in range(0, stop, block_size):
        end = min(start + block_size, n_kv)
        S = Qs @ K[..., start:end, :].to(work).mT  # (..., N_Q, block) scaled scores
        if positions is not None:  # key j is hidden from a query at p when j > p
            hidden = torch.arange(start, end, device=Q.device)[None, :] > positions[:, None]
            S = S.masked_fill(hidden, -math.inf)
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))
        # A row that has seen no visible key yet keeps m = -inf; shift it by 0 instead, so
        # that its weights are exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
        shift = torch.where(m_new == -math.inf, 0.0, m_new)
        alpha = torch.exp(m - shift)  # rescales the old sums; exp(-inf) = 0 at the start
        P = torch.exp(S - shift)  # (..., N_Q, block) this block's weights, unnormalised
        l = alpha * l + P.sum(dim=-1, keepdim=True)
        acc = alpha * acc + P @ V[..., start:end, :].to(work)
        m = m_new
        if on_tile is not None:
            on_tile(start, m, l, acc)
    l = torch.where(l > 0, l, 1.0)  # a row that saw no key: l = 0, so Y = 0 and L = m = -inf
    return acc / l, (m + torch.log(l)).squeeze(-1)


def _check_tiled(Q, K, V, block_size, causal, scale) -> None:
    check_qkv(Q, K, V)
    check_positive_int("block_size", block_size)
    check_bool("causal", causal)
    check_optional_positive_float("scale", scale)
