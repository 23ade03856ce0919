"""The backward pass of softmax attention, in closed form and tile by tile.

In the book's notation, with ``s`` the scale (``1/sqrt(d)`` by default)::

    S = s Q K^T,   P = softmax of each row of S (Z^-1 A),   O = P V

and, given ``dO`` (the gradient of the loss with respect to ``O``)::

    dV = P^T dO
    dP = dO V^T
    dS = P * (dP - D),   D = rowsum(dO * O)    (one number per query row)
    dQ = s dS K
    dK = s dS^T Q

``attention_backward`` computes these with the N x N matrices ``P`` and ``dP`` whole.
``tiled_forward`` is FlashAttention-2's forward: it keeps ``O`` and the row log-sum-exp
``L = max + log(sum exp)`` and never an N x N matrix; ``tiled_backward`` rebuilds each tile of
``P = exp(S - L)`` from ``L`` and accumulates ``dQ, dK, dV`` tile by tile.

Shapes: ``Q`` is ``(..., H, N, d)``, ``K`` and ``V`` are ``(..., G, M, d)`` with ``G``
dividing ``H`` (grouped-query attention: query head ``h`` reads kv head ``h // (H // G)``).
``causal=True`` lets query ``i`` see keys ``j <= i + (M - N)`` (the queries are the last ``N``
positions), as ``torch.nn.functional.scaled_dot_product_attention`` does for ``N == M``.
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import check_tensor


def check_qkv(Q: object, K: object, V: object, scale: float | None) -> float:
    """Q (..., H, N, d), K and V (..., G, M, d) with G dividing H; returns the scale."""
    for name, x in (("Q", Q), ("K", K), ("V", V)):
        check_tensor(name, x, min_dim=3)
    if K.shape != V.shape:
        raise ValueError(f"K and V must have the same shape (..., G, M, d); got K "
                         f"{tuple(K.shape)} and V {tuple(V.shape)}")
    if Q.shape[:-3] != K.shape[:-3] or Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"Q (..., H, N, d) and K (..., G, M, d) must share the batch "
                         f"dimensions and d; got Q {tuple(Q.shape)} and K {tuple(K.shape)}")
    H, G = Q.shape[-3], K.shape[-3]
    if H % G != 0:
        raise ValueError(f"the kv heads G must divide the query heads H (Q (..., H, N, d), "
                         f"K (..., G, M, d)); got H={H}, G={G}")
    if not (Q.dtype == K.dtype == V.dtype):
        raise TypeError(f"Q, K and V must share a dtype; got {Q.dtype}, {K.dtype}, {V.dtype}")
    if scale is None:
        return 1.0 / math.sqrt(Q.shape[-1])
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not scale > 0:
        raise ValueError(f"scale must be a positive number; got {scale!r}")
    return float(scale)


def _expand(K: torch.Tensor, H: int) -> torch.Tensor:
    """Repeat each of K's G heads H // G times, so query head h meets kv head h // (H // G)."""
    G = K.shape[-3]
    return K if G == H else K.repeat_interleave(H // G, dim=-3)


def _fold(dK: torch.Tensor, G: int) -> torch.Tensor:
    """Sum the gradients of the H // G query heads that share each kv head."""
    H = dK.shape[-3]
    if G == H:
        return dK
    return dK.unflatten(-3, (G, H // G)).sum(-3)


def _causal_keep(N: int, M: int, device, rows=None, cols=None) -> torch.Tensor:
    i = torch.arange(N, device=device) if rows is None else rows
    j = torch.arange(M, device=device) if cols is None else cols
    return j[None, :] <= i[:, None] + (M - N)


def attention_forward(Q, K, V, *, causal: bool = False, scale: float | None = None,
                      check: bool = True):
    """Naive softmax attention; returns ``(O, P)`` with the whole N x M matrix ``P``."""
    s = check_qkv(Q, K, V, scale) if check else (scale or 1.0 / math.sqrt(Q.shape[-1]))
    H = Q.shape[-3]
    S = s * Q @ _expand(K, H).transpose(-1, -2)
    if causal:
        S = S.masked_fill(~_causal_keep(Q.shape[-2], K.shape[-2], Q.device), float("-inf"))
    P = torch.softmax(S, dim=-1)
    return P @ _expand(V, H), P


def attention_backward(Q, K, V, O, dO, *, causal: bool = False, scale: float | None = None,
                       P: torch.Tensor | None = None, check: bool = True):
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
    s = check_qkv(Q, K, V, scale) if check else (scale or 1.0 / math.sqrt(Q.shape[-1]))
    if check:
        for name, x in (("O", O), ("dO", dO)):
            check_tensor(name, x, min_dim=3)
            if x.shape != Q.shape:
                raise ValueError(f"{name} must have Q's shape {tuple(Q.shape)}; "
                                 f"got {tuple(x.shape)}")
    H, G = Q.shape[-3], K.shape[-3]
    if P is None:
        _, P = attention_forward(Q, K, V, causal=causal, scale=s, check=False)
    Ke, Ve = _expand(K, H), _expand(V, H)
    dV = P.transpose(-1, -2) @ dO
    dP = dO @ Ve.transpose(-1, -2)
    D = (dO * O).sum(-1, keepdim=True)
    dS = P * (dP - D)
    dQ = s * dS @ Ke
    dK = s * dS.transpose(-1, -2) @ Q
    return dQ, _fold(dK, G), _fold(dV, G)


def tiled_forward(Q, K, V, *, causal: bool = False, scale: float | None = None,
                  block_m: int = 16, block_n: int = 16, check: bool = True, on_tile=None):
    """FlashAttention-2's forward in torch: returns ``(O, L)``, L the row log-sum-exp.

    Each block of ``block_m`` query rows walks the key blocks of ``block_n`` keys with an
    online softmax (running max ``m``, running sum ``l``, unnormalised output); no N x M
    matrix is ever made. ``L = m + log(l)`` is what the backward needs to rebuild ``P``.
    Causal attention skips the key blocks wholly in a query block's future.

    ``on_tile``, when given, is called after each tile as ``on_tile(i0, j0, m, l, acc)``:
    the first query row and first key of the tile, and the running max, running sum and
    unnormalised accumulator of the query block after it (the loop's own tensors; copy
    them to keep them). Lesson 13's tile walk records the loop this way.
    """
    s = check_qkv(Q, K, V, scale) if check else (scale or 1.0 / math.sqrt(Q.shape[-1]))
    if check:
        _check_blocks(block_m, block_n)
    H, N, M = Q.shape[-3], Q.shape[-2], K.shape[-2]
    Ke, Ve = _expand(K, H), _expand(V, H)
    O = torch.empty_like(Q)
    L = Q.new_empty(Q.shape[:-1])
    for i0 in range(0, N, block_m):
        q = Q[..., i0:i0 + block_m, :]
        rows = torch.arange(i0, i0 + q.shape[-2], device=Q.device)
        m = q.new_full((*q.shape[:-1], 1), float("-inf"))
        l = q.new_zeros((*q.shape[:-1], 1))
        acc = torch.zeros_like(q)
        stop = min(M, i0 + q.shape[-2] + (M - N)) if causal else M
        for j0 in range(0, max(stop, 0), block_n):
            k, v = Ke[..., j0:j0 + block_n, :], Ve[..., j0:j0 + block_n, :]
            S = s * q @ k.transpose(-1, -2)
            if causal:
                cols = torch.arange(j0, j0 + k.shape[-2], device=Q.device)
                S = S.masked_fill(~_causal_keep(N, M, Q.device, rows, cols), float("-inf"))
            m_new = torch.maximum(m, S.amax(-1, keepdim=True))
            p = torch.exp(S - m_new)
            alpha = torch.exp(m - m_new)
            l = alpha * l + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ v
            m = m_new
            if on_tile is not None:
                on_tile(i0, j0, m, l, acc)
        O[..., i0:i0 + block_m, :] = acc / l
        L[..., i0:i0 + block_m] = (m + torch.log(l)).squeeze(-1)
    return O, L


def tiled_backward(Q, K, V, O, dO, L, *, causal: bool = False, scale: float | None = None,
                   block_m: int = 16, block_n: int = 16, check: bool = True, on_tile=None):
    """FlashAttention-2's backward in torch: ``(dQ, dK, dV)`` from O, dO and L alone.

    ``D = rowsum(dO * O)`` is computed once; then for each key block, each query block
    rebuilds its tile ``P = exp(s Q K^T - L)`` and adds its share to ``dV``, ``dK`` and ``dQ``.
    The largest temporaries are ``block_m x block_n`` tiles. The loops visit the tiles in
    the order of the dK/dV kernel (key blocks outside, each from the first query block that
    can see it); ``on_tile(i0, j0)``, when given, is called after each tile.
    """
    s = check_qkv(Q, K, V, scale) if check else (scale or 1.0 / math.sqrt(Q.shape[-1]))
    if check:
        _check_blocks(block_m, block_n)
    H, G, N, M = Q.shape[-3], K.shape[-3], Q.shape[-2], K.shape[-2]
    Ke, Ve = _expand(K, H), _expand(V, H)
    D = (dO * O).sum(-1)
    dQ = torch.zeros_like(Q)
    dK = torch.zeros_like(Ke)
    dV = torch.zeros_like(Ve)
    for j0 in range(0, M, block_n):
        k, v = Ke[..., j0:j0 + block_n, :], Ve[..., j0:j0 + block_n, :]
        cols = torch.arange(j0, j0 + k.shape[-2], device=Q.device)
        first = max(0, j0 - (M - N)) // block_m * block_m if causal else 0
        for i0 in range(first, N, block_m):
            q, do = Q[..., i0:i0 + block_m, :], dO[..., i0:i0 + block_m, :]
            S = s * q @ k.transpose(-1, -2)
            if causal:
                rows = torch.arange(i0, i0 + q.shape[-2], device=Q.device)
                S = S.masked_fill(~_causal_keep(N, M, Q.device, rows, cols), float("-inf"))
            P = torch.exp(S - L[..., i0:i0 + block_m, None])
            dV[..., j0:j0 + block_n, :] += P.transpose(-1, -2) @ do
            dP = do @ v.transpose(-1, -2)
            dS = P * (dP - D[..., i0:i0 + block_m, None])
            dQ[..., i0:i0 + block_m, :] += s * dS @ k
            dK[..., j0:j0 + block_n, :] += s * dS.transpose(-1, -2) @ q
            if on_tile is not None:
                on_tile(i0, j0)
    return dQ, _fold(dK, G), _fold(dV, G)


def _check_blocks(block_m: object, block_n: object) -> None:
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"{name} must be a positive int; got {b!r}")


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
        s = check_qkv(Q, K, V, scale)
        _check_blocks(block_m, block_n)
        O, L = tiled_forward(Q, K, V, causal=causal, scale=s, block_m=block_m,
                             block_n=block_n, check=False)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.settings = (causal, s, block_m, block_n)
        return O

    @staticmethod
    def backward(ctx, dO):
        """``dQ, dK, dV`` by ``tiled_backward``, from the saved tensors and ``dO``."""
        Q, K, V, O, L = ctx.saved_tensors
        causal, s, block_m, block_n = ctx.settings
        dQ, dK, dV = tiled_backward(Q, K, V, O, dO.contiguous(), L, causal=causal, scale=s,
                                    block_m=block_m, block_n=block_n, check=False)
        return dQ, dK, dV, None, None, None, None
