"""The trained-model dial of lessons 06 and 07: what a conversion saves and what it costs.

Both lessons convert a small trained model that :mod:`attnlib.pretrained` ships, lesson 06
by mean pooling its key/value heads to ``G`` (:func:`attnlib.viz.gqa.trained_figure`),
lesson 07 by factoring its keys and values through a latent of width ``d_L``
(:func:`attnlib.viz.mla.trained_figure`). Each computes a table with one row per setting,
and :func:`dial_figure` draws it: the held-out loss against the setting, right after the
conversion and after the short fine-tune that ships with the model, beside the cache bytes
per token that the setting keeps.

Lesson: 06_gqa, 07_mla.
"""

from __future__ import annotations

import math
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = ["AFTER", "CACHE", "CONVERSIONS", "CONVERTED", "dial_figure", "dial_table"]

CONVERSIONS = ("n_kv_heads", "d_latent")
"""The settings a dial turns: :func:`attnlib.pretrained.to_gqa`'s ``n_kv_heads`` and
:func:`attnlib.pretrained.to_mla`'s ``d_latent``."""

CACHE = "cache bytes per token"
"""Column of a dial table: cache bytes per token over all layers, at the model's precision."""

CONVERTED = "loss, converted"
"""Column of a dial table: held-out loss (nats per token) right after the conversion."""

AFTER = "loss, after 100 steps"
"""Column of a dial table: held-out loss after the shipped fine-tune; NaN where none ships."""


def _cache_bytes(model) -> int:
    """Bytes one token adds to ``model``'s caches, measured by running one token through them."""
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.zeros(1, 1, dtype=torch.long, device=model.E.device), caches=caches)
    return sum(cache.nbytes for cache in caches)


@lru_cache(maxsize=8)
def _dial_table(name: str, conversion: str, values: tuple, n_windows: int) -> pd.DataFrame:
    from attnlib import pretrained, train

    source = pretrained.load(name)
    convert = pretrained.to_gqa if conversion == "n_kv_heads" else pretrained.to_mla
    shipped = [v[conversion] for v in pretrained.variants(name) if conversion in v]
    ids, targets = train.held_out(name, n_windows=n_windows)
    rows = {}
    for value in values:
        converted = convert(source, value)
        after = (train.evaluate(pretrained.load(name, **{conversion: value}), ids, targets)
                 ["loss"] if value in shipped else math.nan)
        rows[value] = {CACHE: _cache_bytes(converted),
                       CONVERTED: round(train.evaluate(converted, ids, targets)["loss"], 3),
                       AFTER: round(after, 3)}
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis(conversion)
    table.attrs = {"source loss": round(train.evaluate(source, ids, targets)["loss"], 3),
                   "source cache": _cache_bytes(source),
                   "uniform loss": round(math.log(source.vocab_size), 3)}
    return table


def dial_table(name: str, conversion: str, values: tuple[int, ...], *,
               n_windows: int = 16) -> pd.DataFrame:
    """Held-out loss and cache of shipped model ``name`` converted at each of ``values``.

    Each row converts the model (:func:`attnlib.pretrained.to_gqa` for ``conversion =
    "n_kv_heads"``, :func:`attnlib.pretrained.to_mla` for ``"d_latent"``), measures the
    bytes one token adds to its caches (by running a token through them) and its held-out
    loss on ``attnlib.train.held_out(name, n_windows=n_windows)`` (float64, 3 decimals),
    then the same loss for the fine-tuned conversion that ships with the model
    (``attnlib.pretrained.load(name, **{conversion: value})``), NaN where none does.
    ``table.attrs`` holds the source model's loss and cache bytes and ``ln(vocab_size)``.
    Computed once per argument set; a copy is returned.

    Args:
        name: a shipped model, e.g. ``"book"`` or ``"book-nope"``.
        conversion: one of :data:`CONVERSIONS`.
        values: the settings, in the order of the rows.
        n_windows: held-out windows of 128 characters.

    Returns:
        pd.DataFrame indexed by the setting, with columns :data:`CACHE`, :data:`CONVERTED`
        and :data:`AFTER`.
    """
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {list(CONVERSIONS)}; got {conversion!r}")
    table = _dial_table(name, conversion, tuple(values), n_windows)
    copy = table.copy()
    copy.attrs = dict(table.attrs)
    return copy


def _label(setting: str, value: object) -> str:
    return f"{setting} = {value}"


