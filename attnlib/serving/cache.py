"""Caches for decoding: keep what every later query will need, and nothing else.

When a decoder generates token ``t``, its query must meet the keys and values of every
earlier token. Those never change, so they are computed once and kept:

* :class:`KVCache` keeps ``K`` and ``V`` per KV head: ``2 * G * d_head`` numbers per token
  and layer (``G = H`` for MHA, ``G = 1`` for MQA).
* :class:`StaticKVCache` keeps the same ``K`` and ``V`` in buffers allocated once for
  ``max_tokens`` tokens and written in place; :class:`KVCache` grows by ``torch.cat``,
  which copies everything it holds at every call.
* :class:`LatentCache` keeps MLA's shared latent ``L = X W_L`` (``d_L`` numbers) and, with
  decoupled RoPE, the one rotated key ``k_R`` (``d_R`` numbers) per token and layer;
  :class:`StaticLatentCache` keeps them in buffers allocated once.
* :class:`WindowCache` keeps the keys and values of the last ``window``
  tokens only (sliding-window attention, :mod:`attnlib.layers.sliding`).

Every cache follows one public protocol, :class:`Cache`: ``append(*new)`` adds the new
tokens' tensors and returns everything held (and raises, naming the tensor, the rule and the
shape, when they do not fit what it holds), ``n_tokens`` is the position of the next token,
``nbytes`` the bytes held, and ``reset()`` forgets every token. A subclass names the tensors
it holds in :attr:`Cache.fields`.

What the cache saves is arithmetic; :mod:`attnlib.analysis.costs` counts it
(:func:`attnlib.analysis.costs.decode_step_macs`, :func:`attnlib.analysis.costs.generation_macs`).

Queries are never cached: each is used once, by the step that made it. Feeding a sequence
through a module in pieces with a cache gives the same outputs as one causal call over
the whole sequence. Keys are stored *after* RoPE, so a cached key never needs rotating
again. One cache object serves one attention layer, whose ``new_cache(max_tokens)`` makes
the right kind.
"""

from __future__ import annotations

import torch

from attnlib._checks import check_positive_int, check_tensor

__all__ = ["Cache", "KVCache", "LatentCache", "StaticKVCache", "StaticLatentCache",
           "WindowCache"]


