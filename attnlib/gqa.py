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

Two conversions: :func:`gqa_from_mha` mean-pools the KV heads of a group, the
initialisation of Ainslie et al. (2023) for turning an MHA checkpoint into GQA, and
:func:`from_hf_llama_attention` loads the weights of a Hugging Face ``LlamaAttention``.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlib._checks import (
    check_attention_inputs,
    check_bool,
    check_divisible,
    check_module_inputs,
    check_positive_float,
    check_positive_int,
    check_tensor,
    entry_point,
    nested_call,
)
from attnlib._params import init_weight
from attnlib.cache import KVCache
from attnlib.core import attention
from attnlib.heads import head_mask, merge_heads, repeat_kv, split_heads
from attnlib.rope import rope_cos_sin, rope_positions, rope_rotate

__all__ = [
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "from_hf_llama_attention",
    "gqa_from_mha",
    "grouped_query_attention",
]


@entry_point
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
        impl: ``"auto"`` (fused SDPA) or ``"explicit"`` (``Z^-1 A V`` literally).

    Returns:
        ``(..., H, N_Q, d_v)``: head ``h`` attended with KV head ``h // (H // G)``.

    Equivalent to ``F.scaled_dot_product_attention(Q, K, V, enable_gqa=True)``.

    Example:
        >>> Q, K = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8)
        >>> grouped_query_attention(Q, K, K, causal=True).shape
        torch.Size([1, 4, 3, 8])

    Lesson: 06_gqa.
    """
    _check_grouped_inputs(Q, K, V, mask, causal, scale, impl)
    H = Q.shape[-3]
    # Expanding K and V to H heads is the clearest statement of the group map; the
    # saving GQA buys is in what the cache holds (G heads), not in this arithmetic.
    K, V = repeat_kv(K, H), repeat_kv(V, H)  # (..., H, N_KV, d): head h reads group h // s
    return attention(Q, K, V, mask=mask, causal=causal, scale=scale, impl=impl)


class GroupedQueryAttention(nn.Module):
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
        rope_interleaved: RoPE pairing, see :mod:`attnlib.rope`.
        device: where the parameters live.
        dtype: their dtype.

    Example:
        >>> attn = GroupedQueryAttention(d_in=32, n_heads=8, n_kv_heads=2, d_head=4)
        >>> attn(torch.randn(3, 10, 32), causal=True).shape
        torch.Size([3, 10, 32])

    Lesson: 03_multi_head_attention (G = H), 06_gqa.
    """

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
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_config(d_in, n_heads, n_kv_heads, d_head, d_out, rope_base, rope_interleaved)
        self.d_in, self.n_heads, self.n_kv_heads, self.d_head = d_in, n_heads, n_kv_heads, d_head
        self.d_out = d_in if d_out is None else d_out
        self.rope_base, self.rope_interleaved = rope_base, rope_interleaved
        kw = {"device": device, "dtype": dtype}
        self.W_Q = init_weight(d_in, n_heads * d_head, **kw)
        self.W_K = init_weight(d_in, n_kv_heads * d_head, **kw)
        self.W_V = init_weight(d_in, n_kv_heads * d_head, **kw)
        self.W_O = init_weight(n_heads * d_head, self.d_out, **kw)

    @property
    def group_size(self) -> int:
        """``s = H // G``: how many query heads read each KV head."""
        return self.n_heads // self.n_kv_heads

    @entry_point
    def forward(
        self,
        X: torch.Tensor,
        X_KV: torch.Tensor | None = None,
        *,
        causal: bool = False,
        mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        impl: str = "auto",
    ) -> torch.Tensor:
        """``Y = concat_col(Z_h^-1 A_h V_g(h)) W_O``.

        Args:
            X: ``(..., N_Q, d_in)`` the tokens that ask (queries).
            X_KV: ``(..., N_KV, d_in)`` the tokens that answer (cross-attention); ``None``
                means self-attention on ``X``. RoPE applies to self-attention only.
            causal: bottom-right aligned causal mask (with a cache: each new token sees
                every cached token and the new ones up to itself).
            mask: bool, broadcastable to ``(..., N_Q, N_KV)`` and shared by every head,
                e.g. :func:`attnlib.masks.key_padding_mask`.
            positions: RoPE positions, ``(N_Q,)`` or ``(B, N_Q)``; ``None`` means
                ``0 .. N_Q - 1`` continuing from ``cache.n_tokens``.
            cache: a :class:`KVCache` to append to and attend over (self-attention only).
            impl: ``"auto"`` or ``"explicit"``, passed to :func:`attnlib.core.attention`.

        Returns:
            ``(..., N_Q, d_out)``.
        """
        check_module_inputs(
            X, d_in=self.d_in, like=self.W_Q, X_KV=X_KV, causal=causal, mask=mask,
            positions=positions, cache=cache, cache_type=KVCache, impl=impl,
        )
        source = X if X_KV is None else X_KV  # the tokens that answer
        Q = split_heads(X @ self.W_Q, self.n_heads)  # (..., H, N_Q, d_head)
        K = split_heads(source @ self.W_K, self.n_kv_heads)  # (..., G, N_KV, d_head)
        V = split_heads(source @ self.W_V, self.n_kv_heads)  # (..., G, N_KV, d_head)
        if self.rope_base is not None and X_KV is None:  # RoPE: self-attention only
            Q, K = self._rope(Q, K, positions, start=0 if cache is None else cache.n_tokens)
        if cache is not None:
            K, V = cache.update(K, V)  # every token so far, keys already rotated
        Y = grouped_query_attention(Q, K, V, mask=head_mask(mask), causal=causal, impl=impl)
        return self._output(Y, X)

    def _output(self, Y: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``concat_col(Y_1 .. Y_H) W_O``; a variant may change the heads first (a gate)."""
        return merge_heads(Y) @ self.W_O  # (..., N_Q, H d_head) @ (H d_head, d_out)

    def _rope(
        self, Q: torch.Tensor, K: torch.Tensor, positions: torch.Tensor | None, start: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate the queries and keys of the new tokens with one set of angles."""
        pos = rope_positions(positions, Q.shape[-2], start=start, device=Q.device)
        work = torch.float32 if Q.dtype in (torch.float16, torch.bfloat16) else Q.dtype
        cos, sin = rope_cos_sin(pos, self.d_head, base=self.rope_base, dtype=work)
        rotate = {"interleaved": self.rope_interleaved}
        return rope_rotate(Q, cos, sin, **rotate), rope_rotate(K, cos, sin, **rotate)

    def extra_repr(self) -> str:
        rope = "" if self.rope_base is None else f", rope_base={self.rope_base:g}"
        return (
            f"d_in={self.d_in}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"d_head={self.d_head}, d_out={self.d_out}{rope}"
        )


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
        rope_interleaved=attn.rope_interleaved, device=W_ref.device, dtype=W_ref.dtype,
    )
    with torch.no_grad():
        out.W_Q.copy_(attn.W_Q)  # queries are never shared: every head keeps its own
        out.W_O.copy_(attn.W_O)
        for name in ("W_K", "W_V"):
            W = getattr(attn, name).reshape(d_in, G, r, d_head)  # head c = g r + j -> [g, j]
            getattr(out, name).copy_(W.mean(dim=2).reshape(d_in, G * d_head))
    return out


