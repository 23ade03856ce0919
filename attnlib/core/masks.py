"""Which keys each query may see: boolean masks, ``True`` meaning "may attend".

The convention is PyTorch's (``scaled_dot_product_attention`` reads boolean masks the
same way). Every mask here is *bottom-right aligned*: with ``N_Q`` queries and ``N_KV``
keys, the queries are taken to be the **last** ``N_Q`` positions of the sequence. That is
exactly the situation of decoding with a cache, where a few new queries meet every key
held so far, and it makes ``causal_mask(N, N)`` the usual lower-triangular matrix.

In the kernel view of chapter 04 a mask is the indicator ``1[j in M_i]`` multiplied into
``A`` after the kernel, where ``M_i`` (the book's calligraphic M) is the set of keys query
``i`` may see; masked entries are exact zeros, so they drop out of ``Z`` too.
"""

from __future__ import annotations

import torch

from attnlib._checks import check_padding_mask, check_positive_int, check_tensor

__all__ = [
    "causal_mask",
    "key_padding_mask",
    "position_ids",
    "query_positions",
    "sliding_window_mask",
]


def _sizes(n_q: object, n_kv: object) -> tuple[int, int]:
    """``(N_Q, N_KV)`` checked, with ``n_kv=None`` meaning ``n_q``."""
    n_q = check_positive_int("n_q", n_q)
    return n_q, (n_q if n_kv is None else check_positive_int("n_kv", n_kv))


