"""Caches for decoding: keep what every later query will need, and nothing else.

When a decoder generates token ``t``, its query must meet the keys and values of every
earlier token. Those never change, so they are computed once and kept:

* :class:`KVCache` keeps ``K`` and ``V`` per KV head: ``2 * G * d_head`` numbers per token
  and layer (``G = H`` for MHA, ``G = 1`` for MQA).
* :class:`StaticKVCache` keeps the same ``K`` and ``V`` in buffers allocated once for
  ``max_tokens`` tokens and written in place; :class:`KVCache` grows by ``torch.cat``,
  which copies everything it holds at every call.
* :class:`LatentCache` keeps MLA's shared latent ``L = X W_L`` (``d_L`` numbers) and, with
  decoupled RoPE, the one rotated key ``k_R`` (``d_R`` numbers) per token and layer.

What the cache saves is arithmetic; :mod:`attnlib.costs` counts it
(:func:`attnlib.costs.decode_step_macs`, :func:`attnlib.costs.generation_macs`).

Queries are never cached: each is used once, by the step that made it. Feeding a sequence
through a module in pieces with a cache gives the same outputs as one causal call over
the whole sequence. Keys are stored *after* RoPE, so a cached key never needs rotating
again. One cache object serves one attention layer.
"""

from __future__ import annotations

import torch

from attnlib._checks import check_positive_int, check_tensor

__all__ = ["KVCache", "LatentCache", "StaticKVCache"]


def _append(name: str, held: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """Concatenate ``new`` after ``held`` along the token axis -2, after checking they fit."""
    check_tensor(name, new, min_dim=2)
    if held is None:
        return new
    _check_fits(name, held, new)
    return torch.cat((held, new), dim=-2)  # a new tensor: every held row is copied


def _check_fits(name: str, held: torch.Tensor, new: torch.Tensor) -> None:
    """``new`` must match ``held`` in every dimension but the token axis, in dtype and device."""
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


def _check_kv_pair(K: torch.Tensor, V: torch.Tensor) -> None:
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
        _check_kv_pair(K, V)
        self.K = _append("K", self.K, K)
        self.V = _append("V", self.V, V)
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
        check_tensor("K", K, min_dim=2)
        check_tensor("V", V, min_dim=2)
        _check_kv_pair(K, V)
        n_new = K.shape[-2]
        if self._n + n_new > self.max_tokens:
            raise ValueError(
                f"K and V must fit in max_tokens={self.max_tokens}: the cache holds "
                f"{self._n} tokens and got {n_new} more"
            )
        if self._K is None or self._V is None:
            self._K = K.new_empty((*K.shape[:-2], self.max_tokens, K.shape[-1]))
            self._V = V.new_empty((*V.shape[:-2], self.max_tokens, V.shape[-1]))
        _check_fits("K", self._K, K)
        _check_fits("V", self._V, V)
        self._K[..., self._n : self._n + n_new, :] = K  # written once, never moved
        self._V[..., self._n : self._n + n_new, :] = V
        self._n += n_new
        return self.K, self.V

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
        if self.n_tokens > 0 and (k_R is None) != (self.k_R is None):
            raise ValueError(
                "k_R must be given on every call or on none (decoupled RoPE is on or off); "
                f"the cache holds k_R: {self.k_R is not None}, got k_R: {k_R is not None}"
            )
        if k_R is not None and (k_R.shape[:-1] != L.shape[:-1]):
            raise ValueError(
                "k_R must have one row per row of L (same leading shape); "
                f"got L {tuple(L.shape)} and k_R {tuple(k_R.shape)}"
            )
        self.L = _append("L", self.L, L)
        if k_R is not None:
            self.k_R = _append("k_R", self.k_R, k_R)
        return self.L, self.k_R

    def reset(self) -> None:
        """Forget every token."""
        self.L = self.k_R = None

    def __repr__(self) -> str:
        shape = None if self.L is None else tuple(self.L.shape)
        return f"LatentCache(n_tokens={self.n_tokens}, L_shape={shape}, nbytes={self.nbytes})"
