"""Figures of lesson 09 (the frontier): tiling, top-k, random features.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`feature_count_figure` is the lesson's explorer. The experiments
they draw, and the lesson's tables, are in :mod:`attnlib.analysis.experiments.frontier`;
:func:`first_token_table` reads trained models.

Lesson: 09_frontier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_bool, check_positive_int
from attnlib.analysis.experiments.frontier import (
    FEATURE_COUNTS,
    RF_D,
    TOPK_VALUES,
    feature_error,
    feature_errors,
    rf_estimates,
    rf_problem,
    tiling_table,
    topk_table,
)
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = ["feature_count_figure", "first_token_table", "tiling_figure", "topk_figure"]


# ---------------------------------------------------------------------------------------
# tiled attention: memory and traffic
# ---------------------------------------------------------------------------------------


def tiling_figure(
    ns: Sequence[int] = (128, 256, 512, 1024),
    *,
    block_size: int = 64,
    d: int = 32,
    seed: int = 0,
) -> go.Figure:
    """The largest intermediate (kB, float32) of both paths against ``N``, log-log.

    Uses :func:`tiling_table`; the reference lines are ``N^2`` and ``N * block_size``
    elements, the sizes of the full logit matrix and of one block of logits.

    Args:
        ns: sequence lengths.
        block_size: keys per block of the tiled path.
        d: width of queries, keys and values.
        seed: seed of the draw.

    Returns:
        go.Figure: two measured traces and two reference lines.
    """
    table = tiling_table(ns, block_size=block_size, d=d, seed=seed)
    x = list(table.index)
    fig = go.Figure()
    for name, col, color, symbol in (
        ("explicit Z⁻¹AV", "explicit", COLORS["reference"], "diamond"),
        (f"tiled, block {block_size}", "tiled", COLORS["main"], "circle"),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded([v * 4 / 1000 for v in table[f"{col}: elements"]], 3),
                mode="markers+lines",
                name=f"{name} (measured)",
                line={"color": color, "width": 2},
                marker={"symbol": symbol, "size": 9},
                hovertemplate=f"{name}<br>N = %{{x}}<br>%{{y:.1f}} kB<extra></extra>",
            )
        )
    for name, sizes, color in (
        ("N² elements", [n * n for n in x], COLORS["reference"]),
        (f"N × {block_size} elements", [n * block_size for n in x], COLORS["main"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded([s * 4 / 1000 for s in sizes], 3),
                mode="lines",
                name=name,
                line={"color": color, "dash": DASHES["marker"], "width": 1},
                hovertemplate=f"{name}<br>N = %{{x}}<br>%{{y:.1f}} kB<extra></extra>",
            )
        )
    fig.update_xaxes(
        type="log",
        title_text="tokens N",
        tickmode="array",
        tickvals=x,
        ticktext=[str(n) for n in x],
    )
    fig.update_yaxes(type="log", title_text="largest intermediate (kB, float32)")
    last = x[-1]
    style(
        fig,
        (
            f"Largest tensor created, one head, d = {d}<br><sup>at N = {last}: "
            f"{table.loc[last, 'ratio']:g}× smaller when tiled</sup>"
        ),
    )
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"}, margin={"b": 120}
    )
    return fig


# ---------------------------------------------------------------------------------------
# top-k sparse attention
# ---------------------------------------------------------------------------------------


def topk_figure(
    ks: Sequence[int] = TOPK_VALUES,
    *,
    n: int = 128,
    d: int = 16,
    d_index: int = 4,
    seed: int = 0,
) -> go.Figure:
    """Left: output error of top-k attention against ``k``. Right: its cost.

    The data are :func:`topk_table`'s; both x axes are logarithmic.

    Args:
        ks: keys kept per query.
        n: tokens.
        d: width of queries, keys and values.
        d_index: width of the indexer's projections.
        seed: seed of the draw.

    Returns:
        go.Figure: three traces (two errors, one cost).
    """
    table = topk_table(ks, n=n, d=d, d_index=d_index, seed=seed)
    x = list(table.index)
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.14,
        subplot_titles=("relative error of Y", "multiply-adds / full attention"),
    )
    _error_curves(
        fig, table, "k",
        (("error, exact top-k", COLORS["main"], "solid", "circle"),
         ("error, indexer top-k", OKABE_ITO["orange"], "dot", "square")),
        rename=("error, ", ""), col=1, marker_size=8,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=rounded(list(table["cost / full"]), 4),
            mode="lines+markers",
            name=f"cost with a {d_index}-dim indexer",
            showlegend=True,
            line={"color": COLORS["reference"], "width": 2},
            marker={"symbol": "diamond", "size": 8},
            hovertemplate="k = %{x}<br>cost %{y:.4f} of full<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_hline(
        y=1, line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1}, row=1, col=2
    )
    for c in (1, 2):
        _log_x(fig, x, "keys kept per query, k", col=c)
    fig.update_yaxes(type="log", row=1, col=1)
    return _two_panel_style(
        fig,
        f"Causal top-k attention, N = {n}, d = {d}<br><sup>the error reaches 0 only "
        f"at k = N; dashed: the cost of full attention</sup>",
        bottom=120,
    )


def _error_curves(
    fig: go.Figure,
    table: pd.DataFrame,
    x_name: str,
    looks: Sequence[tuple[str, str, str, str]],
    *,
    rename: tuple[str, str],
    col: int,
    marker_size: int | None = None,
) -> None:
    """One line per column of ``table`` (looks: column, colour, dash, symbol) against its index."""
    x = list(table.index)
    for column, color, dash, symbol in looks:
        marker = {"symbol": symbol} if marker_size is None else {"symbol": symbol,
                                                                  "size": marker_size}
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded(list(table[column]), 4),
                mode="lines+markers",
                name=column.replace(*rename),
                line={"color": color, "dash": dash, "width": 2},
                marker=marker,
                hovertemplate=f"{column}<br>{x_name} = %{{x}}<br>%{{y:.4f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )


def _log_x(fig: go.Figure, ticks: Sequence[int], title: str, *, col: int) -> None:
    """A logarithmic x axis in panel ``col`` with one labelled tick per value of ``ticks``."""
    fig.update_xaxes(type="log", title_text=title, tickmode="array", tickvals=list(ticks),
                     ticktext=[str(t) for t in ticks], row=1, col=col)


def _two_panel_style(fig: go.Figure, title: str, *, bottom: int) -> go.Figure:
    """The common style of the chapter's two-panel figures, legend in a row below them."""
    style(fig, title, height=HEIGHT + 40)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
                      margin={"t": 110, "b": bottom})
    return fig


