"""Figures of lesson 14 (your model, wired and loaded by you): where a reader's decoder
parts from attnlib's.

The numbers come from :func:`attnlib.models.assemble.divergence_table`, which runs both
decoders side by side through the prompt and then token by token through their caches, and
compares every sublayer's output; this module only draws them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from attnlib.viz.style import HEIGHT, style
from attnlib.viz.walk import show_char

__all__ = ["FLOOR", "divergence_figure", "text_figure"]

FLOOR = -10
"""The level drawn where the two agree, within the table's ``rtol``: differences that small
are rounding, and differ from CPU to CPU, so they are not drawn one by one."""


def divergence_figure(case: str, model: str, *,
                      tables: Mapping[tuple[str, str], pd.DataFrame]) -> go.Figure:
    """A heat map of where the decoder of ``case`` parts from attnlib's on ``model``.

    Rows are steps (0: the prompt; then each token fed through the caches), columns the
    places in the order they run (the embedding, each layer's attention and feed-forward
    sublayer, the logits); a cell's colour is log10 of the largest difference there over the
    largest entry of attnlib's output, to one decimal (:data:`FLOOR` within the table's
    ``rtol``, 1 for a wrong shape). The title names the first place above the table's
    ``rtol`` (``first_divergence``'s tolerance: 1e-9 in float64, 1e-4 in float32).

    Args:
        case: the mistake (or ``"your pieces"``), a key of ``tables`` with ``model``.
        model: the model's label.
        tables: ``(case, model) -> divergence_table(...)``.

    Example:
        >>> t = pd.DataFrame({"step": [0, 0], "place": ["embed", "logits"],
        ...                   "max |diff|": [0.0, 0.5], "relative": [0.0, 0.25],
        ...                   "rtol": [1e-9, 1e-9]})
        >>> divergence_figure("x", "m", tables={("x", "m"): t}).layout.title.text
        'x on m<br><sup>first apart: step 0, logits, relative 0.25</sup>'
    """
    if (case, model) not in tables:
        held = sorted({m for c, m in tables if c == case})
        raise ValueError(f"no run of {case!r} on {model!r}; that case ran on {held}")
    table = tables[(case, model)]
    places = list(dict.fromkeys(table["place"]))
    steps = sorted(set(table["step"]))
    grid = table.pivot(index="step", columns="place", values="relative").loc[steps, places]

    rtol = float(table["rtol"].iloc[0])

    def level(x: float) -> float:
        if not math.isfinite(x):
            return 1.0
        return FLOOR if x <= rtol else max(FLOOR, min(1.0, round(math.log10(x), 1)))

    z = [[level(float(v)) for v in row] for row in grid.to_numpy()]
    text = [["within rtol" if float(v) <= rtol else f"{float(v):.2g}" for v in row]
            for row in grid.to_numpy()]
    apart = table[~(table["relative"] <= rtol)]
    if apart.empty:
        sub = f"agrees everywhere (relative difference at most {rtol:g})"
    else:
        first = apart.iloc[0]
        sub = (f"first apart: step {first['step']}, {first['place']}, "
               f"relative {float(first['relative']):.2g}")
    fig = go.Figure(go.Heatmap(
        z=z, x=places, y=[str(s) for s in steps], zmin=FLOOR, zmax=1, text=text,
        colorscale="Viridis", xgap=1, ygap=1,
        colorbar={"title": {"text": "log10", "side": "top"}, "thickness": 10,
                  "tickvals": [-10, -5, 0], "len": 0.9},
        hovertemplate="step %{y}, %{x}: relative difference %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title_text="step", type="category")
    fig.update_xaxes(title_text="place, in the order it runs", tickangle=-90,
                     type="category", tickvals=places,
                     ticktext=[p.replace("attention", "attn").replace("feed-forward", "FFN")
                               for p in places])
    fig.update_layout(margin={"b": 130})
    return style(fig, f"{case} on {model}<br><sup>{sub}</sup>", height=HEIGHT + 60)


def text_figure(case: str, model: str, *,
                written: Mapping[tuple[str, str], tuple[Sequence[str], Sequence[str]]],
                per_row: int = 16) -> go.Figure:
    """The characters attnlib's decoder and the reader's write, side by side, row by row.

    ``written[(case, model)]`` is ``(attnlib's tokens, the reader's tokens)``, each a sequence
    of decoded tokens (a string: one token per character) written greedily by its own decoder
    through its own caches. Rows alternate attnlib's and the reader's
    ``per_row`` characters; a character of the reader's that differs from attnlib's is
    coloured, and the title names the first one. A token of several characters (``<pad>``)
    is drawn as ▯.

    Example:
        >>> fig = text_figure("x", "m", written={("x", "m"): ("abcd", "abXd")}, per_row=2)
        >>> fig.layout.title.text
        'x on m<br><sup>first differs at character 2 of 4: X for c</sup>'
    """
    if (case, model) not in written:
        held = sorted({m for c, m in written if c == case})
        raise ValueError(f"no text of {case!r} on {model!r}; that case ran on {held}")
    ours, theirs = written[(case, model)]
    if len(ours) != len(theirs):
        raise ValueError(f"the two texts must have one length in tokens; got {len(ours)} "
                         f"and {len(theirs)}")
    z, text, labels = [], [], []
    for start in range(0, len(ours), per_row):
        a, b = ours[start:start + per_row], theirs[start:start + per_row]
        pad = per_row - len(a)
        z += [[0] * len(a) + [None] * pad,
              [int(x != y) + 1 for x, y in zip(a, b, strict=True)] + [None] * pad]
        text += [[_visible(c) for c in a] + [""] * pad, [_visible(c) for c in b] + [""] * pad]
        labels += [f"attnlib {start}", f"yours {start}"]
    differs = [k for k, (x, y) in enumerate(zip(ours, theirs, strict=True)) if x != y]
    sub = ("the same characters throughout" if not differs else
           f"first differs at character {differs[0]} of {len(ours)}: "
           f"{_visible(theirs[differs[0]])} for {_visible(ours[differs[0]])}")
    scale = [[0.0, "#e8eef5"], [0.33, "#e8eef5"], [0.34, "#cfe8dc"], [0.66, "#cfe8dc"],
             [0.67, "#f4b183"], [1.0, "#f4b183"]]
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", textfont={"size": 12}, zmin=0, zmax=2,
        y=labels, colorscale=scale, showscale=False, xgap=1, ygap=3,
        hovertemplate="%{y} + %{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text="character in the row (orange: yours differs)", dtick=4)
    return style(fig, f"{case} on {model}<br><sup>{sub}</sup>",
                 height=HEIGHT if len(labels) <= 4 else HEIGHT + 30 * (len(labels) - 4))


def _visible(token: str) -> str:
    """A token as a cell shows it: one character as the book prints it
    (:func:`attnlib.viz.walk.show_char`: ``␣`` for a space, ``⏎`` for a newline), and a token
    of several characters (a special one, such as ``<pad>``) as ▯, so every cell holds one
    glyph."""
    return "▯" if len(token) > 1 else show_char(token)
