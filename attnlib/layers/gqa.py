"""Grouped-query attention: ``H`` query heads share ``G`` key/value heads.

One code path covers the three classic layouts: multi-head attention is ``G = H``,
multi-query attention is ``G = 1``, and grouped-query attention anything in between
(``G`` must divide ``H``). Query head ``h`` reads KV head ``h // (H // G)``.

Per head ``h``, with ``g = h // (H // G)``::

    Q_h = X_Q W_Q^h,  K_g = X_KV W_K^g,  V_g = X_KV W_V^g,
    Y_h = Z_h^-1 A_h V_g,  A_h = exp(Q_h K_g^T / sqrt(d_head)),
    Y   = concat_col(Y_1 .. Y_H) W_O.

Only ``K`` and ``V`` are cached, so the cache holds ``2 * G * d_head`` numbers per token
and layer instead of ``2 * H * d_head``: sharing the keys and values is what saves memory.
Queries are never shared.

:func:`gqa_from_mha` mean-pools the KV heads of a group, the initialisation of Ainslie et
al. (2023) for turning an MHA checkpoint into GQA;
:func:`attnlib.models.convert.from_hf_llama_attention`
loads the weights of a Hugging Face ``LlamaAttention``.
"""

from __future__ import annotations

import torch

from attnlib._checks import (
    check_attention_options,
    check_bool,
    check_divisible,
    check_positive_float,
    check_positive_int,
    check_qkv,
    check_tensor,
)
from attnlib._params import init_weight
from attnlib.core.functional import ATTENTION_FUNCTIONS
from attnlib.core.heads import merge_heads, split_heads
from attnlib.core.rope import RopeScaling, RopeTables, check_rope_scaling
from attnlib.layers.base import AttentionLayer
from attnlib.layers.variants import register_attention
from attnlib.serving.cache import KVCache, StaticKVCache

__all__ = [
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "gqa_from_mha",
    "grouped_query_attention",
]


