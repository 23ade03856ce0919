"""Figures of lesson 15: what each 2025-2026 design costs, against the context length.

:func:`design_cost_figure` is the lesson's explorer: for the five published designs of
:data:`MODELS` it draws the bytes one sequence holds (every layer's cache and state,
:meth:`attnlib.analysis.memory.ModelSpec.sequence_bytes`) and the multiply-adds attention
does for one decoded token (:func:`attnlib.analysis.costs.decode_token_macs`) against the
context length ``N``, both on log axes. Its controls are the context (a marker on every
curve), the layer schedule (one layer reading the whole context in every ``r``,
:meth:`~attnlib.analysis.memory.ModelSpec.interleaved`) and the sliding window.
:data:`TWIN_SETTINGS` are its twin's steps.

The figure function takes keyword parameters, returns a ``go.Figure`` with rounded data and
never shows it; the numbers themselves come from :mod:`attnlib.analysis`.

Lesson: 09_frontier (the designs it draws).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib._checks import check_choice, check_positive_int
from attnlib.analysis.costs import decode_token_macs
from attnlib.analysis.memory import FRONTIER, ModelSpec
from attnlib.viz.style import OKABE_ITO, rounded, style

__all__ = [
    "CONTEXTS",
    "CURVE_CONTEXTS",
    "MODELS",
    "SCHEDULES",
    "TWIN_SETTINGS",
    "WINDOWS",
    "design_cost_figure",
    "design_spec",
]

MODELS: tuple[str, ...] = (
    "gpt-oss-120b",
    "Qwen3-Next-80B-A3B",
    "Kimi Linear 48B-A3B",
    "DeepSeek-V3.2",
    "DeepSeek-V4-Flash",
)
"""The five designs drawn, keys of :data:`attnlib.analysis.memory.FRONTIER`."""

CONTEXTS: tuple[int, ...] = tuple(2**k for k in range(10, 21))
"""The context control's values, 1,024 to 1,048,576 tokens."""

CURVE_CONTEXTS: tuple[int, ...] = tuple(2**k for k in range(7, 21))
"""The ``N`` of the curves' points, 128 to 1,048,576 tokens (below 128 every window is
still filling)."""

SCHEDULES: dict[str, int | None] = {
    "published": None,
    "all": 1,
    "1 in 2": 2,
    "1 in 4": 4,
    "1 in 8": 8,
    "none": 0,
}
"""The schedule control: the published layers, or one layer that reads the whole context
(full attention, or DeepSeek-V4's compressed sparse attention) in every ``r`` of a hybrid's
layers, the others its cheap kind (sliding window, linear attention, heavily compressed
attention); ``"all"`` and ``"none"`` are the two ends. DeepSeek-V3.2, whose layers are all
of one kind, stays as published."""

WINDOWS: tuple[int, ...] = (128, 512, 4096)
"""The window control: tokens a sliding window keeps (gpt-oss-120b's sliding layers,
DeepSeek-V4's window in every layer; both publish 128)."""

TWIN_SETTINGS: tuple[tuple[int, str, int], ...] = (
    *((n, schedule, 128) for n in (4096, 32_768, 131_072, 1_048_576) for schedule in SCHEDULES),
    (131_072, "published", 512),
    (131_072, "published", 4096),
)
"""The twin's steps, as ``(context, schedule, window)``: every schedule at 4k, 32k, 128k and
1M tokens with the published window, then the published schedule at 128k with wider
windows."""

GB = 10**9
"""A gigabyte as the book uses it: 10^9 bytes."""

_LOOKS = (
    (OKABE_ITO["blue"], "solid", "circle"),
    (OKABE_ITO["vermillion"], "dash", "square"),
    (OKABE_ITO["bluish green"], "dot", "diamond"),
    (OKABE_ITO["orange"], "dashdot", "triangle-up"),
    (OKABE_ITO["reddish purple"], "longdash", "x"),
)


def design_spec(model: str, schedule: str = "published", window: int = 128) -> ModelSpec:
    """The published design ``model`` with the explorer's schedule and window applied.

    Args:
        model: a key of :data:`attnlib.analysis.memory.FRONTIER`.
        schedule: a key of :data:`SCHEDULES`.
        window: ``w`` for the model's windows (ignored by a model without one).

    Returns:
        ModelSpec: the spec the figure counts.

    Example:
        >>> design_spec("gpt-oss-120b", "1 in 4").schedule.count("full")
        9
    """
    check_choice("model", model, list(FRONTIER))
    check_choice("schedule", schedule, list(SCHEDULES))
    check_positive_int("window", window)
    spec = FRONTIER[model]
    every = SCHEDULES[schedule]
    if every is not None:
        spec = spec.interleaved(every)
    if spec.window is not None:
        spec = dataclasses.replace(spec, window=window)
    return spec


