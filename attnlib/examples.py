"""The lessons' small fixed examples, shared by their figures and their exercise checks.

Each example is data (or one seeded draw) and nothing else, so that the exercise checks of
:mod:`attnlib.exercises` can use it without loading the figure libraries of
:mod:`attnlib.viz`:

- lesson 01's toy database, five keys :data:`KEYS` and five values :data:`VALUES` in
  ``R^2`` (small enough to draw);
- lesson 03's toy multi-head layer, :func:`draw_layer`: one seeded draw, in float64 on the
  CPU from ``torch.Generator().manual_seed(seed)``, in this order: ``X`` of shape
  ``(N, d_in)`` with standard normal entries, then ``W_Q``, ``W_K``, ``W_V`` of shape
  ``(d_in, WIDE)`` and ``W_O`` of shape ``(WIDE, d_in)``, with normal entries of variance
  ``1/d_in`` (``1/WIDE`` for ``W_O``). A layer with ``H`` heads of width ``d_head`` keeps
  the first ``H d_head`` columns of ``W_Q``, ``W_K``, ``W_V`` and the first ``H d_head``
  rows of ``W_O``. Head ``h`` is the column block ``h d_head .. (h + 1) d_head - 1``, so at
  a fixed ``d_head`` adding heads keeps the old heads and appends new ones.

Lessons: 01_attention_as_lookup, 03_multi_head_attention.
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import check_positive_int

__all__ = ["D_IN", "KEYS", "SERVING_REQUESTS", "TOKENS", "VALUES", "WIDE", "draw_layer"]

KEYS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
"""Lesson 01's toy database: its keys ``k_0, ..., k_4`` (rows), ``N_KV = 5``, ``d_QK = 2``."""

VALUES = torch.tensor([[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [1.0, 4.0], [3.0, 1.0]])
"""Lesson 01's toy database: its values ``v_0, ..., v_4`` (rows), ``d_V = 2``; ``v_4`` lies
inside the convex hull of the other four."""

SERVING_REQUESTS = ((5, 12, 0), (17, 4, 0), (3, 20, 1), (11, 6, 3), (8, 9, 4), (2, 15, 6))
"""Lesson 11's six requests: (prompt characters, characters to generate, arrival step)."""

D_IN = 16
"""Lesson 03's toy layer: the input width ``d_in``."""

TOKENS: tuple[str, ...] = ("the", "cat", "sat", "on", "a", "mat")
"""Lesson 03's toy layer: labels of its tokens; their rows of ``X`` are random (see above)."""

WIDE = 128
"""Columns drawn for ``W_Q``, ``W_K``, ``W_V`` (rows of ``W_O``): ``H d_head`` may not exceed it."""


def draw_layer(
    n_heads: int, d_head: int, *, d_in: int = D_IN, n_tokens: int = len(TOKENS), seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lesson 03's toy multi-head layer and its input: ``X, W_Q, W_K, W_V, W_O`` (float64, CPU).

    See the module docstring for the draw. Head ``h`` owns columns
    ``h d_head .. (h + 1) d_head - 1`` of ``W_Q``, ``W_K``, ``W_V`` and the same rows of
    ``W_O``.

    Args:
        n_heads: ``H``.
        d_head: ``d_head``; ``H d_head`` at most :data:`WIDE`.
        d_in: input (and output) width.
        n_tokens: ``N``, rows of ``X``.
        seed: seed of the generator.

    Returns:
        ``X (N, d_in)``, ``W_Q``, ``W_K``, ``W_V`` ``(d_in, H d_head)``, ``W_O (H d_head, d_in)``.

    Example:
        >>> X, W_Q, W_K, W_V, W_O = draw_layer(2, 3, d_in=6, n_tokens=4)
        >>> X.shape, W_Q.shape, W_O.shape
        (torch.Size([4, 6]), torch.Size([6, 6]), torch.Size([6, 6]))

    Lesson: 03_multi_head_attention.
    """
    _check_layer(n_heads, d_head, d_in, n_tokens)
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n_tokens, d_in, generator=gen, dtype=torch.float64)
    W_Q, W_K, W_V = (torch.randn(d_in, WIDE, generator=gen, dtype=torch.float64)
                     / math.sqrt(d_in) for _ in range(3))
    W_O = torch.randn(WIDE, d_in, generator=gen, dtype=torch.float64) / math.sqrt(WIDE)
    width = n_heads * d_head
    return X, W_Q[:, :width], W_K[:, :width], W_V[:, :width], W_O[:width]


def _check_layer(n_heads: int, d_head: int, d_in: int, n_tokens: int) -> None:
    for name, value in (("n_heads", n_heads), ("d_head", d_head), ("d_in", d_in),
                        ("n_tokens", n_tokens)):
        check_positive_int(name, value)
    if n_heads * d_head > WIDE:
        raise ValueError(f"n_heads * d_head must be at most WIDE = {WIDE}; got "
                         f"{n_heads} * {d_head} = {n_heads * d_head}")
