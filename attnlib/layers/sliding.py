"""Sliding-window attention: each query reads only the last ``w`` tokens, and the cache keeps ``w``.

The local layers of Mistral 7B (``w = 4096``) and of Gemma 2 and 3 (``w = 4096`` and
``1024``) restrict causal attention to a window: the query at position ``p`` may attend to
the keys at ``p - w < j <= p``, itself included,

    A_h[p, j] = exp(Q_h[p] . K_g[j] / sqrt(d_head))   if p - w < j <= p,   else 0,

and ``Y = Z^-1 A V`` as everywhere else. A layer of ``L`` stacked window layers still sees
``L (w - 1)`` tokens back, through the residual stream. The point of the window is the
cache: no later query reads a key more than ``w - 1`` positions behind it, so
:class:`WindowCache` keeps the keys and values of the last ``w`` tokens only, and its size
stops growing at ``2 G d_head w`` numbers per layer (:meth:`attnlib.analysis.memory.ModelSpec.
windowed_cache_bytes` counts it for Gemma 3).

:class:`SlidingWindowAttention` is grouped-query attention whose mask step adds the window
to the mask (:func:`attnlib.core.masks.sliding_window_mask`) and whose cache is a
:class:`WindowCache`; it is registered as ``attention="sliding"``, so
``TinyDecoder(..., attention="sliding", window=32)`` uses it in every block.

Lesson: 05_kv_cache (evicting old tokens), 09_frontier.
"""

from __future__ import annotations

import torch

from attnlib._checks import check_positive_int
from attnlib.core.masks import sliding_window_mask
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.variants import register_attention
from attnlib.serving.cache import WindowCache

__all__ = ["SlidingWindowAttention"]


class SlidingWindowAttention(GroupedQueryAttention):
    """Grouped-query attention over a causal window of ``window`` tokens.

    Every step but :meth:`mask` is GQA's; :meth:`mask` adds
    :func:`~attnlib.core.masks.sliding_window_mask` to the mask (bottom-right aligned, so with
    a cache the new queries sit at the end of the keys the cache returns), for attnlib's
    attend step and a reader's alike. The window is
    causal: query ``p`` reads keys ``p - window < j <= p`` whether or not ``causal`` is
    passed. :meth:`new_cache` makes a :class:`WindowCache`.

    Args:
        d_in, n_heads, n_kv_heads, d_head, d_out: as for
            :class:`~attnlib.layers.gqa.GroupedQueryAttention`.
        window: how many of the most recent positions each query reads, itself included.
        **kw: GQA's keyword arguments (``rope_base``, ``device``, ``dtype``, ...).

    Equivalent to ``F.scaled_dot_product_attention`` with
    ``attn_mask=sliding_window_mask(N, N, window=window)`` per head, and to Hugging Face's
    Mistral attention with ``sliding_window=window``.

    Example:
        >>> attn = SlidingWindowAttention(16, n_heads=4, n_kv_heads=2, d_head=4, window=3)
        >>> X = torch.randn(1, 7, 16)
        >>> cache = attn.new_cache()
        >>> Y = torch.cat([attn(X[:, :4], cache=cache), attn(X[:, 4:], cache=cache)], dim=1)
        >>> torch.allclose(Y, attn(X), atol=1e-6), cache.n_held
        (True, 3)

    Lesson: 05_kv_cache.
    """

    cache_type = WindowCache

    def __init__(self, d_in: int, n_heads: int, n_kv_heads: int, d_head: int,
                 d_out: int | None = None, *, window: int, **kw) -> None:
        super().__init__(d_in, n_heads, n_kv_heads, d_head, d_out, **kw)
        self.window = check_positive_int("window", window)

    def mask(self, mask: torch.Tensor | None, Q: torch.Tensor, K: torch.Tensor
             ) -> torch.Tensor:
        """The window, ``p - window < j <= p`` for each query ``p``, and the caller's mask."""
        allowed = sliding_window_mask(Q.shape[-2], K.shape[-2], window=self.window,
                                      device=Q.device)  # (N_Q, N_KV)
        if mask is not None:  # the mask covers every token seen; the cache holds the last
            allowed = mask[..., -K.shape[-2]:] & allowed
        return allowed.unsqueeze(-3)  # (..., 1, N_Q, N_KV): one mask for every head

    def new_cache(self, max_tokens: int | None = None) -> WindowCache:
        """An empty :class:`WindowCache` of this layer's window (``max_tokens`` is not needed:
        it never holds more than ``window`` tokens)."""
        return WindowCache(self.window)

    @classmethod
    def for_block(cls, d_model: int, n_heads: int, d_head: int, *, window: int,
                  n_kv_heads: int | None = None, rope_base: float | None = None,
                  device: torch.device | str | None = None,
                  dtype: torch.dtype | None = None) -> SlidingWindowAttention:
        """A block's ``attention="sliding"``: ``window`` is required; ``G = n_kv_heads``
        (``None`` means ``H``)."""
        G = n_heads if n_kv_heads is None else n_kv_heads
        return cls(d_model, n_heads, G, d_head, window=window, rope_base=rope_base,
                   device=device, dtype=dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}"


register_attention("sliding")(SlidingWindowAttention.for_block)
