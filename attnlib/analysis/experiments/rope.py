"""The experiments of lesson 08 as tables: RoPE's wavelengths and rotations.

Pair ``i`` of a ``d``-wide query or key turns by ``theta_i = b^(-2i/d)`` radians per
position (:func:`attnlib.core.rope.rope_frequencies`), so it comes back to the same angle every
``2 pi / theta_i`` positions, its *wavelength* (:func:`wavelengths`). The rotation explorer
follows one query and one key of width :data:`D_EXPLORE` and the score
``<q R_m, k R_n>`` of the rotated rows for every offset ``m - n`` from 0 to
:data:`OFFSET_MAX` (:func:`offset_scores`). The query has i.i.d. standard normal entries;
the key is the query plus i.i.d. normal noise of standard deviation :data:`KEY_NOISE`, a key
that matches its query (float64, on the CPU, both from
``torch.Generator().manual_seed(seed)``, the query first). The figures of
:mod:`attnlib.viz.rope` draw the same numbers.

Lesson: 08_rope.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch

from attnlib._checks import check_positive_float, check_positive_int
from attnlib.core.rope import Llama3Scaling, RopeScaling, YarnScaling, apply_rope, rope_frequencies

__all__ = [
    "Curve", "D_EXPLORE", "KEY_NOISE", "OFFSET_MAX", "ROTATION_SETTINGS", "check_base",
    "curve_parts", "offset_scores", "rotation_table", "wavelength_table", "wavelengths",
]


D_EXPLORE = 16
"""Width of the explorer's query and key: eight pairs, eight hands on the dial."""

KEY_NOISE = 0.5
"""Standard deviation of the noise that separates the explorer's key from its query."""

OFFSET_MAX = 64
"""The largest offset ``m - n`` the explorer shows."""

ROTATION_SETTINGS: tuple[tuple[int, float], ...] = (
    (0, 10_000.0),
    (1, 10_000.0),
    (6, 10_000.0),
    (25, 10_000.0),
    (64, 10_000.0),
    (6, 500_000.0),
    (64, 500_000.0),
    (6, 100.0),
    (64, 100.0),
)
"""The settings the lesson's answers quote, as ``(offset, base)``.

Offset 0 (no turn), 1 (pair 0 turns one radian), 6 (pair 0 almost back where it started),
25 and 64 with RoFormer's base; offsets 6 and 64 with Llama 3's larger base and with a
small base of 100, whose slow pairs turn much further.
"""


def check_base(base: object) -> float:
    return float(check_positive_float("base", base))


def wavelengths(d: int, base: float = 10_000.0, *,
                scaling: RopeScaling | None = None) -> torch.Tensor:
    """Wavelengths ``2 pi / theta_i`` of the ``d/2`` pairs, in positions (float64).

    Args:
        d: rotated width (even): ``d_head``, or ``d_R`` for MLA's rotary part.
        base: RoPE base ``b``.
        scaling: a frequency scaling of :mod:`attnlib.core.rope` (Llama 3.1's
            :class:`~attnlib.core.rope.Llama3Scaling`, YaRN), or None.

    Returns:
        ``(d/2,)`` float64, from ``2 pi`` (pair 0) up to ``2 pi b^((d-2)/d)`` without a
        scaling.

    Example:
        >>> wavelengths(4, base=100.0)
        tensor([ 6.2832, 62.8319], dtype=torch.float64)
    """
    base = check_base(base)
    return 2 * math.pi / rope_frequencies(d, base=base, scaling=scaling)


Curve = float | tuple[float, RopeScaling | None]
"""A base, or a ``(base, scaling)`` pair: one curve of the wavelength figure and table."""


def _scaling_name(scaling: RopeScaling | None) -> str:
    """How the figure and table name a scaling: ``llama3 ×8``, ``YaRN ×40`` or nothing."""
    if scaling is None:
        return ""
    kind = "llama3" if isinstance(scaling, Llama3Scaling) else "YaRN"
    return f"{kind} ×{scaling.factor:g}"


