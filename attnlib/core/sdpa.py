"""PyTorch's fused attention under attnlib's contract: the speed paths, apart from the mathematics.

:func:`sdpa_attention` computes what :func:`attnlib.core.functional.explicit_attention` writes
out, softmax attention ``Y_h = Z_h^-1 A_h V_g(h)`` for every head, with PyTorch's
``F.scaled_dot_product_attention``; it is ``ATTENTION_FUNCTIONS["auto"]``
(:data:`attnlib.core.functional.ATTENTION_FUNCTIONS`), the attend step of every layer. What it
adds to one call of SDPA:

* attnlib's causal mask is bottom-right aligned (SDPA's ``is_causal`` is top-left), so
  ``is_causal`` is used only where the two agree, and the mask is passed otherwise;
* a query that may see no key gets zeros (SDPA's result there depends on the release);
* ``G`` key/value heads for ``H`` query heads: one new token reads a group's queries as rows
  against its KV head (the layout PyTorch's CPU kernel runs fastest), otherwise SDPA's
  ``enable_gqa`` (PyTorch 2.5 and later) reads the ``G`` heads where they are.

Like ``ATTENTION_FUNCTIONS["explicit"]``, it trusts its caller: the attention layers, and
:func:`attnlib.attention` and :func:`attnlib.layers.gqa.grouped_query_attention`, which check
their arguments.

Lesson: 02_softmax_attention (the fused kernel), 06_gqa (grouped heads).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlib.core.masks import causal_mask

__all__ = ["sdpa_attention"]

# PyTorch 2.5 added enable_gqa to scaled_dot_product_attention: G key/value heads for H
# query heads, read without copying them to H heads.
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)
# One new token reads a group's queries as rows against its KV head, at most this many rows
# per head: PyTorch's CPU kernel spreads so few rows across its threads by the keys.
_ROWS = 16


def sdpa_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention ``Y_h = Z_h^-1 A_h V_g(h)`` by PyTorch's fused kernel.

    Args:
        Q: ``(..., H, N_Q, d)`` queries (or ``(..., N_Q, d)``).
        K: ``(..., G, N_KV, d)`` keys, ``G`` dividing ``H`` (or batch dimensions that
            broadcast against those of ``Q``).
        V: ``(..., G, N_KV, d_v)`` values.
        mask: bool, broadcastable to ``(..., H, N_Q, N_KV)``; True = may attend.
        causal: bottom-right aligned causal mask.
        scale: multiplies the logits; default ``1/sqrt(d)``.

    Returns:
        ``(..., H, N_Q, d_v)``: head ``h`` read KV head ``h // (H // G)``.

    Equivalent to ``F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, scale=scale,
    enable_gqa=True)`` with ``allowed = mask & causal_mask(N_Q, N_KV)``, and zeros where a
    row of ``allowed`` is all False.

    Lesson: 02_softmax_attention, 06_gqa.
    """
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    kw = {"scale": scale}
    if Q.dim() > 2 and K.dim() > 2 and K.shape[-3] != Q.shape[-3]:  # G KV heads for H query heads
        H, G = Q.shape[-3], K.shape[-3]
        if n_q == 1 and (G == 1 or H // G <= _ROWS):  # one new token: a group's queries as rows
            return _decode_as_rows(Q, K, V, mask, scale)
        if _SDPA_GQA:  # the kernel reads the G heads where they are
            kw["enable_gqa"] = True
        else:  # head h reads KV head h // (H / G): a copy per query head
            K, V = K.repeat_interleave(H // G, dim=-3), V.repeat_interleave(H // G, dim=-3)
    if mask is None and (not causal or n_q == 1):  # every key (a last query sees them all)
        return F.scaled_dot_product_attention(Q, K, V, **kw)
    if mask is None and n_q == n_kv:  # SDPA's top-left causal mask is attnlib's here
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True, **kw)
    if mask is None and n_q < n_kv:  # bottom-right causal: every query sees a key
        return F.scaled_dot_product_attention(
            Q, K, V, attn_mask=causal_mask(n_q, n_kv, device=Q.device), **kw)
    if causal:  # the bottom-right causal mask, and the caller's
        below = causal_mask(n_q, n_kv, device=Q.device)  # (N_Q, N_KV)
        mask = below if mask is None else mask & below
    has_key = mask.any(dim=-1, keepdim=True)  # (..., N_Q, 1)
    Y = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask | ~has_key, **kw)
    return Y.masked_fill(~has_key, 0.0)  # a query with no key: zeros, not NaN


def _decode_as_rows(Q, K, V, mask, scale) -> torch.Tensor:
    """One new token: group ``g``'s ``s = H / G`` queries become ``s`` rows against ``K_g``.

    The numbers of the head-by-head form, in the layout PyTorch's kernels run faster: ``c``
    blocks of at most ``_ROWS`` rows (with one KV head, ``c`` views of it: nothing is
    copied). A last query sees every key, so no causal mask is needed.
    """
    H, G = Q.shape[-3], K.shape[-3]
    s = H // G
    c = 1 if s <= _ROWS else next(c for c in range(2, s + 1) if s % c == 0 and s // c <= _ROWS)
    Q_g = Q.unflatten(-3, (G * c, s // c)).flatten(-3, -2)  # (..., G c, s / c, d)
    if mask is not None and mask.dim() >= 3 and mask.shape[-3] == H:
        mask = mask.unflatten(-3, (G * c, s // c)).flatten(-3, -2)  # the same rows
    if c > 1:  # G = 1 here
        K, V = (T.expand(*T.shape[:-3], c, *T.shape[-2:]) for T in (K, V))
    Y = sdpa_attention(Q_g, K, V, mask=mask, scale=scale)  # (..., G c, s / c, d_v)
    return Y.flatten(-3, -2).unsqueeze(-2)  # (..., H, 1, d_v)
