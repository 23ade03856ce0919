"""Figures of lesson 04: the mask builder, norm placement, feed-forward sizes.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`mask_builder_figure` into the lesson's explorer. The sequence the mask builder
draws, the norms' runs and the lesson's tables are in
:mod:`attnlib.analysis.experiments.masks`.

Lesson: 04_masks_and_layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analysis.experiments.masks import (
    WEIGHT_SCALES,
    builder_weights,
    residual_variances,
    seen,
)
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = ["mask_builder_figure", "norm_variance_figure"]


_PLACEMENT_LOOKS = {
    "pre": {"color": COLORS["main"], "dash": "solid", "symbol": "circle"},
    "post": {"color": COLORS["reference"], "dash": "dash", "symbol": "diamond"},
    "peri": {"color": OKABE_ITO["bluish green"], "dash": "dot", "symbol": "square"},
}


# ---------------------------------------------------------------------------------------
# the mask builder
# ---------------------------------------------------------------------------------------


def _describe(mask: str, window: int, length: int, n_kv: int) -> str:
    extra = {"sliding window": f", w = {window}", "padding": f", length {min(length, n_kv)}",
             "causal + padding": f", length {min(length, n_kv)}"}
    return f"{mask}{extra.get(mask, '')}"


def mask_builder_figure(
    mask: str = "causal",
    n_q: int = 6,
    n_kv: int = 6,
    window: int = 3,
    length: int = 6,
    align: str = "bottom-right",
    *,
    seed: int = 0,
) -> go.Figure:
    """A mask (left) and the softmax weights it leaves (right), for one builder setting.

    Left: the mask of :func:`~attnlib.analysis.experiments.masks.mask_for`, blue where
    query ``i`` may attend to key ``j``;
    each row's label gives how many keys the query sees. Right:
    ``P = attnlib.attention_weights(Q, K, mask=...)`` for the draw described in the module
    docstring, each allowed cell labelled with its weight (2 decimals), masked cells left
    blank; each row's label gives its sum, 1 for a query that sees a key and 0 for one that
    sees none (attnlib returns a zero row there, never NaN). The title names the keys the
    last query sees and counts the rows with no key.

    Args:
        mask: one of :data:`~attnlib.analysis.experiments.masks.MASKS`.
        n_q: number of queries, ``1 <= N_Q <= N_MAX``.
        n_kv: number of keys, ``1 <= N_KV <= N_MAX``.
        window: sliding-window width ``w`` (used by ``"sliding window"`` only).
        length: real tokens for the padding masks, clipped to ``[0, N_KV]``.
        align: one of :data:`~attnlib.analysis.experiments.masks.ALIGNMENTS` (used by the
            causal and sliding-window masks).
        seed: seed of the draw.

    Returns:
        go.Figure: two heatmaps of ``N_Q x N_KV`` cells (weights rounded to 4 decimals).
    """
    allowed, P = builder_weights(mask, n_q, n_kv, window, length, align, seed)
    counts = allowed.sum(dim=-1).tolist()
    sums = P.sum(dim=-1).tolist()
    empty = sum(1 for c in counts if c == 0)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2,
                        subplot_titles=("mask", "weights P = Z⁻¹A"))
    keys = [f"k{j}" for j in range(n_kv)]
    queries = [f"q{i}" for i in range(n_q)]
    fig.add_trace(go.Heatmap(
        z=allowed.int().tolist(), x=keys, y=queries, zmin=0, zmax=1, showscale=False,
        colorscale=[[0, "#EEEEEE"], [1, COLORS["main"]]], xgap=2, ygap=2,
        hovertemplate="query %{y}, key %{x}: %{z}<extra>1 = may attend</extra>",
    ), row=1, col=1)
    z = [[round(float(P[i, j]), 4) if allowed[i, j] else None for j in range(n_kv)]
         for i in range(n_q)]
    text = [[f"{float(P[i, j]):.2f}" if allowed[i, j] else "" for j in range(n_kv)]
            for i in range(n_q)]
    fig.add_trace(go.Heatmap(
        z=z, x=keys, y=queries, text=text, texttemplate="%{text}", zmin=0, zmax=1,
        colorscale=[[0, "#FFFFFF"], [1, OKABE_ITO["sky blue"]]], showscale=False,
        xgap=2, ygap=2, hovertemplate="query %{y}, key %{x}: weight %{z:.4f}<extra></extra>",
    ), row=1, col=2)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=queries,
                     ticktext=[f"q{i}: {c} key{'s' * (c != 1)}" for i, c in enumerate(counts)],
                     row=1, col=1)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=queries, side="right",
                     ticktext=[f"Σ = {s:.2f}" if counts[i] else "Σ = 0: zero output"
                               for i, s in enumerate(sums)], row=1, col=2)
    fig.update_xaxes(title_text="keys")
    what = _describe(mask, window, length, n_kv)
    align_note = f", {align}" if mask in ("causal", "sliding window", "causal + padding") else ""
    style(fig, (f"{what}{align_note}: N_Q = {n_q}, N_KV = {n_kv}<br><sup>last query sees keys "
                f"{seen(allowed[-1])}; rows with no key: {empty}<br>blue: may attend; "
                "blank weight: masked</sup>"), height=HEIGHT + 40)
    fig.update_layout(margin={"t": 160, "l": 110, "r": 150})
    return fig


# ---------------------------------------------------------------------------------------
# norm placement: the variance of the residual stream across depth
# ---------------------------------------------------------------------------------------


def norm_variance_figure(
    *, n_layers: int = 24, scales: Sequence[float] = WEIGHT_SCALES, seed: int = 0
) -> go.Figure:
    """Left: variance of the residual stream against depth, at initialisation.
    Right: the variance after ``n_layers`` blocks against the weight scale.

    Both panels use :func:`residual_variances`, kept to 3 significant digits: with large
    weights the softmax saturates and near-ties between keys make the fourth digit differ
    from CPU to CPU, even in float64. Both y axes are logarithmic. The left
    panel marks each placement's final variance; colour, dash and marker symbol all tell
    the placements apart.

    Args:
        n_layers: depth of the stack.
        scales: weight scales of the right panel.
        seed: seed of the weights and of the input.

    Returns:
        go.Figure: six traces, three per panel.
    """
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=(
        "at initialisation: variance after each block",
        f"every weight × c: variance after {n_layers} blocks"))
    for norm, look in _PLACEMENT_LOOKS.items():
        v = residual_variances(norm, n_layers=n_layers, seed=seed)
        name = f"{norm}-LN"
        line = {"color": look["color"], "dash": look["dash"], "width": 2}
        fig.add_trace(go.Scatter(
            x=list(range(n_layers + 1)), y=rounded(v, digits=3), mode="lines+markers", name=name,
            legendgroup=norm, line=line, marker={"symbol": look["symbol"], "size": 6},
            hovertemplate=f"{name}<br>blocks %{{x}}<br>variance %{{y:.4g}}<extra></extra>",
        ), row=1, col=1)
        fig.add_annotation(text=f"{name}: {v[-1]:.3g}", x=n_layers, y=_log10(v[-1]),
                           xref="x", yref="y", xanchor="left", showarrow=False,
                           yshift=-10 if norm == "post" else 0,  # clear of the dashed line
                           font={"color": look["color"]})
        finals = [residual_variances(norm, n_layers=n_layers, weight_scale=c, seed=seed)[-1]
                  for c in scales]
        fig.add_trace(go.Scatter(
            x=list(scales), y=rounded(finals, digits=3), mode="lines+markers", name=name,
            legendgroup=norm, showlegend=False, line=line,
            marker={"symbol": look["symbol"], "size": 8},
            hovertemplate=f"{name}<br>c = %{{x}}<br>variance %{{y:.4g}}<extra></extra>",
        ), row=1, col=2)
    fig.update_xaxes(title_text="blocks applied", range=[0, n_layers + 6], row=1, col=1)
    fig.update_xaxes(title_text="weight scale c (log)", type="log", tickmode="array",
                     tickvals=list(scales), ticktext=[f"{c:g}" for c in scales], row=1, col=2)
    fig.update_yaxes(type="log", title_text="variance of the residual stream", tickmode="array",
                     tickvals=[0.5, 1, 2, 5, 10, 20, 50, 100], row=1, col=1)
    fig.update_yaxes(type="log", exponentformat="power", row=1, col=2)
    fig.add_hline(y=1, line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1})
    style(fig, (f"Norm placement in {n_layers} decoder blocks (RMSNorm, SwiGLU)<br><sup>"
                "dashed: variance 1, the input's</sup>"), height=HEIGHT + 60)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"t": 110, "b": 120})
    return fig


def _log10(x: float) -> float:
    return round(math.log10(x), 6)