class Cache:
    """The protocol every cache follows; a subclass names what it holds in :attr:`fields`.

    Tensors are held along the token axis -2. Without ``max_tokens`` they grow by
    ``torch.cat`` (every call copies what is held); with it, the first :meth:`append`
    allocates buffers for ``max_tokens`` tokens and every call writes the new rows into the
    next free positions, ``buffer[..., n:n + N_new, :] = new``, so no held row is copied
    again. The outputs are the same either way.

    Subclasses set :attr:`fields` (and :attr:`optional`, the fields that may be None on
    every call, as MLA's ``k_R`` without decoupled RoPE); a cache that keeps only some
    tokens (a sliding window) overrides :meth:`append`.

    Attributes:
        max_tokens: the most tokens the buffers hold, or None for a growing cache.

    Lesson: 05_kv_cache.
    """

    fields: tuple[str, ...] = ()
    """The names of the tensors held, in the order :meth:`append` takes and returns them."""
    optional: tuple[str, ...] = ()
    """Fields that may be None (given on every call or on none)."""

    def __init__(self, max_tokens: int | None = None) -> None:
        self.max_tokens = None if max_tokens is None else check_positive_int(
            "max_tokens", max_tokens)
        self._held: dict[str, torch.Tensor | None] = dict.fromkeys(self.fields)
        self._n = 0

    @property
    def n_tokens(self) -> int:
        """Number of tokens seen, the position of the next one (0 for an empty cache)."""
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tensors (the rows in use): ``numel * element size``."""
        return sum(_nbytes(getattr(self, name)) for name in self.fields)

    @property
    def allocated_nbytes(self) -> int:
        """Bytes allocated: the buffers' ``max_tokens`` rows, or :attr:`nbytes` when growing."""
        if self.max_tokens is None:
            return self.nbytes
        return sum(_nbytes(t) for t in self._held.values())

    def held(self, name: str) -> torch.Tensor | None:
        """The held rows of tensor ``name`` (a view of the buffer), or None before any."""
        T = self._held[name]
        return T if T is None or self.max_tokens is None else T[..., : self._n, :]

    def __getattr__(self, name: str) -> torch.Tensor | None:
        # cache.K, cache.V, cache.L, cache.k_R: the held rows of that field
        if name in type(self).fields:
            return self.held(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def append(self, *new: torch.Tensor | None) -> tuple:
        """Append the new tokens' tensors (one per field); return everything held.

        Args:
            *new: one tensor per field, ``(..., N_new, d)``, in the order of :attr:`fields`
                (None for an optional field that is off).

        Returns:
            One tensor per field with every held row (None for an optional field that is off).

        Raises:
            ValueError: the new rows do not fit what is held: one leading shape and token
                count for every field, the held shape in every dimension but the token axis,
                the held dtype and device, an optional field on every call or on none, and
                room in ``max_tokens``.
        """
        self._check_new(new)
        n, n_new = self._n, new[0].shape[-2]
        self._n = n + n_new
        out = []
        for name, T in zip(self.fields, new, strict=True):
            held = self._held[name]
            if T is None:
                out.append(held)
            elif self.max_tokens is None:  # grow: every held row is copied
                self._held[name] = held = T if held is None else torch.cat((held, T), dim=-2)
                out.append(held)
            else:  # write into the buffer: once, never moved
                if held is None:
                    self._held[name] = held = T.new_empty((*T.shape[:-2], self.max_tokens,
                                                           T.shape[-1]))
                held[..., n : n + n_new, :] = T
                out.append(held[..., : n + n_new, :])
        return tuple(out)

    def _check_new(self, new: tuple) -> None:
        """Raise unless the new rows fit what is held (see :meth:`append`)."""
        first = new[0]
        for name, T in zip(self.fields, new, strict=True):
            held = self._held[name]  # a buffer has the held rows' shape but for the token axis
            if not isinstance(T, torch.Tensor) or held is None or T.dtype != held.dtype or (
                    T.shape[-2] != first.shape[-2] or T.shape[:-2] != held.shape[:-2]
                    or T.shape[-1] != held.shape[-1]):
                self._check_fields(new)  # a first append, an optional field off, or a misfit
                break
        if self.max_tokens is not None and self._n + first.shape[-2] > self.max_tokens:
            names = " and ".join(n for n, T in zip(self.fields, new, strict=True) if T is not None)
            raise ValueError(
                f"{names} must fit in max_tokens={self.max_tokens}: the cache holds {self._n} "
                f"tokens and got {first.shape[-2]} more"
            )

    def _check_fields(self, new: tuple) -> None:
        """Each field's rules: a tensor ``(..., N_new, d)`` (or None for an optional field,
        on every call or on none), the leading shape and token count of the first field, and
        the held shape, dtype and device."""
        first = new[0]
        for name, T in zip(self.fields, new, strict=True):
            held = self._held[name]
            if T is None:
                if name not in self.optional:
                    raise ValueError(f"{name} must be a tensor (..., N_new, d); got None")
            elif not isinstance(T, torch.Tensor) or T.dim() < 2:
                check_tensor(name, T, min_dim=2)  # raises
            elif T.shape[:-1] != first.shape[:-1]:
                raise ValueError(
                    f"{' and '.join(self.fields)} must have the same leading shape and token "
                    f"count; got {self.fields[0]} {tuple(first.shape)} and {name} "
                    f"{tuple(T.shape)}"
                )
            if self._n and name in self.optional and (T is None) != (held is None):
                raise ValueError(
                    f"{name} must be given on every call or on none (decoupled RoPE is on or "
                    f"off); the cache holds {name}: {held is not None}, got {name}: "
                    f"{T is not None}"
                )
            if T is not None and held is not None:
                _check_fits(name, held, T, self._n)

    def reset(self) -> None:
        """Forget every token (a preallocated cache keeps its buffers for the next sequence)."""
        self._n = 0
        if self.max_tokens is None:
            self._held = dict.fromkeys(self.fields)

    def __repr__(self) -> str:
        first = self.held(self.fields[0]) if self.fields else None
        shape = None if first is None else tuple(first.shape)
        if self.max_tokens is None:
            return (f"{type(self).__name__}(n_tokens={self._n}, {self.fields[0]}_shape={shape}, "
                    f"nbytes={self.nbytes})")
        return (f"{type(self).__name__}(n_tokens={self._n}, max_tokens={self.max_tokens}, "
                f"nbytes={self.nbytes}, allocated_nbytes={self.allocated_nbytes})")


class KVCache(Cache):
    """Keys and values of every token seen so far: ``K, V`` of shape ``(..., G, N, d_head)``.

    Pass one instance as ``cache=`` to an attention module; each call appends the new
    tokens' keys (after RoPE) and values and attends over everything held.

    Attributes:
        K: ``(..., G, N, d_head)`` cached keys, or None before the first call.
        V: ``(..., G, N, d_v)`` cached values, or None before the first call.

    Example:
        >>> cache = KVCache()
        >>> K, V = cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> cache.n_tokens, cache.nbytes   # 2 tensors * 2 heads * 3 tokens * 4 * 4 bytes
        (3, 192)

    Lesson: 05_kv_cache.
    """

    fields = ("K", "V")

    def __init__(self, max_tokens: int | None = None) -> None:
        super().__init__(max_tokens)


class StaticKVCache(KVCache):
    """A :class:`KVCache` whose buffers are allocated once and written in place.

    The first :meth:`~Cache.append` allocates ``K`` and ``V`` buffers of shape
    ``(..., G, max_tokens, d)``; every call then writes the new rows into the next free
    positions and returns views of the first ``n_tokens`` rows. No held row is ever copied
    again, where :class:`KVCache`'s ``torch.cat`` copies all of them at every call. The
    outputs are the same: it is usable wherever a :class:`KVCache` is.

    Attributes:
        max_tokens: the most tokens the buffers hold.

    Example:
        >>> cache = StaticKVCache(max_tokens=8)
        >>> K, V = cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> cache.n_tokens, cache.nbytes, cache.allocated_nbytes   # 3 of 8 tokens held
        (3, 192, 512)

    Lesson: 05_kv_cache.
    """

    def __init__(self, max_tokens: int) -> None:
        if max_tokens is None:
            raise TypeError(f"max_tokens must be a positive int for a {type(self).__name__}; "
                            "got None")
        super().__init__(max_tokens)


class LatentCache(Cache):
    """MLA's cache: the latent ``L`` of shape ``(..., N, d_L)`` and the rotated key ``k_R``.

    ``k_R`` (shape ``(..., N, d_R)``) exists only with decoupled RoPE (``d_rope > 0``); it
    is shared by every head. Per token and layer this holds ``d_L + d_R`` numbers, against
    ``2 * H * d_head`` for an MHA cache.

    Attributes:
        L: ``(..., N, d_L)`` cached latents, or None before the first call.
        k_R: ``(..., N, d_R)`` cached rotated keys, or None.

    Example:
        >>> cache = LatentCache()
        >>> L, k_R = cache.append(torch.zeros(1, 3, 4))   # no decoupled RoPE: k_R is None
        >>> cache.n_tokens, cache.nbytes, k_R
        (3, 48, None)

    Lesson: 07_mla.
    """

    fields = ("L", "k_R")
    optional = ("k_R",)

    def __init__(self, max_tokens: int | None = None) -> None:
        super().__init__(max_tokens)

    def append(self, L: torch.Tensor, k_R: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append new latents ``(..., N_new, d_L)`` (and rotated keys ``(..., N_new, d_R)``,
        or None without decoupled RoPE); return ``(L_all, k_R_all)``."""
        return super().append(L, k_R)


class StaticLatentCache(LatentCache):
    """A :class:`LatentCache` whose buffers are allocated once and written in place.

    The latent counterpart of :class:`StaticKVCache`: the first :meth:`~Cache.append`
    allocates ``L`` (and ``k_R``) buffers for ``max_tokens`` tokens, and every call writes
    the new rows into the next free positions; no held row is copied again.

    Attributes:
        max_tokens: the most tokens the buffers hold.

    Example:
        >>> cache = StaticLatentCache(max_tokens=8)
        >>> L, k_R = cache.append(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
        >>> cache.n_tokens, cache.nbytes, cache.allocated_nbytes   # 3 of 8 tokens held
        (3, 72, 192)

    Lesson: 07_mla.
    """

    def __init__(self, max_tokens: int) -> None:
        if max_tokens is None:
            raise TypeError(f"max_tokens must be a positive int for a {type(self).__name__}; "
                            "got None")
        super().__init__(max_tokens)


def _nbytes(T: torch.Tensor | None) -> int:
    return 0 if T is None else T.numel() * T.element_size()


def _check_fits(name: str, held: torch.Tensor, new: torch.Tensor, n_held: int) -> None:
    """``new`` must match ``held`` (``n_held`` rows of it in use) in every dimension but the
    token axis, in dtype and device."""
    if held.shape[:-2] != new.shape[:-2] or held.shape[-1] != new.shape[-1]:
        cached = (*held.shape[:-2], n_held, held.shape[-1])
        raise ValueError(
            f"{name} must match the cached shape in every dimension but the token axis -2: "
            f"cached {cached}, got {tuple(new.shape)}"
        )
    if new.dtype != held.dtype or new.device != held.device:
        raise ValueError(
            f"{name} must match the cache's dtype and device ({held.dtype}, {held.device}); "
            f"got ({new.dtype}, {new.device})"
        )


class WindowCache(KVCache):
    """A :class:`KVCache` holding the keys and values of the last ``window`` tokens.

    :meth:`append` returns the held tokens followed by the new ones (the new queries need
    the ``window - 1`` keys before them), then keeps the last ``window`` of them.
    :attr:`n_tokens` counts every token seen, so positions continue; :attr:`n_held` is how
    many rows are kept, at most ``window``.

    Args:
        window: how many of the most recent tokens to keep (>= 1).
        max_tokens: accepted for the protocol of ``new_cache(max_tokens)`` and ignored: the
            cache never holds more than ``window`` tokens.

    Example:
        >>> cache = WindowCache(window=4)
        >>> for _ in range(6):
        ...     K, V = cache.append(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8))
        >>> cache.n_tokens, cache.n_held, K.shape[-2]
        (6, 4, 5)

    Lesson: 05_kv_cache.
    """

    def __init__(self, window: int, max_tokens: int | None = None) -> None:
        super().__init__()
        self.window = check_positive_int("window", window)

    @property
    def n_held(self) -> int:
        """How many tokens' keys and values are kept (at most ``window``)."""
        K = self._held["K"]
        return 0 if K is None else K.shape[-2]

    def append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the held keys and values followed by the new ones; keep the last ``window``."""
        K_all, V_all = super().append(K, V)  # (..., G, n_held + N_new, d)
        self._held["K"] = K_all[..., -self.window :, :]  # the oldest rows drop out
        self._held["V"] = V_all[..., -self.window :, :]
        return K_all, V_all

    def __repr__(self) -> str:
        return (f"WindowCache(window={self.window}, n_tokens={self.n_tokens}, "
                f"n_held={self.n_held}, nbytes={self.nbytes})")
