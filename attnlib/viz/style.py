"""The book's shared figure style: template, size, a colour-blind-safe palette, rounding.

Colours come from the Okabe-Ito palette, which stays distinguishable under the common
forms of colour blindness. Colour is never the only signal: a figure that tells curves
apart by colour also tells them apart by line dash or marker symbol, and names them in
its legend or in an annotation.

Lesson: every lesson's figures (first used in 00_tokens_and_embeddings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import torch

__all__ = [
    "COLORS",
    "DASHES",
    "DECIMALS",
    "HEIGHT",
    "OKABE_ITO",
    "SYMBOLS",
    "TEMPLATE",
    "rounded",
    "style",
]

TEMPLATE = "plotly_white"
"""The plotly template of every figure in the book."""

HEIGHT = 420
"""Figure height in pixels, shared by every figure so pages keep a steady rhythm."""

DECIMALS = 6
"""Figure data are rounded to this many decimals, so every CPU writes the same JSON."""

OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}
"""The eight colours of Okabe and Ito's colour-blind-safe palette."""

COLORS = {
    "main": OKABE_ITO["blue"],  # the quantity a figure is about
    "reference": OKABE_ITO["vermillion"],  # closed forms and theory curves
    "marker": OKABE_ITO["black"],  # thresholds and measured extremes
    "char": OKABE_ITO["black"],
    "word": OKABE_ITO["orange"],
    "bpe": OKABE_ITO["blue"],
}
"""Named roles, so that one idea keeps one colour across lessons."""

DASHES = {"measured": "solid", "held-out": "dot", "reference": "solid", "marker": "dash"}
"""Line dashes that carry the same distinctions as the colours."""

SYMBOLS = {"char": "square", "word": "diamond", "bpe": "circle"}
"""Marker symbols that carry the same distinctions as the colours."""


def style(fig: go.Figure, title: str, *, height: int = HEIGHT) -> go.Figure:
    """Apply the book's shared look to ``fig`` and return it.

    Args:
        fig: the figure to style (changed in place).
        title: the figure title; say what is shown and for which setting.
        height: height in pixels.

    Returns:
        go.Figure: ``fig`` itself.
    """
    fig.update_layout(
        template=TEMPLATE,
        height=height,
        title={"text": title, "x": 0.01, "xanchor": "left"},
        margin={"l": 70, "r": 30, "t": 70, "b": 60},
        font={"size": 13},
    )
    return fig


def rounded(x: object, decimals: int = DECIMALS, *, digits: int | None = None) -> object:
    """``x`` with every float rounded to ``decimals``; tensors and arrays become lists.

    With ``digits`` set, every float keeps that many significant digits instead, for data
    that span orders of magnitude (a gain of 1.5e-7 beside one of 0.3), or whose last
    digits differ from CPU to CPU (a variance after dozens of layers).

    Dictionaries, lists and tuples are walked recursively; ints, strings, bools and
    ``None`` pass through. Rounding makes a figure's JSON identical on every CPU, whatever
    the last bits of its floating-point arithmetic.

    Example:
        >>> rounded({"x": [0.1 + 0.2, 2], "name": "a"}, 3)
        {'x': [0.3, 2], 'name': 'a'}
        >>> rounded([1.5487e-7, 0.31416, 48.657], digits=3)
        [1.55e-07, 0.314, 48.7]
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float64 if x.is_floating_point() else x.dtype).numpy()
    if isinstance(x, np.ndarray):
        return rounded(x.tolist(), decimals, digits=digits)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (float, np.floating)):
        value = round(float(x), decimals) if digits is None else float(f"{float(x):.{digits}g}")
        return value + 0.0  # + 0.0 turns -0.0 into 0.0
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, Mapping):
        return {k: rounded(v, decimals, digits=digits) for k, v in x.items()}
    if isinstance(x, Sequence) and not isinstance(x, str):
        return [rounded(v, decimals, digits=digits) for v in x]
    return x
