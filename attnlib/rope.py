"""Rotary position embedding (RoPE): rotate pairs of coordinates by position-dependent angles.

Coordinates are grouped in ``d/2`` pairs; pair ``i`` of a vector at position ``m`` turns by
the angle ``m * theta_i`` with ``theta_i = base^(-2i/d)``. A rotation is orthogonal, so

    <R_m q, R_n k> = q^T R_m^T R_n k = q^T R_{n-m} k,

which depends on the offset ``n - m`` only: attention logits see relative position.

Two pairings are in use, and they are not interchangeable on the same weights:

* half-split (attnlib's default; Hugging Face Llama's ``rotate_half``): pair ``i`` is
  coordinates ``(i, i + d/2)``;
* interleaved (the RoFormer paper, Meta's original Llama code): pair ``i`` is
  ``(2i, 2i + 1)``.

They agree after permuting the columns of ``W_Q`` and ``W_K`` with
:func:`rope_permutation`. The rotation turns each pair counter-clockwise:
``(x, y) -> (x cos a - y sin a, x sin a + y cos a)``.

The ``cos`` and ``sin`` tables are computed on every call, from the positions at hand:
nothing is cached between calls, so no table outlives the forward pass that made it or
carries ``torch.inference_mode`` into a later training step.
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import (
    as_positions,
    broadcasts_to,
    check_bool,
    check_even,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from attnlib.device import work_dtype

__all__ = [
    "apply_rope",
    "rope_angles",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_matrix",
    "rope_permutation",
    "rope_positions",
    "rope_rotate",
]


def apply_rope(
    X: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = 10000.0,
    interleaved: bool = False,
) -> torch.Tensor:
    """Rotate each row of ``X`` by its position: ``RoPE(x_m) = R_m x_m``.

    Args:
        X: ``(..., N, d)`` queries or keys (``d`` even); per-head tensors ``(..., H, N, d)``
            work as they are.
        positions: positions of the rows, broadcastable to ``X.shape[:-1]`` (right-aligned):
            ``(N,)`` for one sequence; ``(B, 1, N)`` for per-sequence offsets of
            per-head tensors. Integers or reals; they continue across cache calls.
        base: RoPE base; ``theta_i = base^(-2i/d)``.
        interleaved: pair ``(2i, 2i+1)`` when True, ``(i, i + d/2)`` when False.

    Returns:
        ``(..., N, d)``, same dtype as ``X`` (angles in float64, the rotation in float32
        or wider).

    Equivalent to ``q * cos + rotate_half(q) * sin`` in Hugging Face's Llama for
    ``interleaved=False``.

    Example:
        >>> x = torch.tensor([[1.0, 0.0]])
        >>> apply_rope(x, torch.tensor([1]), base=10000.0)  # one pair, theta_0 = 1
        tensor([[0.5403, 0.8415]])

    Lesson: 08_rope.
    """
    _check_rope_inputs(X, positions, base, interleaved)
    return _apply_rope(X, positions, base=base, interleaved=interleaved)


def _apply_rope(
    X: torch.Tensor, positions: torch.Tensor, *, base: float = 10000.0, interleaved: bool = False
) -> torch.Tensor:
    positions = torch.as_tensor(positions, device=X.device)
    cos, sin = _rope_cos_sin(positions, X.shape[-1], base=base, dtype=work_dtype(X.dtype))
    return rope_rotate(X, cos, sin, interleaved=interleaved)


apply_rope.unchecked = _apply_rope


def rope_rotate(
    X: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False
) -> torch.Tensor:
    """Turn each pair ``(x, y)`` of ``X`` to ``(x cos - y sin, x sin + y cos)``.

    Compute ``cos`` and ``sin`` once (:func:`rope_cos_sin`) and rotate the queries and
    the keys of a forward pass with them. A building block for callers that checked their
    inputs (the attention modules): it checks nothing; :func:`apply_rope` is the checked
    way in.

    Args:
        X: ``(..., N, d)``.
        cos: ``(..., N, d/2)``, broadcastable against the pairs of ``X``.
        sin: same shape as ``cos``.
        interleaved: pair ``(2i, 2i+1)`` when True, ``(i, i + d/2)`` when False.

    Returns:
        ``(..., N, d)`` in the dtype of ``X`` (computed in the dtype of ``cos``).

    Lesson: 08_rope.
    """
    d = X.shape[-1]
    Xw = X.to(cos.dtype)
    x, y = (Xw[..., 0::2], Xw[..., 1::2]) if interleaved else (Xw[..., : d // 2], Xw[..., d // 2 :])
    rx, ry = x * cos - y * sin, x * sin + y * cos  # (..., N, d/2) each: the rotated pairs
    out = torch.stack((rx, ry), dim=-1).flatten(-2) if interleaved else torch.cat((rx, ry), -1)
    return out.to(X.dtype)


def rope_cos_sin(
    positions: torch.Tensor, d: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of every pair's angle ``m * theta_i``, ``(..., N, d/2)`` each.

    Args:
        positions: ``(..., N)`` positions ``m``.
        d: rotated width (even).
        base: RoPE base.
        dtype: dtype of the results (the angles themselves are float64).

    Returns:
        ``(cos, sin)``, each ``(..., N, d/2)`` in ``dtype``.

    Lesson: 08_rope.
    """
    _check_angle_inputs(positions, d, base)
    return _rope_cos_sin(positions, d, base=base, dtype=dtype)


