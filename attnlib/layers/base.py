"""The attention layer's contract: the paper's steps in order, each a public method.

Every attention module of attnlib (multi-head, grouped-query, multi-query, latent, gated,
sliding-window) derives from :class:`AttentionLayer`, whose ``forward`` is the layer read
as the paper writes it::

    Q, kv = project(X, X_KV)          Q_h = X W_Q^h;  K_g = X_KV W_K^g,  V_g = X_KV W_V^g
    Q, kv = rotate(Q, kv, rope)       RoPE:  q_m -> R_m q_m,  k_n -> R_n k_n
    kv    = cache.append(*kv)         every token so far (keys already rotated)
    Y     = attend(Q, *kv, mask)      Y_h = Z_h^-1 A_h V_g(h),  A_h = exp(Q_h K_g^T / sqrt(d))
    out   = combine(Y, X)             concat_col(Y_1 .. Y_H) W_O

``kv`` is what the layer keeps per token: ``(K, V)`` for the GQA family, ``(L, k_R)`` for
MLA. A subclass replaces only the step it changes: gated attention its ``combine``,
sliding-window attention its ``attend`` and its cache. A reader replaces a step of every
layer of a model without subclassing: :meth:`AttentionLayer.use` installs a function as
the attend step or the rotation, and :meth:`attnlib.layers.blocks.TinyDecoder.with_attention`
does it for a whole model.

Checks: ``forward(..., check=True)`` validates its arguments once, with :meth:`check`,
before any step runs; a block or decoder that checked its own arguments calls its
attention with ``check=False`` (through ``__call__``, so forward hooks fire), and the steps
never check again.

Lesson: 03_multi_head_attention (the steps), 06_gqa, 07_mla.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from attnlib._checks import check_attention_call, check_choice, check_input
from attnlib.core.functional import IMPLS
from attnlib.core.rope import RopeScaling, RopeTables, rope_rotate, rope_tables
from attnlib.device import work_dtype
from attnlib.serving.cache import Cache, Rows

__all__ = ["AttendFn", "AttentionLayer", "RopeFn"]

AttendFn = Callable[..., torch.Tensor]
"""``attend(Q, K, V, *, mask=None, causal=False) -> Y``: per-head attention, ``Q`` of
``(..., H, N_Q, d)``, ``K`` and ``V`` of ``(..., G, N_KV, d)``, ``Y`` of ``(..., H, N_Q, d_v)``."""

RopeFn = Callable[..., torch.Tensor]
"""``rope(X, positions, *, base) -> X``: rotate ``X (..., heads, N, d)`` at ``positions``."""


class AttentionLayer(nn.Module):
    """The base of every attention module: ``forward`` runs the steps of the paper in order.

    A subclass sets the sizes and parameters, the RoPE settings (``rope_dim``, the width
    RoPE rotates, 0 for none; ``rope_base``, ``rope_interleaved``, ``rope_scaling``) and
    ``cache_type``, and implements :meth:`project`, :meth:`rotate`, :meth:`attend` and
    :meth:`combine` (the GQA family's are in :class:`attnlib.layers.gqa.GroupedQueryAttention`),
    :meth:`cache_rows` and, for its own arguments, :meth:`check`.

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
        check: bool = True,
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
            check: validate the arguments first (the default); a block that checked its
                own passes False.
            **options: the attend step's options (``impl`` for every layer, ``absorbed``
                for MLA).

        Returns:
            ``(..., N_Q, d_out)``.
        """
        if check:
            self.check(X, X_KV, causal=causal, mask=mask, positions=positions, cache=cache,
                       **options)
        Q, kv = self.project(X, X_KV)  # the heads' queries; what the cache keeps
        if self.rope_dim and X_KV is None:  # RoPE: self-attention only
            if rope is None:
                start = 0 if cache is None else cache.n_tokens
                rope = self.rope_tables(positions, X.shape[-2], start, X.dtype, X.device)
            Q, kv = self.rotate(Q, kv, rope)
        if cache is not None:  # every token so far (attnlib's caches were checked above)
            named = isinstance(cache, Cache) and cache.fields  # attnlib's, which take check=
            kv = cache.append(*kv, check=False) if named else cache.append(*kv)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # (..., 1, N_Q, N_KV): one mask for every head
        Y = self.attend(Q, *kv, mask=mask, causal=causal, **options)
        return self.combine(Y, X)  # (..., N_Q, d_out)

    # --- the steps; a subclass implements them -------------------------------------------

    def project(self, X: torch.Tensor, X_KV: torch.Tensor | None = None) -> tuple:
        """``(Q, kv)``: the queries of ``X`` and what the cache keeps of ``X_KV`` (or ``X``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement project")

    def rotate(self, Q: object, kv: tuple, rope: RopeTables) -> tuple:
        """``(Q, kv)`` with RoPE applied to the queries and keys of the new tokens."""
        raise NotImplementedError(f"{type(self).__name__} must implement rotate")

    def attend(self, Q: object, *kv: torch.Tensor, mask: torch.Tensor | None = None,
               causal: bool = False, **options: object) -> torch.Tensor:
        """``Y_h = Z_h^-1 A_h V_h`` per head, ``(..., H, N_Q, d_v)``, over every held token."""
        raise NotImplementedError(f"{type(self).__name__} must implement attend")

    def combine(self, Y: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
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
                           interleaved=self.rope_interleaved, dtype=work_dtype(dtype),
                           check=False)

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

        ``attend(Q, K, V, *, mask=None, causal=False)`` receives the heads' queries
        ``(..., H, N_Q, d)`` and every held key and value ``(..., G, N_KV, d)`` (``G = H``
        for multi-head attention, and for MLA, whose per-head keys are built from the
        latent first), ``mask`` broadcastable to ``(..., H, N_Q, N_KV)`` or None, and
        returns ``(..., H, N_Q, d_v)``; :func:`attnlib.layers.gqa.grouped_query_attention` has this
        signature. A layer whose logit scale is not ``1/sqrt(d)`` (MLA with YaRN) passes
        ``scale=`` as well. ``rope(X, positions, *, base)`` rotates ``X (..., heads, N, d)``
        at integer ``positions`` (``(N,)`` or ``(B, 1, N)``), as :func:`attnlib.apply_rope`
        does. ``None`` keeps the layer's own step.
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

    def cache_rows(self, batch: tuple[int, ...], n: int) -> tuple[Rows | None, ...]:
        """The :class:`~attnlib.serving.cache.Rows` that ``n`` new tokens add to the cache."""
        raise NotImplementedError(f"{type(self).__name__} must implement cache_rows")

    def check_cache(self, cache: object, batch: tuple[int, ...], n: int, *,
                    name: str = "cache") -> None:
        """``cache`` is a cache of this layer's kind that takes ``n`` new tokens.

        attnlib's caches name what they hold (:attr:`~attnlib.serving.cache.Cache.fields`) and must
        be of :attr:`cache_type`'s kind; a cache of one's own, any object with ``append(*new)``
        returning everything held and ``n_tokens``, is taken as it is and called as
        ``cache.append(K, V)``.
        """
        kind = self.cache_type
        named = isinstance(cache, Cache) and bool(cache.fields)  # attnlib's caches
        own = not named and callable(getattr(cache, "append", None)) and hasattr(
            type(cache), "n_tokens")  # a cache of one's own: append and n_tokens
        if not own and not (named and cache.fields == kind.fields):
            raise TypeError(f"{name} must be an attnlib.{kind.__name__} (or a cache of your own "
                            f"with append and n_tokens); got {type(cache).__name__}")
        if not own:
            cache.check_next(*self.cache_rows(batch, n))

    def check(self, X: object, X_KV: object = None, *, causal: object = False,
              mask: object = None, positions: object = None, cache: object = None,
              **options: object) -> None:
        """The arguments of :meth:`forward` (a block checks its own with it)."""
        like = self.parameters().__next__()
        check_input("X", X, self.d_in, like, "d_in of this module")
        if X_KV is not None:
            check_input("X_KV", X_KV, self.d_in, like, "d_in of this module")
            if cache is not None:
                raise ValueError("cache must be None for cross-attention (X_KV given)")
        if cache is not None:
            self.check_cache(cache, X.shape[:-2], X.shape[-2])
        check_choice("impl", options.pop("impl", "auto"), IMPLS)
        n_kv = (X if X_KV is None else X_KV).shape[-2] + (0 if cache is None else cache.n_tokens)
        check_attention_call(X, causal=causal, mask=mask, positions=positions, n_kv=n_kv,
                             **options)  # the other options are flags