def from_hf_llama_attention(hf_attention: nn.Module) -> GroupedQueryAttention:
    """Load a Hugging Face ``LlamaAttention`` into a :class:`GroupedQueryAttention`.

    ``nn.Linear`` stores the transpose of a right-multiplying weight, so
    ``W_Q = q_proj.weight.T``, ``W_K = k_proj.weight.T``, ``W_V = v_proj.weight.T`` and
    ``W_O = o_proj.weight.T``. The head counts, ``head_dim`` and the RoPE base come from
    ``hf_attention.config`` (``num_attention_heads``, ``num_key_value_heads``,
    ``rope_parameters["rope_theta"]`` or ``rope_theta``). Hugging Face's Llama rotates the
    half-split pairs ``(i, i + d_head/2)``, attnlib's default. Nothing here imports
    ``transformers``: any module with these attributes loads.

    Args:
        hf_attention: a ``transformers`` ``LlamaAttention`` (or a module laid out like
            it: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` without biases, a
            ``config`` and a ``head_dim``).

    Returns:
        A :class:`GroupedQueryAttention` with RoPE on the weights' device and dtype. Its
        ``forward(X, causal=True)`` equals ``hf_attention`` run on positions
        ``0 .. N - 1`` with a causal mask.

    Example:
        A stand-in with LlamaAttention's layout (the lesson uses the real module):

        >>> from types import SimpleNamespace
        >>> hf = nn.Module()
        >>> hf.config = SimpleNamespace(num_attention_heads=4, num_key_value_heads=2,
        ...                             rope_theta=10000.0)
        >>> hf.head_dim = 2
        >>> for name, width in (("q_proj", 8), ("k_proj", 4), ("v_proj", 4), ("o_proj", 8)):
        ...     setattr(hf, name, nn.Linear(8, width, bias=False))
        >>> attn = from_hf_llama_attention(hf)
        >>> attn.n_kv_heads, attn.W_K.shape, torch.equal(attn.W_K, hf.k_proj.weight.T)
        (2, torch.Size([8, 4]), True)

    Lesson: 06_gqa.
    """
    config = getattr(hf_attention, "config", None)
    projections = ("q_proj", "k_proj", "v_proj", "o_proj")
    missing = [n for n in (*projections, "head_dim") if not hasattr(hf_attention, n)]
    if config is None or missing:
        raise TypeError(
            "hf_attention must be laid out like transformers' LlamaAttention (config, "
            f"head_dim, q_proj, k_proj, v_proj, o_proj); got {type(hf_attention).__name__} "
            f"without {missing or ['config']}"
        )
    with_bias = [n for n in projections if getattr(hf_attention, n).bias is not None]
    if with_bias:
        raise ValueError(f"hf_attention must have no biases (attention_bias=False); "
                         f"{with_bias} have one")
    rope = getattr(config, "rope_parameters", None) or {}
    base = rope.get("rope_theta", getattr(config, "rope_theta", None))
    W_Q = hf_attention.q_proj.weight
    attn = GroupedQueryAttention(
        W_Q.shape[1], config.num_attention_heads, config.num_key_value_heads,
        hf_attention.head_dim, hf_attention.o_proj.weight.shape[0], rope_base=base,
        device=W_Q.device, dtype=W_Q.dtype,
    )
    with torch.no_grad():
        for name, proj in zip(("W_Q", "W_K", "W_V", "W_O"), projections, strict=True):
            getattr(attn, name).copy_(getattr(hf_attention, proj).weight.T)  # (in, out)
    return attn


def _check_grouped_inputs(Q, K, V, mask, causal, scale, impl) -> None:
    if nested_call():
        return
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
    K_1, V_1 = K.narrow(-3, 0, 1), V.narrow(-3, 0, 1)  # (..., 1, N_KV, d), views
    check_attention_inputs(Q, K_1, V_1, mask=mask, causal=causal, scale=scale, impl=impl)


def _check_config(d_in, n_heads, n_kv_heads, d_head, d_out, rope_base, rope_interleaved) -> None:
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
