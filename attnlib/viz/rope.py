"""Figures of lesson 08: RoPE's wavelengths and the rotation explorer.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`rotation_figure` into the lesson's explorer. The query and key it turns, and the
lesson's tables, are in :mod:`attnlib.analysis.experiments.rope`.

Lesson: 08_rope.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib._checks import check_nonnegative_int, check_positive_int
from attnlib.analysis.experiments.rope import (
    D_EXPLORE,
    OFFSET_MAX,
    Curve,
    check_base,
    curve_parts,
    offset_scores,
    wavelengths,
)
from attnlib.core.rope import rope_frequencies
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = ["BASES", "TWIN_OFFSETS", "TWIN_SETTINGS", "rotation_figure", "wavelength_figure"]


BASES: tuple[float, ...] = (100.0, 10_000.0, 500_000.0)
"""The explorer's bases: a small one, RoFormer's 10,000 and Llama 3's 500,000."""


TWIN_OFFSETS: tuple[int, ...] = (*range(13), 16, 20, 25, 32, 40, 48, 56, 64)
"""The offsets of the lesson's twin: every offset up to 12, then a coarser grid to 64."""

TWIN_SETTINGS: tuple[tuple[int, float], ...] = (
    *((offset, 10_000.0) for offset in TWIN_OFFSETS),
    *((offset, base) for base in (500_000.0, 100.0) for offset in (0, 1, 6, 12, 25, 40, 64)),
)
"""The settings of the lesson's twin: every :data:`TWIN_OFFSETS` with RoFormer's base, and a
coarser grid with the other two, so that the twin asks the reader to search, as the live
explorer does, rather than listing the answers."""

_BASE_LOOKS = {  # colour, dash and marker together, so colour is never the only signal
    10_000.0: {"color": COLORS["main"], "dash": DASHES["measured"], "symbol": "circle"},
    500_000.0: {"color": COLORS["reference"], "dash": "dash", "symbol": "diamond"},
}
_OTHER_LOOKS = ({"color": OKABE_ITO["bluish green"], "dash": "dot", "symbol": "square"},
                {"color": OKABE_ITO["orange"], "dash": "dashdot", "symbol": "triangle-up"})


