"""The backward pass of softmax attention, in closed form and tile by tile.

In the book's notation, with ``s`` the scale (``1/sqrt(d)`` by default)::

    S = s Q K^T,   P = softmax of each row of S (Z^-1 A),   O = P V

and, given ``dO`` (the gradient of the loss with respect to ``O``)::

    dV = P^T dO
    dP = dO V^T
    dS = P * (dP - D),   D = rowsum(dO * O)    (one number per query row)
    dQ = s dS K
    dK = s dS^T Q

``attention_backward`` computes these with the N x M matrices ``P`` and ``dP`` whole.
``tiled_forward`` is FlashAttention-2's forward: each block of query rows runs the online
softmax of :func:`attnlib.core.functional.online_softmax` over the key blocks, keeping ``O``
and the row log-sum-exp ``L = max + log(sum exp)`` and never an N x M matrix;
``tiled_backward`` rebuilds each tile of ``P = exp(S - L)`` from ``L`` and accumulates
``dQ, dK, dV`` tile by tile.

Shapes: ``Q`` is ``(..., H, N, d)``, ``K`` and ``V`` are ``(..., G, M, d)`` with ``G``
dividing ``H`` (grouped-query attention: query head ``h`` reads kv head ``h // (H // G)``).
``causal=True`` lets query ``i`` see keys ``j <= i + (M - N)`` (the queries are the last ``N``
positions, :func:`attnlib.core.masks.causal_mask`), as
``torch.nn.functional.scaled_dot_product_attention`` does for ``N == M``.

A row that sees no key (causal, ``N > M``: the first ``N - M`` queries) gives zeros, as
:func:`attnlib.attention` does; its ``L`` is ``-inf``, and its weights rebuilt from ``L`` are
zeros, so it adds nothing to any gradient and its own ``dQ`` is zero.
"""

from __future__ import annotations

import functools
import math

import torch

from attnlib._checks import check_positive_float, check_positive_int, check_qkv, check_tensor
from attnlib.core.functional import online_softmax
from attnlib.core.heads import repeat_kv
from attnlib.core.masks import causal_mask, query_positions


def check_grouped_qkv(Q: object, K: object, V: object, scale: object) -> float:
    """Q (..., H, N, d), K and V (..., G, M, d) with G dividing H; returns the scale.

    The rules of every attention function (:func:`attnlib._checks.check_qkv`, on one head
    each), then the grouped heads: K and V of one shape, Q's batch dimensions, G dividing H.
    """
    for name, x in (("Q", Q), ("K", K), ("V", V)):
        check_tensor(name, x, min_dim=3)
    check_qkv(*(x.narrow(-3, 0, 1) for x in (Q, K, V)))  # d, M, dtype and device
    if K.shape != V.shape:
        raise ValueError(f"K and V must have the same shape (..., G, M, d); got K "
                         f"{tuple(K.shape)} and V {tuple(V.shape)}")
    if Q.shape[:-3] != K.shape[:-3]:
        raise ValueError(f"Q (..., H, N, d) and K (..., G, M, d) must share the batch "
                         f"dimensions; got Q {tuple(Q.shape)} and K {tuple(K.shape)}")
    H, G = Q.shape[-3], K.shape[-3]
    if H % G != 0:
        raise ValueError(f"the kv heads G must divide the query heads H (Q (..., H, N, d), "
                         f"K (..., G, M, d)); got H={H}, G={G}")
    return 1.0 / math.sqrt(Q.shape[-1]) if scale is None else check_positive_float("scale", scale)


def attention_forward(Q, K, V, *, causal: bool = False, scale: float | None = None):
    """Naive softmax attention; returns ``(O, P)`` with the whole N x M matrix ``P``.

    Example:
        >>> Q, K, V = torch.randn(3, 1, 4, 2).unbind(0)
        >>> O, P = attention_forward(Q, K[..., :2, :], V[..., :2, :], causal=True)
        >>> P[0, :2].sum().item()  # queries 0 and 1 see no key
        0.0
    """
    s = check_grouped_qkv(Q, K, V, scale)
    P = _weights(Q, K, causal, s)
    return P @ repeat_kv(V, Q.shape[-3]), P


def _weights(Q, K, causal, s):
    """``P = softmax(s Q K^T)``, masked; a row that sees no key is zeros, not softmax's NaN."""
    N, M = Q.shape[-2], K.shape[-2]
    S = s * Q @ repeat_kv(K, Q.shape[-3]).transpose(-1, -2)  # (..., H, N, M)
    if not causal:
        return torch.softmax(S, dim=-1)
    S = S.masked_fill(~causal_mask(N, M, device=Q.device), float("-inf"))
    if N <= M:
        return torch.softmax(S, dim=-1)
    # the first N - M queries sit before the first key (bottom-right): they see none
    seen = torch.softmax(S[..., N - M:, :], dim=-1)
    return torch.cat([torch.zeros_like(S[..., :N - M, :]), seen], dim=-2)


