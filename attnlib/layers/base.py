"""The attention layer's contract: the paper's steps in order, each a public method.

Every attention module of attnlib (multi-head, grouped-query, multi-query, latent, gated,
sliding-window) derives from :class:`AttentionLayer`, whose ``forward`` is the layer read
as the paper writes it::

    Q, kv   = project(X, X_KV)         Q_h = X W_Q^h;  K_g = X_KV W_K^g,  V_g = X_KV W_V^g
    Q, kv   = rotate(Q, kv, rope)      RoPE:  q_m -> R_m q_m,  k_n -> R_n k_n
    kv      = cache.append(*kv)        every token so far (keys already rotated)
    Q, K, V = heads(Q, *kv)            what the heads attend with (GQA: as projected)
    mask    = mask(mask, Q, K)         one mask for every head
    Y       = attend(Q, K, V, mask)    Y_h = Z_h^-1 A_h V_g(h),  A_h = exp(Q_h K_g^T / sqrt(d))
    out     = combine(Y, X)            concat_col(Y_1 .. Y_H) W_O

``kv`` is what the layer keeps per token: ``(K, V)`` for the GQA family, ``(L, k_R)`` for
MLA, whose ``heads`` step builds the per-head keys and values from the latent (or moves the
queries into the latent's coordinates). The attend step is the function
:data:`attnlib.core.functional.ATTENTION_FUNCTIONS` holds for ``impl`` (PyTorch's fused
kernel, or ``Z^-1 A V`` as written), or the one a reader installed with :meth:`use`
(:meth:`attnlib.layers.blocks.TinyDecoder.with_attention` does it for a whole model):
``forward`` calls it for every layer, whatever its kind. Keys and values a paged cache
returns (:class:`~attnlib.serving.paged.PagedBlocks`) are read through their block tables by
:func:`~attnlib.serving.paged.paged_attention` instead. A subclass replaces only the step
it changes: gated attention its ``combine``, sliding-window attention its ``mask`` and its
cache, MLA its ``project``, ``heads`` and ``combine``.

``forward`` checks its arguments before any step (inside a decoder's call, which checked
them, it does not check them again); the steps trust them.

Lesson: 03_multi_head_attention (the steps), 06_gqa, 07_mla.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from attnlib._checks import check_attention_call, check_choice, check_input, in_checked_call
from attnlib.core.functional import ATTENTION_FUNCTIONS, IMPLS, AttendFn
from attnlib.core.rope import RopeScaling, RopeTables, rope_rotate, rope_tables
from attnlib.device import work_dtype
from attnlib.serving.cache import Cache
from attnlib.serving.paged import PagedBlocks, paged_attention

__all__ = ["AttendFn", "AttentionLayer", "RopeFn"]

RopeFn = Callable[..., torch.Tensor]
"""``rope(X, positions, *, base) -> X``: rotate ``X (..., heads, N, d)`` at ``positions``."""


class AttentionLayer(nn.Module):
    """The base of every attention module: ``forward`` runs the steps of the paper in order.

    A subclass sets the sizes and parameters (``d_in``, and ``W_O`` last), the RoPE settings
    (``rope_dim``, the width RoPE rotates, 0 for none; ``rope_base``, ``rope_interleaved``,
    ``rope_scaling``), ``cache_type`` and ``scale`` (None: ``1/sqrt(d)`` of the queries the
    attend step receives), and implements :meth:`project`, :meth:`rotate`, :meth:`heads` and
    :meth:`combine` (the GQA family's are in
    :class:`attnlib.layers.gqa.GroupedQueryAttention`).

    Attributes:
        attend_fn: a function that replaces the attend step (see :meth:`use`), or None.
        rope_fn: a function that replaces the rotation (see :meth:`use`), or None.

    Lesson: 03_multi_head_attention, 06_gqa, 07_mla.
    """

    rope_dim: int = 0
    rope_base: float | None = None
    rope_interleaved: bool = False
    rope_scaling: RopeScaling | None = None
    cache_type: type[Cache] = Cache
    scale: float | None = None
    attend_fn: AttendFn | None = None
    rope_fn: RopeFn | None = None

    def forward(
        self,
        X: torch.Tensor,
        X_KV: torch.Tensor | None = None,
        *,
        causal: bool = False,
        mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: Cache | None = None,
        rope: RopeTables | None = None,
        impl: str = "auto",
        **options: object,
    ) -> torch.Tensor:
        """``Y = concat_col(Z_h^-1 A_h V_h) W_O``: project, rotate, cache, attend, combine.

        Args:
            X: ``(..., N_Q, d_in)`` the tokens that ask (queries).
            X_KV: ``(..., N_KV, d_in)`` the tokens that answer (cross-attention); ``None``
                means self-attention on ``X``. RoPE applies to self-attention only.
            causal: bottom-right aligned causal mask (with a cache: each new token sees
                every cached token and the new ones up to itself).
            mask: bool, broadcastable to ``(..., N_Q, N_KV)`` and shared by every head,
                e.g. :func:`attnlib.core.masks.key_padding_mask`; True = may attend.
            positions: RoPE positions, ``(N_Q,)`` or ``(B, N_Q)``; ``None`` means
                ``0 .. N_Q - 1`` continuing from ``cache.n_tokens``.
            cache: a cache of the layer's kind (:meth:`new_cache`) to append to and attend
                over (self-attention only).
            rope: the new tokens' rotation (:meth:`rope_tables`), when a decoder made it
                once for all its layers; ``None`` makes it here.
            impl: ``"auto"`` (PyTorch's fused kernel) or ``"explicit"`` (``Z^-1 A V`` as
                written): the key of :data:`attnlib.core.functional.ATTENTION_FUNCTIONS`.
            **options: the variant's own options (``absorbed`` for MLA).

        Returns:
            ``(..., N_Q, d_out)``.
        """
        if not in_checked_call():  # a decoder checked its layers' arguments already
            self.check(X, X_KV, causal=causal, mask=mask, positions=positions, cache=cache,
                       impl=impl, **options)
        Q, kv = self.project(X, X_KV)  # the heads' queries; what the cache keeps
        if self.rope_dim and X_KV is None:  # RoPE: self-attention only
            if rope is None:
                start = 0 if cache is None else cache.n_tokens
                rope = self.rope_tables(positions, X.shape[-2], start, X.dtype, X.device)
            Q, kv = self.rotate(Q, kv, rope)
        if cache is not None:
            kv = cache.append(*kv)  # every token so far
        Q, K, V = self.heads(Q, *kv, **options)  # (..., H, N_Q, d), (..., G, N_KV, d) twice
        mask = self.mask(mask, Q, K)  # (..., 1, N_Q, N_KV): one mask for every head
        attend = self.attend_fn or ATTENTION_FUNCTIONS[impl]  # a reader's, or PyTorch's
        if isinstance(K, PagedBlocks):  # a paged cache: read in place through the block tables
            attend = paged_attention
        scale = {} if self.scale is None else {"scale": self.scale}  # MLA: not 1/sqrt(d)
        Y = attend(Q, K, V, mask=mask, causal=causal, **scale)  # Y_h = Z_h^-1 A_h V_g(h)
        return self.combine(Y, X, **options)  # (..., N_Q, d_out)

    # --- the steps; a subclass implements them -------------------------------------------

    def project(self, X: torch.Tensor, X_KV: torch.Tensor | None = None) -> tuple:
        """``(Q, kv)``: the queries of ``X`` and what the cache keeps of ``X_KV`` (or ``X``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement project")

    def rotate(self, Q: object, kv: tuple, rope: RopeTables) -> tuple:
        """``(Q, kv)`` with RoPE applied to the queries and keys of the new tokens."""
        raise NotImplementedError(f"{type(self).__name__} must implement rotate")

    def heads(self, Q: object, *kv: torch.Tensor, **options: object
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Q, K, V)`` the attend step reads: ``(..., H, N_Q, d)`` and ``(..., G, N_KV, d)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement heads")

    def mask(self, mask: torch.Tensor | None, Q: torch.Tensor, K: torch.Tensor
             ) -> torch.Tensor | None:
        """The caller's mask ``(..., N_Q, N_KV)`` for every head: ``(..., 1, N_Q, N_KV)``."""
        return None if mask is None else mask.unsqueeze(-3)

    def combine(self, Y: torch.Tensor, X: torch.Tensor, **options: object) -> torch.Tensor:
        """The heads merged and mapped out, ``concat_col(Y_h) W_O``; ``X`` is the layer's input."""
        raise NotImplementedError(f"{type(self).__name__} must implement combine")

    # --- RoPE ------------------------------------------------------------------------------

    def rope_tables(
        self, positions: torch.Tensor | None, n: int, start: int, dtype: torch.dtype,
        device: torch.device,
    ) -> RopeTables | None:
        """The rotation of ``n`` new tokens after ``start`` held ones (None without RoPE).

        Every layer of a decoder rotates by the same angles, so the decoder calls this on
        its first layer once per forward pass and hands the result to every layer.
        """
        if not self.rope_dim:
            return None
        if positions is None:  # the next n positions after the held tokens
            pos = torch.arange(start, start + n, device=device)
        else:  # (N,), or (B, N) -> (B, 1, N): a head axis, to broadcast against (B, H, N, d)
            pos = torch.as_tensor(positions, device=device)
            pos = pos if pos.dim() == 1 else pos[:, None, :]
        return rope_tables(pos, self.rope_dim, base=self.rope_base, scaling=self.rope_scaling,
                           interleaved=self.rope_interleaved, dtype=work_dtype(dtype))

    def rope(self, rope: RopeTables, Q: torch.Tensor, K: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys ``(..., heads, N, d)``: with the tables, or :attr:`rope_fn`."""
        if self.rope_fn is not None:
            base = self.rope_base
            return self.rope_fn(Q, rope.positions, base=base), self.rope_fn(K, rope.positions,
                                                                            base=base)
        pairing = self.rope_interleaved
        return rope_rotate(Q, rope, interleaved=pairing), rope_rotate(K, rope, interleaved=pairing)

    # --- replacing a step --------------------------------------------------------------------

    def use(self, *, attend: AttendFn | None = None, rope: RopeFn | None = None) -> AttentionLayer:
        """Run ``attend`` as this layer's attend step and ``rope`` as its rotation; return self.

        ``attend(Q, K, V, *, mask=None, causal=False)`` receives what :meth:`heads` made:
        the heads' queries ``(..., H, N_Q, d)`` and every held key and value
        ``(..., G, N_KV, d)`` (``G = H`` for multi-head attention, and for MLA, whose
        per-head keys are built from the latent first; ``G = 1`` on MLA's absorbed path,
        whose one key and value head is the latent), ``mask`` broadcastable to
        ``(..., H, N_Q, N_KV)`` or None, and returns ``(..., H, N_Q, d_v)``;
        :func:`attnlib.layers.gqa.grouped_query_attention` has this signature. A layer
        whose logit scale is not ``1/sqrt(d)`` of the queries it hands over (MLA) passes
        ``scale=`` as well. ``rope(X, positions, *, base)`` rotates ``X (..., heads, N, d)``
        at integer ``positions`` (``(N,)`` or ``(B, 1, N)``), as :func:`attnlib.apply_rope`
        does. ``None`` keeps the layer's own step. A paged cache's blocks are read by
        :func:`~attnlib.serving.paged.paged_attention`, not by ``attend``.
        """
        if attend is not None and not callable(attend):
            raise TypeError(f"attend must be a callable (Q, K, V, *, mask, causal) -> Y; "
                            f"got {type(attend).__name__}")
        if rope is not None and not callable(rope):
            raise TypeError(f"rope must be a callable (X, positions, *, base) -> X; "
                            f"got {type(rope).__name__}")
        if attend is not None:
            self.attend_fn = attend
        if rope is not None:
            self.rope_fn = rope
        return self

    # --- caches and checks ----------------------------------------------------------------

    def new_cache(self, max_tokens: int | None = None) -> Cache:
        """An empty cache of this layer's kind: growing, or preallocated for ``max_tokens``."""
        return self.cache_type(max_tokens)

    def check_cache(self, cache: object, name: str = "cache") -> None:
        """``cache`` is a cache of this layer's kind.

        attnlib's caches name what they hold (:attr:`~attnlib.serving.cache.Cache.fields`),
        which must be :attr:`cache_type`'s; a cache of one's own, any object with
        ``append(*new)`` returning everything held and ``n_tokens``, is taken as it is. A
        cache refuses, when :meth:`~attnlib.serving.cache.Cache.append` runs, new rows that
        do not fit what it holds.
        """
        fields = getattr(cache, "fields", None)
        own = not fields and callable(getattr(cache, "append", None)) and hasattr(
            type(cache), "n_tokens")  # a cache of one's own: append and n_tokens
        if not own and fields != self.cache_type.fields:
            kind = self.cache_type.__name__
            raise TypeError(f"{name} must be an attnlib.{kind} (or a cache of your own with "
                            f"append and n_tokens); got {type(cache).__name__}")

    def check(self, X: object, X_KV: object = None, *, causal: object = False,
              mask: object = None, positions: object = None, cache: object = None,
              impl: object = "auto", **options: object) -> None:
        """The arguments of :meth:`forward`."""
        like = self.W_O  # the parameters' dtype and device
        check_input("X", X, self.d_in, like, "d_in of this module")
        n_kv = X.shape[-2]
        if X_KV is not None:
            check_input("X_KV", X_KV, self.d_in, like, "d_in of this module")
            if cache is not None:
                raise ValueError("cache must be None for cross-attention (X_KV given)")
            n_kv = X_KV.shape[-2]
        if cache is not None:
            self.check_cache(cache)
            n_kv += cache.n_tokens
        check_choice("impl", impl, IMPLS)
        check_attention_call(X, causal=causal, mask=mask, positions=positions, n_kv=n_kv,
                             **options)  # the other options are flags
