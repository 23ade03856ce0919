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
"""

from __future__ import annotations

import functools
import math

import torch

from attnlib._checks import check_even, check_positive_float, check_positive_int, check_tensor

__all__ = [
    "apply_rope",
    "rope_angles",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_matrix",
    "rope_permutation",
]

_HALF = (torch.float16, torch.bfloat16)


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

    Lesson: 08_rope.
    """
    check_positive_int("d", d)
    check_even("d", d, "RoPE rotates coordinates in pairs")
    base = check_positive_float("base", base)
    device = torch.device("cpu") if device is None else torch.device(device)
    return _frequencies(d, base, device).clone()


@functools.lru_cache(maxsize=64)
def _frequencies(d: int, base: float, device: torch.device) -> torch.Tensor:
    """Cached ``theta``; decoding asks for the same frequencies at every step."""
    i = torch.arange(d // 2, dtype=torch.float64)
    return (base ** (-2.0 * i / d)).to(device=device, dtype=_angle_dtype(device))


def _angle_dtype(device: torch.device) -> torch.dtype:
    # Angles in float64 keep m * theta accurate at large positions; MPS has no float64.
    return torch.float32 if device.type == "mps" else torch.float64


def rope_angles(
    positions: torch.Tensor, d: int, *, base: float = 10000.0
) -> torch.Tensor:
    """Angles ``positions[..., None] * theta`` of every pair (float64).

    Args:
        positions: ``(...)`` integer or float positions.
        d: rotated width (even).
        base: RoPE base.

    Returns:
        ``(..., d/2)`` float64 (float32 on MPS, which has no float64).

    Lesson: 08_rope.
    """
    check_positive_int("d", d)
    check_even("d", d, "RoPE rotates coordinates in pairs")
    theta = _frequencies(d, check_positive_float("base", base), positions.device)
    return positions.to(theta.dtype)[..., None] * theta


def _positions(positions: object, X: torch.Tensor) -> torch.Tensor:
    if not isinstance(positions, torch.Tensor):
        try:
            positions = torch.as_tensor(positions, device=X.device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                "positions must be a tensor or a sequence of numbers; "
                f"got {type(positions).__name__}"
            ) from err
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be integer or real; got dtype {positions.dtype}")
    if positions.device != X.device:
        raise ValueError(f"positions must live on X's device {X.device}; got {positions.device}")
    if positions.dim() == 1 and positions.shape[0] == X.shape[-2]:
        return positions  # the common case: one position per token
    try:
        if positions.dim() > X.dim() - 1:
            raise RuntimeError
        if torch.broadcast_shapes(positions.shape, X.shape[:-1]) != X.shape[:-1]:
            raise RuntimeError
    except RuntimeError as err:
        raise ValueError(
            "positions must broadcast to X.shape[:-1] = "
            f"{tuple(X.shape[:-1])} (one position per row of X); got shape {tuple(positions.shape)}"
        ) from err
    return positions


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
    check_tensor("X", X, min_dim=2)
    d = X.shape[-1]
    check_even("X.shape[-1]", d, "RoPE rotates coordinates in pairs")
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool; got {interleaved!r}")
    pos = _positions(positions, X)
    work = torch.float32 if X.dtype in _HALF else X.dtype
    cos, sin = rope_cos_sin(pos, d, base=base, dtype=work)
    return _rotate(X, cos, sin, interleaved)


def rope_cos_sin(
    positions: torch.Tensor, d: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of every pair's angle, ``(..., N, d/2)`` each, in ``dtype``.

    Compute them once per forward pass and rotate both queries and keys with them (what
    :func:`apply_rope` does for one tensor).

    Lesson: 08_rope.
    """
    angles = rope_angles(positions, d, base=base)  # (..., N, d/2), float64
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rope_cos_sin_range(
    start: int, n: int, d: int, *, base: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_cos_sin` of positions ``start .. start + n - 1``, sliced from a table.

    Decoding asks for one new position per step; the table (rows for positions
    ``0 .. 2^k - 1``, ``2^k >= start + n``) is computed once, exactly as
    :func:`rope_cos_sin` would, and reused.
    """
    length = 1 << max(6, (start + n - 1).bit_length())
    cos, sin = _cos_sin_table(length, d, base, dtype, torch.device(device))
    return cos[start : start + n], sin[start : start + n]


@functools.lru_cache(maxsize=32)
def _cos_sin_table(
    length: int, d: int, base: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    return rope_cos_sin(torch.arange(length, device=device), d, base=base, dtype=dtype)


def _rotate(
    X: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
) -> torch.Tensor:
    """Turn each pair ``(x, y)`` of ``X`` to ``(x cos - y sin, x sin + y cos)``."""
    d = X.shape[-1]
    Xw = X if X.dtype == cos.dtype else X.to(cos.dtype)
    if interleaved:
        x, y = Xw[..., 0::2], Xw[..., 1::2]
    else:
        x, y = Xw[..., : d // 2], Xw[..., d // 2 :]
    rx, ry = x * cos - y * sin, x * sin + y * cos
    if interleaved:
        out = torch.stack((rx, ry), dim=-1).flatten(-2)
    else:
        out = torch.cat((rx, ry), dim=-1)
    return out if out.dtype == X.dtype else out.to(X.dtype)


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
    check_positive_int("d", d)
    check_even("d", d, "RoPE rotates coordinates in pairs")
    angles = float(position) * rope_frequencies(d, base=base)
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

    Lesson: 08_rope.
    """
    check_positive_int("d", d)
    check_even("d", d, "RoPE rotates coordinates in pairs")
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))
