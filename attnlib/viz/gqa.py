"""Figures of lesson 06: the group map, what ``G`` saves, the mean-pooling dial.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`groups_figure` into the lesson's explorer. The layers the conversion experiments
draw, and the lesson's tables, are in :mod:`attnlib.analysis.experiments.gqa`; the trained
models' dial is :func:`trained_table` and :func:`trained_figure`.

Lesson: 06_gqa.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib._checks import check_choice, check_divisible, check_positive_int
from attnlib.analysis.experiments.gqa import (
    D_HEAD,
    HEAD_COUNTS,
    KINDS,
    KV_HEAD_COUNTS,
    conversion_error,
)
from attnlib.core.heads import kv_head_index
from attnlib.viz.style import COLORS, HEIGHT, OKABE_ITO, rounded, style
from attnlib.viz.trained import BUDGETS, dial_figure, dial_table

__all__ = [
    "group_map_figure", "groups_figure", "TRAINED_KV_HEADS", "TRAINED_MODEL", "TRAINED_SCRATCH",
    "TRAINED_SETTINGS", "trained_figure", "trained_table",
]


TRAINED_MODEL = "book"
"""The shipped model that :func:`trained_table` converts (RoPE, ``G = H = 4`` in 4 layers)."""

TRAINED_KV_HEADS: tuple[int, ...] = (4, 2, 1)
"""The ``G`` of :func:`trained_table` and of the trained explorer, largest first."""

_KIND_LOOKS = {"correlated": {"color": COLORS["main"]},
               "independent": {"color": COLORS["reference"]}}


# ---------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------


def trained_table() -> pd.DataFrame:
    """The trained book model mean-pooled to each ``G`` of :data:`TRAINED_KV_HEADS`.

    :func:`attnlib.viz.trained.dial_table` of :data:`TRAINED_MODEL`: per ``G``, the cache
    bytes per token (float32, 4 layers) and the held-out loss on
    :func:`attnlib.models.train.eval_set` right after
    :func:`attnlib.models.pretrained.to_gqa` and after
    the 100 and 400 steps of uptraining that ship with the model. ``G = H`` is the control:
    pooling changes nothing there, so its row is the fine-tune alone.

    Returns:
        pd.DataFrame indexed by ``G``; ``attrs`` holds the source's loss and cache and the
        seed noise of the ``book`` recipe (:func:`attnlib.viz.trained.seed_noise`).
    """
    return dial_table(TRAINED_MODEL, "n_kv_heads", TRAINED_KV_HEADS)


# ---------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------


TRAINED_SCRATCH: dict[int, str] = {4: "book", 2: "book-scratch-gqa2", 1: "book-scratch-gqa1"}
"""The models trained from scratch with the ``book`` recipe, by ``G`` (``G = 4`` is ``book``
itself)."""


def trained_figure(n_kv_heads: int = 2, steps: int = 100) -> go.Figure:
    """The trained explorer: loss against the uptraining budget for each ``G``; one marked.

    :func:`attnlib.viz.trained.dial_figure` of :func:`trained_table`, with ``G = H = 4``
    as the control and the from-scratch models of :data:`TRAINED_SCRATCH`.

    Args:
        n_kv_heads: ``G``, one of :data:`TRAINED_KV_HEADS`.
        steps: the uptraining budget, one of :data:`attnlib.viz.trained.BUDGETS`.

    Returns:
        go.Figure: the loss lines and the cache bars.
    """
    from attnlib.models import pretrained

    table = trained_table()
    scratch = {G: round(pretrained.card(name)["held_out"]["loss"], 3)
               for G, name in TRAINED_SCRATCH.items()}
    return dial_figure(table, check_choice("n_kv_heads", n_kv_heads, list(TRAINED_KV_HEADS)),
                       check_choice("steps", steps, list(BUDGETS)), setting="G",
                       control=max(TRAINED_KV_HEADS), scratch=scratch,
                       model=f"'{TRAINED_MODEL}'", conversion="mean pooling")


TRAINED_SETTINGS: tuple[tuple[int, int], ...] = tuple(
    (G, b) for G in TRAINED_KV_HEADS for b in BUDGETS)
"""Every ``(G, steps)`` of the trained explorer and its twin."""


def group_map_figure(n_heads: int = 8, kv_heads: Sequence[int] = (8, 4, 2, 1)) -> go.Figure:
    """The group map ``g(h) = h // s``: one row per ``G``, one column per query head.

    Each cell is labelled with the KV head that query head ``h`` reads
    (:func:`attnlib.core.heads.kv_head_index`); runs of one label are the groups.

    Args:
        n_heads: ``H``.
        kv_heads: the values of ``G`` to draw, each a divisor of ``H``.

    Returns:
        go.Figure: one heatmap.
    """
    check_positive_int("n_heads", n_heads)
    rows, labels = [], []
    for G in kv_heads:
        check_positive_int("kv_heads[...]", G)
        check_divisible("n_heads", n_heads, "kv_heads[...]", G)
        rows.append(kv_head_index(n_heads, G).tolist())
        name = "MHA" if G == n_heads else "MQA" if G == 1 else "GQA"
        labels.append(f"{name}, G = {G}, s = {n_heads // G}")
    text = [[str(g) for g in row] for row in rows]
    z = [[g % 2 for g in row] for row in rows]  # neighbouring groups alternate colours
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"q{h}" for h in range(n_heads)], y=labels, text=text, texttemplate="%{text}",
        colorscale=[[0, OKABE_ITO["sky blue"]], [1, OKABE_ITO["orange"]]], zmin=0, zmax=1,
        showscale=False, xgap=3, ygap=3,
        hovertemplate="%{y}<br>query head %{x} reads KV head %{text}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="query head h", side="bottom")
    style(fig, (f"Which KV head each of H = {n_heads} query heads reads: g(h) = ⌊h / s⌋"
                "<br><sup>cell label: the KV head; a run of equal labels is one group</sup>"),
          height=HEIGHT - 60)
    fig.update_layout(margin={"l": 170, "t": 90})
    return fig


def _invalid_figure(n_heads: int, n_kv_heads: int) -> go.Figure:
    divisors = [g for g in KV_HEAD_COUNTS if g <= n_heads and n_heads % g == 0]
    fig = go.Figure(go.Scatter(x=[0], y=[0], mode="markers", marker={"opacity": 0},
                               hoverinfo="skip", showlegend=False))
    fig.add_annotation(x=0, y=0, showarrow=False, font={"size": 16},
                       text=(f"G = {n_kv_heads} does not divide H = {n_heads}: no such layer."
                             f"<br>Pick G among {', '.join(map(str, divisors))}."))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return style(fig, f"H = {n_heads}, G = {n_kv_heads}: not a valid grouping")


def groups_figure(n_heads: int = 8, n_kv_heads: int = 2, *, d_head: int = D_HEAD,
                  seed: int = 0) -> go.Figure:
    """The explorer: the group map, the cache, and the error of mean-pooling to ``G``.

    Left: which KV head (row) each query head (column) reads. Middle: numbers cached per
    token and layer, ``2 G d_head`` beside MHA's ``2 H d_head`` and MQA's ``2 d_head``.
    Right: :func:`conversion_error` of the two documented layers. The title states ``s``,
    the cache and both errors. A ``G`` that does not divide ``H`` gives a figure that
    says so.

    Args:
        n_heads: ``H``, one of :data:`HEAD_COUNTS` (any positive int works).
        n_kv_heads: ``G``.
        d_head: head width for the cache count.
        seed: seed of the layers.

    Returns:
        go.Figure: a heatmap and two bar charts.
    """
    check_positive_int("n_heads", n_heads)
    check_positive_int("n_kv_heads", n_kv_heads)
    if n_kv_heads > n_heads or n_heads % n_kv_heads:
        return _invalid_figure(n_heads, n_kv_heads)
    H, G, s = n_heads, n_kv_heads, n_heads // n_kv_heads
    fig = make_subplots(rows=1, cols=3, column_widths=[0.44, 0.28, 0.28],
                        horizontal_spacing=0.09, subplot_titles=(
                            "KV head g(h) that<br>query head h reads",
                            "numbers cached per<br>token and layer",
                            "relative output error<br>of mean pooling"))
    group = kv_head_index(H, G).tolist()
    z = [[1 if group[h] == g else 0 for h in range(H)] for g in range(G)]
    fig.add_trace(go.Heatmap(
        z=z, x=[f"q{h}" for h in range(H)], y=[f"kv{g}" for g in range(G)],
        colorscale=[[0, "#EEEEEE"], [1, COLORS["main"]]], zmin=0, zmax=1, showscale=False,
        xgap=2, ygap=2, hovertemplate="query head %{x}, KV head %{y}: %{z}<extra>1 = reads"
                                      "</extra>",
    ), row=1, col=1)
    layouts = [("MHA", 2 * H * d_head), (f"this, G = {G}", 2 * G * d_head), ("MQA", 2 * d_head)]
    fig.add_trace(go.Bar(
        x=[name for name, _ in layouts], y=[n for _, n in layouts],
        text=[str(n) for _, n in layouts], textposition="outside", showlegend=False,
        marker={"color": [OKABE_ITO["sky blue"], COLORS["main"], OKABE_ITO["sky blue"]]},
        hovertemplate="%{x}: %{y} numbers per token and layer<extra></extra>",
    ), row=1, col=2)
    errors = {kind: conversion_error(H, G, kind, seed=seed) for kind in KINDS}
    fig.add_trace(go.Bar(
        x=list(KINDS), y=rounded(list(errors.values()), 4),
        text=[f"{e:.4f}" for e in errors.values()], textposition="outside", showlegend=False,
        marker={"color": [_KIND_LOOKS[k]["color"] for k in KINDS],
                },
        hovertemplate="%{x} heads: relative error %{y:.4f}<extra></extra>",
    ), row=1, col=3)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="query head", row=1, col=1)
    fig.update_yaxes(range=[0, 2 * max(HEAD_COUNTS) * d_head * 1.2], row=1, col=2)
    fig.update_yaxes(range=[0, 1.15], row=1, col=3)  # ‖Y_G − Y‖ / ‖Y‖
    style(fig, (f"H = {H} query heads, G = {G} KV heads, s = {s}: the cache is 1/{s} of MHA's"
                f"<br><sup>2·G·d_head = {2 * G * d_head} numbers per token and layer</sup>"
                f"<br><sup>mean pooling to G costs {errors['correlated']:.4f} (correlated heads), "
                f"{errors['independent']:.4f} (independent heads)</sup>"), height=HEIGHT + 50)
    fig.update_layout(margin={"t": 175})
    return fig
