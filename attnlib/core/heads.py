"""Heads are column blocks: splitting, merging and the grouped-query map.

A projection ``X @ W_Q`` with ``W_Q`` of shape ``(d_in, H * d_head)`` computes every head
at once; "splitting into heads" only reshapes its output columns into ``H`` blocks of
``d_head``. Every head reads the same full ``X`` (the input is never partitioned).

Grouped-query attention keeps ``G`` key/value heads for ``H`` query heads. With group
size ``s = H // G``, query head ``h`` (0-based) reads KV head ``h // s``; the paper writes
the same map 1-based as ``g(h) = floor((h - 1) / s) + 1``. ``G = H`` is multi-head
attention (MHA) and ``G = 1`` is multi-query attention (MQA).
"""

from __future__ import annotations

import torch

from attnlib._checks import check_divisible, check_positive_int, check_tensor

__all__ = ["kv_head_index", "merge_heads", "repeat_kv", "split_heads"]


def split_heads(X: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reshape ``(..., N, H * d_head)`` into ``(..., H, N, d_head)``.

    Column block ``h`` (columns ``h * d_head`` to ``(h + 1) * d_head - 1``) becomes head
    ``h``: the layout of ``W_Q = (W_Q^0 | ... | W_Q^{H-1})``.

    Args:
        X: ``(..., N, H * d_head)``, e.g. ``X @ W_Q``.
        n_heads: ``H``; must divide the last dimension.

    Returns:
        ``(..., H, N, d_head)`` (a view when possible).

    Example:
        >>> split_heads(torch.zeros(2, 5, 12), 3).shape
        torch.Size([2, 3, 5, 4])

    Lesson: 03_multi_head_attention.
    """
    if not isinstance(X, torch.Tensor) or type(n_heads) is not int or n_heads < 1 or (
            X.dim() < 2 or X.shape[-1] % n_heads):
        _check_split(X, n_heads)  # raises, naming the argument, the rule and the value
    return X.reshape(*X.shape[:-1], n_heads, -1).transpose(-3, -2)  # (..., H, N, d_head)


def merge_heads(Y: torch.Tensor) -> torch.Tensor:
    """Reshape ``(..., H, N, d_head)`` into ``(..., N, H * d_head)``: ``concat_col(Y_h)``.

    The inverse of :func:`split_heads`; its output is what ``W_O`` multiplies.

    Args:
        Y: ``(..., H, N, d_head)``.

    Returns:
        ``(..., N, H * d_head)``.

    Lesson: 03_multi_head_attention.
    """
    if not isinstance(Y, torch.Tensor) or Y.dim() < 3:
        check_tensor("Y", Y, min_dim=3, floating=False)  # raises
    return Y.transpose(-3, -2).flatten(-2)  # (..., N, H, d_head) -> (..., N, H * d_head)


def kv_head_index(
    n_heads: int,
    n_kv_heads: int,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The group map: entry ``h`` is the KV head that query head ``h`` reads, ``h // (H // G)``.

    Args:
        n_heads: ``H`` query heads.
        n_kv_heads: ``G`` key/value heads; must divide ``H``.
        device: where to build the index.

    Returns:
        ``(H,)`` long tensor.

    Example:
        >>> kv_head_index(8, 2)
        tensor([0, 0, 0, 0, 1, 1, 1, 1])

    Lesson: 06_gqa.
    """
    _check_group(n_heads, n_kv_heads)
    return torch.arange(n_heads, device=device) // (n_heads // n_kv_heads)  # h -> h // s


def repeat_kv(KV: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Give each query head its group's keys (or values): ``(..., G, N, d) -> (..., H, N, d)``.

    Equivalent to ``KV.index_select(-3, kv_head_index(H, G))`` and to
    ``KV.repeat_interleave(H // G, dim=-3)``: consecutive query heads share a KV head.

    Args:
        KV: ``(..., G, N, d)`` keys or values, one per KV head.
        n_heads: ``H``; a multiple of ``G``.

    Returns:
        ``(..., H, N, d)``.

    Lesson: 06_gqa.
    """
    _check_repeat(KV, n_heads)
    g = KV.shape[-3]
    if g == n_heads:
        return KV
    *batch, _, n, d = KV.shape
    s = n_heads // g
    return KV.unsqueeze(-3).expand(*batch, g, s, n, d).reshape(*batch, n_heads, n, d)  # a copy


def _check_split(X: object, n_heads: object) -> None:
    check_tensor("X", X, min_dim=2, floating=False)
    check_positive_int("n_heads", n_heads)
    check_divisible("X.shape[-1]", X.shape[-1], "n_heads", n_heads)


def _check_group(n_heads: object, n_kv_heads: object) -> None:
    check_positive_int("n_heads", n_heads)
    check_positive_int("n_kv_heads", n_kv_heads)
    check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)


def _check_repeat(KV: object, n_heads: object) -> None:
    check_tensor("KV", KV, min_dim=3, floating=False)
    check_positive_int("n_heads", n_heads)
    check_divisible("n_heads", n_heads, "the number of KV heads KV.shape[-3]", KV.shape[-3])