def design_cost_figure(
    context: int = 131_072,
    schedule: str = "published",
    window: int = 128,
    *,
    models: Sequence[str] = MODELS,
) -> go.Figure:
    """Bytes per sequence and multiply-adds per token of each design, against the context.

    Left: every layer's cache and state for one sequence of ``N`` tokens in bf16
    (:meth:`~attnlib.analysis.memory.ModelSpec.sequence_bytes`), in GB. Right: the
    multiply-adds attention does to decode one token against ``N``
    (:func:`~attnlib.analysis.costs.decode_token_macs`: scores, weighted sums, the
    indexer, recurrent state updates, convolutions and compressors; no projections, no
    experts), in units of 10^9. Both axes are logarithmic; the markers sit at ``context``.

    Args:
        context: ``N`` of the markers, one of :data:`CONTEXTS` or any positive int.
        schedule: a key of :data:`SCHEDULES`.
        window: the sliding window ``w``, as in :data:`WINDOWS` or any positive int.
        models: keys of :data:`attnlib.analysis.memory.FRONTIER` to draw (at most five).

    Returns:
        go.Figure: per model a line in each of the two panels (legend: the left one's),
        then per panel one trace of markers at ``context``, one per model in order.
    """
    check_positive_int("context", context)
    models = list(models)
    if not 1 <= len(models) <= len(_LOOKS):
        raise ValueError(f"models must name 1 to {len(_LOOKS)} designs; got {len(models)}")
    specs = {name: design_spec(name, schedule, window) for name in models}
    xs = list(CURVE_CONTEXTS)
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=("cache and state per sequence (GB, bf16)",
                        "attention's multiply-adds per decoded token (10⁹)"),
    )
    here = {1: [], 2: []}  # per panel, each model's value at the chosen context
    for name, (color, dash, _) in zip(models, _LOOKS, strict=False):
        spec = specs[name]
        curves = {1: [spec.sequence_bytes(n) / GB for n in xs],
                  2: [decode_token_macs(spec, n)["total"] / 1e9 for n in xs]}
        here[1].append(spec.sequence_bytes(context) / GB)
        here[2].append(decode_token_macs(spec, context)["total"] / 1e9)
        for col in (1, 2):
            fig.add_trace(go.Scatter(
                x=xs, y=rounded(curves[col], digits=4), mode="lines", name=name,
                legendgroup=name, showlegend=col == 1,
                line={"color": color, "dash": dash, "width": 2},
                hovertemplate="N = %{x:,}: %{y:.3g}<extra>" + name + "</extra>",
            ), row=1, col=col)
    looks = _LOOKS[: len(models)]
    for col, unit in ((1, "GB"), (2, "× 10⁹ multiply-adds")):
        fig.add_trace(go.Scatter(
            x=[context] * len(models), y=rounded(here[col], digits=4), mode="markers",
            text=models, showlegend=False, name=f"N = {context:,}",
            marker={"color": [c for c, _, _ in looks], "symbol": [s for _, _, s in looks],
                    "size": 11, "line": {"color": "white", "width": 1}},
            hovertemplate="%{text}: %{y:.3g} " + unit + f"<extra>N = {context:,}</extra>",
        ), row=1, col=col)
    ticks = [2**k for k in range(8, 21, 3)]
    fig.update_xaxes(type="log", tickmode="array", tickvals=ticks,
                     ticktext=[_tokens_text(t) for t in ticks],
                     title_text="context N, tokens (log)")
    decades = [10.0**k for k in range(-4, 4)]
    for col in (1, 2):
        fig.update_yaxes(type="log", tickmode="array", tickvals=decades,
                         ticktext=[f"{t:g}" for t in decades], row=1, col=col)
    fixed = [n for n in models if n in specs and specs[n].schedule == FRONTIER[n].schedule
             and schedule != "published"]
    note = f"; {', '.join(fixed)} as published (one kind of layer)" if fixed else ""
    style(fig, (f"Five designs at N = {context:,} tokens: schedule {schedule}, window {window:,}"
                f"<br><sup>attention only: projections and experts not counted{note}</sup>"),
          height=470)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"t": 100, "b": 110})
    return fig


def _tokens_text(n: int) -> str:
    """A power of two of tokens as the axis shows it: 256, 2k, 128k, 1M."""
    if n >= 2**20:
        return f"{n // 2**20}M"
    return f"{n // 1024}k" if n >= 1024 else str(n)
