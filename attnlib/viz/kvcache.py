"""Figures and tables of lesson 05: decoding timings, operation counts, cache sizes.

- :func:`decode_timings` runs greedy generation the way :meth:`attnlib.TinyDecoder.generate`
  does, with or without caches, and times every pass; :func:`timing_figure` draws the
  time per new token against its position, with the tokens per second of both runs.
- :func:`macs_table` adds up :func:`attnlib.analysis.costs.generation_macs` over a generation.
- :func:`preset_table` and :func:`memory_figure` size the cache of the published models of
  :data:`attnlib.analysis.memory.PRESETS` against their weights, with sliding-window layers holding
  only their window (:meth:`attnlib.analysis.memory.ModelSpec.windowed_cache_bytes`);
  :func:`memory_figure` is the lesson's explorer (:data:`MEMORY_SETTINGS` are its twin's
  steps).
- :func:`reservation_table` compares what a batch of requests reserves when each cache is
  allocated for the longest context, in fixed-size pages, or exactly.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; table builders return ``pandas.DataFrame`` objects.

Lesson: 05_kv_cache.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from attnlib._checks import check_choice, check_positive_int
from attnlib.analysis.costs import generation_macs
from attnlib.analysis.memory import PRESETS
from attnlib.layers.blocks import TinyDecoder
from attnlib.viz.style import COLORS, DASHES, rounded, style

__all__ = [
    "BATCHES",
    "CONTEXTS",
    "DTYPES",
    "GB",
    "MEMORY_SETTINGS",
    "WEIGHT_DTYPE",
    "decode_timings",
    "macs_table",
    "memory_figure",
    "memory_table",
    "preset_table",
    "reservation_table",
    "timing_figure",
]

GB = 10**9
"""A gigabyte as the book uses it: 10^9 bytes (a GiB is 2^30 bytes, 7.4% more)."""

DTYPES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp8": 1}
"""Bytes per stored number ``n_b`` of the cache's formats."""

WEIGHT_DTYPE = "bf16"
"""The format the memory calculator stores the weights in, whatever the cache's format."""

CONTEXTS: tuple[int, ...] = tuple(2**k for k in range(10, 21))
"""Context lengths of the calculator, 1,024 to 1,048,576 tokens per sequence."""

BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
"""Batch sizes of the calculator: sequences served at once."""

MEMORY_SETTINGS: tuple[tuple[str, int, int, str], ...] = (
    ("Llama 3 70B", 131_072, 1, "bf16"),
    ("Llama 3 70B", 131_072, 4, "bf16"),
    ("Llama 3 70B", 131_072, 4, "fp8"),
    ("Llama 3 8B", 131_072, 1, "bf16"),
    ("Llama 2 7B", 4_096, 1, "bf16"),
    ("Llama 2 7B", 4_096, 16, "bf16"),
    ("Gemma 3 27B", 131_072, 1, "bf16"),
    ("DeepSeek-V2", 131_072, 1, "bf16"),
    ("DeepSeek-V2", 131_072, 64, "bf16"),
)
"""The twin's steps, as ``(model, context, batch, dtype)``: Llama 3 70B at 128k tokens for
one and four sequences, with a bf16 and an fp8 cache; Llama 3 8B at 128k; Llama 2 7B (plain
MHA) at its 4,096-token context for one and 16 sequences; Gemma 3 27B at 128k; DeepSeek-V2
(MLA) at 128k for one and 64 sequences."""


# ---------------------------------------------------------------------------------------
# time and operation counts
# ---------------------------------------------------------------------------------------


