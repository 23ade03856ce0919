"""Figures of lesson 05: decoding timings and cache sizes.

:func:`timing_figure` draws the time per new token of
:func:`attnlib.analysis.experiments.kvcache.decode_timings` against its position, with the
tokens per second of both runs; :func:`memory_figure`, the lesson's explorer, sizes the
caches of :data:`attnlib.analysis.memory.PRESETS` against their weights. The lesson's
tables are in :mod:`attnlib.analysis.experiments.kvcache`.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it.

Lesson: 05_kv_cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnlib.analysis.experiments.kvcache import DTYPES, GB, WEIGHT_DTYPE, memory
from attnlib.analysis.memory import PRESETS
from attnlib.viz.style import COLORS, DASHES, rounded, style

__all__ = ["BATCHES", "CONTEXTS", "memory_figure", "timing_figure"]


CONTEXTS: tuple[int, ...] = tuple(2**k for k in range(10, 21))
"""Context lengths of the calculator, 1,024 to 1,048,576 tokens per sequence."""

BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
"""Batch sizes of the calculator: sequences served at once."""


# ---------------------------------------------------------------------------------------
# time and operation counts
# ---------------------------------------------------------------------------------------


def timing_figure(
    positions: Sequence[int],
    seconds_cached: Sequence[float],
    seconds_recomputed: Sequence[float],
) -> go.Figure:
    """Time per new token against its position, with and without a cache (log-log axes).

    The title gives what a user waits for: the tokens per second of each run over the
    whole generation (the number of passes over the sum of their times) and the speed-up
    of the cache, the ratio of the two total times. No growth exponent is fitted: at a
    small model's lengths each pass also pays a fixed cost (launching its operations,
    Python), which no count of multiply-adds sees, so the slopes of these curves say
    more about that overhead than about the ``n^2`` and ``n`` of the counts.

    Args:
        positions: position of each generated token (its index in the sequence).
        seconds_cached: seconds of each pass with caches.
        seconds_recomputed: seconds of each pass that recomputes the whole sequence.

    Returns:
        go.Figure: two scatter traces in milliseconds.
    """
    if not len(positions) == len(seconds_cached) == len(seconds_recomputed) > 0:
        raise ValueError("positions, seconds_cached and seconds_recomputed must have the "
                         f"same, nonzero length; got {len(positions)}, {len(seconds_cached)} "
                         f"and {len(seconds_recomputed)}")
    pos = np.asarray(positions, dtype=np.float64)
    fig = go.Figure()
    rates = {}
    looks = (("with the cache", seconds_cached, COLORS["main"], "circle"),
             ("recomputing everything", seconds_recomputed, COLORS["reference"], "diamond"))
    for name, secs, color, symbol in looks:
        ms = np.asarray(secs, dtype=np.float64) * 1e3
        rates[name] = len(ms) / (ms.sum() / 1e3)  # tokens per second over the generation
        fig.add_trace(go.Scatter(
            x=rounded(pos), y=rounded(ms, 4), mode="markers",
            name=f"{name}: {rates[name]:,.0f} tokens/s",
            marker={"color": color, "symbol": symbol, "size": 5},
            hovertemplate="position %{x}<br>%{y:.3f} ms<extra>" + name + "</extra>",
        ))
    xticks = [t for t in (10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
              if min(positions) / 2 <= t <= 2 * max(positions)]
    fig.update_xaxes(title_text="position of the new token (log)", type="log", tickmode="array",
                     tickvals=xticks, ticktext=[str(t) for t in xticks])
    ticks = [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500]
    fig.update_yaxes(title_text="time for the pass (ms, log)", type="log", tickmode="array",
                     tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    speedup = rates["with the cache"] / rates["recomputing everything"]
    style(fig, (f"{len(pos)} new tokens: {rates['with the cache']:,.0f} tokens/s with the cache, "
                f"{rates['recomputing everything']:,.0f} recomputing ({speedup:.1f}× faster)"
                "<br><sup>measured here, different on your machine</sup>"))
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"b": 110})
    return fig


# ---------------------------------------------------------------------------------------
# memory: the cache against the weights
# ---------------------------------------------------------------------------------------


def memory_figure(
    model: str = "Llama 3 70B", context: int = 131_072, batch: int = 1, dtype: str = "bf16"
) -> go.Figure:
    """The KV cache of a batch against the model's weights, over the context length.

    The cache curve is :meth:`attnlib.analysis.memory.ModelSpec.windowed_cache_bytes` for ``N`` in
    :data:`CONTEXTS` (log axis), ``kv_bytes_per_token(n_b) · N · B`` for a model without
    sliding windows; the horizontal line is the weights in :data:`WEIGHT_DTYPE`; the large marker
    is the chosen context. The title gives both sizes in GB (10^9 bytes), their ratio and
    the context per sequence at which the cache outweighs the weights.

    Args:
        model: a name in :data:`attnlib.analysis.memory.PRESETS`.
        context: tokens per sequence ``N``.
        batch: sequences ``B``.
        dtype: the cache's format, a key of :data:`DTYPES`.

    Returns:
        go.Figure: three scatter traces (cache, weights, chosen point), in GB.
    """
    m = memory(model, context, batch, dtype)
    xs = list(CONTEXTS)
    spec = PRESETS[model]
    cache_gb = [spec.windowed_cache_bytes(n, batch=batch, bytes_per_elem=DTYPES[dtype]) / GB
                for n in xs]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=xs, y=rounded(cache_gb, 3), mode="lines+markers", name=f"KV cache ({dtype})",
        line={"color": COLORS["main"], "dash": DASHES["measured"], "width": 2},
        marker={"symbol": "circle", "size": 6},
        hovertemplate="N = %{x:,} tokens<br>cache %{y:.1f} GB<extra></extra>",
    ))
    fig.add_trace(go.Scatter(
        x=[xs[0], xs[-1]], y=rounded([m["weights"] / GB] * 2, 3), mode="lines",
        name=f"weights ({WEIGHT_DTYPE})",
        line={"color": COLORS["reference"], "dash": DASHES["marker"], "width": 2},
        hovertemplate="weights %{y:.1f} GB<extra></extra>",
    ))
    fig.add_trace(go.Scatter(
        x=[context], y=rounded([m["cache"] / GB], 3), mode="markers", name="chosen context",
        marker={"color": COLORS["marker"], "symbol": "diamond", "size": 13},
        hovertemplate="N = %{x:,}<br>cache %{y:.1f} GB<extra></extra>",
    ))
    fig.update_xaxes(title_text="context N, tokens per sequence (log)", type="log",
                     tickmode="array", tickvals=xs[::2],
                     ticktext=[f"{n // 1024:,}k" for n in xs[::2]])
    ticks = [0.01, 0.1, 1, 10, 100, 1000, 10000]
    fig.update_yaxes(title_text="GB (10⁹ bytes), log", type="log", tickmode="array",
                     tickvals=ticks, ticktext=[f"{t:,g}" for t in ticks])
    ratio = m["cache"] / m["weights"]
    cross = m["crossover"]
    if math.isinf(cross):
        where = "its sliding windows keep the cache below the weights at every N"
    else:
        where = (f"the cache reaches the weights at N = {math.floor(cross):,}"
                 + (" (off the axis)" if cross > xs[-1] else "") + " tokens per sequence")
    style(fig, (f"{model}, batch {batch}, {dtype} cache: {m['cache'] / GB:.1f} GB of cache, "
                f"{m['weights'] / GB:.1f} GB of weights ({ratio:.2f}×)<br><sup>"
                f"{m['per_token']:,} bytes per token; {where}</sup>"))
    fig.update_layout(legend={"x": 0.99, "y": 0.02, "xanchor": "right", "yanchor": "bottom",
                              "bgcolor": "rgba(255,255,255,0.8)"},
                      margin={"t": 90})
    return fig