def wavelength_figure(
    d: int = 128, bases: Sequence[Curve] = (10_000.0, 500_000.0), *, context: int | None = None
) -> go.Figure:
    """The wavelength of every pair, one curve per base, on a logarithmic axis.

    Args:
        d: rotated width (even).
        bases: the bases to compare (at most four), each a base or a ``(base, scaling)``
            pair (:data:`Curve`).
        context: when given, a dashed line at this many positions.

    Returns:
        go.Figure: one scatter trace per base (pair index against wavelength), the longest
        wavelength of each base annotated, and the optional context line.
    """
    if not 1 <= len(bases) <= 4:
        raise ValueError(f"bases must hold one to four bases; got {len(bases)}")
    fig = go.Figure()
    others = iter(_OTHER_LOOKS)
    pairs = list(range(d // 2))
    for curve in bases:
        base, scaling, name = curve_parts(curve)
        lam = wavelengths(d, base, scaling=scaling)
        look = (_BASE_LOOKS.get(base) if scaling is None else None) or next(others)
        fig.add_trace(go.Scatter(
            x=pairs, y=rounded(lam), mode="lines+markers", name=f"b = {name}",
            line={"color": look["color"], "dash": look["dash"]},
            marker={"symbol": look["symbol"], "size": 5, "color": look["color"]},
            hovertemplate="pair %{x}: wavelength %{y:,.1f} positions<extra>b = "
                          f"{name}</extra>",
        ))
        fig.add_annotation(x=pairs[-1], y=math.log10(float(lam[-1])),
                           text=f"{float(lam[-1]):,.0f}", showarrow=True, arrowhead=2,
                           ax=-60, ay=-25, font={"color": look["color"]})
    if context is not None:
        context = check_positive_int("context", context)
        fig.add_trace(go.Scatter(
            x=[pairs[0], pairs[-1]], y=[context, context], mode="lines",
            name=f"context of {context:,} positions",
            line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1},
            hoverinfo="skip",
        ))
    fig.update_yaxes(type="log", title_text="wavelength 2π/θᵢ (positions, log scale)")
    fig.update_xaxes(title_text="pair index i")
    fig.update_layout(legend={"x": 0.02, "y": 0.98})
    return style(fig, f"How far apart two positions are before pair i repeats its angle "
                      f"(rotated width {d})")


_LABEL_RADIUS = 1.18  # the hands' labels stand just outside the dial's rim (radius 1)
_LABEL_GAP = 0.3  # rad: hands closer than this share one label


def _hand_groups(angles: Sequence[float]) -> list[tuple[float, str]]:
    """The dial's labels: hands whose angles lie within :data:`_LABEL_GAP` of each other
    share one label ("4-7", or "1, 6"), written at the group's mean angle.

    Example:
        >>> [(round(a, 2), label) for a, label in _hand_groups([3.0, 0.1, 0.2, 0.25])]
        [(0.18, '1-3'), (3.0, '0')]
    """
    turned = sorted((a % (2 * math.pi), i) for i, a in enumerate(angles))
    groups: list[list[tuple[float, int]]] = []
    for angle, i in turned:
        if groups and angle - groups[-1][-1][0] < _LABEL_GAP:
            groups[-1].append((angle, i))
        else:
            groups.append([(angle, i)])
    if len(groups) > 1 and groups[0][0][0] + 2 * math.pi - groups[-1][-1][0] < _LABEL_GAP:
        last = groups.pop()  # the group across angle 0 joins the first
        groups[0] = [(a - 2 * math.pi, i) for a, i in last] + groups[0]
    return [(sum(a for a, _ in group) / len(group), _runs(sorted(i for _, i in group)))
            for group in groups]


def _runs(indices: Sequence[int]) -> str:
    """Sorted indices written with runs of three or more as ranges: ``0, 3-7``.

    Example:
        >>> _runs([0, 3, 4, 5, 6, 7]), _runs([1, 2]), _runs([4])
        ('0, 3-7', '1, 2', '4')
    """
    parts: list[list[int]] = []
    for i in indices:
        if parts and i == parts[-1][-1] + 1:
            parts[-1].append(i)
        else:
            parts.append([i])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run))
                     for run in parts)