def decode_timings(
    model: TinyDecoder, ids: torch.Tensor, n_new: int, *, use_cache: bool, repeats: int = 1
) -> tuple[torch.Tensor, list[float]]:
    """Greedy generation as :meth:`attnlib.TinyDecoder.generate` does it, timing each pass.

    Pass ``t`` feeds the whole sequence (``use_cache=False``) or, after the prompt, only the
    newest token through per-layer caches, and appends the ``argmax`` of the last logits.
    The run is repeated ``repeats`` times on one CPU thread and each pass keeps its fastest
    time, which filters out most of the noise of a shared machine.

    Args:
        model: the decoder.
        ids: ``(B, N)`` prompt token ids.
        n_new: tokens to generate (>= 1).
        use_cache: decode with caches.
        repeats: runs to take the fastest time of (>= 1).

    Returns:
        ``(ids_out, seconds)``: the prompt followed by the generated ids, ``(B, N + n_new)``,
        and the wall-clock seconds of each of the ``n_new`` passes.
    """
    check_positive_int("n_new", n_new)
    check_positive_int("repeats", repeats)
    best = [math.inf] * n_new
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: a thread pool only adds noise
    try:
        with torch.no_grad():
            for _ in range(repeats):
                caches = model.new_caches() if use_cache else None
                out = step = ids
                for t in range(n_new):
                    start = time.perf_counter()
                    logits = model(step, caches=caches)  # (B, N_step, N_T)
                    next_id = logits[..., -1, :].argmax(dim=-1, keepdim=True)  # (B, 1)
                    best[t] = min(best[t], time.perf_counter() - start)
                    out = torch.cat((out, next_id), dim=-1)
                    step = next_id if use_cache else out
    finally:
        torch.set_num_threads(threads)
    return out, best


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


