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

Checkpoints trained for long contexts stretch the slow frequencies. ``scaling=`` takes one
of the two rescalings released models use, both checked against Hugging Face's rotary
embeddings:

* :class:`Llama3Scaling` (Llama 3.1, ``rope_type="llama3"``): pairs whose wavelength
  ``2 pi / theta_i`` exceeds the pretraining context divided by ``low_freq_factor`` turn
  ``factor`` times slower, those shorter than it divided by ``high_freq_factor`` keep their
  speed, and the ones between are interpolated;
* :class:`YarnScaling` (YaRN, Peng et al. 2023; DeepSeek-V2 and V3): a linear ramp over
  the pairs between "turns many times within the pretraining context" (kept) and "turns
  less than once" (slowed ``factor`` times), plus an attention temperature: ``cos`` and
  ``sin`` are multiplied by :attr:`YarnScaling.attention_factor`, which scales every
  rotated logit by its square.

The frequencies and the ``cos`` and ``sin`` tables are computed on every call, from the
positions at hand: nothing is cached between calls, so no table outlives the forward pass
that made it or carries ``torch.inference_mode`` into a later training step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

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
    "Llama3Scaling",
    "RopeTables",
    "YarnScaling",
    "apply_rope",
    "rope_frequencies",
    "rope_matrix",
    "rope_permutation",
    "rope_rotate",
    "rope_tables",
]


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1's frequency scaling (Hugging Face's ``rope_type="llama3"``).

    With wavelengths ``lambda_i = 2 pi / theta_i`` and the pretraining context
    ``L = original_max_positions``: ``theta_i`` is kept when ``lambda_i < L /
    high_freq_factor``, divided by ``factor`` when ``lambda_i > L / low_freq_factor``, and
    in between ``theta_i' = (1 - s) theta_i / factor + s theta_i`` with
    ``s = (L / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
    Its ``attention_factor`` is 1: the logits are not rescaled.

    Args:
        factor: how many times slower the slowest pairs turn (8 in Llama 3.1).
        low_freq_factor: the long-wavelength boundary, ``L / low_freq_factor`` (1).
        high_freq_factor: the short-wavelength boundary, ``L / high_freq_factor`` (4).
        original_max_positions: ``L``, the pretraining context (8192 in Llama 3).

    Example:
        >>> theta = rope_frequencies(8, base=500000.0, scaling=Llama3Scaling())
        >>> (theta / rope_frequencies(8, base=500000.0)).round(decimals=4).tolist()
        [1.0, 1.0, 0.3711, 0.125]

    Lesson: 08_rope.
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            check_positive_float(name, getattr(self, name))
        check_positive_int("original_max_positions", self.original_max_positions)
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                "high_freq_factor must be larger than low_freq_factor; got "
                f"{self.high_freq_factor} and {self.low_freq_factor}"
            )

    @property
    def attention_factor(self) -> float:
        """What ``cos`` and ``sin`` are multiplied by: 1 (Llama 3.1 keeps its logits)."""
        return 1.0

    def frequencies(self, theta: torch.Tensor, d: int, base: float) -> torch.Tensor:
        """The rescaled ``theta'`` from the plain ``theta (d/2,)``."""
        L, lo, hi = self.original_max_positions, self.low_freq_factor, self.high_freq_factor
        wavelength = 2 * math.pi / theta
        s = (L / wavelength - lo) / (hi - lo)  # 0 at the long boundary, 1 at the short one
        between = (1 - s) * theta / self.factor + s * theta
        slow = torch.where(wavelength > L / lo, theta / self.factor, between)
        return torch.where(wavelength < L / hi, theta, slow)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's temperature ``0.1 mscale ln(factor) + 1`` (1 when ``factor <= 1``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class YarnScaling:
    """YaRN (Peng et al. 2023), as DeepSeek-V2 and V3 use it (Hugging Face's ``"yarn"``).

    Pair ``i`` turns ``r_i = L theta_i / (2 pi)`` times within the pretraining context
    ``L``. Pairs with ``r_i > beta_fast`` keep ``theta_i``; pairs with ``r_i < beta_slow``
    are slowed to ``theta_i / factor``; a linear ramp over the pair index joins the two (its
    ends rounded outwards when ``truncate``). The logits of the rotated parts grow with the
    context, which YaRN tempers: ``cos`` and ``sin`` are multiplied by
    :attr:`attention_factor`, ``0.1 mscale ln(factor) + 1`` over the same with
    ``mscale_all_dim`` (or ``0.1 ln(factor) + 1`` without both). DeepSeek's attention also
    multiplies its softmax scale by :attr:`softmax_factor`.

    Args:
        factor: the context extension, ``theta_i / factor`` for the slowest pairs (40 in
            DeepSeek-V3).
        original_max_positions: ``L``, the pretraining context (4096 in DeepSeek-V3).
        beta_fast: rotations above which a pair keeps its frequency (32).
        beta_slow: rotations below which a pair is fully slowed (1).
        mscale: the temperature's coefficient in the numerator; ``None`` means none given.
        mscale_all_dim: its coefficient in the denominator (and for the softmax factor).
        truncate: round the ramp's ends to whole pair indices.
        given_attention_factor: the ``cos`` and ``sin`` multiplier, when a checkpoint gives
            it (``None``: :attr:`attention_factor` is computed from ``factor``, ``mscale``
            and ``mscale_all_dim``).

    Example:
        >>> yarn = YarnScaling(factor=40.0, original_max_positions=4096, mscale=1.0,
        ...                    mscale_all_dim=1.0)
        >>> yarn.attention_factor, round(yarn.softmax_factor, 4)
        (1.0, 1.8739)

    Lesson: 08_rope (the frequencies), 07_mla (DeepSeek's attention).
    """

    factor: float
    original_max_positions: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    given_attention_factor: float | None = None

    def __post_init__(self) -> None:
        for name in ("factor", "beta_fast", "beta_slow"):
            check_positive_float(name, getattr(self, name))
        if self.given_attention_factor is not None:
            check_positive_float("given_attention_factor", self.given_attention_factor)
        check_positive_int("original_max_positions", self.original_max_positions)
        for name in ("mscale", "mscale_all_dim"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))):
                raise TypeError(f"{name} must be a number or None; got {value!r}")
        check_bool("truncate", self.truncate)

    @property
    def attention_factor(self) -> float:
        """What ``cos`` and ``sin`` are multiplied by (each rotated logit by its square)."""
        if self.given_attention_factor is not None:
            return self.given_attention_factor
        if self.mscale and self.mscale_all_dim:
            return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(
                self.factor, self.mscale_all_dim)
        return _yarn_mscale(self.factor)

    @property
    def softmax_factor(self) -> float:
        """What DeepSeek multiplies its softmax scale by: ``mscale(factor, mscale_all_dim)^2``
        (1 without ``mscale_all_dim``)."""
        return _yarn_mscale(self.factor, self.mscale_all_dim) ** 2 if self.mscale_all_dim else 1.0

    def frequencies(self, theta: torch.Tensor, d: int, base: float) -> torch.Tensor:
        """The rescaled ``theta'`` from the plain ``theta (d/2,)`` of width ``d`` and ``base``."""

        def pair(rotations: float) -> float:  # the pair index that turns so many times in L
            return d * math.log(self.original_max_positions / (rotations * 2 * math.pi)) / (
                2 * math.log(base))

        lo, hi = pair(self.beta_fast), pair(self.beta_slow)
        if self.truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
        hi = hi + 0.001 if lo == hi else hi  # a ramp of zero width
        i = torch.arange(d // 2, dtype=theta.dtype, device=theta.device)
        ramp = ((i - lo) / (hi - lo)).clamp(0, 1)  # 0: kept (fast pairs), 1: slowed
        return theta / self.factor * ramp + theta * (1 - ramp)


RopeScaling = Llama3Scaling | YarnScaling


class RopeTables(NamedTuple):
    """The rotation of ``N`` tokens: their positions and the full-width ``cos`` and ``sin``.

    ``cos`` and ``sin`` are ``(..., N, d)``, laid out over all ``d`` coordinates so that
    :func:`rope_rotate` is one product plus another: for half-split pairs
    ``cos = (c | c)`` and ``sin = (-s | s)``; interleaved, each pair's entries are
    repeated, ``sin`` as ``(-s, s)``. A decoder computes them once per forward pass and
    every layer rotates with them; ``positions`` stay beside them for a layer whose rotation
    is a function of the positions (``AttentionLayer.use(rope=...)``).
    """

    positions: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


def apply_rope(
    X: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = 10000.0,
    interleaved: bool = False,
    scaling: RopeScaling | None = None,
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
        scaling: a :class:`Llama3Scaling` or :class:`YarnScaling` of the frequencies, or
            None.

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
    _check_rope_inputs(X, positions, base, interleaved, scaling)
    tables = rope_tables(torch.as_tensor(positions, device=X.device), X.shape[-1], base=base,
                         scaling=scaling, interleaved=interleaved, dtype=work_dtype(X.dtype))
    return rope_rotate(X, tables, interleaved=interleaved)


def rope_rotate(X: torch.Tensor, tables: RopeTables, *, interleaved: bool = False) -> torch.Tensor:
    """Turn each pair ``(x, y)`` of ``X`` to ``(x cos - y sin, x sin + y cos)``: ``XC + swap(X)S``.

    ``swap`` exchanges the two entries of every pair (the two halves for half-split pairs),
    and ``C``, ``S`` are the full-width tables of :func:`rope_tables`, whose ``S`` carries
    the sign: each coordinate is one product plus another, the numbers of the per-pair
    formula exactly. A building block for callers that checked their inputs (the attention
    layers rotate their queries and keys with one set of tables); :func:`apply_rope` is the
    checked way in.

    Args:
        X: ``(..., N, d)``.
        tables: the :class:`RopeTables` of the rows' positions, ``cos`` and ``sin``
            ``(..., N, d)`` broadcastable against ``X``.
        interleaved: pair ``(2i, 2i+1)`` when True, ``(i, i + d/2)`` when False; the
            pairing the tables were made for.

    Returns:
        ``(..., N, d)`` in the dtype of ``X`` (computed in the dtype of the tables).

    Equivalent to Hugging Face's ``q * cos + rotate_half(q) * sin``, the sign of
    ``rotate_half`` moved into ``S``.

    Lesson: 08_rope.
    """
    C, S = tables.cos, tables.sin
    Xw = X if X.dtype == C.dtype else X.to(C.dtype)
    if interleaved:  # (x, y) -> (y, x) within each pair
        swapped = Xw.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    else:  # (x | y) -> (y | x): the halves exchanged
        swapped = Xw.roll(X.shape[-1] // 2, dims=-1)
    out = Xw * C + swapped * S  # (..., N, d)
    return out if out.dtype == X.dtype else out.to(X.dtype)


def rope_tables(
    positions: torch.Tensor,
    d: int,
    *,
    base: float = 10000.0,
    scaling: RopeScaling | None = None,
    interleaved: bool = False,
    dtype: torch.dtype = torch.float32,
) -> RopeTables:
    """The rotation tables of ``positions``: ``m cos`` and ``m sin`` of every pair's angle.

    The angle of pair ``i`` at position ``p`` is ``p * theta_i`` (computed in float64, see
    :func:`rope_frequencies`); ``m`` is the scaling's ``attention_factor`` (1 without a
    scaling): rotating a query and a key with these multiplies their dot product by
    ``m^2``, YaRN's temperature. The one table builder of attnlib: :func:`apply_rope`, the
    attention layers and the decoders all call it. Like :func:`rope_rotate` it is a building
    block for callers that checked their arguments (a layer checks its RoPE settings when it
    is built); :func:`apply_rope` is the checked way in.

    Args:
        positions: ``(..., N)`` positions.
        d: rotated width (even).
        base: RoPE base.
        scaling: a :class:`Llama3Scaling` or :class:`YarnScaling`, or None.
        interleaved: the pairing the tables are laid out for.
        dtype: dtype of ``cos`` and ``sin`` (the angles themselves are float64).

    Returns:
        :class:`RopeTables` ``(positions, cos, sin)``, ``cos`` and ``sin`` ``(..., N, d)``.

    Equivalent to Hugging Face's rotary embeddings (``LlamaRotaryEmbedding``,
    ``DeepseekV3RotaryEmbedding``) for half-split pairs, with ``sin``'s first half negated.

    Example:
        >>> tables = rope_tables(torch.tensor([0, 1]), 2, base=10000.0)  # one pair, theta_0 = 1
        >>> tables.cos[1], tables.sin[1]  # position 1: cos 1 twice, then (-sin 1, sin 1)
        (tensor([0.5403, 0.5403]), tensor([-0.8415,  0.8415]))

    Lesson: 08_rope.
    """
    theta = _frequencies(d, base, scaling, positions.device)  # (d/2,)
    angles = positions.to(theta.dtype)[..., None] * theta  # (..., N, d/2), float64
    m = 1.0 if scaling is None else scaling.attention_factor
    cos, sin = angles.cos(), angles.sin()
    if m != 1.0:
        cos, sin = cos * m, sin * m
    cos, sin = cos.to(dtype), sin.to(dtype)
    if interleaved:
        return RopeTables(positions, cos.repeat_interleave(2, dim=-1),
                          torch.stack((-sin, sin), dim=-1).flatten(-2))
    return RopeTables(positions, torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1))


def rope_frequencies(
    d: int,
    *,
    base: float = 10000.0,
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The ``d/2`` angular frequencies ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2 - 1`` (float64).

    Args:
        d: rotated width (even).
        base: RoPE base (10,000 in RoFormer; 500,000 in Llama 3).
        scaling: a :class:`Llama3Scaling` or :class:`YarnScaling` that rescales them, or
            None.
        device: where to build them.

    Returns:
        ``(d/2,)`` float64 (float32 on MPS), from 1 down to ``base^(-(d-2)/d)`` without a
        scaling.

    Example:
        >>> rope_frequencies(4, base=100.0)
        tensor([1.0000, 0.1000], dtype=torch.float64)

    Lesson: 08_rope.
    """
    _check_frequencies(d, base, scaling)
    return _frequencies(d, base, scaling, torch.device("cpu") if device is None else device)


def _frequencies(d: int, base: float, scaling: RopeScaling | None,
                 device: torch.device | str) -> torch.Tensor:
    """:func:`rope_frequencies` of checked arguments."""
    device = torch.device(device)
    # Angles in float64 keep m * theta accurate at large positions; MPS has no float64.
    dtype = torch.float32 if device.type == "mps" else torch.float64
    i = torch.arange(d // 2, dtype=dtype, device=device)
    theta = float(base) ** (-2.0 * i / d)
    return theta if scaling is None else scaling.frequencies(theta, d, float(base))


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


def _check_frequencies(d: object, base: object, scaling: object) -> None:
    _check_width(d)
    check_positive_float("base", base)
    _check_scaling(scaling)


def _check_scaling(scaling: object, name: str = "scaling") -> None:
    if scaling is not None and not isinstance(scaling, (Llama3Scaling, YarnScaling)):
        raise TypeError(
            f"{name} must be None, an attnlib.core.rope.Llama3Scaling or an "
            "attnlib.core.rope.YarnScaling;"
            f" got {type(scaling).__name__}"
        )


def check_rope_scaling(rope_scaling: object, rope_base: object) -> None:
    """A module's ``rope_scaling``: None, or a scaling of the RoPE that ``rope_base`` sets up."""
    _check_scaling(rope_scaling, "rope_scaling")
    if rope_scaling is not None and rope_base is None:
        raise ValueError(f"rope_scaling needs rope_base (a RoPE to scale); got {rope_scaling}")


def _check_rope_inputs(X, positions, base, interleaved, scaling) -> None:
    _check_scaling(scaling)
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
