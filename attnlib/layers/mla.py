"""Multi-head latent attention (MLA, DeepSeek-V2): every head reads one shared low-rank latent.

MLA factors the key and value projections through a latent of width ``d_L`` shared by all
``H`` heads, and (optionally) the query projection through a latent of width ``d_LQ``::

    W_K = W_L W_LK,   W_V = W_L W_LV,   W_Q = W_LQ W_LQQ,
    L = X W_L,        L_Q = X W_LQ   (L_Q = X when there is no query latent),
    K_h = L W_LK^h,   V_h = L W_LV^h,   Q_h = L_Q W_LQQ^h,
    Y = concat_col(Z_h^-1 A_h V_h) W_O,   A_h = exp(Q_h K_h^T / sqrt(d_head)).

Here ``W_LK^h`` is column block ``h`` of ``W_LK`` (and likewise for the others). Only ``L``
is cached: ``d_L`` numbers per token and layer instead of ``2 * H * d_head``. Without
positions in the logits and without the latent RMSNorm (``latent_norm=False``) this is
multi-head attention whose ``W_K`` and ``W_V`` have rank at most ``d_L`` (and ``W_Q`` at
most ``d_LQ``). With ``latent_norm=True`` each latent row is divided by its own root mean
square, which no fixed ``W_K`` does.

**Weight absorption.** Matrix products associate, so ``K_h`` and ``V_h`` never need to
exist::

    Q_h K_h^T = (Q_h (W_LK^h)^T) L^T,          the query moved into latent coordinates,
    A_h V_h   = (A_h L) W_LV^h,                the average taken over latent rows.

Read this way, absorbed MLA is multi-query attention whose one key and value head is the
latent ``L``. The merged matrices ``W_LQK^h = W_LQQ^h (W_LK^h)^T`` and
``W_LO = blockdiag(W_LV^1, ..., W_LV^H) W_O`` (:func:`mla_merged_weights`) show the algebra;
the absorbed path multiplies the factors in the absorbed order at run time instead, as
DeepSeek's inference code does (lesson 07 counts both at DeepSeek-V2's sizes).

**Decoupled RoPE.** A rotation between ``W_LQQ^h`` and ``(W_LK^h)^T`` would block the
absorption, so the latent stays unrotated and a part of width ``d_R`` carries the position:
a per-head rotated query ``q_R,h = RoPE(L_Q W_QR^h)`` and ONE rotated key
``k_R = RoPE(X W_KR)`` shared by all heads (cached beside ``L``)::

    logits_h = (Q_h K_h^T + q_R,h k_R^T) / sqrt(d_head + d_R).

With ``latent_norm=True`` both latents pass through an RMSNorm (``eps = 1e-6``, learnable
gains ``g_L`` and ``g_LQ``) as in DeepSeek-V2; the rotary key part is not normalised.

Lesson: 07_mla (decoupled RoPE: 08_rope).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from attnlib._checks import (
    check_attention_options,
    check_bool,
    check_divisible,
    check_even,
    check_last_dim,
    check_matrix,
    check_nonnegative_int,
    check_optional_positive_int,
    check_positive_float,
    check_positive_int,
    check_qkv,
    check_tensor,
)
from attnlib._params import init_weight
from attnlib.core.functional import ATTENTION_FUNCTIONS
from attnlib.core.heads import kv_head_index, merge_heads, split_heads
from attnlib.core.rope import RopeScaling, RopeTables, YarnScaling, check_rope_scaling
from attnlib.layers.base import AttentionLayer
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.norms import rms_norm
from attnlib.layers.variants import register_attention
from attnlib.serving.cache import LatentCache, StaticLatentCache

__all__ = [
    "MultiHeadLatentAttention",
    "mla_absorbed",
    "mla_from_mha",
    "mla_merged_weights",
    "mla_naive",
]


def mla_naive(
    L_Q: torch.Tensor,
    L: torch.Tensor,
    W_LQQ: torch.Tensor,
    W_LK: torch.Tensor,
    W_LV: torch.Tensor,
    W_O: torch.Tensor,
    n_heads: int,
    *,
    q_R: torch.Tensor | None = None,
    k_R: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """MLA read off the latents: ``Y = concat_col(Z_h^-1 A_h V_h) W_O`` with ``K_h = L W_LK^h``.

    Each head's keys and values are built from the shared latent
    (``K_h = L W_LK^h``, ``V_h = L W_LV^h``, ``Q_h = L_Q W_LQQ^h``) and ordinary softmax
    attention runs per head. With decoupled RoPE the rotated parts are appended:
    ``[Q_h | q_R,h]`` against ``[K_h | k_R]``, the same ``k_R`` for every head.

    Args:
        L_Q: ``(..., N_Q, d_LQ)`` query latent (``X`` itself, width ``d_in``, when there is
            no query latent).
        L: ``(..., N_KV, d_L)`` key/value latent ``X W_L`` (normalised if the model does so).
        W_LQQ: ``(d_LQ, H * d_head)``.
        W_LK: ``(d_L, H * d_head)``.
        W_LV: ``(d_L, H * d_v)``.
        W_O: ``(H * d_v, d_out)``.
        n_heads: ``H``.
        q_R: ``(..., H, N_Q, d_R)`` rotated query parts, or None without decoupled RoPE.
        k_R: ``(..., N_KV, d_R)`` the rotated key part shared by every head, or None.
        mask: bool, broadcastable to ``(..., H, N_Q, N_KV)``; True = may attend.
        causal: bottom-right aligned causal mask.
        scale: multiplies the logits; default ``1/sqrt(d_head + d_R)``.
        impl: ``"auto"`` (fused SDPA) or ``"explicit"``, see
            :func:`attnlib.core.functional.attention`.

    Returns:
        ``(..., N_Q, d_out)``.

    Equivalent to multi-head attention with ``W_Q = W_LQ W_LQQ``, ``W_K = W_L W_LK`` and
    ``W_V = W_L W_LV`` when there is no RoPE part.

    Lesson: 07_mla (decoupled RoPE: 08_rope).
    """
    _check_latents(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R, k_R, mask, causal, scale, impl)
    Q = split_heads(L_Q @ W_LQQ, n_heads)  # (..., H, N_Q, d_head)  Q_h = L_Q W_LQQ^h
    Q, K, V = naive_heads(Q, q_R, L, k_R, W_LK, W_LV)
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale  # 1/sqrt(d_head + d_R)
    Y = ATTENTION_FUNCTIONS[impl](Q, K, V, mask=mask, causal=causal, scale=scale)
    return merge_heads(Y) @ W_O  # (..., N_Q, H d_v) @ (H d_v, d_out)


def naive_heads(Q: torch.Tensor, q_R: torch.Tensor | None, L: torch.Tensor,
                k_R: torch.Tensor | None, W_LK: torch.Tensor, W_LV: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every head's query, key and value: ``[Q_h | q_R,h]``, ``[L W_LK^h | k_R]``, ``L W_LV^h``.

    The step :func:`mla_naive` and :meth:`MultiHeadLatentAttention.heads` share (their
    arguments checked): ``H = Q.shape[-3]`` heads, ``(..., H, N, d_head + d_R)`` queries and
    keys and ``(..., H, N_KV, d_v)`` values, as multi-head attention takes them.

    Lesson: 07_mla.
    """
    H = Q.shape[-3]
    K = split_heads(L @ W_LK, H)  # (..., H, N_KV, d_head)     K_h = L W_LK^h
    V = split_heads(L @ W_LV, H)  # (..., H, N_KV, d_v)        V_h = L W_LV^h
    if q_R is not None:  # [Q_h | q_R,h] . [K_h | k_R]: one rotated key for every head
        Q = torch.cat((Q, q_R), dim=-1)  # (..., H, N_Q, d_head + d_R)
        K = torch.cat((K, k_R.unsqueeze(-3).expand(*K.shape[:-1], k_R.shape[-1])), dim=-1)
    return Q, K, V