def macs_table(n_passes: Sequence[int], **shape: int | str) -> pd.DataFrame:
    """Multiply-adds of a generation whose passes read ``n = 1, 2, ..., N`` tokens.

    For each ``N`` in ``n_passes``, :func:`attnlib.analysis.costs.generation_macs` is summed over
    ``N`` new tokens generated from a one-token prompt, with and without a cache.

    Args:
        n_passes: the numbers of passes ``N`` (each >= 1).
        **shape: the model's shape, as for :func:`attnlib.analysis.costs.decode_step_macs`.

    Returns:
        pd.DataFrame: indexed by ``N``; the attention and the total multiply-adds without
        and with the cache, and the ratio of the totals (1 decimal).
    """
    rows = {}
    for n in n_passes:
        check_positive_int("n_passes[...]", n)
        runs = {}
        for use_cache in (False, True):
            steps = generation_macs(1, n, use_cache=use_cache, **shape)
            runs[use_cache] = (sum(s["attention"] for s in steps),
                               sum(s["attention"] + s["other"] for s in steps))
        rows[n] = {
            "attention, recomputing": runs[False][0],
            "attention, cached": runs[True][0],
            "total, recomputing": runs[False][1],
            "total, cached": runs[True][1],
            "total ratio": round(runs[False][1] / runs[True][1], 1),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("N")


# ---------------------------------------------------------------------------------------
# memory: the cache against the weights
# ---------------------------------------------------------------------------------------


def preset_table(n_tokens: int = 131_072, *, bytes_per_elem: int = 2) -> pd.DataFrame:
    """Cache and weights of every preset, one sequence of ``n_tokens`` tokens.

    The cache is :meth:`attnlib.analysis.memory.ModelSpec.windowed_cache_bytes`: a sliding-window
    layer holds at most its window.

    Args:
        n_tokens: tokens in the sequence.
        bytes_per_elem: ``n_b`` of the cache and of the weights.

    Returns:
        pd.DataFrame: per model, its attention kind, ``N_L``, ``H``, ``G``, ``d_head``, the
        sliding window and the layers that use it, the cache bytes per token (every layer),
        the cache and the weights in GB (1 decimal) and the tokens of cache that weigh as
        much as the weights ("never" when the windows cap the cache below them).
    """
    check_positive_int("n_tokens", n_tokens)
    rows = {}
    for name, spec in PRESETS.items():
        per_token = spec.kv_bytes_per_token(bytes_per_elem)
        weights = spec.weight_bytes(bytes_per_elem)
        cache = spec.windowed_cache_bytes(n_tokens, bytes_per_elem=bytes_per_elem)
        rows[name] = {
            "attention": spec.attention_kind.upper(),
            "N_L": spec.n_layers,
            "H": spec.n_heads,
            "G": spec.n_kv_heads if spec.d_latent is None else "-",
            "d_head": spec.d_head,
            "window (layers)": (f"{spec.window:,} ({spec.n_window_layers})"
                                if spec.window else "-"),
            "cache bytes per token": per_token,
            f"cache GB at {n_tokens:,}": round(cache / GB, 1),
            "weights GB": round(weights / GB, 1),
            "tokens = weights": _crossover_text(_crossover(spec, weights, bytes_per_elem, 1)),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")


def _crossover(spec, weights: int, bytes_per_elem: int, batch: int) -> float:
    """Tokens per sequence at which ``spec.windowed_cache_bytes(N, batch)`` equals ``weights``
    (``math.inf`` when the windows keep the cache below the weights at every length)."""
    per_token = spec.kv_bytes_per_token(bytes_per_elem) * batch  # every layer, the batch
    if not spec.n_window_layers or weights <= per_token * spec.window:
        return weights / per_token  # reached while every layer still holds every token
    n_global = spec.n_layers - spec.n_window_layers
    if n_global == 0:
        return math.inf
    per_layer = per_token / spec.n_layers
    return (weights / per_layer - spec.n_window_layers * spec.window) / n_global


def _crossover_text(tokens: float) -> int | str:
    return "never" if math.isinf(tokens) else math.floor(tokens)


def _memory(model: str, context: int, batch: int, dtype: str) -> dict[str, float]:
    check_choice("model", model, list(PRESETS))
    check_choice("dtype", dtype, list(DTYPES))
    check_positive_int("context", context)
    check_positive_int("batch", batch)
    spec = PRESETS[model]
    per_token = spec.kv_bytes_per_token(DTYPES[dtype])
    weights = spec.weight_bytes(DTYPES[WEIGHT_DTYPE])
    cache = spec.windowed_cache_bytes(context, batch=batch, bytes_per_elem=DTYPES[dtype])
    return {"per_token": per_token, "cache": cache, "weights": weights,
            "crossover": _crossover(spec, weights, DTYPES[dtype], batch)}


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
    m = _memory(model, context, batch, dtype)
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


def memory_table(
    settings: Sequence[tuple[str, int, int, str]] = MEMORY_SETTINGS,
) -> pd.DataFrame:
    """The numbers behind :func:`memory_figure`, one row per ``(model, context, batch, dtype)``.

    Returns:
        pd.DataFrame: bytes per token, the cache and the weights in GB (1 decimal), their
        ratio (2 decimals) and the context per sequence at which they are equal.
    """
    rows = {}
    for model, context, batch, dtype in settings:
        m = _memory(model, context, batch, dtype)
        rows[(model, context, batch, dtype)] = {
            "bytes per token": m["per_token"],
            "cache GB": round(m["cache"] / GB, 1),
            "weights GB": round(m["weights"] / GB, 1),
            "cache / weights": round(m["cache"] / m["weights"], 2),
            "N where equal": _crossover_text(m["crossover"]),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["model", "N", "B", "cache"])
    return table


# ---------------------------------------------------------------------------------------
# how a cache is laid out in memory
# ---------------------------------------------------------------------------------------


def reservation_table(
    lengths: Sequence[int], *, max_tokens: int, block_tokens: int, bytes_per_token: int
) -> pd.DataFrame:
    """Bytes a batch of requests reserves under three ways of laying out the cache.

    - *preallocated*: every request gets room for ``max_tokens`` tokens up front;
    - *paged*: every request gets ``ceil(n / block_tokens)`` blocks of ``block_tokens``
      tokens, allocated as it grows (the idea of vLLM's PagedAttention);
    - *exact*: ``n`` tokens, what the request actually holds.

    Args:
        lengths: tokens each request holds (each ``<= max_tokens``).
        max_tokens: the longest context a request may reach.
        block_tokens: tokens per block.
        bytes_per_token: cache bytes per token, all layers.

    Returns:
        pd.DataFrame: reserved bytes per layout, in GB (3 decimals), and the share of them
        holding tokens (1 decimal, percent).
    """
    check_positive_int("max_tokens", max_tokens)
    check_positive_int("block_tokens", block_tokens)
    check_positive_int("bytes_per_token", bytes_per_token)
    for n in lengths:
        if check_positive_int("lengths[...]", n) > max_tokens:
            raise ValueError(f"lengths must be at most max_tokens={max_tokens}; got {n}")
    held = sum(lengths)
    reserved = {
        "preallocated": len(lengths) * max_tokens,
        "paged": sum(-(-n // block_tokens) * block_tokens for n in lengths),
        "exact": held,
    }
    rows = {name: {"tokens reserved": tokens,
                   "GB reserved": round(tokens * bytes_per_token / GB, 3),
                   "used %": round(100 * held / tokens, 1)}
            for name, tokens in reserved.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("layout")

