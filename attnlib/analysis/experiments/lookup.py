"""The experiments of lesson 01 as tables: a query against the toy database, its kernels.

The lesson's toy database has five keys and five values, both in ``R^2`` so that they can
be drawn: :data:`attnlib.examples.KEYS` and :data:`attnlib.examples.VALUES`. A query of
length ``length`` at ``angle`` degrees, ``q = length (cos angle, sin angle)``
(:func:`query_at`), is scored against every key; the weight row ``P[0, :] = Z^-1 A[0, :]``
and the output ``y = P[0, :] V`` follow (:func:`weights_and_output`). Every output lies in
the convex hull of the values (:func:`convex_hull`). The figures of
:mod:`attnlib.viz.lookup` draw the same numbers.

Lesson: 01_attention_as_lookup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pandas as pd
import torch

from attnlib._checks import check_positive_float
from attnlib.core.functional import attention, attention_weights

__all__ = ["Kernel", "convex_hull", "kernel_table", "query_at", "weights_and_output"]


Kernel = str | Callable[[torch.Tensor], torch.Tensor]


def query_at(angle: float, length: float = 2.0) -> torch.Tensor:
    """The query ``q = length (cos angle, sin angle)`` as a ``(1, 2)`` float64 row.

    Args:
        angle: direction in degrees, counter-clockwise from the first axis.
        length: the query's Euclidean norm.

    Example:
        >>> query_at(90.0, 2.0)
        tensor([[0., 2.]], dtype=torch.float64)
    """
    check_positive_float("length", length)
    rad = math.radians(angle)
    cos, sin = round(math.cos(rad), 12), round(math.sin(rad), 12)  # exact zeros at 90°, 180°
    return torch.tensor([[length * cos, length * sin]], dtype=torch.float64)


def weights_and_output(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, kernel: Kernel, scale: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``P[0, :]`` and ``y`` for one query, in float64 on the CPU."""
    K = keys.detach().to("cpu", torch.float64)
    V = values.detach().to("cpu", torch.float64)
    P = attention_weights(q, K, kernel=kernel, scale=scale)[0]  # (N_KV,)
    y = attention(q, K, V, kernel=kernel, scale=scale, impl="explicit")[0]  # (d_V,)
    return P, y


def kernel_table(
    query: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    kernels: Mapping[str, Kernel],
    *,
    scale: float | None = None,
) -> pd.DataFrame:
    """The same lookup under several kernels: weight row, output, largest weight, zeros.

    Args:
        query: ``(1, d_QK)`` one query.
        K: ``(N_KV, d_QK)`` keys.
        V: ``(N_KV, d_V)`` values.
        kernels: display name -> a name in :data:`attnlib.KERNELS` or a callable ``f``.
        scale: multiplies the dot products; ``1/sqrt(d_QK)`` when ``None``.

    Returns:
        pd.DataFrame: one row per kernel; columns ``key 0`` ... ``key N_KV - 1`` (the
        weights ``P[0, j]``), ``y[0]`` ... ``y[d_V - 1]`` (the output), ``largest weight`` and
        ``zero weights``; numbers rounded to 4 decimals.
    """
    if not isinstance(query, torch.Tensor) or query.dim() != 2 or query.shape[0] != 1:
        got = tuple(query.shape) if isinstance(query, torch.Tensor) else type(query).__name__
        raise ValueError(f"query must have shape (1, d_QK); got {got}")
    q = query.detach().to("cpu", torch.float64)
    rows = {}
    for name, kernel in kernels.items():
        P, y = weights_and_output(q, K, V, kernel, scale)
        row = {f"key {j}": round(float(w), 4) for j, w in enumerate(P)}
        row |= {f"y[{c}]": round(float(v), 4) for c, v in enumerate(y)}
        row["largest weight"] = round(float(P.max()), 4)
        row["zero weights"] = int((P == 0).sum())
        rows[name] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("kernel")


def convex_hull(points: torch.Tensor) -> list[int]:
    """Indices of the vertices of the convex hull of 2-D ``points``, counter-clockwise.

    Andrew's monotone chain: sort the points, then build the lower and the upper chain,
    dropping every point that makes a clockwise (or straight) turn. Points on an edge are
    not vertices.

    Args:
        points: ``(n, 2)``.

    Returns:
        list[int]: row indices of ``points``, counter-clockwise, starting from the
        lowest-leftmost point.

    Example:
        >>> convex_hull(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.5, 0.2], [0.0, 1.0]]))
        [0, 1, 3]
    """
    if not isinstance(points, torch.Tensor) or points.dim() != 2 or points.shape[1] != 2:
        got = tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__
        raise ValueError(f"points must be a tensor of shape (n, 2); got {got}")
    pts = points.detach().to("cpu", torch.float64).tolist()
    order = sorted(range(len(pts)), key=lambda i: (pts[i][0], pts[i][1]))
    if len(order) < 3:
        return order

    def turn(o: int, a: int, b: int) -> float:  # > 0: counter-clockwise turn o -> a -> b
        return ((pts[a][0] - pts[o][0]) * (pts[b][1] - pts[o][1])
                - (pts[a][1] - pts[o][1]) * (pts[b][0] - pts[o][0]))

    def chain(indices: list[int]) -> list[int]:
        out: list[int] = []
        for i in indices:
            while len(out) >= 2 and turn(out[-2], out[-1], i) <= 1e-12:
                out.pop()
            out.append(i)
        return out

    lower, upper = chain(order), chain(order[::-1])
    return lower[:-1] + upper[:-1]
