"""Figures of lesson 02: the spread of the logits, saturation, temperature.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`weight_row_figure` into the lesson's explorer. The random queries and keys, and the
lesson's tables, are those of :mod:`attnlib.analysis.experiments.softmax`.

Lesson: 02_softmax_attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_positive_float, check_positive_int
from attnlib.analysis.experiments.softmax import (
    D_MAX,
    MEAN_MAX,
    MEDIAN_GAIN,
    SATURATION_DIMS,
    SCALED,
    UNSCALED,
    dot_products,
    draw_queries_keys,
    entropy,
    saturation_stats,
)
from attnlib.core.functional import attention_weights
from attnlib.viz.style import COLORS, DASHES, HEIGHT, SYMBOLS, rounded, style

__all__ = [
    "TEMPERATURES", "WIDTHS", "logit_histogram_figure", "saturation_figure", "weight_row_figure",
]


WIDTHS: tuple[int, ...] = (2, 8, 32, 128, 512)
"""The widths ``d_QK`` the explorer offers."""

TEMPERATURES: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0, 10.0)
"""The temperatures ``tau`` the explorer offers (``tau = 1`` is plain softmax attention)."""


def _normal_density(x: float, std: float) -> float:
    return math.exp(-0.5 * (x / std) ** 2) / (std * math.sqrt(2 * math.pi))


def logit_histogram_figure(
    d_qk: int = 128, *, n_pairs: int = 10_000, seed: int = 0, bins: int = 60
) -> go.Figure:
    """Dot products of random vectors have variance ``d_QK``; divided by ``√d_QK``, variance 1.

    ``n_pairs`` pairs ``(q, k)`` of width ``d_QK`` are drawn (``q`` rows first, then ``k``
    rows, see the module docstring). The left panel histograms ``<q, k>`` over
    ``±4.5 √d_QK`` with the normal density ``N(0, d_QK)``; the right one histograms the
    logits ``<q, k> / √d_QK`` over ``±4.5`` with ``N(0, 1)``. Bars are densities: counts
    divided by ``n_pairs`` times the bin width.

    Args:
        d_qk: the width ``d_QK`` of queries and keys.
        n_pairs: the number of random pairs.
        seed: seed of the generator.
        bins: number of bins in each panel.

    Returns:
        go.Figure: two bar traces and two density curves; one annotation per panel gives
        the measured standard deviation.
    """
    check_positive_int("d_qk", d_qk)
    check_positive_int("n_pairs", n_pairs)
    check_positive_int("bins", bins)
    if n_pairs < 2:
        raise ValueError(f"n_pairs must be >= 2 (a spread needs two samples); got {n_pairs}")
    dots = dot_products(d_qk, n_pairs, seed)
    root = math.sqrt(d_qk)
    panels = (
        (dots, root, "⟨q, k⟩", f"N(0, d_QK) = N(0, {d_qk})"),
        (dots / root, 1.0, "⟨q, k⟩ / √d_QK", "N(0, 1)"),
    )
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "dot products ⟨q, k⟩: spread √d_QK", "logits ⟨q, k⟩ / √d_QK: spread 1"))
    for col, (x, std_ref, what, ref_name) in enumerate(panels, start=1):
        half = 4.5 * std_ref
        width = 2 * half / bins
        density = torch.histc(x, bins=bins, min=-half, max=half) / (n_pairs * width)
        centres = [-half + (b + 0.5) * width for b in range(bins)]
        t = [-half + 2 * half * b / 200 for b in range(201)]
        fig.add_trace(go.Bar(
            x=rounded(centres), y=rounded(density), width=round(width, 10),
            marker={"color": COLORS["main"], "line": {"width": 0}}, opacity=0.7,
            name=f"{what} (histogram)", showlegend=True,
            hovertemplate=f"{what} ≈ %{{x:.3f}}<br>density %{{y:.4f}}<extra></extra>",
        ), row=1, col=col)
        fig.add_trace(go.Scatter(
            x=rounded(t), y=rounded([_normal_density(v, std_ref) for v in t]), mode="lines",
            line={"color": COLORS["reference"], "dash": DASHES["reference"], "width": 2},
            name=ref_name, hovertemplate="%{x:.3f}<br>density %{y:.4f}<extra></extra>",
        ), row=1, col=col)
        fig.update_xaxes(range=[round(-half, 6), round(half, 6)], title_text=what,
                         row=1, col=col)
        ref = f"√d_QK = {root:.2f}" if col == 1 else "theory: 1"
        fig.add_annotation(
            text=f"std = {float(x.std()):.2f}<br>{ref}", showarrow=False, align="right",
            xref=f"x{'' if col == 1 else col} domain", yref=f"y{'' if col == 1 else col} domain",
            x=0.98, y=0.97, xanchor="right", yanchor="top", bgcolor="rgba(255,255,255,0.8)",
        )
    fig.update_yaxes(title_text="probability density", row=1, col=1)
    fig.update_layout(bargap=0, legend={"orientation": "h", "x": 0, "y": -0.22,
                                        "yanchor": "top"}, margin={"b": 120})
    style(fig, f"{n_pairs:,} random pairs (q, k), d_QK = {d_qk}", height=HEIGHT + 40)
    fig.update_layout(margin={"b": 120})
    return fig


def saturation_figure(
    dims: Sequence[int] = SATURATION_DIMS, *, n_kv: int = 16, n_queries: int = 1000,
    seed: int = 0,
) -> go.Figure:
    """The numbers of :func:`~attnlib.analysis.experiments.softmax.saturation_table` against
    ``d_QK``, on logarithmic axes.

    Left: the mean largest weight, from ``1/N_KV`` (uniform, dotted line) to 1 (one-hot).
    Right: the median gain ``||J||`` of the softmax, whose collapse is the vanishing
    gradient. Colour, line dash and marker symbol all tell the two scalings apart.

    Args:
        dims: widths ``d_QK``.
        n_kv: keys per query, ``N_KV``.
        n_queries: queries per width.
        seed: seed of the generator.

    Returns:
        go.Figure: four traces, ``(largest weight, gain) x (with, without the scaling)``.
    """
    stats = saturation_stats(tuple(dims), n_kv, n_queries, seed)
    dims = list(stats)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=(
        "largest weight (mean over queries)", "gain ||J|| (median over queries)"))
    looks = {
        SCALED: {"color": COLORS["main"], "dash": DASHES["measured"], "symbol": "circle"},
        UNSCALED: {"color": COLORS["reference"], "dash": DASHES["marker"],
                    "symbol": SYMBOLS["word"]},
    }
    for col, stat in enumerate((MEAN_MAX, MEDIAN_GAIN), start=1):
        for label, look in looks.items():
            fig.add_trace(go.Scatter(
                x=dims, y=rounded([stats[d][label, stat] for d in dims], digits=3),
                mode="lines+markers", name=f"{stat}, {label}", legendgroup=label,
                line={"color": look["color"], "dash": look["dash"], "width": 2},
                marker={"color": look["color"], "symbol": look["symbol"], "size": 9},
                hovertemplate=f"{label}<br>d_QK = %{{x}}<br>{stat} %{{y:.3g}}<extra></extra>",
            ), row=1, col=col)
    fig.add_hline(y=round(1 / n_kv, 6), row=1, col=1,
                  line={"color": COLORS["marker"], "dash": "dot", "width": 1.5})
    fig.add_annotation(text=f"uniform: 1/N_KV = 1/{n_kv}", x=0.02, y=round(1 / n_kv, 6),
                       xref="x domain", yref="y", xanchor="left", yanchor="bottom",
                       showarrow=False)
    fig.update_xaxes(type="log", title_text="d_QK (log scale)")
    fig.update_yaxes(range=[0, 1.05], title_text="weight", row=1, col=1)
    gains = [stats[d][label, MEDIAN_GAIN] for d in dims for label in looks]
    low = math.floor(math.log10(max(min(gains), 1e-300)))
    fig.update_yaxes(type="log", title_text="largest eigenvalue of J", dtick=1,
                     exponentformat="power", range=[low - 0.3, 0.2], row=1, col=2)
    style(fig, f"Saturation: {n_queries:,} queries, {n_kv} keys", height=HEIGHT + 60)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.25, "yanchor": "top"},
                      margin={"b": 140})
    return fig


def weight_row_figure(
    tau: float = 1.0, d_qk: int = 128, *, n_kv: int = 12, seed: int = 0
) -> go.Figure:
    """One query's row of weights over ``N_KV`` keys, with and without the ``√d_QK``.

    The query and the keys are the first ``d_QK`` columns of one draw of width
    :data:`D_MAX` (query first, then keys; see the module docstring), so raising ``d_QK``
    adds coordinates to the same vectors. Left: ``softmax(<q, k_j> / (tau √d_QK))``, the
    weights of ``attnlib.attention_weights(q, K, scale=1 / (tau √d_QK))``. Right:
    ``softmax(<q, k_j> / tau)``, the same without the ``√d_QK``. Each panel's title gives its
    scale, its largest weight (dashed line) and its entropy ``H(p) = -Σ p_j ln p_j`` in
    nats, whose maximum ``ln N_KV`` belongs to the uniform row (dotted line at ``1/N_KV``).

    Args:
        tau: the temperature, ``> 0``.
        d_qk: the width of queries and keys, ``1 <= d_QK <=`` :data:`D_MAX`.
        n_kv: the number of keys.
        seed: seed of the generator.

    Returns:
        go.Figure: two bar traces of ``N_KV`` bars each (weights rounded to 4 decimals).
    """
    tau = check_positive_float("tau", tau)
    check_positive_int("d_qk", d_qk)
    check_positive_int("n_kv", n_kv)
    if d_qk > D_MAX:
        raise ValueError(f"d_qk must be at most D_MAX = {D_MAX}; got {d_qk}")
    q_full, K_full = draw_queries_keys(1, n_kv, D_MAX, seed)
    q, K = q_full[:, :d_qk], K_full[:, :d_qk]  # prefixes of one draw
    panels = (  # scale = 1/(tau sqrt(d_QK)) with the scaling, 1/tau without it
        ("with 1/√d_QK", 1.0 / (tau * math.sqrt(d_qk)), COLORS["main"]),
        ("without 1/√d_QK", 1.0 / tau, COLORS["reference"]),
    )
    weights = [attention_weights(q, K, scale=scale)[0] for _, scale, _ in panels]
    titles = [
        f"{name}: scale = {scale:.4f}<br>largest weight = {float(p.max()):.3f} (dashed)"
        f"<br>entropy H = {float(entropy(p)):.3f} nats"
        for (name, scale, _), p in zip(panels, weights, strict=True)
    ]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.08)
    keys = list(range(n_kv))  # key j = 0 .. N_KV - 1, the book's indexing
    uniform = round(1 / n_kv, 6)
    for col, ((name, _, color), p) in enumerate(zip(panels, weights, strict=True), start=1):
        fig.add_trace(go.Bar(
            x=keys, y=rounded(p, 4), marker={"color": color}, name=name,
            hovertemplate="key %{x}<br>weight %{y:.4f}<extra></extra>",
        ), row=1, col=col)
        fig.add_hline(y=round(float(p.max()), 4), row=1, col=col,
                      line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1.5})
        fig.add_hline(y=uniform, row=1, col=col,
                      line={"color": COLORS["marker"], "dash": "dot", "width": 1})
    fig.update_xaxes(title_text="key j", dtick=1)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_yaxes(title_text="weight p_j", row=1, col=1)
    fig.update_layout(showlegend=False, bargap=0.15)
    for a in fig.layout.annotations:  # the two panel titles
        a.font = {"size": 12}
    style(fig, (f"One query, {n_kv} random keys: τ = {tau:g}, d_QK = {d_qk}<br><sup>dotted: "
                f"the uniform row, every weight 1/{n_kv}, entropy ln {n_kv} = "
                f"{math.log(n_kv):.3f} nats (the maximum)</sup>"), height=HEIGHT + 40)
    fig.update_layout(margin={"t": 150})
    return fig