# ---------------------------------------------------------------------------------------
# random features
# ---------------------------------------------------------------------------------------


def feature_count_figure(r: int = 16, orthogonal: bool = False, *, seed: int = 0) -> go.Figure:
    """The explorer: Performer's kernel estimate for ``r`` features, and its error against ``r``.

    Left: every entry of one estimate ``A_hat`` (one draw of ``Omega``) against the exact
    ``A = exp(Q K^T / sqrt(d))``; a perfect estimate lies on the diagonal. Right: the mean
    relative error of ``Y`` over 100 draws against ``r`` (:func:`feature_errors`) for i.i.d.
    and orthogonal features, the curve ``c / sqrt(r)`` through the i.i.d. error at
    ``r = 1``, and a marker at the chosen ``r``; the title gives its error.

    Args:
        r: number of random features, one of :data:`FEATURE_COUNTS` for the right panel.
        orthogonal: draw block-orthogonal features.
        seed: seed of the problem.

    Returns:
        go.Figure: a scatter of ``N^2`` points and four curves.
    """
    r = check_positive_int("r", r)
    check_bool("orthogonal", orthogonal)
    Q, K, V = rf_problem(seed)
    A = torch.exp(Q @ K.T / math.sqrt(RF_D))
    A_hat = rf_estimates(Q, K, V, r, orthogonal, 1, torch.Generator().manual_seed(seed))[0][0]
    table = feature_errors(FEATURE_COUNTS, seed=seed)
    kind = "orthogonal" if orthogonal else "i.i.d."
    err_Y = feature_error(r, orthogonal, seed)[1]
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.14,
        subplot_titles=(
            f"one estimate, r = {r}: entries of A",
            "mean relative error of Y (100 draws)",
        ),
    )
    top = float(max(A.max(), A_hat.max()))
    fig.add_trace(
        go.Scatter(
            x=[0, round(top, 3)],
            y=[0, round(top, 3)],
            mode="lines",
            name="exact = estimate",
            line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1},
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=rounded(A.flatten(), 3),
            y=rounded(A_hat.flatten(), 3),
            mode="markers",
            name=f"entries of A_hat ({kind})",
            marker={"color": COLORS["main"], "size": 5, "opacity": 0.6},
            hovertemplate="exact %{x:.3f}<br>estimate %{y:.3f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    rs = list(table.index)
    _error_curves(
        fig, table, "r",
        (("error of Y, i.i.d.", COLORS["main"], "solid", "circle"),
         ("error of Y, orthogonal", OKABE_ITO["bluish green"], "dot", "square")),
        rename=("error of Y, ", "mean error, "), col=2,
    )
    c = float(table.loc[rs[0], "error of Y, i.i.d."]) * math.sqrt(rs[0])
    fig.add_trace(
        go.Scatter(
            x=rs,
            y=rounded([c / math.sqrt(x) for x in rs], 4),
            mode="lines",
            name="c / √r",
            line={"color": COLORS["reference"], "dash": DASHES["marker"], "width": 1},
            hoverinfo="skip",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Scatter(
            x=[r],
            y=[round(err_Y, 4)],
            mode="markers",
            name=f"r = {r}",
            showlegend=False,
            marker={
                "color": COLORS["marker"],
                "size": 14,
                "symbol": "circle-open",
                "line": {"width": 2},
            },
            hovertemplate="r = %{x}<br>error %{y:.4f}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="exact exp(q·k/√d)", row=1, col=1)
    fig.update_yaxes(title_text="estimate φ(q)·φ(k)", row=1, col=1)
    _log_x(fig, rs, "features r", col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    return _two_panel_style(
        fig,
        f"Positive random features, r = {r} ({kind})<br><sup>mean relative error of "
        f"Y: {err_Y:.4f}; dashed: c/√r, the rate of each entry's standard deviation</sup>",
        bottom=130,
    )


# ---------------------------------------------------------------------------------------
# attention sinks, and usable context
# ---------------------------------------------------------------------------------------


def first_token_table(models: dict[str, torch.nn.Module], ids: torch.Tensor) -> pd.DataFrame:
    """The share of attention on position 0, layer by layer, in trained decoders.

    For each model, :func:`attnlib.models.probes.first_token_share` on ``ids`` (in float64, so the
    numbers are the same on every CPU): the mean over heads of the weight that queries
    ``1 .. N-1`` put on position 0, and the largest share of any one head. An attention sink
    shows as a share far above :func:`attnlib.models.probes.uniform_first_token_share`.

    Args:
        models: trained decoders by name, e.g. ``{"book": attnlib.models.pretrained.load("book")}``.
        ids: ``(B, N)`` token ids, e.g. held-out text.

    Returns:
        pd.DataFrame: two columns per model (4 decimals), indexed by layer.
    """
    from attnlib.models.probes import first_token_share

    columns = {}
    for name, model in models.items():
        share = first_token_share(model, ids)  # (n_layers, n_heads)
        columns[f"{name}: mean over heads"] = share.mean(dim=-1).numpy().round(4)
        columns[f"{name}: largest head"] = share.amax(dim=-1).numpy().round(4)
    return pd.DataFrame(columns).rename_axis("layer")