def grouped_query_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Softmax attention of ``H`` query heads over ``G`` shared key/value heads.

    Args:
        Q: ``(..., H, N_Q, d_head)`` queries.
        K: ``(..., G, N_KV, d_head)`` keys; ``G`` divides ``H``.
        V: ``(..., G, N_KV, d_v)`` values.
        mask: bool, broadcastable to ``(..., H, N_Q, N_KV)``; True = may attend.
        causal: bottom-right aligned causal mask.
        scale: default ``1/sqrt(d_head)``.
        impl: ``"auto"`` (fused SDPA) or ``"explicit"`` (``Z^-1 A V`` literally), a key of
            :data:`attnlib.core.functional.ATTENTION_FUNCTIONS`.

    Returns:
        ``(..., H, N_Q, d_v)``: head ``h`` attended with KV head ``h // (H // G)``; ``K``
        and ``V`` are never copied to ``H`` heads on the fused path (the explicit one
        repeats them, the formula literally).

    Equivalent to ``F.scaled_dot_product_attention(Q, K, V, enable_gqa=True)``.

    Example:
        >>> Q, K = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8)
        >>> grouped_query_attention(Q, K, K, causal=True).shape
        torch.Size([1, 4, 3, 8])

    Lesson: 06_gqa.
    """
    _check_grouped(Q, K, V, mask, causal, scale, impl)
    return ATTENTION_FUNCTIONS[impl](Q, K, V, mask=mask, causal=causal, scale=scale)


class GroupedQueryAttention(AttentionLayer):
    """Grouped-query attention with ``n_heads`` query heads and ``n_kv_heads`` KV heads.

    Parameters (multiplying from the right, as in the paper):
    ``W_Q (d_in, H*d_head)``, ``W_K`` and ``W_V (d_in, G*d_head)``, ``W_O (H*d_head, d_out)``.

    Args:
        d_in: input width.
        n_heads: ``H`` query heads.
        n_kv_heads: ``G`` key/value heads; must divide ``n_heads``.
        d_head: width of each head.
        d_out: output width; ``None`` means ``d_in``.
        rope_base: RoPE base for self-attention; ``None`` means no RoPE.
        rope_interleaved: RoPE pairing, see :mod:`attnlib.core.rope`.
        rope_scaling: a frequency scaling of long-context checkpoints
            (:class:`attnlib.core.rope.Llama3Scaling`, :class:`attnlib.core.rope.YarnScaling`), or
            None; needs ``rope_base``.
        device: where the parameters live.
        dtype: their dtype.

    Example:
        >>> attn = GroupedQueryAttention(d_in=32, n_heads=8, n_kv_heads=2, d_head=4)
        >>> attn(torch.randn(3, 10, 32), causal=True).shape
        torch.Size([3, 10, 32])

    Its ``forward`` is :meth:`attnlib.layers.base.AttentionLayer.forward`: project,
    rotate, append to the cache, attend, combine; the steps are the methods below.

    Lesson: 03_multi_head_attention (G = H), 06_gqa.
    """

    cache_type = KVCache

    def __init__(
        self,
        d_in: int,
        n_heads: int,
        n_kv_heads: int,
        d_head: int,
        d_out: int | None = None,
        *,
        rope_base: float | None = None,
        rope_interleaved: bool = False,
        rope_scaling: RopeScaling | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_config(d_in, n_heads, n_kv_heads, d_head, d_out, rope_base, rope_interleaved,
                      rope_scaling)
        self.d_in, self.n_heads, self.n_kv_heads, self.d_head = d_in, n_heads, n_kv_heads, d_head
        self.d_out = d_in if d_out is None else d_out
        self.rope_base, self.rope_interleaved = rope_base, rope_interleaved
        self.rope_scaling = rope_scaling
        self.rope_dim = 0 if rope_base is None else d_head  # RoPE turns every coordinate
        kw = {"device": device, "dtype": dtype}
        self.W_Q = init_weight(d_in, n_heads * d_head, **kw)
        self.W_K = init_weight(d_in, n_kv_heads * d_head, **kw)
        self.W_V = init_weight(d_in, n_kv_heads * d_head, **kw)
        self.W_O = init_weight(n_heads * d_head, self.d_out, **kw)

    @property
    def group_size(self) -> int:
        """``s = H // G``: how many query heads read each KV head."""
        return self.n_heads // self.n_kv_heads

    # --- the steps of AttentionLayer.forward ---------------------------------------------

    def project(self, X: torch.Tensor, X_KV: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``Q_h = X W_Q^h``, ``K_g = X_KV W_K^g``, ``V_g = X_KV W_V^g`` (``X_KV = X`` if None)."""
        source = X if X_KV is None else X_KV  # the tokens that answer
        Q = split_heads(X @ self.W_Q, self.n_heads)  # (..., H, N_Q, d_head)
        K = split_heads(source @ self.W_K, self.n_kv_heads)  # (..., G, N_KV, d_head)
        V = split_heads(source @ self.W_V, self.n_kv_heads)  # (..., G, N_KV, d_head)
        return Q, (K, V)

    def rotate(self, Q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], rope: RopeTables
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Queries and keys of the new tokens turned by their positions' angles; values stay."""
        K, V = kv
        Q, K = self.rope(rope, Q, K)
        return Q, (K, V)

    def heads(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``Q_h``, ``K_g`` and ``V_g`` as projected: query head ``h`` reads KV head
        ``h // (H // G)`` (the attend step pairs them)."""
        return Q, K, V

    def combine(self, Y: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``concat_col(Y_1 .. Y_H) W_O``."""
        return merge_heads(Y) @ self.W_O  # (..., N_Q, H d_head) @ (H d_head, d_out)

    def new_cache(self, max_tokens: int | None = None) -> KVCache:
        """An empty cache for this layer: a :class:`KVCache`, or with ``max_tokens`` a
        :class:`~attnlib.serving.cache.StaticKVCache` that holds that many tokens without
        copying."""
        return KVCache() if max_tokens is None else StaticKVCache(max_tokens)

    @classmethod
    def for_block(
        cls,
        d_model: int,
        n_heads: int,
        d_head: int,
        *,
        n_kv_heads: int | None = None,
        rope_base: float | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> GroupedQueryAttention:
        """A block's sublayer (``attention="gqa"``, and the variants that subclass this one):
        ``G = n_kv_heads``, ``None`` meaning ``H`` (MHA)."""
        G = n_heads if n_kv_heads is None else n_kv_heads
        return cls(d_model, n_heads, G, d_head, rope_base=rope_base, device=device, dtype=dtype)

    def extra_repr(self) -> str:
        rope = "" if self.rope_base is None else f", rope_base={self.rope_base:g}"
        if self.rope_scaling is not None:
            rope += f", rope_scaling={self.rope_scaling}"
        return (
            f"d_in={self.d_in}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"d_head={self.d_head}, d_out={self.d_out}{rope}"
        )


register_attention("gqa")(GroupedQueryAttention.for_block)


class MultiHeadAttention(GroupedQueryAttention):
    """Multi-head attention: :class:`GroupedQueryAttention` with ``n_kv_heads = n_heads``.

    Every query head has its own key/value head (``G = H``).

    Lesson: 03_multi_head_attention.
    """

    def __init__(
        self, d_in: int, n_heads: int, d_head: int, d_out: int | None = None, **kw
    ) -> None:
        super().__init__(d_in, n_heads, n_heads, d_head, d_out, **kw)


class MultiQueryAttention(GroupedQueryAttention):
    """Multi-query attention: :class:`GroupedQueryAttention` with ``n_kv_heads = 1``.

    Every query head reads the one shared key/value head (``G = 1``).

    Lesson: 06_gqa.
    """

    def __init__(
        self, d_in: int, n_heads: int, d_head: int, d_out: int | None = None, **kw
    ) -> None:
        super().__init__(d_in, n_heads, 1, d_head, d_out, **kw)


def gqa_from_mha(attn: GroupedQueryAttention, n_kv_heads: int) -> GroupedQueryAttention:
    """GQA from MHA by mean-pooling: ``W_K^g = (1/r) sum_{c in group g} W_K^c``, same for ``W_V``.

    The source's ``G_src`` KV heads are cut into ``n_kv_heads`` consecutive groups of
    ``r = G_src / n_kv_heads`` heads (for an MHA source ``G_src = H`` and ``r = s``); KV
    head ``g`` of the result is the mean of the source's KV heads ``g r`` to
    ``(g + 1) r - 1``. ``W_Q`` and ``W_O`` are copied, and so are the RoPE settings. This
    is the checkpoint conversion of Ainslie et al. (2023), who then train the pooled
    model further ("uptraining").

    The mean is the one matrix closest to the heads of a group in the Frobenius norm
    (it minimises ``sum_c ||W^c - W||_F^2``). It is exact when the heads of each group
    are equal already, in particular when ``n_kv_heads == attn.n_kv_heads``; otherwise
    the outputs change, by little when the heads of a group are close and by much when
    they are unrelated.

    Args:
        attn: the source, a :class:`GroupedQueryAttention` (an MHA, ``G_src = H``, or a
            GQA with more KV heads than wanted).
        n_kv_heads: ``G``, the KV heads of the result; must divide ``attn.n_kv_heads``.

    Returns:
        A new :class:`GroupedQueryAttention` with ``G = n_kv_heads``, on the source's
        device and dtype; the source is not changed.

    Equivalent to ``W_K.reshape(d_in, G, r, d_head).mean(dim=2).reshape(d_in, G * d_head)``.

    Example:
        >>> mha = MultiHeadAttention(d_in=16, n_heads=4, d_head=2)
        >>> gqa = gqa_from_mha(mha, 2)
        >>> gqa.W_K.shape, torch.equal(gqa.W_Q, mha.W_Q)
        (torch.Size([16, 4]), True)
        >>> torch.allclose(gqa.W_K[:, :2], (mha.W_K[:, 0:2] + mha.W_K[:, 2:4]) / 2)
        True

    Lesson: 06_gqa.
    """
    if not isinstance(attn, GroupedQueryAttention):
        raise TypeError(f"attn must be a GroupedQueryAttention (MHA and MQA included); "
                        f"got {type(attn).__name__}")
    check_positive_int("n_kv_heads", n_kv_heads)
    check_divisible("attn.n_kv_heads", attn.n_kv_heads, "n_kv_heads", n_kv_heads)
    d_in, G, d_head = attn.d_in, n_kv_heads, attn.d_head
    r = attn.n_kv_heads // G  # source KV heads pooled into each new one
    W_ref = attn.W_Q
    out = GroupedQueryAttention(
        d_in, attn.n_heads, G, d_head, attn.d_out, rope_base=attn.rope_base,
        rope_interleaved=attn.rope_interleaved, rope_scaling=attn.rope_scaling,
        device=W_ref.device, dtype=W_ref.dtype,
    )
    with torch.no_grad():
        out.W_Q.copy_(attn.W_Q)  # queries are never shared: every head keeps its own
        out.W_O.copy_(attn.W_O)
        for name in ("W_K", "W_V"):
            W = getattr(attn, name).reshape(d_in, G, r, d_head)  # head c = g r + j -> [g, j]
            getattr(out, name).copy_(W.mean(dim=2).reshape(d_in, G * d_head))
    return out


def _check_grouped(Q, K, V, mask, causal, scale, impl) -> None:
    for name, T in (("Q", Q), ("K", K), ("V", V)):
        check_tensor(name, T, min_dim=3)
    if V.shape[-3] != K.shape[-3]:
        raise ValueError(
            "K and V must have the same number of KV heads G in dimension -3; "
            f"got K {tuple(K.shape)} and V {tuple(V.shape)}"
        )
    h, g = Q.shape[-3], check_positive_int("the number of KV heads K.shape[-3]", K.shape[-3])
    check_divisible("the number of query heads Q.shape[-3]", h, "the number of KV heads G", g)
    # One KV head stands in for the G: the check needs shapes, dtypes and devices only.
    batch = check_qkv(Q, K.narrow(-3, 0, 1), V.narrow(-3, 0, 1))  # (..., 1, N_KV, d): views
    logits = (*batch, Q.shape[-2], K.shape[-2])
    check_attention_options(mask, causal, scale, impl, logits=logits, device=Q.device)


def _check_config(d_in, n_heads, n_kv_heads, d_head, d_out, rope_base, rope_interleaved,
                  rope_scaling) -> None:
    for name, value in (("d_in", d_in), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads),
                        ("d_head", d_head)):
        check_positive_int(name, value)
    if d_out is not None:
        check_positive_int("d_out", d_out)
    check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    check_bool("rope_interleaved", rope_interleaved)
    if rope_base is not None:
        check_positive_float("rope_base", rope_base)
        if d_head % 2:
            raise ValueError(
                f"d_head must be even when rope_base is set (RoPE rotates pairs); got {d_head}"
            )
    check_rope_scaling(rope_scaling, rope_base)