def attention_backward(Q, K, V, O, dO, *, causal: bool = False, scale: float | None = None,
                       P: torch.Tensor | None = None):
    """The closed-form gradients ``(dQ, dK, dV)`` of softmax attention.

    Args:
        Q, K, V: ``(..., H, N, d)``, ``(..., G, M, d)``, ``(..., G, M, d)``.
        O: the forward's output ``(..., H, N, d)``.
        dO: the gradient of the loss with respect to ``O``, shaped like ``O``.
        causal: whether the forward masked the future.
        scale: the forward's scale (``1/sqrt(d)`` when None).
        P: the forward's attention weights, recomputed when None.

    Returns:
        tuple: ``dQ`` shaped like Q, ``dK`` and ``dV`` shaped like K (summed over the query
        heads that share each kv head).

    Example:
        >>> Q, K, V = torch.randn(3, 2, 5, 4, dtype=torch.float64).unbind(0)
        >>> O, P = attention_forward(Q, K, V)
        >>> dQ, dK, dV = attention_backward(Q, K, V, O, torch.ones_like(O))
        >>> torch.allclose(dV, P.transpose(-1, -2) @ torch.ones_like(O))
        True
    """
    s = check_grouped_qkv(Q, K, V, scale)
    _check_like_q(Q, O=O, dO=dO)
    H, G = Q.shape[-3], K.shape[-3]
    if P is None:
        P = _weights(Q, K, causal, s)
    Ke, Ve = repeat_kv(K, H), repeat_kv(V, H)
    dV = P.transpose(-1, -2) @ dO
    dP = dO @ Ve.transpose(-1, -2)
    D = (dO * O).sum(-1, keepdim=True)
    dS = P * (dP - D)
    dQ = s * dS @ Ke
    dK = s * dS.transpose(-1, -2) @ Q
    return dQ, _fold(dK, G), _fold(dV, G)


def tiled_forward(Q, K, V, *, causal: bool = False, scale: float | None = None,
                  block_m: int = 16, block_n: int = 16, on_tile=None):
    """FlashAttention-2's forward in torch: returns ``(O, L)``, L the row log-sum-exp.

    Each block of ``block_m`` query rows walks the key blocks of ``block_n`` keys with an
    online softmax (running max ``m``, running sum ``l``, unnormalised output); no N x M
    matrix is ever made. ``L = m + log(l)`` is what the backward needs to rebuild ``P``;
    it is ``-inf`` for a row that sees no key, whose ``O`` is zeros. Causal attention skips
    the key blocks wholly in a query block's future.

    ``on_tile``, when given, is called after each tile as ``on_tile(i0, j0, m, l, acc)``:
    the first query row and first key of the tile, and the running max, running sum and
    unnormalised accumulator of the query block after it (the loop's own tensors; copy
    them to keep them). Lesson 13's tile walk records the loop this way.
    """
    s = check_grouped_qkv(Q, K, V, scale)
    _check_blocks(block_m, block_n)
    return _tiled_forward(Q, K, V, causal, s, block_m, block_n, on_tile)


def _tiled_forward(Q, K, V, causal, s, block_m, block_n, on_tile=None):
    H, N, M = Q.shape[-3], Q.shape[-2], K.shape[-2]
    Ke, Ve = repeat_kv(K, H), repeat_kv(V, H)
    positions = query_positions(N, M, device=Q.device)  # query i sits at i + M - N
    O, L = [], []
    for i0 in range(0, N, block_m):
        o, lse = online_softmax(
            Q[..., i0:i0 + block_m, :], Ke, Ve, scale=s, block_size=block_n,
            positions=positions[i0:i0 + block_m] if causal else None,
            on_tile=None if on_tile is None else functools.partial(on_tile, i0))
        O.append(o)
        L.append(lse)
    return torch.cat(O, dim=-2).to(Q.dtype), torch.cat(L, dim=-1)