def curve_parts(curve: Curve) -> tuple[float, RopeScaling | None, str]:
    """``(base, scaling, name)`` of a curve; the name reads ``500,000, llama3 ×8``."""
    base, scaling = curve if isinstance(curve, tuple) else (curve, None)
    if scaling is not None and not isinstance(scaling, (Llama3Scaling, YarnScaling)):
        raise TypeError(f"a curve's scaling must be a Llama3Scaling, a YarnScaling or None; "
                        f"got {scaling!r}")
    base = check_base(base)
    name = f"{base:,.0f}" + (f", {_scaling_name(scaling)}" if scaling is not None else "")
    return base, scaling, name


def wavelength_table(
    d: int = 128, bases: Sequence[Curve] = (10_000.0, 500_000.0), *, context: int = 131_072
) -> pd.DataFrame:
    """Frequencies and wavelengths of the pairs for each base.

    Args:
        d: rotated width (even).
        bases: the bases to compare, each a base or a ``(base, scaling)`` pair.
        context: a context length; the last column counts the pairs whose wavelength is
            longer, so that their angle never repeats within the context.

    Returns:
        pd.DataFrame: ``θ_0`` and ``θ_last`` (as text, 4 significant digits), the shortest
        and longest wavelength (2 decimals) and the count of slow pairs, one row per base.
    """
    context = check_positive_int("context", context)
    rows = {}
    for curve in bases:
        base, scaling, name = curve_parts(curve)
        theta = rope_frequencies(d, base=base, scaling=scaling)
        lam = 2 * math.pi / theta
        rows[name] = {
            "θ_0": f"{float(theta[0]):.3e}",
            f"θ_{d // 2 - 1}": f"{float(theta[-1]):.3e}",
            "shortest wavelength": round(float(lam[0]), 2),
            "longest wavelength": round(float(lam[-1]), 2),
            f"pairs with wavelength > {context:,}": int((lam > context).sum()),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("base b")


def _draw(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The explorer's query and its matching key: ``(D_EXPLORE,)`` each, float64."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(D_EXPLORE, generator=gen, dtype=torch.float64)
    k = q + KEY_NOISE * torch.randn(D_EXPLORE, generator=gen, dtype=torch.float64)
    return q, k


def offset_scores(base: float = 10_000.0, *, seed: int = 0) -> torch.Tensor:
    """``s(Δ) = <q R_Δ, k R_0>`` for ``Δ = 0 .. OFFSET_MAX``, the explorer's score curve.

    By the relative-position property this is also ``<q R_m, k R_n>`` for every pair of
    positions with ``m - n = Δ``.

    Args:
        base: RoPE base.
        seed: seed of the draw (see the module docstring).

    Returns:
        ``(OFFSET_MAX + 1,)`` float64.
    """
    base = check_base(base)
    q, k = _draw(seed)
    offsets = torch.arange(OFFSET_MAX + 1)
    q_rot = apply_rope(q.expand(OFFSET_MAX + 1, D_EXPLORE), offsets, base=base)  # q R_Δ
    return q_rot @ k  # k at position 0 is not rotated


def rotation_table(
    settings: Sequence[tuple[int, float]] = ROTATION_SETTINGS, *, seed: int = 0
) -> pd.DataFrame:
    """The explorer's settings in numbers: turns of pair 0 and of the slowest pair, score.

    Args:
        settings: ``(offset, base)`` tuples as in :data:`ROTATION_SETTINGS`.
        seed: seed of the draw.

    Returns:
        pd.DataFrame: pair 0's turns (3 decimals), the slowest pair's angle in radians
        (4 significant digits), the score ``s(Δ)`` and ``s(Δ) - s(0)`` (3 decimals),
        indexed by ``(offset, base)``.
    """
    rows = {}
    for offset, base in settings:
        base = check_base(base)
        theta = rope_frequencies(D_EXPLORE, base=base)
        scores = offset_scores(base, seed=seed)
        rows[(offset, f"{base:,.0f}")] = {
            "pair 0, turns": round(offset * float(theta[0]) / (2 * math.pi), 3),
            f"pair {D_EXPLORE // 2 - 1}, radians": float(f"{offset * float(theta[-1]):.4g}"),
            "score s(Δ)": round(float(scores[offset]), 3),
            "s(Δ) − s(0)": round(float(scores[offset] - scores[0]), 3),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["offset Δ", "base b"])
    return table