def mla_absorbed(
    L_Q: torch.Tensor,
    L: torch.Tensor,
    W_LQQ: torch.Tensor,
    W_LK: torch.Tensor,
    W_LV: torch.Tensor,
    W_O: torch.Tensor,
    n_heads: int,
    *,
    q_R: torch.Tensor | None = None,
    k_R: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Absorbed MLA: ``Y_h = Z_h^-1 A_h L W_LV^h`` with ``A_h = exp(scale Q_h (W_LK^h)^T L^T)``.

    The same arguments and result as :func:`mla_naive`; only the order of the products
    differs. Head ``h`` turns its query into latent coordinates (``Q_h (W_LK^h)^T``,
    width ``d_L``), scores it against the rows of ``L`` and averages the rows of ``L``;
    ``W_LV^h`` and ``W_O`` then map the averaged latent to the output. All heads share
    one key/value "head", ``L`` (plus ``k_R`` in the logits), so this is multi-query
    attention over the latent. No per-head key or value exists at any point, and no
    merged weight is formed.

    Args:
        L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R, k_R, mask, causal, scale, impl:
            as in :func:`mla_naive`.

    Returns:
        ``(..., N_Q, d_out)``, equal to :func:`mla_naive` up to rounding.

    Example:
        >>> H, d_LQ, d_L, d_head = 2, 6, 4, 3
        >>> L_Q, L = torch.randn(5, d_LQ), torch.randn(5, d_L)
        >>> W = [torch.randn(d_LQ, H * d_head), torch.randn(d_L, H * d_head),
        ...      torch.randn(d_L, H * d_head), torch.randn(H * d_head, 7)]
        >>> torch.allclose(mla_absorbed(L_Q, L, *W, H, causal=True),
        ...                mla_naive(L_Q, L, *W, H, causal=True), atol=1e-4)
        True

    Lesson: 07_mla (decoupled RoPE: 08_rope).
    """
    _check_latents(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R, k_R, mask, causal, scale, impl)
    Q = split_heads(L_Q @ W_LQQ, n_heads)  # (..., H, N_Q, d_head)  Q_h = L_Q W_LQQ^h
    d_rope = 0 if q_R is None else q_R.shape[-1]
    scale = 1.0 / math.sqrt(Q.shape[-1] + d_rope) if scale is None else scale
    Q_L, K_L, L = absorbed_heads(Q, q_R, L, k_R, W_LK)
    Y_L = ATTENTION_FUNCTIONS[impl](Q_L, K_L, L, mask=mask, causal=causal, scale=scale)
    return merge_heads(absorbed_values(Y_L, W_LV)) @ W_O  # (..., N_Q, H d_v) @ (H d_v, d_out)


def absorbed_heads(Q: torch.Tensor, q_R: torch.Tensor | None, L: torch.Tensor,
                   k_R: torch.Tensor | None, W_LK: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The queries moved into latent coordinates, against ONE key and value head, the latent.

    ``[Q_h (W_LK^h)^T | q_R,h]`` ``(..., H, N_Q, d_L + d_R)``, ``[L | k_R]``
    ``(..., 1, N_KV, d_L + d_R)`` and ``L`` ``(..., 1, N_KV, d_L)``: multi-query attention,
    whose output ``Z_h^-1 A_h L`` :func:`absorbed_values` maps to the heads' values. The step
    :func:`mla_absorbed` and :meth:`MultiHeadLatentAttention.heads` share (their arguments
    checked).

    Lesson: 07_mla.
    """
    H, d_head = Q.shape[-3], Q.shape[-1]
    W_LK_T = W_LK.unflatten(1, (H, d_head)).permute(1, 2, 0)  # (H, d_head, d_L): (W_LK^h)^T
    Q_L = Q @ W_LK_T  # (..., H, N_Q, d_L)  Q_h (W_LK^h)^T
    K_L = L
    if q_R is not None:
        Q_L = torch.cat((Q_L, q_R), dim=-1)  # (..., H, N_Q, d_L + d_R)
        K_L = torch.cat((L, k_R), dim=-1)  # (..., N_KV, d_L + d_R)
    return Q_L, K_L.unsqueeze(-3), L.unsqueeze(-3)  # one KV head: the latent


def absorbed_values(Y_L: torch.Tensor, W_LV: torch.Tensor) -> torch.Tensor:
    """``(Z_h^-1 A_h L) W_LV^h``: the heads' averaged latents ``(..., H, N_Q, d_L)`` mapped
    to their values ``(..., H, N_Q, d_v)``.

    Lesson: 07_mla.
    """
    H = Y_L.shape[-3]
    W_LV_h = W_LV.unflatten(1, (H, -1)).transpose(0, 1)  # (H, d_L, d_v): W_LV^h
    return Y_L @ W_LV_h  # (..., H, N_Q, d_v)


def mla_merged_weights(
    W_LQQ: torch.Tensor,
    W_LK: torch.Tensor,
    W_LV: torch.Tensor,
    W_O: torch.Tensor,
    n_heads: int,
) -> dict[str, torch.Tensor]:
    """Merged weights ``W_LQK^h = W_LQQ^h (W_LK^h)^T`` and ``W_LO = blockdiag(W_LV^h) W_O``.

    With them ``Q_h K_h^T = L_Q W_LQK^h L^T`` and
    ``concat_col(Z_h^-1 A_h L) W_LO = concat_col(Z_h^-1 A_h V_h) W_O``. Row block ``h``
    (``d_L`` rows) of ``W_LO`` is ``W_LV^h W_O^h``, where ``W_O^h`` is row block ``h``
    (``d_v`` rows) of ``W_O``; that is how it is computed here, without building the
    ``(H d_L, H d_v)`` block-diagonal matrix. attnlib's absorbed path does not use these
    matrices; they are here to show the algebra.

    Args:
        W_LQQ: ``(d_LQ, H * d_head)``.
        W_LK: ``(d_L, H * d_head)``.
        W_LV: ``(d_L, H * d_v)``.
        W_O: ``(H * d_v, d_out)``.
        n_heads: ``H``.

    Returns:
        ``{"W_LQK": (H, d_LQ, d_L), "W_LO": (H * d_L, d_out)}``.

    Equivalent to ``torch.block_diag(*W_LV.split(d_v, dim=1)) @ W_O`` for ``W_LO``.

    Lesson: 07_mla.
    """
    _check_factors(W_LQQ, W_LK, W_LV, W_O, n_heads)
    H, d_q, d_latent, d_out = n_heads, W_LQQ.shape[0], W_LK.shape[0], W_O.shape[1]
    d_head, d_v = W_LK.shape[1] // H, W_LV.shape[1] // H
    W_LQQ_h = W_LQQ.reshape(d_q, H, d_head)  # [:, h] is column block W_LQQ^h
    W_LK_h = W_LK.reshape(d_latent, H, d_head)  # [:, h] is W_LK^h
    W_LQK = torch.einsum("qhd,lhd->hql", W_LQQ_h, W_LK_h)  # (H, d_LQ, d_L)
    W_LV_h = W_LV.reshape(d_latent, H, d_v)  # [:, h] is W_LV^h
    W_O_h = W_O.reshape(H, d_v, d_out)  # [h] is row block W_O^h
    W_LO = torch.einsum("lhv,hvo->hlo", W_LV_h, W_O_h).reshape(H * d_latent, d_out)
    return {"W_LQK": W_LQK, "W_LO": W_LO}


class MultiHeadLatentAttention(AttentionLayer):
    """Multi-head latent attention: ``K_h = L W_LK^h``, ``V_h = L W_LV^h``, cached ``L = X W_L``.

    Parameters (multiplying from the right; ``d_Q = d_LQ`` with a query latent, else
    ``d_in``):

    - ``W_L (d_in, d_L)``, ``W_LK (d_L, H*d_head)``, ``W_LV (d_L, H*d_v)``;
    - ``W_LQ (d_in, d_LQ)`` only when ``d_latent_q`` is set; ``W_LQQ (d_Q, H*d_head)``;
    - ``W_O (H*d_v, d_out)``;
    - with ``d_rope > 0``: ``W_QR (d_Q, H*d_R)`` and ``W_KR (d_in, d_R)``;
    - with ``latent_norm=True``: RMSNorm gains ``g_L (d_L,)`` and, with a query latent,
      ``g_LQ (d_LQ,)``.

    Head ``h``'s logits are ``(Q_h K_h^T + RoPE(q_R,h) RoPE(k_R)^T) / sqrt(d_head + d_R)``
    with a single rotated key ``k_R = RoPE(X W_KR)`` shared by all heads.

    A :class:`attnlib.LatentCache` holds ``L`` (after the RMSNorm when ``latent_norm`` is
    on: the normalisation acts per token, so each row is normalised once, when it is
    made) and ``k_R`` (after rotation): ``(d_L + d_R)`` numbers per token, the count of
    :func:`attnlib.analysis.memory.mla_cache_bytes`.

    DeepSeek-V2 names (transposed: it multiplies from the left): ``W_L = W^DKV``,
    ``W_LK = W^UK``, ``W_LV = W^UV``, ``W_LQ = W^DQ``, ``W_LQQ = W^UQ``, ``W_QR = W^QR``,
    ``W_KR = W^KR`` (``book/notation.md`` maps them, and Hugging Face's).

    Args:
        d_in: input width.
        n_heads: ``H``.
        d_head: per-head width of the unrotated query/key part.
        d_latent: ``d_L``, width of the cached key/value latent.
        d_latent_q: ``d_LQ``, width of the query latent; ``None`` means no query latent
            (queries read ``X`` directly, as in DeepSeek-V2-Lite).
        d_rope: ``d_R``, width of the decoupled RoPE part (even; 0 for none).
        d_v: per-head value width; ``None`` means ``d_head``.
        d_out: output width; ``None`` means ``d_in``.
        latent_norm: RMSNorm (``eps = 1e-6``, learnable gains) on ``L`` and ``L_Q``.
        rope_base: RoPE base for the decoupled part; unused (and may be None) when
            ``d_rope = 0``.
        rope_interleaved: RoPE pairing, see :mod:`attnlib.core.rope`.
        rope_scaling: a frequency scaling of the decoupled RoPE
            (:class:`attnlib.core.rope.YarnScaling` for DeepSeek-V2 and V3, which also
            multiplies the softmax scale by its ``softmax_factor``), or None.
        device: where the parameters live.
        dtype: their dtype.

    Example:
        >>> mla = MultiHeadLatentAttention(d_in=32, n_heads=4, d_head=8, d_latent=6, d_rope=4)
        >>> X = torch.randn(2, 5, 32)
        >>> mla(X, causal=True).shape
        torch.Size([2, 5, 32])
        >>> torch.allclose(mla(X, causal=True), mla(X, causal=True, absorbed=True), atol=1e-5)
        True

    Its ``forward`` is :meth:`AttentionLayer.forward
    <attnlib.layers.base.AttentionLayer.forward>` (self-attention only, ``X_KV=None``),
    with one option of its heads step: ``absorbed=True`` runs :func:`mla_absorbed`'s order
    (per-head ``K_h`` and ``V_h`` are never formed) instead of :func:`mla_naive`'s; the two
    agree up to rounding. Either way the attend step is the layer's (or the reader's
    function, :meth:`~attnlib.layers.base.AttentionLayer.use`), called with ``scale=``
    :attr:`scale`. ``impl`` is ``"auto"`` or ``"explicit"``, as for
    :func:`attnlib.core.functional.attention`.

    Lesson: 07_mla (decoupled RoPE: 08_rope).
    """

    cache_type = LatentCache

    def __init__(
        self,
        d_in: int,
        n_heads: int,
        d_head: int,
        d_latent: int,
        *,
        d_latent_q: int | None = None,
        d_rope: int = 0,
        d_v: int | None = None,
        d_out: int | None = None,
        latent_norm: bool = False,
        rope_base: float | None = 10000.0,
        rope_interleaved: bool = False,
        rope_scaling: RopeScaling | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_config(d_in, n_heads, d_head, d_latent, d_latent_q, d_rope, d_v, d_out,
                      latent_norm, rope_base, rope_interleaved, rope_scaling)
        self.d_in, self.n_heads, self.d_head, self.d_latent = d_in, n_heads, d_head, d_latent
        self.d_latent_q, self.d_rope = d_latent_q, d_rope
        self.d_v = d_head if d_v is None else d_v
        self.d_out = d_in if d_out is None else d_out
        self.latent_norm, self.rope_base, self.rope_interleaved = (
            latent_norm, rope_base, rope_interleaved
        )
        self.rope_scaling = rope_scaling
        self.rope_dim = d_rope  # only the decoupled part turns
        kw = {"device": device, "dtype": dtype}
        H, d_q = n_heads, d_in if d_latent_q is None else d_latent_q
        self.W_L = init_weight(d_in, d_latent, **kw)
        self.W_LK = init_weight(d_latent, H * d_head, **kw)
        self.W_LV = init_weight(d_latent, H * self.d_v, **kw)
        self.W_LQ = None if d_latent_q is None else init_weight(d_in, d_latent_q, **kw)
        self.W_LQQ = init_weight(d_q, H * d_head, **kw)
        self.W_O = init_weight(H * self.d_v, self.d_out, **kw)
        self.W_QR = init_weight(d_q, H * d_rope, **kw) if d_rope else None
        self.W_KR = init_weight(d_in, d_rope, **kw) if d_rope else None
        # RMSNorm gains start at 1, as in nn.RMSNorm; g_LQ exists only with a query latent.
        ones = lambda d: nn.Parameter(torch.ones(d, **kw))  # noqa: E731
        self.g_L = ones(d_latent) if latent_norm else None
        self.g_LQ = ones(d_latent_q) if latent_norm and d_latent_q is not None else None

    @property
    def scale(self) -> float:
        """The logit scale ``1/sqrt(d_head + d_R)``, times DeepSeek's ``softmax_factor`` of a
        :class:`~attnlib.core.rope.YarnScaling` (``mscale(factor, mscale_all_dim)^2``)."""
        yarn = isinstance(self.rope_scaling, YarnScaling)
        return (self.rope_scaling.softmax_factor if yarn else 1.0) / math.sqrt(
            self.d_head + self.d_rope)

    def merged_weights(self) -> dict[str, torch.Tensor]:
        """The paper's absorbed weights ``{"W_LQK": (H, d_Q, d_L), "W_LO": (H*d_L, d_out)}``.

        Computed from the current parameters on each call (``d_Q = d_LQ``, or ``d_in``
        without a query latent); see :func:`mla_merged_weights`. ``forward(absorbed=True)``
        does not use them: it applies the factors in the absorbed order instead.
        """
        return mla_merged_weights(self.W_LQQ, self.W_LK, self.W_LV, self.W_O, self.n_heads)

    # --- the steps of AttentionLayer.forward ---------------------------------------------

    def project(self, X: torch.Tensor, X_KV: torch.Tensor | None = None) -> tuple:
        """``Q_h = L_Q W_LQQ^h`` (with ``q_R,h = L_Q W_QR^h``) and the latent ``L = X W_L``
        (with ``k_R = X W_KR``): ``((Q, q_R), (L, k_R))``, the rotary parts None when
        ``d_rope = 0``. Self-attention only (``X_KV`` must be None)."""
        L = X @ self.W_L  # (..., N, d_L)  the latent: with k_R, all that is cached
        L_Q = X if self.W_LQ is None else X @ self.W_LQ  # (..., N, d_Q)
        if self.latent_norm:
            L = rms_norm(L, self.g_L, 1e-6)
            L_Q = L_Q if self.g_LQ is None else rms_norm(L_Q, self.g_LQ, 1e-6)
        Q = split_heads(L_Q @ self.W_LQQ, self.n_heads)  # (..., H, N, d_head)
        if not self.d_rope:
            return (Q, None), (L, None)
        q_R = split_heads(L_Q @ self.W_QR, self.n_heads)  # (..., H, N, d_R)
        k_R = X @ self.W_KR  # (..., N, d_R): one rotary key for every head
        return (Q, q_R), (L, k_R)

    def rotate(self, Q: tuple, kv: tuple, rope: RopeTables) -> tuple:
        """Rotate the decoupled parts ``q_R`` and ``k_R``; the latent is never rotated."""
        (Q, q_R), (L, k_R) = Q, kv
        # k_R has no head axis; a singleton one lines it up with positions of shape (B, 1, N).
        q_R, k_R = self.rope(rope, q_R, k_R.unsqueeze(-3))  # (..., H, N, d_R), (..., 1, N, d_R)
        return (Q, q_R), (L, k_R.squeeze(-3))

    def heads(self, Q: tuple, L: torch.Tensor, k_R: torch.Tensor | None = None, *,
              absorbed: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the heads attend with, over the held latents.

        ``absorbed=False``: ``K_h = L W_LK^h`` and ``V_h = L W_LV^h``, one key and value head
        per query head (:func:`naive_heads`). ``absorbed=True``: each query moved into
        latent coordinates, against one key and value head, the latent itself
        (:func:`absorbed_heads`); no per-head key or value is formed.
        """
        Q, q_R = Q
        if absorbed:
            return absorbed_heads(Q, q_R, L, k_R, self.W_LK)
        return naive_heads(Q, q_R, L, k_R, self.W_LK, self.W_LV)

    def combine(self, Y: torch.Tensor, X: torch.Tensor, *, absorbed: bool = False
                ) -> torch.Tensor:
        """``concat_col(Y_1 .. Y_H) W_O``; on the absorbed path each head's averaged latent is
        first mapped to its values, ``Y_h W_LV^h`` (:func:`absorbed_values`)."""
        if absorbed:
            Y = absorbed_values(Y, self.W_LV)  # (..., H, N_Q, d_v)
        return merge_heads(Y) @ self.W_O  # (..., N_Q, H d_v) @ (H d_v, d_out)

    def new_cache(self, max_tokens: int | None = None) -> LatentCache:
        """An empty cache for this layer: a :class:`~attnlib.serving.cache.LatentCache`, or with
        ``max_tokens`` a :class:`~attnlib.serving.cache.StaticLatentCache` (no copies as it
        grows)."""
        return LatentCache() if max_tokens is None else StaticLatentCache(max_tokens)

    def check(self, X: object, X_KV: object = None, *, absorbed: object = False,
              **kw: object) -> None:
        """The arguments of :meth:`forward` (self-attention only)."""
        if X_KV is not None:
            raise ValueError("X_KV must be None: MultiHeadLatentAttention is self-attention "
                             f"only; got a tensor of shape {tuple(getattr(X_KV, 'shape', ()))}")
        super().check(X, absorbed=absorbed, **kw)

    def extra_repr(self) -> str:
        parts = [
            f"d_in={self.d_in}, n_heads={self.n_heads}, d_head={self.d_head}",
            f"d_latent={self.d_latent}",
        ]
        if self.d_latent_q is not None:
            parts.append(f"d_latent_q={self.d_latent_q}")
        if self.d_rope:
            parts.append(f"d_rope={self.d_rope}, rope_base={self.rope_base:g}")
        parts.append(f"d_v={self.d_v}, d_out={self.d_out}")
        if self.latent_norm:
            parts.append("latent_norm=True")
        if self.rope_scaling is not None:
            parts.append(f"rope_scaling={self.rope_scaling}")
        return ", ".join(parts)


@register_attention("mla")
def _mla_sublayer(
    d_model: int,
    n_heads: int,
    d_head: int,
    *,
    d_latent: int | None = None,
    d_latent_q: int | None = None,
    d_rope: int = 0,
    rope_base: float | None = None,
    n_kv_heads: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> MultiHeadLatentAttention:
    """A block's ``attention="mla"``: ``d_latent`` is required; ``rope_base=None`` means 10,000."""
    if n_kv_heads is not None:
        raise ValueError(
            "n_kv_heads applies to attention='gqa' only (MLA caches a latent, "
            f"not KV heads); got {n_kv_heads!r}"
        )
    if d_latent is None:
        raise ValueError("d_latent must be set when attention='mla'; got None")
    return MultiHeadLatentAttention(
        d_model, n_heads, d_head, d_latent, d_latent_q=d_latent_q, d_rope=d_rope,
        rope_base=10000.0 if rope_base is None else rope_base, device=device, dtype=dtype,
    )


def mla_from_mha(
    attn: GroupedQueryAttention,
    d_latent: int,
    *,
    svd: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    | None = None,
) -> MultiHeadLatentAttention:
    """Convert MHA/GQA to MLA by a truncated SVD: ``[W_K | W_V] ~ U_r S_r V_r^T``, ``r = d_latent``.

    The joint key/value projection ``W_KV = [W_K | W_V]`` (``d_in x 2 G d_head``) is cut
    to rank ``r``; the balanced factors

        W_L = U_r S_r^{1/2}   (d_in x r),   [W_LK_G | W_LV_G] = S_r^{1/2} V_r^T,

    give every KV head's keys and values as linear reads of the one latent
    ``L = X W_L``. The ``G`` KV heads are then expanded to ``H``: query head ``h`` gets
    the columns of KV head ``h // (H // G)``. ``W_LQQ = W_Q`` and ``W_O = W_O`` are copied,
    with no query latent and ``d_rope = 0``.

    By Eckart-Young, ``||W_KV - W_L [W_LK_G | W_LV_G]||_F^2 = sum_{i > r} s_i^2``, the
    smallest possible at rank ``r``, and it shrinks as ``r`` grows (as does the error of
    ``[K | V]`` on any fixed input). ``[W_K | W_V]`` has rank at most
    ``r_max = min(d_in, 2 G d_head)``, so at ``d_latent = r_max`` the factorisation, and
    the returned module's output, are exact up to rounding; a larger latent would only
    store zeros, which is why ``d_latent`` must lie in ``[1, r_max]``. The attention
    output is not linear in ``W_KV``, so its error usually, but not provably, falls as
    ``r`` grows. The cache holds ``d_latent`` numbers per token against ``2 G d_head``
    for the source: only a truncated conversion saves memory.

    RoPE is not supported: a source with ``rope_base`` set rotates ``K_h`` after
    projection, so the logits are ``X W_Q^h R_i^T R_j (W_K^h)^T X^T`` and no fixed
    latent factorisation reproduces them. Making such a model MLA needs decoupled RoPE
    (``d_rope > 0``) and retraining, or an approximate conversion such as TransMLA's.

    Args:
        attn: the source; a :class:`attnlib.GroupedQueryAttention` (MHA and MQA included)
            without RoPE.
        d_latent: ``r``, the latent width: an int in ``[1, min(d_in, 2 G d_head)]``.
        svd: how to compute the rank-``r`` factors, ``svd(W_KV, r) -> (U_r, S_r, Vh_r)``;
            default the exact truncated SVD (``torch.linalg.svd``). Chapter 10 passes a
            randomised one (:func:`attnlib.analysis.randomised.randomised_mla_from_mha`).

    Returns:
        A :class:`MultiHeadLatentAttention` on the same device and dtype (the SVD itself
        runs in float64, or float32 on MPS, which has no float64).

    Example:
        >>> gqa = GroupedQueryAttention(d_in=16, n_heads=4, n_kv_heads=2, d_head=2)
        >>> mla = mla_from_mha(gqa, d_latent=8)  # full rank: 2 * G * d_head = 8
        >>> X = torch.randn(3, 5, 16)
        >>> torch.allclose(mla(X, causal=True), gqa(X, causal=True), atol=1e-5)
        True

    Lesson: 07_mla (why RoPE blocks it: 08_rope).
    """
    _check_conversion(attn, d_latent, svd)
    H, G, d_head, d_in = attn.n_heads, attn.n_kv_heads, attn.d_head, attn.d_in
    W_ref = attn.W_K
    work = torch.float32 if W_ref.device.type == "mps" else torch.float64
    with torch.no_grad():
        W_KV = torch.cat((attn.W_K, attn.W_V), dim=1).to(work)  # (d_in, 2 G d_head)
        U, S, Vh = (svd or _truncated_svd)(W_KV, d_latent)  # (d_in, r), (r,), (r, 2 G d_head)
        root = S.sqrt()
        W_L = U * root  # (d_in, r) = U_r S_r^{1/2}
        W_LKV = root[:, None] * Vh  # (r, 2 G d_head) = S_r^{1/2} V_r^T
        group = kv_head_index(H, G, device=W_ref.device)  # head h reads h // s
        W_LK, W_LV = (
            W.reshape(d_latent, G, d_head)[:, group].reshape(d_latent, H * d_head)
            for W in W_LKV.split(G * d_head, dim=1)
        )
        mla = MultiHeadLatentAttention(
            d_in, H, d_head, d_latent, d_out=attn.d_out, device=W_ref.device, dtype=W_ref.dtype
        )
        for name, W in (("W_L", W_L), ("W_LK", W_LK), ("W_LV", W_LV)):
            getattr(mla, name).copy_(W)
        mla.W_LQQ.copy_(attn.W_Q)
        mla.W_O.copy_(attn.W_O)
    return mla


def _truncated_svd(W: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact rank-``r`` SVD ``(U_r, S_r, Vh_r)`` of ``W``."""
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    return U[:, :r], S[:r], Vh[:r]


def _check_conversion(attn: object, d_latent: object, svd: object = None) -> None:
    if svd is not None and not callable(svd):
        raise TypeError(
            f"svd must be a callable (W_KV, r) -> (U_r, S_r, Vh_r); got {type(svd).__name__}"
        )
    if not isinstance(attn, GroupedQueryAttention):
        raise TypeError(
            f"attn must be an attnlib.GroupedQueryAttention (or MHA/MQA); got {type(attn).__name__}"
        )
    if attn.rope_base is not None:
        raise ValueError(
            "attn.rope_base must be None: RoPE rotates each key after W_K, so [W_K | W_V] "
            "has no exact latent factorisation; decoupled RoPE (d_rope > 0) needs retraining. "
            f"Got attn.rope_base={attn.rope_base!r}"
        )
    check_positive_int("d_latent", d_latent)
    r_max = min(attn.d_in, 2 * attn.n_kv_heads * attn.d_head)
    if d_latent > r_max:
        raise ValueError(
            f"d_latent must be at most min(d_in, 2 * G * d_head) = "
            f"min({attn.d_in}, {2 * attn.n_kv_heads * attn.d_head}) = {r_max}, the largest rank "
            f"[W_K | W_V] can have; got {d_latent}"
        )


# --- checks ------------------------------------------------------------------------------


def _check_factors(W_LQQ, W_LK, W_LV, W_O, n_heads, d_q=None, d_latent=None) -> None:
    """The four factors fit together (and fit ``L_Q``, ``L`` when their widths are given)."""
    check_positive_int("n_heads", n_heads)
    check_matrix("W_LQQ", W_LQQ, d_q)
    check_matrix("W_LK", W_LK, d_latent)
    check_matrix("W_LV", W_LV, W_LK.shape[0])
    if W_LQQ.shape[1] != W_LK.shape[1]:
        raise ValueError(
            "W_LQQ and W_LK must have the same number of columns H * d_head (queries and "
            f"keys meet in dot products); got W_LQQ {tuple(W_LQQ.shape)}, W_LK {tuple(W_LK.shape)}"
        )
    check_divisible("W_LK.shape[1]", W_LK.shape[1], "n_heads", n_heads)
    check_divisible("W_LV.shape[1]", W_LV.shape[1], "n_heads", n_heads)
    check_matrix("W_O", W_O, W_LV.shape[1])


def _check_latents(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R, k_R, mask, causal, scale,
                   impl) -> None:
    check_tensor("L_Q", L_Q, min_dim=2)
    check_tensor("L", L, min_dim=2)
    _check_factors(W_LQQ, W_LK, W_LV, W_O, n_heads, L_Q.shape[-1], L.shape[-1])
    if (q_R is None) != (k_R is None):
        raise ValueError(
            "q_R and k_R must be given together (decoupled RoPE on) or both be None; "
            f"got q_R: {q_R is not None}, k_R: {k_R is not None}"
        )
    if q_R is not None:
        check_tensor("q_R", q_R, min_dim=3)
        check_tensor("k_R", k_R, min_dim=2)
        if q_R.shape[-3:-1] != (n_heads, L_Q.shape[-2]):
            raise ValueError(
                f"q_R must have shape (..., H, N_Q, d_R) with H = {n_heads} heads and "
                f"N_Q = {L_Q.shape[-2]} queries; got shape {tuple(q_R.shape)}"
            )
        if k_R.shape[-2] != L.shape[-2]:
            raise ValueError(
                f"k_R must have one row per key (N_KV = {L.shape[-2]}, the rows of L); "
                f"got shape {tuple(k_R.shape)}"
            )
        check_last_dim("k_R", k_R, q_R.shape[-1], "the rotary width d_R of q_R")
    # Zero-width per-head stand-ins (views) for the attention's queries and keys: the
    # attention check needs their batch shapes, dtypes and devices only.
    def heads(T: torch.Tensor) -> torch.Tensor:
        return T[..., :0].unsqueeze(-3).expand(*T.shape[:-2], n_heads, T.shape[-2], 0)

    logits = (*check_qkv(heads(L_Q), heads(L)), L_Q.shape[-2], L.shape[-2])
    check_attention_options(mask, causal, scale, impl, logits=logits, device=L.device)


def _check_config(d_in, n_heads, d_head, d_latent, d_latent_q, d_rope, d_v, d_out, latent_norm,
                  rope_base, rope_interleaved, rope_scaling) -> None:
    for name, value in (("d_in", d_in), ("n_heads", n_heads), ("d_head", d_head),
                        ("d_latent", d_latent)):
        check_positive_int(name, value)
    for name, value in (("d_latent_q", d_latent_q), ("d_v", d_v), ("d_out", d_out)):
        check_optional_positive_int(name, value)
    check_nonnegative_int("d_rope", d_rope)
    check_even("d_rope", d_rope, "RoPE rotates coordinates in pairs")
    check_bool("latent_norm", latent_norm)
    check_bool("rope_interleaved", rope_interleaved)
    if rope_base is not None or d_rope > 0:
        check_positive_float("rope_base", rope_base)
    check_rope_scaling(rope_scaling, rope_base)