def _rope_cos_sin(
    positions: torch.Tensor, d: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    angles = _rope_angles(positions, d, base=base)  # (..., N, d/2), float64
    return angles.cos().to(dtype), angles.sin().to(dtype)


rope_cos_sin.unchecked = _rope_cos_sin


def rope_angles(positions: torch.Tensor, d: int, *, base: float = 10000.0) -> torch.Tensor:
    """Angles ``positions[..., None] * theta`` of every pair (float64).

    Args:
        positions: ``(...)`` integer or float positions.
        d: rotated width (even).
        base: RoPE base.

    Returns:
        ``(..., d/2)`` float64 (float32 on MPS, which has no float64).

    Lesson: 08_rope.
    """
    _check_angle_inputs(positions, d, base)
    return _rope_angles(positions, d, base=base)


def _rope_angles(positions: torch.Tensor, d: int, *, base: float = 10000.0) -> torch.Tensor:
    theta = _rope_frequencies(d, base=base, device=positions.device)  # (d/2,)
    return positions.to(theta.dtype)[..., None] * theta


def rope_frequencies(
    d: int, *, base: float = 10000.0, device: torch.device | str | None = None
) -> torch.Tensor:
    """The ``d/2`` angular frequencies ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2 - 1`` (float64).

    Args:
        d: rotated width (even).
        base: RoPE base (10,000 in RoFormer; 500,000 in Llama 3).
        device: where to build them.

    Returns:
        ``(d/2,)`` float64 (float32 on MPS), from 1 down to ``base^(-(d-2)/d)``.

    Example:
        >>> rope_frequencies(4, base=100.0)
        tensor([1.0000, 0.1000], dtype=torch.float64)

    Lesson: 08_rope.
    """
    _check_width(d)
    check_positive_float("base", base)
    return _rope_frequencies(d, base=base, device=device)


def _rope_frequencies(
    d: int, *, base: float = 10000.0, device: torch.device | str | None = None
) -> torch.Tensor:
    device = torch.device("cpu") if device is None else torch.device(device)
    # Angles in float64 keep m * theta accurate at large positions; MPS has no float64.
    dtype = torch.float32 if device.type == "mps" else torch.float64
    i = torch.arange(d // 2, dtype=dtype, device=device)
    return float(base) ** (-2.0 * i / d)


def rope_positions(
    positions: torch.Tensor | None,
    n: int,
    *,
    start: int = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Positions for per-head tensors ``(..., H, N, d)``: ``(N,)``, or ``(B, 1, N)`` per sequence.

    An attention module takes ``positions`` as ``(N,)`` or ``(B, N)``; the head axis is
    inserted here so they broadcast against ``(B, H, N, d)``. ``None`` means the next
    ``n`` positions after ``start`` tokens (a cache's ``n_tokens``). A building block for
    the attention modules, which checked ``positions``: it checks nothing.

    Args:
        positions: ``(N,)``, ``(B, N)`` or None.
        n: ``N``, the number of new tokens.
        start: the first default position.
        device: where the default positions are built.

    Returns:
        ``(N,)`` or ``(B, 1, N)``.

    Example:
        >>> rope_positions(None, 3, start=5)
        tensor([5, 6, 7])

    Lesson: 08_rope.
    """
    if positions is None:
        return torch.arange(start, start + n, device=device)
    positions = torch.as_tensor(positions, device=device)
    return positions if positions.dim() == 1 else positions[:, None, :]


def rope_matrix(
    position: float,
    d: int,
    *,
    base: float = 10000.0,
    interleaved: bool = False,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The ``d x d`` rotation ``R_m`` with ``apply_rope(x, m) = x @ R_m.T`` for a row ``x``.

    Block diagonal with 2 x 2 rotations ``[[cos, -sin], [sin, cos]]`` of angle
    ``m * theta_i`` on each pair (which coordinates pair up depends on ``interleaved``).

    Args:
        position: ``m``.
        d: width (even).
        base: RoPE base.
        interleaved: pairing convention.
        dtype: floating dtype of the result.

    Returns:
        ``(d, d)`` orthogonal matrix.

    Lesson: 08_rope.
    """
    angles = float(position) * rope_frequencies(d, base=base)  # (d/2,); checks d and base
    R = torch.zeros(d, d, dtype=torch.float64)
    for i, a in enumerate(angles.tolist()):
        p, q = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        c, s = math.cos(a), math.sin(a)
        R[p, p], R[p, q], R[q, p], R[q, q] = c, -s, s, c
    return R.to(dtype)


def rope_permutation(d: int) -> torch.Tensor:
    """The column order that turns interleaved RoPE into half-split RoPE.

    ``perm = (0, 2, 4, ..., d-2, 1, 3, ..., d-1)`` satisfies

        apply_rope(X[..., perm], p) == apply_rope(X, p, interleaved=True)[..., perm],

    so a model trained with one pairing runs with the other once the columns of each
    head's ``W_Q`` and ``W_K`` are permuted by ``perm``; the logits do not change, since a
    shared permutation of coordinates leaves dot products alone.

    Args:
        d: head width (even).

    Returns:
        ``(d,)`` long tensor.

    Example:
        >>> rope_permutation(6)
        tensor([0, 2, 4, 1, 3, 5])

    Lesson: 08_rope.
    """
    _check_width(d)
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))


def _check_width(d: object) -> None:
    check_positive_int("d", d)
    check_even("d", d, "RoPE rotates coordinates in pairs")


def _check_angle_inputs(positions: object, d: object, base: object) -> None:
    check_tensor("positions", positions, min_dim=0, floating=False)
    _check_width(d)
    check_positive_float("base", base)


def _check_rope_inputs(X: object, positions: object, base: object, interleaved: object) -> None:
    check_tensor("X", X, min_dim=2)
    check_even("X.shape[-1]", X.shape[-1], "RoPE rotates coordinates in pairs")
    check_positive_float("base", base)
    check_bool("interleaved", interleaved)
    shape = tuple(as_positions(positions, X.device).shape)
    if not broadcasts_to(shape, X.shape[:-1]):
        raise ValueError(
            f"positions must broadcast to X.shape[:-1] = {tuple(X.shape[:-1])} "
            f"(one position per row of X); got shape {shape}"
        )
