"""Figures of lesson 07: cache sizes, decode costs, the GQA-to-MLA explorer.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`latent_width_figure` into the lesson's explorer. The conversions it draws, and the
lesson's tables, are in :mod:`attnlib.analysis.experiments.mla`; the trained models' dial
is :func:`trained_table` and :func:`trained_figure`.

Lesson: 07_mla.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib._checks import check_choice, check_positive_int
from attnlib.analysis.experiments.mla import CONVERSION, SEED, conversion_errors
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style
from attnlib.viz.trained import BUDGETS, dial_figure, dial_table

__all__ = [
    "latent_width_figure", "TRAINED_LATENTS", "TRAINED_MODEL", "TRAINED_SETTINGS",
    "trained_figure", "trained_table",
]


TRAINED_MODEL = "book-nope"
"""The shipped model that :func:`trained_table` converts (no positions, 4 layers of 4 heads
of width 16, so ``2 G d_head = 128``)."""

TRAINED_LATENTS: tuple[int, ...] = (8, 16, 32, 64, 96, 128)
"""The ``d_L`` of :func:`trained_table` and of the trained explorer; 128 is exact."""


# ---------------------------------------------------------------------------------------
# GQA -> MLA: the explorer
# ---------------------------------------------------------------------------------------


def latent_width_figure(d_latent: int = 8, *, seed: int = SEED) -> go.Figure:
    """The explorer: convert a GQA layer to MLA with latent width ``d_latent``.

    Left: numbers cached per token and layer (labelled with their bytes in bf16) by the
    source's multi-head form (``2 H d_head``), by the GQA layer itself (``2 G d_head``)
    and by the converted MLA (``d_L``). Right: the relative weight error and output error of
    :func:`conversion_errors` against ``d_L``, the current width marked; a dashed line at
    ``d_L = 2 G d_head``, where the conversion is exact. The title gives the current
    errors, or says that the outputs agree up to rounding.

    Args:
        d_latent: ``d_L``, in ``[1, 2 G d_head]`` (16 for :data:`CONVERSION`).
        seed: seed of the layer and the input.

    Returns:
        go.Figure: a bar trace and four scatter traces.
    """
    c = CONVERSION
    H, G, d_head = c["n_heads"], c["n_kv_heads"], c["d_head"]
    r_max = min(c["d_in"], 2 * G * d_head)
    if check_positive_int("d_latent", d_latent) > r_max:
        raise ValueError(f"d_latent must be at most 2 G d_head = {r_max}; got {d_latent}")
    errors = conversion_errors(seed=seed)
    now = errors[d_latent - 1]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.38, 0.62], horizontal_spacing=0.12,
                        subplot_titles=("cached per token and layer<br>(numbers; bytes in bf16)",
                                        "relative error of the conversion"))
    names = [f"MHA<br>{H} heads", f"GQA<br>G = {G}", f"MLA<br>d_L = {d_latent}"]
    sizes = [2 * H * d_head, 2 * G * d_head, d_latent]
    fig.add_trace(go.Bar(
        x=names, y=sizes, text=[f"{v} ({2 * v} B)" for v in sizes], textposition="outside",
        marker={"color": [OKABE_ITO["sky blue"], OKABE_ITO["orange"], COLORS["main"]]},
        showlegend=False, hovertemplate="%{x}: %{y} numbers<extra></extra>",
    ), row=1, col=1)
    x = [e["d_L"] for e in errors]
    looks = {"weight": ("weight error ||W_KV − Ŵ|| / ||W_KV||", COLORS["reference"], "dash",
                        "diamond"),
             "output": ("output error ||Y_MLA − Y_GQA|| / ||Y_GQA||", COLORS["main"], "solid",
                        "circle")}
    for key, (name, color, dash, symbol) in looks.items():
        fig.add_trace(go.Scatter(
            x=x, y=rounded([e[key] for e in errors], 4), mode="lines+markers", name=name,
            line={"color": color, "dash": dash, "width": 2}, marker={"symbol": symbol, "size": 6},
            hovertemplate=f"{key} error<br>d_L = %{{x}}<br>%{{y:.4f}}<extra></extra>",
        ), row=1, col=2)
        fig.add_trace(go.Scatter(
            x=[d_latent], y=rounded([now[key]], 4), mode="markers", showlegend=False,
            marker={"color": color, "symbol": symbol, "size": 14,
                    "line": {"color": COLORS["marker"], "width": 2}},
            hovertemplate=f"d_L = {d_latent}: {key} error %{{y:.4f}}<extra></extra>",
        ), row=1, col=2)
    fig.add_vline(x=r_max, line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1},
                  row=1, col=2)
    fig.add_annotation(text=f"exact: d_L = 2·G·d_head = {r_max}", x=r_max, y=1.0, xref="x2",
                       yref="y2", xanchor="right", yanchor="bottom", showarrow=False)
    fig.update_xaxes(tickangle=0, row=1, col=1)
    fig.update_xaxes(title_text="d_L", range=[0.5, r_max + 0.5], dtick=1, row=1, col=2)
    fig.update_yaxes(range=[0, max(2 * H * d_head, 2 * G * d_head) * 1.2], row=1, col=1)
    fig.update_yaxes(range=[0, 1.08], row=1, col=2)
    if now["output"] < 1e-9:
        verdict = "outputs equal the GQA layer's up to rounding (error < 1e-9)"
    else:
        verdict = (f"output error {now['output']:.4f}, weight error {now['weight']:.4f}, "
                   f"largest |Y_MLA − Y_GQA| {now['output_max']:.4f}")
    style(fig, (f"mla_from_mha of a GQA layer (H = {H}, G = {G}, d_head = {d_head}) at "
                f"d_L = {d_latent}<br><sup>{verdict}</sup>"), height=HEIGHT + 40)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"t": 135, "b": 120})
    return fig


def trained_table() -> pd.DataFrame:
    """The trained ``book-nope`` model converted to MLA at each ``d_L`` of :data:`TRAINED_LATENTS`.

    :func:`attnlib.viz.trained.dial_table` of :data:`TRAINED_MODEL`: per ``d_L``, the cache
    bytes per token (float32, 4 layers) and the held-out loss on
    :func:`attnlib.models.train.eval_set` right after
    :func:`attnlib.models.pretrained.to_mla`, and after
    the 100 and 400 steps of fine-tuning that ship with the model at ``d_L = 16, 32, 64``
    and at the exact ``d_L = 128``, the control (NaN elsewhere).

    Returns:
        pd.DataFrame indexed by ``d_L``; ``attrs`` holds the source's loss and cache and the
        seed noise of the ``book`` recipe (:func:`attnlib.viz.trained.seed_noise`).
    """
    return dial_table(TRAINED_MODEL, "d_latent", TRAINED_LATENTS)


TRAINED_SETTINGS: tuple[tuple[int, int], ...] = (
    *((d_L, 0) for d_L in (8, 96)),
    *((d_L, b) for d_L in (16, 32, 64, 128) for b in BUDGETS))
"""Every ``(d_L, steps)`` that ships a model: the trained explorer's twin offers these."""


def trained_figure(d_latent: int = 32, steps: int = 100) -> go.Figure:
    """The trained explorer: loss against the fine-tuning budget for each ``d_L``; one marked.

    :func:`attnlib.viz.trained.dial_figure` of :func:`trained_table`, with the exact
    ``d_L = 128`` as the control. ``d_L = 8`` and ``96`` ship no fine-tune: the twin offers
    only ``steps=0`` there, and the live explorer, whose controls move one at a time, draws
    0 steps with a note in the title.

    Args:
        d_latent: ``d_L``, one of :data:`TRAINED_LATENTS`.
        steps: the fine-tuning budget, one of :data:`attnlib.viz.trained.BUDGETS`.

    Returns:
        go.Figure: the loss lines and the cache bars.
    """
    table = trained_table()
    return dial_figure(table, check_choice("d_latent", d_latent, list(TRAINED_LATENTS)),
                       check_choice("steps", steps, list(BUDGETS)), setting="d_L",
                       control=max(TRAINED_LATENTS), model=f"'{TRAINED_MODEL}'",
                       conversion="the SVD of [W_K | W_V]")
