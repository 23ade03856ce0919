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

What the cache saves is arithmetic; :mod:`attnlib.costs` counts it
(:func:`attnlib.costs.decode_step_macs`, :func:`attnlib.costs.generation_macs`).

Queries are never cached: each is used once, by the step that made it. Feeding a sequence
through a module in pieces with a cache gives the same outputs as one causal call over
the whole sequence. Keys are stored *after* RoPE, so a cached key never needs rotating
again. One cache object serves one attention layer, whose ``new_cache(max_tokens)`` makes
the right kind.

``update`` checks what it is given and appends it; the attention modules, which made the
tensors themselves, call the unchecked ``_append``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnlib._checks import check_positive_int, check_tensor

__all__ = ["KVCache", "LatentCache", "StaticKVCache", "StaticLatentCache"]


def _concat(held: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """``new`` after ``held`` along the token axis -2: a new tensor, every held row copied."""
    return new if held is None else torch.cat((held, new), dim=-2)


def _buffer(like: torch.Tensor, max_tokens: int) -> torch.Tensor:
    """An empty ``(..., max_tokens, d)`` buffer with ``like``'s other sizes, dtype and device."""
    return like.new_empty((*like.shape[:-2], max_tokens, like.shape[-1]))


class Rows(NamedTuple):
    """What a cache is about to receive: the shape, dtype and device of the new rows."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


def _rows(name: str, new: object) -> Rows:
    """The :class:`Rows` of a tensor ``new (..., N_new, d)`` handed to ``update``."""
    check_tensor(name, new, min_dim=2)
    return Rows(tuple(new.shape), new.dtype, new.device)


def _check_fits(name: str, held: torch.Tensor | None, new: Rows) -> None:
    """``new`` must match ``held`` in every dimension but the token axis, in dtype and device."""
    if held is None:
        return
    same_rest = held.shape[:-2] == new.shape[:-2] and held.shape[-1] == new.shape[-1]
    if not same_rest:
        raise ValueError(
            f"{name} must match the cached shape in every dimension but the token axis -2: "
            f"cached {tuple(held.shape)}, got {tuple(new.shape)}"
        )
    if new.dtype != held.dtype or new.device != held.device:
        raise ValueError(
            f"{name} must match the cache's dtype and device ({held.dtype}, {held.device}); "
            f"got ({new.dtype}, {new.device})"
        )


def _check_kv_pair(K: Rows, V: Rows) -> None:
    if K.shape[-2] != V.shape[-2] or K.shape[:-2] != V.shape[:-2]:
        raise ValueError(
            "K and V must have the same leading shape and token count; "
            f"got K {tuple(K.shape)} and V {tuple(V.shape)}"
        )


def _nbytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class KVCache:
    """Keys and values of every token seen so far: ``K, V`` of shape ``(..., G, N, d_head)``.

    Pass one instance as ``cache=`` to an attention module; each call appends the new
    tokens' keys (after RoPE) and values and attends over everything held.

    Attributes:
        K: ``(..., G, N, d_head)`` cached keys, or None before the first call.
        V: ``(..., G, N, d_v)`` cached values, or None before the first call.

    Example:
        >>> cache = KVCache()
        >>> K, V = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> cache.n_tokens, cache.nbytes   # 2 tensors * 2 heads * 3 tokens * 4 * 4 bytes
        (3, 192)

    Lesson: 05_kv_cache.
    """

    def __init__(self) -> None:
        self.K: torch.Tensor | None = None
        self.V: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        """Number of tokens held (0 for an empty cache)."""
        return 0 if self.K is None else self.K.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tensors: ``(numel(K) + numel(V)) * element size``."""
        return _nbytes(self.K, self.V)

    def update(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys and values; return everything held.

        Args:
            K: ``(..., G, N_new, d_head)`` keys of the new tokens (already rotated).
            V: ``(..., G, N_new, d_v)`` their values.

        Returns:
            ``(K_all, V_all)`` with ``N_all = n_tokens`` rows.
        """
        self._check_next(_rows("K", K), _rows("V", V))
        return self._append(K, V)

    def _check_next(self, K: Rows, V: Rows) -> None:
        """New keys and values of these shapes fit (an attention module asks before it runs)."""
        _check_kv_pair(K, V)
        _check_fits("K", self.K, K)
        _check_fits("V", self.V, V)

    def _append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.K, self.V = _concat(self.K, K), _concat(self.V, V)
        return self.K, self.V

    def reset(self) -> None:
        """Forget every token."""
        self.K = self.V = None

    def __repr__(self) -> str:
        shape = None if self.K is None else tuple(self.K.shape)
        return f"KVCache(n_tokens={self.n_tokens}, K_shape={shape}, nbytes={self.nbytes})"


class StaticKVCache(KVCache):
    """A :class:`KVCache` whose buffers are allocated once and written in place.

    The first :meth:`update` allocates ``K`` and ``V`` buffers of shape
    ``(..., G, max_tokens, d)``; every call then writes the new rows into the next free
    positions, ``buffer[..., n:n + N_new, :] = new``, and returns views of the first
    ``n_tokens`` rows. No held row is ever copied again, where :class:`KVCache`'s
    ``torch.cat`` copies all of them at every call. The outputs are the same: it is usable
    wherever a :class:`KVCache` is.

    Attributes:
        max_tokens: the most tokens the buffers hold.

    Example:
        >>> cache = StaticKVCache(max_tokens=8)
        >>> K, V = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> cache.n_tokens, cache.nbytes, cache.allocated_nbytes   # 3 of 8 tokens held
        (3, 192, 512)

    Lesson: 05_kv_cache.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self._K: torch.Tensor | None = None  # (..., G, max_tokens, d_head)
        self._V: torch.Tensor | None = None  # (..., G, max_tokens, d_v)
        self._n = 0

    @property
    def K(self) -> torch.Tensor | None:  # type: ignore[override]
        """``(..., G, N, d_head)`` view of the held keys, or None before the first call."""
        return None if self._K is None else self._K[..., : self._n, :]

    @property
    def V(self) -> torch.Tensor | None:  # type: ignore[override]
        """``(..., G, N, d_v)`` view of the held values, or None before the first call."""
        return None if self._V is None else self._V[..., : self._n, :]

    @property
    def n_tokens(self) -> int:
        """Number of tokens held (0 for an empty cache)."""
        return self._n

    @property
    def allocated_nbytes(self) -> int:
        """Bytes of the two buffers, ``max_tokens`` rows each (0 before the first call)."""
        return _nbytes(self._K, self._V)

    def update(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new keys and values after the held ones, in place; return everything held.

        Args:
            K: ``(..., G, N_new, d_head)`` keys of the new tokens (already rotated).
            V: ``(..., G, N_new, d_v)`` their values.

        Returns:
            ``(K_all, V_all)``: views of the buffers with ``N_all = n_tokens`` rows.

        Raises:
            ValueError: the new tokens would not fit in ``max_tokens``, or their shape,
                dtype or device differ from the buffers'.
        """
        self._check_next(_rows("K", K), _rows("V", V))
        return self._append(K, V)

    def _check_next(self, K: Rows, V: Rows) -> None:
        """New keys and values of these shapes fit the buffers and the room left in them."""
        _check_kv_pair(K, V)
        _check_room("K and V", self._n, K.shape[-2], self.max_tokens)
        _check_fits("K", self._K, K)
        _check_fits("V", self._V, V)

    def _append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._K is None or self._V is None:
            self._K, self._V = _buffer(K, self.max_tokens), _buffer(V, self.max_tokens)
        n, n_new = self._n, K.shape[-2]
        self._K[..., n : n + n_new, :] = K  # written once, never moved
        self._V[..., n : n + n_new, :] = V
        self._n = n + n_new
        return self._K[..., : self._n, :], self._V[..., : self._n, :]

    def reset(self) -> None:
        """Forget every token; keep the buffers for the next sequence."""
        self._n = 0

    def __repr__(self) -> str:
        return (f"StaticKVCache(n_tokens={self._n}, max_tokens={self.max_tokens}, "
                f"nbytes={self.nbytes}, allocated_nbytes={self.allocated_nbytes})")


class LatentCache:
    """MLA's cache: the latent ``L`` of shape ``(..., N, d_L)`` and the rotated key ``k_R``.

    ``k_R`` (shape ``(..., N, d_R)``) exists only with decoupled RoPE (``d_rope > 0``); it
    is shared by every head. Per token and layer this holds ``d_L + d_R`` numbers, against
    ``2 * H * d_head`` for an MHA cache.

    Attributes:
        L: ``(..., N, d_L)`` cached latents, or None before the first call.
        k_R: ``(..., N, d_R)`` cached rotated keys, or None.

    Lesson: 07_mla.
    """

    def __init__(self) -> None:
        self.L: torch.Tensor | None = None
        self.k_R: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        """Number of tokens held (0 for an empty cache)."""
        return 0 if self.L is None else self.L.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held: ``(numel(L) + numel(k_R)) * element size``."""
        return _nbytes(self.L, self.k_R)

    def update(
        self, L: torch.Tensor, k_R: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append new latents (and rotated keys); return everything held.

        Args:
            L: ``(..., N_new, d_L)`` latents of the new tokens.
            k_R: ``(..., N_new, d_R)`` their rotated keys, or None without decoupled RoPE.

        Returns:
            ``(L_all, k_R_all)``; ``k_R_all`` is None when no rotated keys are kept.
        """
        self._check_next(_rows("L", L), None if k_R is None else _rows("k_R", k_R))
        return self._append(L, k_R)

    def _check_next(self, L: Rows, k_R: Rows | None) -> None:
        """New latents (and rotated keys) of these shapes fit what the cache holds."""
        _check_latent(self, L, k_R)

    def _append(
        self, L: torch.Tensor, k_R: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.L = _concat(self.L, L)
        if k_R is not None:
            self.k_R = _concat(self.k_R, k_R)
        return self.L, self.k_R

    def reset(self) -> None:
        """Forget every token."""
        self.L = self.k_R = None

    def __repr__(self) -> str:
        shape = None if self.L is None else tuple(self.L.shape)
        return f"LatentCache(n_tokens={self.n_tokens}, L_shape={shape}, nbytes={self.nbytes})"


class StaticLatentCache(LatentCache):
    """A :class:`LatentCache` whose buffers are allocated once and written in place.

    The latent counterpart of :class:`StaticKVCache`: the first :meth:`update` allocates
    ``L`` (and ``k_R``) buffers for ``max_tokens`` tokens, and every call writes the new
    rows into the next free positions; no held row is copied again.

    Attributes:
        max_tokens: the most tokens the buffers hold.

    Example:
        >>> cache = StaticLatentCache(max_tokens=8)
        >>> L, k_R = cache.update(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
        >>> cache.n_tokens, cache.nbytes, cache.allocated_nbytes   # 3 of 8 tokens held
        (3, 72, 192)

    Lesson: 07_mla.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self._L: torch.Tensor | None = None  # (..., max_tokens, d_L)
        self._k_R: torch.Tensor | None = None  # (..., max_tokens, d_R)
        self._n = 0

    @property
    def L(self) -> torch.Tensor | None:  # type: ignore[override]
        """``(..., N, d_L)`` view of the held latents, or None before the first call."""
        return None if self._L is None else self._L[..., : self._n, :]

    @property
    def k_R(self) -> torch.Tensor | None:  # type: ignore[override]
        """``(..., N, d_R)`` view of the held rotated keys, or None."""
        return None if self._k_R is None else self._k_R[..., : self._n, :]

    @property
    def n_tokens(self) -> int:
        """Number of tokens held (0 for an empty cache)."""
        return self._n

    @property
    def allocated_nbytes(self) -> int:
        """Bytes of the buffers, ``max_tokens`` rows each (0 before the first call)."""
        return _nbytes(self._L, self._k_R)

    def update(
        self, L: torch.Tensor, k_R: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Write new latents (and rotated keys) after the held ones, in place.

        Args:
            L: ``(..., N_new, d_L)`` latents of the new tokens.
            k_R: ``(..., N_new, d_R)`` their rotated keys, or None without decoupled RoPE.

        Returns:
            ``(L_all, k_R_all)``: views of the buffers with ``N_all = n_tokens`` rows.
        """
        self._check_next(_rows("L", L), None if k_R is None else _rows("k_R", k_R))
        return self._append(L, k_R)

    def _check_next(self, L: Rows, k_R: Rows | None) -> None:
        """New latents (and rotated keys) fit the buffers and the room left in them."""
        _check_room("L", self._n, L.shape[-2], self.max_tokens)
        _check_latent(self, L, k_R)

    def _append(
        self, L: torch.Tensor, k_R: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self._L is None:
            self._L = _buffer(L, self.max_tokens)
            self._k_R = None if k_R is None else _buffer(k_R, self.max_tokens)
        n, n_new = self._n, L.shape[-2]
        self._L[..., n : n + n_new, :] = L  # written once, never moved
        if k_R is not None:
            self._k_R[..., n : n + n_new, :] = k_R
        self._n = n + n_new
        return self.L, self.k_R

    def reset(self) -> None:
        """Forget every token; keep the buffers for the next sequence."""
        self._n = 0

    def __repr__(self) -> str:
        return (f"StaticLatentCache(n_tokens={self._n}, max_tokens={self.max_tokens}, "
                f"nbytes={self.nbytes}, allocated_nbytes={self.allocated_nbytes})")


def _check_room(name: str, held: int, n_new: int, max_tokens: int) -> None:
    if held + n_new > max_tokens:
        raise ValueError(
            f"{name} must fit in max_tokens={max_tokens}: the cache holds {held} tokens and "
            f"got {n_new} more"
        )


def _check_latent(cache: LatentCache, L: Rows, k_R: Rows | None) -> None:
    """``L`` and ``k_R`` fit each other and what ``cache`` holds."""
    _check_fits("L", cache.L, L)
    if cache.n_tokens > 0 and (k_R is None) != (cache.k_R is None):
        raise ValueError(
            "k_R must be given on every call or on none (decoupled RoPE is on or off); "
            f"the cache holds k_R: {cache.k_R is not None}, got k_R: {k_R is not None}"
        )
    if k_R is not None:
        _check_fits("k_R", cache.k_R, k_R)
        if k_R.shape[:-1] != L.shape[:-1]:
            raise ValueError(
                "k_R must have one row per row of L (same leading shape); "
                f"got L {tuple(L.shape)} and k_R {tuple(k_R.shape)}"
            )

