"""Figures of lesson 03: what each head reads, its pattern, what the heads cost.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`heads_figure` into the lesson's explorer. The toy layer and the lesson's tables are
in :mod:`attnlib.analysis.experiments.heads`.

Lesson: 03_multi_head_attention.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import lru_cache

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_positive_int
from attnlib.analysis.experiments.heads import head_patterns
from attnlib.examples import D_IN, TOKENS
from attnlib.viz.style import HEIGHT, OKABE_ITO, rounded, style

__all__ = ["HEAD_COUNTS", "HEAD_WIDTHS", "heads_figure", "layer_heads_figure", "reads_figure"]

HEAD_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
"""The numbers of heads ``H`` the explorer offers."""

HEAD_WIDTHS: tuple[int, ...] = (2, 4, 8, 16)
"""The head widths ``d_head`` the explorer offers."""

_ROWS, _COLS = 2, 4  # the explorer's grid: up to 8 heads
_ROW_HEIGHT = 210  # px a row of panels takes; a single row of heads leaves out one
_HEAD_COLORS = ("blue", "orange", "bluish green", "vermillion", "reddish purple", "sky blue",
                "yellow", "black")


@lru_cache(maxsize=2)
def _grid_layout(rows: int) -> dict:
    """The explorer's grid of heatmap axes with token labels: ``rows`` rows of
    :data:`_COLS` panels, built once per row count."""
    n = len(TOKENS)
    fig = make_subplots(rows=rows, cols=_COLS,
                        subplot_titles=[f"head {h}" for h in range(rows * _COLS)],
                        horizontal_spacing=0.06, vertical_spacing=0.16)
    ticks = {"tickmode": "array", "tickvals": list(range(n)), "ticktext": list(TOKENS),
             "showgrid": False, "tickfont": {"size": 10}}
    fig.update_xaxes(**ticks, tickangle=-90, range=[-0.5, n - 0.5])
    fig.update_yaxes(**ticks, range=[n - 0.5, -0.5])  # query 0 on top, as in a matrix
    for col in range(2, _COLS + 1):
        fig.update_yaxes(showticklabels=False, col=col)
    fig.update_yaxes(title_text="query", col=1)
    fig.update_layout(coloraxis={"colorscale": "Cividis", "cmin": 0, "cmax": 1,
                                 "colorbar": {"title": {"text": "weight", "side": "right"},
                                              "len": 0.8}})
    return fig.layout.to_plotly_json()


def heads_figure(n_heads: int = 4, d_head: int = 4, *, d_in: int = D_IN, seed: int = 0
                 ) -> go.Figure:
    """The attention pattern of every head on the same ``X``, and the layer's parameter count.

    Panel ``h`` (left to right, then top to bottom) is the heatmap of ``P_h`` from
    :func:`head_patterns` on the tokens :data:`attnlib.examples.TOKENS` (tick labels): row
    ``i`` (a query token) holds the weights it gives to each column (a key token), and every
    row sums to 1.
    The grid has :data:`_COLS` panels a row and as many rows as ``H`` needs, and only ``H``
    panels: a twin switches the subplots with the head count. The title gives ``H d_head``
    against ``d_in`` and the parameter count of the layer's four matrices,
    ``3 d_in H d_head + H d_head d_in = 4 d_in H d_head``.

    Args:
        n_heads: ``H``, from 1 to 8.
        d_head: ``d_head``; ``H d_head`` at most :data:`attnlib.examples.WIDE`.
        d_in: input (and output) width.
        seed: seed of :func:`attnlib.examples.draw_layer`.

    Returns:
        go.Figure: ``H`` heatmap traces (weights rounded to 3 decimals) sharing one colour
        axis from 0 to 1.
    """
    check_positive_int("n_heads", n_heads)
    if n_heads > _ROWS * _COLS:
        raise ValueError(f"n_heads must be at most {_ROWS * _COLS} (the figure's grid); "
                         f"got {n_heads}")
    P = head_patterns(n_heads, d_head, d_in=d_in, seed=seed)
    rows = -(-n_heads // _COLS)
    layout = copy.deepcopy(_grid_layout(rows))
    layout["annotations"] = layout["annotations"][:n_heads]  # the titles "head h", h < H
    for h in range(n_heads, rows * _COLS):  # no axes for the panels beyond H
        axis = "" if h == 0 else str(h + 1)
        del layout[f"xaxis{axis}"], layout[f"yaxis{axis}"]
    fig = go.Figure(layout=layout)
    n = len(TOKENS)
    for h in range(n_heads):
        axis = "" if h == 0 else str(h + 1)  # subplot h draws on axes x{h+1}, y{h+1}
        fig.add_trace(go.Heatmap(
            z=rounded(P[h], 3), x=list(range(n)), y=list(range(n)), coloraxis="coloraxis",
            name=f"head {h}", xaxis=f"x{axis}", yaxis=f"y{axis}",
            hovertemplate=f"head {h}<br>query %{{y}}, key %{{x}}<br>weight %{{z:.3f}}"
                          "<extra></extra>",
        ))
    width = n_heads * d_head
    relation = "=" if width == d_in else ("<" if width < d_in else ">")
    count = 4 * d_in * width
    style(fig, (f"{n_heads} head{'s' if n_heads > 1 else ''}, d_head = {d_head}, on the same X: "
                f"H d_head = {width} {relation} d_in = {d_in}<br><sup>parameters "
                f"4 d_in H d_head = 4 × {d_in} × {width} = {count:,}; row: query token, "
                f"column: key token</sup>"),
          height=HEIGHT + 160 - _ROW_HEIGHT * (_ROWS - rows))
    fig.update_layout(margin={"t": 110, "b": 50})
    return fig


def layer_heads_figure(
    maps: Sequence[torch.Tensor], *, labels: Sequence[Sequence[str]] | None = None,
    title: str = "attention weights of every head",
) -> go.Figure:
    """The attention weights of every head of every layer on one sequence, in a grid.

    Row ``l`` of the grid is layer ``l``, column ``h`` its head ``h``; each panel is the
    heatmap of ``P_h`` (query positions down, key positions across, query 0 on top), so a
    previous-token head shows as the diagonal just below the main one, and an induction
    head on a repeated sequence as a diagonal one period, minus one, below it.

    Args:
        maps: one tensor ``(H, N, N)`` per layer, the weights on one sequence (for
            example ``P[0]`` of each entry of :func:`attnlib.models.probes.attention_maps`), all
            with the same ``H`` and ``N``.
        labels: optional ``labels[l][h]``, short lines under panel ``(l, h)``'s title,
            one per ``", "``-separated part (measured scores, say).
        title: the figure's title.

    Returns:
        go.Figure: ``L H`` heatmap traces (weights rounded to 3 decimals) sharing one colour
        axis from 0 to 1.
    """
    if not isinstance(maps, Sequence) or not maps:
        raise TypeError(f"maps must be a non-empty list of (H, N, N) tensors; got {maps!r}")
    shape = None
    for P in maps:
        if not isinstance(P, torch.Tensor) or P.dim() != 3 or P.shape[-1] != P.shape[-2]:
            got = tuple(P.shape) if isinstance(P, torch.Tensor) else type(P).__name__
            raise ValueError(f"maps must hold (H, N, N) tensors; got {got}")
        if shape is not None and P.shape != shape:
            raise ValueError(f"maps must all have one shape; got {tuple(shape)} and "
                             f"{tuple(P.shape)}")
        shape = P.shape
    n_layers, (n_heads, n, _) = len(maps), shape
    if labels is not None and (len(labels) != n_layers
                               or any(len(row) != n_heads for row in labels)):
        raise ValueError(f"labels must be {n_layers} rows of {n_heads} strings, one per panel")
    def under(label: str) -> str:  # each ", "-separated part of a label on a line of its own
        return "".join(f"<br><sup>{part}</sup>" for part in label.split(", "))

    titles = [f"layer {layer}, head {h}" + ("" if labels is None else under(labels[layer][h]))
              for layer in range(n_layers) for h in range(n_heads)]
    fig = make_subplots(rows=n_layers, cols=n_heads, subplot_titles=titles,
                        horizontal_spacing=0.04, vertical_spacing=0.2)
    for layer, P in enumerate(maps):
        for h in range(n_heads):
            fig.add_trace(go.Heatmap(
                z=rounded(P[h].detach().cpu(), 3), coloraxis="coloraxis",
                name=f"layer {layer}, head {h}",
                hovertemplate=f"layer {layer}, head {h}<br>query %{{y}}, key %{{x}}"
                              "<br>weight %{z:.3f}<extra></extra>",
            ), row=layer + 1, col=h + 1)
    fig.update_xaxes(showgrid=False, range=[-0.5, n - 0.5], tickfont={"size": 9})
    fig.update_yaxes(showgrid=False, range=[n - 0.5, -0.5], tickfont={"size": 9})
    for col in range(2, n_heads + 1):
        fig.update_yaxes(showticklabels=False, col=col)
    fig.update_yaxes(title_text="query", col=1)
    for row in range(1, n_layers):  # key ticks under the last row only: the titles need the room
        fig.update_xaxes(showticklabels=False, row=row)
    fig.update_xaxes(title_text="key", row=n_layers)
    fig.update_layout(coloraxis={"colorscale": "Cividis", "cmin": 0, "cmax": 1,
                                 "colorbar": {"title": {"text": "weight", "side": "right"},
                                              "len": 0.8}})
    style(fig, title, height=160 + 260 * n_layers)
    fig.update_layout(margin={"t": 140, "b": 50})
    return fig


def reads_figure(n_heads: int = 4, d_head: int = 2, *, d_in: int = 8) -> go.Figure:
    """Which inputs each head's queries read: ``W_Q`` against the sliced-input version.

    Left: the ``d_in × H d_head`` matrix ``W_Q`` of multi-head attention, each entry
    coloured by the head whose column it feeds; every head has a weight on every input
    feature. Right: the matrix that slicing ``X`` into ``H`` pieces amounts to, block
    diagonal: head ``h`` reads only the input features ``h d_in/H .. (h + 1) d_in/H - 1``
    (white: a weight fixed at 0).

    Args:
        n_heads: ``H``; must divide ``d_in`` (the sliced version needs it).
        d_head: ``d_head``.
        d_in: input width.

    Returns:
        go.Figure: two heatmaps of head indices (``None`` where a weight is 0).
    """
    for name, value in (("n_heads", n_heads), ("d_head", d_head), ("d_in", d_in)):
        check_positive_int(name, value)
    if d_in % n_heads:
        raise ValueError(f"n_heads must divide d_in to slice X; got d_in={d_in}, "
                         f"n_heads={n_heads}")
    if n_heads > len(_HEAD_COLORS):
        raise ValueError(f"n_heads must be at most {len(_HEAD_COLORS)}; got {n_heads}")
    piece = d_in // n_heads
    full = [[c // d_head for c in range(n_heads * d_head)] for _ in range(d_in)]
    sliced = [[c // d_head if r // piece == c // d_head else None
               for c in range(n_heads * d_head)] for r in range(d_in)]
    scale = []  # a stepwise colour scale: head h gets the h-th colour of the palette
    for h in range(n_heads):
        color = OKABE_ITO[_HEAD_COLORS[h]]
        scale += [[h / n_heads, color], [(h + 1) / n_heads, color]]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "multi-head attention: W_Q", f"slicing X: {piece} features per head"))
    hover = "input feature %{y}<br>column %{x} of W_Q: head %{z}<extra></extra>"
    for col, z in ((1, full), (2, sliced)):
        fig.add_trace(go.Heatmap(
            z=z, zmin=-0.5, zmax=n_heads - 0.5, colorscale=scale, xgap=1, ygap=1,
            texttemplate="%{z}",  # the head number in each cell: colour is not the only cue
            showscale=col == 1, hovertemplate=hover, name=f"panel {col}",
            colorbar={"title": {"text": "head"}, "tickvals": list(range(n_heads))},
        ), row=1, col=col)
    fig.update_yaxes(autorange="reversed", title_text="row of W_Q: input feature", dtick=1,
                     showgrid=False, col=1)
    fig.update_yaxes(autorange="reversed", dtick=1, showgrid=False, col=2)
    fig.update_xaxes(title_text="column of W_Q", dtick=d_head, showgrid=False)
    fig.update_layout(plot_bgcolor="white")
    for a in fig.layout.annotations:
        a.font = {"size": 12}
    style(fig, f"Who reads what: d_in = {d_in}, H = {n_heads} heads of width d_head = {d_head}")
    return fig