def rotation_figure(offset: int = 6, base: float = 10_000.0, *, seed: int = 0) -> go.Figure:
    """The pairs' angles at one offset (left) and the score against the offset (right).

    Left: a dial with one hand per pair, hand ``i`` at the angle ``Δ θ_i`` by which pair
    ``i`` of the query has turned relative to the key, ``Δ = m - n = offset``; hand ``i``
    has length ``1 - 0.1 i`` so that hands at equal angles stay apart. Right:
    :func:`offset_scores` for every offset, the current one marked, and a dotted line at
    ``s(0) = <q, k>``. The title gives the turns of pair 0 and of the slowest pair and the
    score at the offset.

    Args:
        offset: ``Δ``, ``0 <= Δ <= OFFSET_MAX``.
        base: RoPE base.
        seed: seed of the draw.

    Returns:
        go.Figure: five scatter traces (dial rim, hands, hand tips, the hands' labels,
        score curve) and two markers (current offset, ``s(0)`` line).
    """
    offset = check_nonnegative_int("offset", offset)
    if offset > OFFSET_MAX:
        raise ValueError(f"offset must be at most OFFSET_MAX = {OFFSET_MAX}; got {offset}")
    base = check_base(base)
    theta = rope_frequencies(D_EXPLORE, base=base)  # (d/2,)
    angles = offset * theta
    radii = [1.0 - 0.1 * i for i in range(D_EXPLORE // 2)]
    tips_x = [r * math.cos(a) for r, a in zip(radii, angles.tolist(), strict=True)]
    tips_y = [r * math.sin(a) for r, a in zip(radii, angles.tolist(), strict=True)]
    scores = offset_scores(base, seed=seed)

    fig = make_subplots(rows=1, cols=2, column_widths=[0.42, 0.58], horizontal_spacing=0.14,
                        subplot_titles=("pair i of q turned by Δ·θᵢ", "score against offset"))
    rim = [2 * math.pi * t / 72 for t in range(73)]
    fig.add_trace(go.Scatter(
        x=rounded([math.cos(t) for t in rim]), y=rounded([math.sin(t) for t in rim]),
        mode="lines", line={"color": "#BBBBBB", "width": 1}, hoverinfo="skip",
        showlegend=False,
    ), row=1, col=1)
    hands_x, hands_y = [], []
    for x, y in zip(tips_x, tips_y, strict=True):
        hands_x += [0.0, x, None]
        hands_y += [0.0, y, None]
    fig.add_trace(go.Scatter(
        x=rounded(hands_x), y=rounded(hands_y), mode="lines",
        line={"color": COLORS["main"], "width": 2}, hoverinfo="skip", showlegend=False,
    ), row=1, col=1)
    fig.add_trace(go.Scatter(
        x=rounded(tips_x), y=rounded(tips_y), mode="markers",
        text=[str(i) for i in range(D_EXPLORE // 2)],
        marker={"color": COLORS["main"], "size": 7}, showlegend=False,
        customdata=rounded([[float(a), float(a) / (2 * math.pi)] for a in angles]),
        hovertemplate="pair %{text}: %{customdata[0]:.3f} rad = %{customdata[1]:.3f} turns"
                      "<extra></extra>",
    ), row=1, col=1)
    # One label per group of hands that point the same way ("4-7"), outside the dial's rim.
    groups = _hand_groups(angles.tolist())
    fig.add_trace(go.Scatter(
        x=rounded([_LABEL_RADIUS * math.cos(a) for a, _ in groups]),
        y=rounded([_LABEL_RADIUS * math.sin(a) for a, _ in groups]),
        mode="text", text=[label for _, label in groups], textfont={"size": 12},
        hoverinfo="skip", showlegend=False,
    ), row=1, col=1)
    offsets = list(range(OFFSET_MAX + 1))
    fig.add_trace(go.Scatter(
        x=offsets, y=rounded(scores), mode="lines", name="s(Δ)",
        line={"color": COLORS["main"]}, showlegend=False,
        hovertemplate="Δ = %{x}: s = %{y:.3f}<extra></extra>",
    ), row=1, col=2)
    fig.add_trace(go.Scatter(
        x=[0, OFFSET_MAX], y=rounded([scores[0], scores[0]]), mode="lines",
        line={"color": COLORS["marker"], "dash": "dot", "width": 1}, hoverinfo="skip",
        showlegend=False,
    ), row=1, col=2)
    fig.add_trace(go.Scatter(
        x=[offset], y=rounded([scores[offset]]), mode="markers",
        marker={"color": COLORS["reference"], "size": 11, "symbol": "diamond"},
        showlegend=False, hovertemplate="Δ = %{x}: s = %{y:.3f}<extra>current</extra>",
    ), row=1, col=2)
    fig.update_xaxes(range=[-1.35, 1.35], showticklabels=False, zeroline=False, row=1, col=1)
    fig.update_yaxes(range=[-1.35, 1.35], showticklabels=False, zeroline=False,
                     scaleanchor="x", scaleratio=1, row=1, col=1)
    fig.update_xaxes(title_text="offset Δ = m − n", range=[-1, OFFSET_MAX + 1], row=1, col=2)
    fig.update_yaxes(title_text="⟨q Rₘ, k Rₙ⟩", row=1, col=2)
    turns0 = float(angles[0]) / (2 * math.pi)
    last = D_EXPLORE // 2 - 1
    title = (f"offset Δ = {offset}, base b = {base:,.0f}: score {float(scores[offset]):.3f}"
             f" (Δ = 0: {float(scores[0]):.3f})<br><sup>pair 0 has turned {turns0:.3f} turns,"
             f" pair {last} {float(angles[-1]):.4f} rad; dotted line: s(0) = ⟨q, k⟩</sup>")
    style(fig, title, height=HEIGHT + 20)
    fig.update_layout(margin={"t": 110})
    return fig