def dial_figure(table: pd.DataFrame, current: object, *, setting: str, source_loss: float,
                uniform_loss: float, source_cache: int, model: str,
                conversion: str) -> go.Figure:
    """Held-out loss and cache bytes per token of a converted model, one setting marked.

    Left: the loss right after the conversion (solid line, circles) and after the shipped
    fine-tune (dashed line, diamonds) at every setting of ``table``, the current one ringed,
    with the source model's loss and the loss of guessing uniformly as horizontal lines.
    Right: the cache bytes per token of every setting, the current one in the main colour.
    The title gives the current setting's bytes, its share of the source's and its losses.

    Args:
        table: one row per setting, in the order to draw (the index holds the settings),
            with columns :data:`CACHE`, :data:`CONVERTED` and :data:`AFTER`.
        current: the setting to mark, a value of ``table.index``.
        setting: its name, e.g. ``"G"`` or ``"d_L"``.
        source_loss: the held-out loss of the model before any conversion.
        uniform_loss: ``ln(vocab_size)``, the loss of uniform guessing.
        source_cache: the source model's cache bytes per token.
        model: the model's name, for the title.
        conversion: what the conversion does, for the title (e.g. ``"mean pooling"``).

    Returns:
        go.Figure: four scatter traces and a bar trace.
    """
    if current not in table.index:
        raise ValueError(f"{setting} must be one of {list(table.index)}; got {current!r}")
    labels = [str(v) for v in table.index]
    now = table.loc[current]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12,
                        subplot_titles=("held-out loss (nats per token)",
                                        "cache bytes per token, all layers"))
    series = {CONVERTED: ("right after the conversion", COLORS["main"], "solid", "circle"),
              AFTER: ("after 100 steps of fine-tuning", OKABE_ITO["orange"], "dash",
                      "diamond")}
    for column, (name, color, dash, symbol) in series.items():
        keep = [not math.isnan(v) for v in table[column]]
        xs = [lab for lab, k in zip(labels, keep, strict=True) if k]
        ys = [v for v, k in zip(table[column], keep, strict=True) if k]
        fig.add_trace(go.Scatter(
            x=xs, y=rounded(ys, 3), mode="lines+markers", name=name,
            line={"color": color, "dash": dash, "width": 2}, marker={"symbol": symbol, "size": 8},
            hovertemplate=f"{setting} = %{{x}}<br>{name}: %{{y:.3f}}<extra></extra>",
        ), row=1, col=1)
        if not math.isnan(now[column]):
            fig.add_trace(go.Scatter(
                x=[str(current)], y=rounded([now[column]], 3), mode="markers", showlegend=False,
                marker={"color": color, "symbol": symbol, "size": 16,
                        "line": {"color": COLORS["marker"], "width": 2}},
                hovertemplate=f"{setting} = %{{x}}: %{{y:.3f}}<extra></extra>",
            ), row=1, col=1)
    for y, text, dash in ((source_loss, f"source model {source_loss:.3f}", DASHES["marker"]),
                          (uniform_loss, f"guessing uniformly {uniform_loss:.3f}",
                           DASHES["held-out"])):
        fig.add_hline(y=rounded(y, 3), line={"color": COLORS["marker"], "dash": dash, "width": 1},
                      annotation_text=text, annotation_position="top left", row=1, col=1)
    fig.add_trace(go.Bar(
        x=labels, y=[int(v) for v in table[CACHE]], text=[f"{int(v):,}" for v in table[CACHE]],
        textposition="outside", showlegend=False,
        marker={"color": [COLORS["main"] if v == current else OKABE_ITO["sky blue"]
                          for v in table.index]},
        hovertemplate=f"{setting} = %{{x}}: %{{y:,}} bytes per token<extra></extra>",
    ), row=1, col=2)
    top = max(table[CONVERTED].max(), uniform_loss)
    fig.update_yaxes(range=[0, rounded(top * 1.15, 3)], row=1, col=1)
    fig.update_yaxes(range=[0, int(max(table[CACHE].max(), source_cache) * 1.2)], row=1, col=2)
    fig.update_xaxes(title_text=setting, type="category", row=1, col=1)
    fig.update_xaxes(title_text=setting, type="category", row=1, col=2)
    share = now[CACHE] / source_cache
    after = "" if math.isnan(now[AFTER]) else f", {now[AFTER]:.3f} after 100 steps"
    style(fig, (f"{model}, {conversion} to {_label(setting, current)}: {int(now[CACHE]):,} "
                f"cache bytes per token, {share:.3g} of the source's"
                f"<br><sup>held-out loss {now[CONVERTED]:.3f} right after the conversion{after}; "
                f"the source model: {source_loss:.3f}</sup>"), height=HEIGHT + 40)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"t": 110, "b": 110})
    return fig