def tiled_backward(Q, K, V, O, dO, L, *, causal: bool = False, scale: float | None = None,
                   block_m: int = 16, block_n: int = 16, on_tile=None):
    """FlashAttention-2's backward in torch: ``(dQ, dK, dV)`` from O, dO and L alone.

    ``D = rowsum(dO * O)`` is computed once; then for each key block, each query block
    rebuilds its tile ``P = exp(s Q K^T - L)`` and adds its share to ``dV``, ``dK`` and ``dQ``.
    The largest temporaries are ``block_m x block_n`` tiles. The loops visit the tiles in
    the order of the dK/dV kernel (key blocks outside, each from the first query block that
    can see it); ``on_tile(i0, j0)``, when given, is called after each tile.
    """
    s = check_grouped_qkv(Q, K, V, scale)
    _check_like_q(Q, O=O, dO=dO)
    check_tensor("L", L, min_dim=2)
    if L.shape != Q.shape[:-1]:
        raise ValueError(f"L must have shape {tuple(Q.shape[:-1])} (one log-sum-exp per row "
                         f"of Q); got {tuple(L.shape)}")
    _check_blocks(block_m, block_n)
    return _tiled_backward(Q, K, V, O, dO, L, causal, s, block_m, block_n, on_tile)


def _tiled_backward(Q, K, V, O, dO, L, causal, s, block_m, block_n, on_tile=None):
    H, G, N, M = Q.shape[-3], K.shape[-3], Q.shape[-2], K.shape[-2]
    Ke, Ve = repeat_kv(K, H), repeat_kv(V, H)
    positions = query_positions(N, M, device=Q.device)  # query i sits at i + M - N
    D = (dO * O).sum(-1)
    dQ = torch.zeros_like(Q)
    dK = torch.zeros_like(Ke)
    dV = torch.zeros_like(Ve)
    for j0 in range(0, M, block_n):
        k, v = Ke[..., j0:j0 + block_n, :], Ve[..., j0:j0 + block_n, :]
        keys = torch.arange(j0, j0 + k.shape[-2], device=Q.device)
        first = max(0, j0 - (M - N)) // block_m * block_m if causal else 0
        for i0 in range(first, N, block_m):
            q, do = Q[..., i0:i0 + block_m, :], dO[..., i0:i0 + block_m, :]
            S = s * q @ k.transpose(-1, -2) - L[..., i0:i0 + block_m, None]  # S - L <= 0
            if causal:  # a hidden pair, and every pair of a row with no key, weighs 0
                S = S.masked_fill(keys[None, :] > positions[i0:i0 + block_m, None], -math.inf)
            P = torch.exp(S)
            dV[..., j0:j0 + block_n, :] += P.transpose(-1, -2) @ do
            dP = do @ v.transpose(-1, -2)
            dS = P * (dP - D[..., i0:i0 + block_m, None])
            dQ[..., i0:i0 + block_m, :] += s * dS @ k
            dK[..., j0:j0 + block_n, :] += s * dS.transpose(-1, -2) @ q
            if on_tile is not None:
                on_tile(i0, j0)
    return dQ, _fold(dK, G), _fold(dV, G)


def _fold(dK: torch.Tensor, G: int) -> torch.Tensor:
    """Sum the gradients of the H // G query heads that share each kv head."""
    H = dK.shape[-3]
    return dK if G == H else dK.unflatten(-3, (G, H // G)).sum(-3)


def _check_like_q(Q: torch.Tensor, **tensors: object) -> None:
    for name, x in tensors.items():
        check_tensor(name, x, min_dim=3)
        if x.shape != Q.shape:
            raise ValueError(f"{name} must have Q's shape {tuple(Q.shape)}; got {tuple(x.shape)}")


def _check_blocks(block_m: object, block_n: object) -> None:
    check_positive_int("block_m", block_m)
    check_positive_int("block_n", block_n)


class FlashAttentionTorch(torch.autograd.Function):
    """``tiled_forward`` and ``tiled_backward`` as one differentiable function.

    It saves ``Q, K, V, O`` and ``L`` (no N x M matrix) for the backward.

    Example:
        >>> Q, K, V = torch.randn(3, 1, 2, 7, 4, dtype=torch.float64).unbind(0)
        >>> O = FlashAttentionTorch.apply(Q, K, V, True)
        >>> O.shape
        torch.Size([1, 2, 7, 4])
    """

    @staticmethod
    def forward(ctx, Q, K, V, causal=False, scale=None, block_m=16, block_n=16):
        """``O`` by ``tiled_forward``; saves ``Q, K, V, O`` and the row log-sum-exp ``L``."""
        s = check_grouped_qkv(Q, K, V, scale)
        _check_blocks(block_m, block_n)
        O, L = _tiled_forward(Q, K, V, causal, s, block_m, block_n)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.settings = (causal, s, block_m, block_n)
        return O

    @staticmethod
    def backward(ctx, dO):
        """``dQ, dK, dV`` by ``tiled_backward``, from the saved tensors and ``dO``."""
        Q, K, V, O, L = ctx.saved_tensors
        dQ, dK, dV = _tiled_backward(Q, K, V, O, dO, L, *ctx.settings)
        return dQ, dK, dV, None, None, None, None