def query_positions(
    n_q: int,
    n_kv: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Where the queries sit: ``N_KV - N_Q, ..., N_KV - 1``, the last ``N_Q`` positions.

    The alignment of every mask in this module (bottom-right): with a cache, ``N_Q`` new
    queries continue the ``N_KV - N_Q`` tokens held before them. More queries than keys
    gives negative positions, queries before the first key.

    Args:
        n_q: number of queries ``N_Q`` (>= 1).
        n_kv: number of keys ``N_KV`` (>= 1); ``None`` means ``n_q``.
        device: where to build the positions.

    Returns:
        ``(N_Q,)`` long tensor.

    Example:
        >>> query_positions(2, 5)
        tensor([3, 4])

    Lesson: 04_masks_and_layers.
    """
    n_q, n_kv = _sizes(n_q, n_kv)
    return torch.arange(n_kv - n_q, n_kv, device=device)  # bottom-right: the last N_Q positions


def _offsets(n_q: int, n_kv: int, device: torch.device | str | None) -> torch.Tensor:
    """``j - pos(i)`` for every (query, key) pair, with queries at the last positions."""
    pos_q = torch.arange(n_kv - n_q, n_kv, device=device)  # absolute position of query i
    pos_k = torch.arange(n_kv, device=device)
    return pos_k[None, :] - pos_q[:, None]  # (N_Q, N_KV)


def causal_mask(
    n_q: int,
    n_kv: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal mask ``M[i, j] = (j <= i + N_KV - N_Q)``, bottom-right aligned.

    Query ``i`` sits at absolute position ``i + N_KV - N_Q`` and may see every key at or
    before that position. With ``n_kv = n_q`` this is the lower triangle; with fewer
    queries than keys (decoding with a cache) the last query sees every key. With more
    queries than keys the first ``N_Q - N_KV`` rows see nothing and attention returns
    zeros there.

    Args:
        n_q: number of queries ``N_Q`` (>= 1).
        n_kv: number of keys ``N_KV`` (>= 1); ``None`` means ``n_q``.
        device: where to build the mask.

    Returns:
        Bool tensor of shape ``(N_Q, N_KV)``.

    Example:
        >>> causal_mask(2, 4).int()
        tensor([[1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)

    Note:
        ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`` aligns
        top-left instead; the two agree only when ``N_Q = N_KV``.

    Lesson: 04_masks_and_layers.
    """
    n_q, n_kv = _sizes(n_q, n_kv)
    return _offsets(n_q, n_kv, device) <= 0  # key j at or before the query's position


def sliding_window_mask(
    n_q: int,
    n_kv: int | None = None,
    *,
    window: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal sliding window: query at position ``p`` sees keys ``p - window < j <= p``.

    Bottom-right aligned like :func:`causal_mask`; each query sees at most ``window``
    keys, itself included (the local layers of Gemma 3 and Mistral use this shape).

    Args:
        n_q: number of queries ``N_Q``.
        n_kv: number of keys ``N_KV``; ``None`` means ``n_q``.
        window: how many most recent positions each query may see (>= 1).
        device: where to build the mask.

    Returns:
        Bool tensor of shape ``(N_Q, N_KV)``.

    Example:
        >>> sliding_window_mask(4, window=2).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)

    Lesson: 04_masks_and_layers, 05_kv_cache (:mod:`attnlib.layers.sliding`).
    """
    (n_q, n_kv), window = _sizes(n_q, n_kv), check_positive_int("window", window)
    offset = _offsets(n_q, n_kv, device)
    return (offset <= 0) & (offset > -window)


def key_padding_mask(
    lengths: torch.Tensor | list[int], n_kv: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Padding mask from lengths: key ``j`` of sequence ``b`` is real iff ``j < lengths[b]``.

    The result has a singleton query axis so that it broadcasts against attention logits
    of shape ``(B, N_Q, N_KV)``; add one more axis (``mask[:, None]``) for per-head logits
    ``(B, H, N_Q, N_KV)``. The attention modules add the head axis themselves.

    Args:
        lengths: ``(B,)`` integers in ``[0, n_kv]``: the number of real tokens per sequence.
        n_kv: padded length ``N_KV``.
        device: where to build the mask (default: the device of ``lengths``).

    Returns:
        Bool tensor of shape ``(B, 1, N_KV)``.

    Example:
        >>> key_padding_mask([3, 1], 4).int()
        tensor([[[1, 1, 1, 0]],
        <BLANKLINE>
                [[1, 0, 0, 0]]], dtype=torch.int32)

    Lesson: 04_masks_and_layers.
    """
    lengths = _lengths(lengths, check_positive_int("n_kv", n_kv))
    device = lengths.device if device is None else device
    keys = torch.arange(n_kv, device=device)  # (N_KV,)
    return (keys[None, :] < lengths.to(device)[:, None])[:, None, :]  # (B, 1, N_KV)


def _lengths(lengths: object, n_kv: int) -> torch.Tensor:
    """``lengths`` as a 1-D integer tensor with entries in ``[0, n_kv]``."""
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths)
    check_tensor("lengths", lengths, min_dim=1, floating=False)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D with shape (B,); got shape {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers; got dtype {lengths.dtype}")
    if (lengths < 0).any() or (lengths > n_kv).any():
        raise ValueError(f"lengths must lie in [0, n_kv={n_kv}]; got {lengths.tolist()}")
    return lengths


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that count real tokens only: ``cumsum(attention_mask) - 1``, pads at 0.

    A batch of prompts padded on the left, ``attention_mask = [0, 0, 1, 1, 1]`` for a row
    with two pads, gives that row the positions ``[0, 0, 0, 1, 2]``: its real tokens sit at
    ``0, 1, 2, ...`` as if the prompt ran alone. A pad's position is 0; it is never used
    when a mask hides the pads from every query. Hugging Face's ``generate`` computes the
    same from its ``attention_mask``.

    Args:
        attention_mask: ``(..., N)`` bools or 0/1 integers; True/1 = a real token.

    Returns:
        ``(..., N)`` long tensor.

    Example:
        >>> position_ids(torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]]))
        tensor([[0, 1, 2, 3],
                [0, 0, 0, 1]])

    Lesson: 04_masks_and_layers, 05_kv_cache (batched generation).
    """
    attention_mask = check_padding_mask("attention_mask", attention_mask)  # as bools
    counted = attention_mask.long().cumsum(dim=-1) - 1  # real tokens up to each position, minus 1
    return counted.masked_fill(~attention_mask, 0)  # (..., N); pads at 0
