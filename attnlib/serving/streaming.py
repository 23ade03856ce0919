"""A rolling KV cache with attention sinks: keep the first tokens and the last ``w``.

A cache that keeps only the last ``w`` tokens (:class:`attnlib.serving.cache.WindowCache`) caps
memory, but a model trained with full attention was never asked to do without its first
tokens, on which many heads park the attention they do not need (Xiao et al., StreamingLLM,
"attention sinks"). :class:`SinkCache` keeps the first ``n_sink`` tokens as well as the
last ``window``: ``n_sink + window`` rows per layer at most, whatever the length.

Keys are cached after RoPE, so each kept key keeps its own position and the query its
own: the distances inside the window are the true ones. (StreamingLLM instead renumbers
the positions inside the cache; here nothing is rotated twice.)

An evicted token is gone from the cache, not from what the cache holds: the keys and
values of layer ``l > 1`` were computed from a residual stream that read the evicted
tokens when it was written. Recomputing the kept tokens from scratch
(:func:`recomputed_logits`) forgets them; the rolling cache does not (:func:`rolling_logits`
and :func:`held_values`).

Lesson: 11_serving.
"""

from __future__ import annotations

import torch

from attnlib._checks import (
    check_nonnegative_int,
    check_positive_int,
    check_tensor,
    checked_call,
)
from attnlib.serving.cache import WindowCache

__all__ = ["SinkCache", "held_values", "kept_positions", "recomputed_logits", "rolling_logits"]


class SinkCache(WindowCache):
    """Keys and values of the first ``n_sink`` tokens and of the last ``window`` tokens.

    :meth:`append` evicts every row that is neither among the first ``n_sink`` tokens seen
    nor among the last ``window``; decoding one token at a time, each query reads exactly
    those. A prompt appended in one piece is read in full by its own queries (the
    prefill); eviction applies from then on. With ``n_sink=0`` it holds what
    :class:`~attnlib.serving.cache.WindowCache` holds.

    Example:
        >>> cache = SinkCache(window=3, n_sink=2)
        >>> for t in range(7):
        ...     _ = cache.append(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
        >>> cache.K.flatten().tolist(), cache.n_tokens   # tokens 0, 1 and 4, 5, 6
        ([0.0, 1.0, 4.0, 5.0, 6.0], 7)
    """

    def __init__(self, window: int, n_sink: int = 4, max_tokens: int | None = None) -> None:
        super().__init__(window)
        self.n_sink = check_nonnegative_int("n_sink", n_sink)

    def append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return what the new queries read: the sinks, then the last ``window + N_new - 1``
        rows (one new token reads the sinks and the last ``window`` tokens, itself
        included); keep the sinks and the last ``window``."""
        K_all, V_all = super(WindowCache, self).append(K, V)
        n, n_new = K_all.shape[-2], K.shape[-2]
        sinks = min(self.n_sink, self._n)  # the first tokens seen are the first rows held

        def cut(last: int) -> torch.Tensor | None:
            if n <= sinks + last:
                return None
            return torch.tensor(list(range(sinks)) + list(range(n - last, n)),
                                device=K_all.device)

        keep = cut(self.window)
        if keep is not None:
            self._held["K"] = K_all.index_select(-2, keep)
            self._held["V"] = V_all.index_select(-2, keep)
        read = cut(self.window + n_new - 1)
        if read is None:
            return K_all, V_all
        return K_all.index_select(-2, read), V_all.index_select(-2, read)

    def __repr__(self) -> str:
        return (f"SinkCache(window={self.window}, n_sink={self.n_sink}, "
                f"n_tokens={self.n_tokens}, n_held={self.n_held})")


def kept_positions(p: int, window: int, n_sink: int) -> list[int]:
    """The positions a query at ``p`` reads through a :class:`SinkCache`, itself included.

    Example:
        >>> kept_positions(9, window=3, n_sink=2)
        [0, 1, 7, 8, 9]
    """
    if p + 1 <= n_sink + window:
        return list(range(p + 1))
    return list(range(n_sink)) + list(range(p + 1 - window, p + 1))


def _check(model, ids, window, n_sink) -> None:
    check_tensor("ids", ids, min_dim=2, floating=False)
    check_positive_int("window", window)
    check_nonnegative_int("n_sink", n_sink)


@torch.no_grad()
def rolling_logits(model, ids: torch.Tensor, *, window: int | None, n_sink: int = 0,
                   return_caches: bool = False):
    """Logits ``(B, N, V)`` of ``ids (B, N)`` decoded one token at a time through rolling caches.

    Each step feeds one token into a :class:`SinkCache` per layer (``window=None``: a full
    :class:`~attnlib.serving.cache.KVCache`), so the query at position ``p`` reads the tokens of
    :func:`kept_positions` in every layer. With ``return_caches`` the caches come back too.
    """
    from attnlib.serving.cache import KVCache

    _check(model, ids, window or 1, n_sink)
    caches = [KVCache() if window is None else SinkCache(window, n_sink) for _ in model.blocks]
    model.check(ids, caches)  # what every step below passes: the ids, the caches
    with checked_call():
        out = [model(ids[:, t:t + 1], caches=caches) for t in range(ids.shape[1])]
    logits = torch.cat(out, dim=1)
    return (logits, caches) if return_caches else logits


@torch.no_grad()
def recomputed_logits(model, ids: torch.Tensor, *, window: int, n_sink: int = 0,
                      chunk: int = 16) -> torch.Tensor:
    """Logits ``(B, N, V)`` where position ``p`` runs the model afresh on its kept tokens only.

    For each ``p`` the tokens of :func:`kept_positions` are fed as a new sequence (positions
    ``0 .. m - 1``), and its last logits are taken: what the kept tokens say without
    anything an evicted token wrote into the residual stream. ``chunk`` positions share
    a forward pass, each as rows of its own.
    """
    _check(model, ids, window, n_sink)
    B, N = ids.shape
    m = n_sink + window  # every position from m - 1 on reads m tokens
    head = model(ids[:, :m])  # (B, min(N, m), V): nothing evicted yet
    if N <= m:
        return head
    rows = [ids[:, torch.tensor(kept_positions(p, window, n_sink), device=ids.device)]
            for p in range(m, N)]  # each (B, m)
    fresh = []
    for i in range(0, len(rows), chunk):  # several positions per pass, each its own row
        part = torch.cat(rows[i:i + chunk], dim=0)  # (B * positions, m)
        fresh.append(model(part)[:, -1].reshape(-1, B, head.shape[-1]))
    tail = torch.cat(fresh, dim=0).transpose(0, 1)  # (B, N - m, V)
    return torch.cat((head, tail), dim=1)


@torch.no_grad()
def held_values(model, ids: torch.Tensor, *, window: int, n_sink: int = 0
                ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each layer's values held after decoding ``ids (B, N)`` through rolling caches, and the
    values the same kept tokens get when recomputed from scratch: two lists of
    ``(B, G, n_held, d)``. Values carry no rotation, so the first layer's agree exactly."""
    _check(model, ids, window, n_sink)
    _, caches = rolling_logits(model, ids, window=window, n_sink=n_sink, return_caches=True)
    kept = torch.tensor(kept_positions(ids.shape[1] - 1, window, n_sink), device=ids.device)
    fresh = model.new_caches()
    model(ids[:, kept], caches=fresh)
    return [c.V for c in caches], [c.V for c in fresh]
