"""Figures and tables of lesson 04: the mask builder, norm placement, feed-forward sizes.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`mask_builder_figure` into the lesson's explorer. The table builders return
``pandas.DataFrame`` objects, which notebooks render as HTML tables.

The mask builder draws one sequence of :data:`N_MAX` tokens with queries and keys of width
:data:`D_QK` (i.i.d. standard normal entries, float64, on the CPU, from
``torch.Generator().manual_seed(seed)``: all queries first, then all keys). The keys are
the first ``N_KV`` tokens; the queries are the *last* ``N_Q`` of those tokens, rows
``N_KV - N_Q`` to ``N_KV - 1`` (the first ``N_Q`` rows when ``N_Q > N_KV``). So a setting
with fewer queries than keys shows exactly the last rows of the square setting, as when
new tokens are decoded against a cache, whatever the alignment of the mask.

Lesson: 04_masks_and_layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_choice, check_nonnegative_int, check_positive_int
from attnlib.core.functional import attention_weights
from attnlib.core.masks import causal_mask, key_padding_mask, sliding_window_mask
from attnlib.device import seeded
from attnlib.layers.blocks import FeedForward, TransformerBlock
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = [
    "ALIGNMENTS",
    "D_QK",
    "MASKS",
    "MASK_SETTINGS",
    "N_MAX",
    "PLACEMENTS",
    "WEIGHT_SCALES",
    "feed_forward_table",
    "mask_builder_figure",
    "mask_for",
    "mask_table",
    "norm_variance_figure",
    "norm_variance_table",
    "residual_variances",
    "weight_scale_table",
]

MASKS: tuple[str, ...] = ("none", "causal", "sliding window", "padding", "causal + padding")
"""The masks the builder offers; ``"padding"`` hides the keys at positions ``>= length``."""

ALIGNMENTS: tuple[str, ...] = ("bottom-right", "top-left")
"""Where a causal or sliding-window mask puts the queries when ``N_Q != N_KV``.

``"bottom-right"`` (attnlib, flash-attn): the queries are the last ``N_Q`` positions.
``"top-left"`` (``scaled_dot_product_attention(..., is_causal=True)``): query ``i`` is
treated as position ``i``.
"""

N_MAX = 8
"""The most queries or keys the builder draws."""

D_QK = 4
"""Width of the builder's queries and keys."""

MASK_SETTINGS: tuple[tuple[str, int, int, int, int, str], ...] = (
    ("causal", 6, 6, 3, 6, "bottom-right"),
    ("causal", 2, 6, 3, 6, "bottom-right"),
    ("causal", 2, 6, 3, 6, "top-left"),
    ("causal", 1, 6, 3, 6, "bottom-right"),
    ("causal", 1, 6, 3, 6, "top-left"),
    ("sliding window", 6, 6, 3, 6, "bottom-right"),
    ("sliding window", 2, 6, 3, 6, "bottom-right"),
    ("padding", 6, 6, 3, 4, "bottom-right"),
    ("causal + padding", 6, 6, 3, 4, "bottom-right"),
    ("causal", 6, 4, 3, 4, "bottom-right"),
)
"""The settings of the lesson's twin, as ``(mask, n_q, n_kv, window, length, align)``:

a square causal mask; decoding two tokens and one token against six keys, with the right
(bottom-right) and the wrong (top-left) alignment; a sliding window of 3, square and while
decoding; padding to length 4 without and with the causal mask; and more queries than keys,
which leaves rows with no key at all.
"""

PLACEMENTS: tuple[str, ...] = ("pre", "post", "peri")
"""Norm placements measured by :func:`residual_variances` (``TransformerBlock(norm=...)``)."""

WEIGHT_SCALES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Factors by which :func:`weight_scale_table` multiplies every weight matrix."""

_PLACEMENT_LOOKS = {
    "pre": {"color": COLORS["main"], "dash": "solid", "symbol": "circle"},
    "post": {"color": COLORS["reference"], "dash": "dash", "symbol": "diamond"},
    "peri": {"color": OKABE_ITO["bluish green"], "dash": "dot", "symbol": "square"},
}


# ---------------------------------------------------------------------------------------
# the mask builder
# ---------------------------------------------------------------------------------------


def mask_for(
    mask: str,
    n_q: int,
    n_kv: int,
    *,
    window: int = 3,
    length: int | None = None,
    align: str = "bottom-right",
) -> torch.Tensor:
    """The boolean mask ``(N_Q, N_KV)`` of one builder setting; True = may attend.

    ``"causal"`` and ``"sliding window"`` come from :func:`attnlib.causal_mask` and
    :func:`attnlib.sliding_window_mask` (bottom-right), or, with ``align="top-left"``,
    from the same rule with query ``i`` placed at position ``i``. ``"padding"`` is
    :func:`attnlib.key_padding_mask` for one sequence of ``length`` real tokens, the same
    for every query. ``"causal + padding"`` is the conjunction of the two.

    Args:
        mask: one of :data:`MASKS`.
        n_q: number of queries ``N_Q``.
        n_kv: number of keys ``N_KV``.
        window: how many most recent positions a sliding-window query sees (>= 1).
        length: real tokens for the padding masks, clipped to ``[0, N_KV]``; ``None``
            means ``N_KV`` (no padding).
        align: one of :data:`ALIGNMENTS`.

    Returns:
        Bool tensor of shape ``(N_Q, N_KV)`` on the CPU.

    Example:
        >>> mask_for("causal", 2, 4, align="top-left").int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0]], dtype=torch.int32)
    """
    check_choice("mask", mask, list(MASKS))
    check_choice("align", align, list(ALIGNMENTS))
    n_q, n_kv = check_positive_int("n_q", n_q), check_positive_int("n_kv", n_kv)
    window = check_positive_int("window", window)
    length = n_kv if length is None else min(check_nonnegative_int("length", length), n_kv)
    allowed = torch.ones(n_q, n_kv, dtype=torch.bool)
    if mask in ("causal", "causal + padding", "sliding window"):
        if align == "bottom-right":
            rule = (sliding_window_mask(n_q, n_kv, window=window) if mask == "sliding window"
                    else causal_mask(n_q, n_kv))
        else:  # top-left: query i stands at position i
            offset = torch.arange(n_kv)[None, :] - torch.arange(n_q)[:, None]  # j - i
            rule = (offset <= 0) & (offset > -window) if mask == "sliding window" else offset <= 0
        allowed &= rule
    if mask in ("padding", "causal + padding"):
        allowed &= key_padding_mask([length], n_kv)[0]  # (1, N_KV) broadcast over queries
    return allowed


def _sequence(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The builder's draw: ``N_MAX`` queries, then ``N_MAX`` keys, width ``D_QK``."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(N_MAX, D_QK, generator=gen, dtype=torch.float64)
    K = torch.randn(N_MAX, D_QK, generator=gen, dtype=torch.float64)
    return Q, K


def _check_sizes(n_q: int, n_kv: int) -> None:
    for name, n in (("n_q", n_q), ("n_kv", n_kv)):
        if check_positive_int(name, n) > N_MAX:
            raise ValueError(f"{name} must be at most N_MAX = {N_MAX}; got {n}")


def _builder_weights(
    mask: str, n_q: int, n_kv: int, window: int, length: int, align: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The setting's mask and weights ``P = Z^-1 A`` (zeros in rows with no key)."""
    _check_sizes(n_q, n_kv)
    allowed = mask_for(mask, n_q, n_kv, window=window, length=length, align=align)
    Q_seq, K_seq = _sequence(seed)
    start = max(n_kv - n_q, 0)  # the queries are the last N_Q tokens of the keys' sequence
    P = attention_weights(Q_seq[start:start + n_q], K_seq[:n_kv], mask=allowed)
    return allowed, P


def _describe(mask: str, window: int, length: int, n_kv: int) -> str:
    extra = {"sliding window": f", w = {window}", "padding": f", length {min(length, n_kv)}",
             "causal + padding": f", length {min(length, n_kv)}"}
    return f"{mask}{extra.get(mask, '')}"


def _seen(row: torch.Tensor) -> str:
    keys = row.nonzero().flatten().tolist()
    if not keys:
        return "none"
    if keys == list(range(keys[0], keys[-1] + 1)):
        return f"{keys[0]}" if len(keys) == 1 else f"{keys[0]}-{keys[-1]}"
    return ", ".join(str(j) for j in keys)


def mask_builder_figure(
    mask: str = "causal",
    n_q: int = 6,
    n_kv: int = 6,
    window: int = 3,
    length: int = 6,
    align: str = "bottom-right",
    *,
    seed: int = 0,
) -> go.Figure:
    """A mask (left) and the softmax weights it leaves (right), for one builder setting.

    Left: the mask of :func:`mask_for`, blue where query ``i`` may attend to key ``j``;
    each row's label gives how many keys the query sees. Right:
    ``P = attnlib.attention_weights(Q, K, mask=...)`` for the draw described in the module
    docstring, each allowed cell labelled with its weight (2 decimals), masked cells left
    blank; each row's label gives its sum, 1 for a query that sees a key and 0 for one that
    sees none (attnlib returns a zero row there, never NaN). The title names the keys the
    last query sees and counts the rows with no key.

    Args:
        mask: one of :data:`MASKS`.
        n_q: number of queries, ``1 <= N_Q <= N_MAX``.
        n_kv: number of keys, ``1 <= N_KV <= N_MAX``.
        window: sliding-window width ``w`` (used by ``"sliding window"`` only).
        length: real tokens for the padding masks, clipped to ``[0, N_KV]``.
        align: one of :data:`ALIGNMENTS` (used by the causal and sliding-window masks).
        seed: seed of the draw.

    Returns:
        go.Figure: two heatmaps of ``N_Q x N_KV`` cells (weights rounded to 4 decimals).
    """
    allowed, P = _builder_weights(mask, n_q, n_kv, window, length, align, seed)
    counts = allowed.sum(dim=-1).tolist()
    sums = P.sum(dim=-1).tolist()
    empty = sum(1 for c in counts if c == 0)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2,
                        subplot_titles=("mask", "weights P = Z⁻¹A"))
    keys = [f"k{j}" for j in range(n_kv)]
    queries = [f"q{i}" for i in range(n_q)]
    fig.add_trace(go.Heatmap(
        z=allowed.int().tolist(), x=keys, y=queries, zmin=0, zmax=1, showscale=False,
        colorscale=[[0, "#EEEEEE"], [1, COLORS["main"]]], xgap=2, ygap=2,
        hovertemplate="query %{y}, key %{x}: %{z}<extra>1 = may attend</extra>",
    ), row=1, col=1)
    z = [[round(float(P[i, j]), 4) if allowed[i, j] else None for j in range(n_kv)]
         for i in range(n_q)]
    text = [[f"{float(P[i, j]):.2f}" if allowed[i, j] else "" for j in range(n_kv)]
            for i in range(n_q)]
    fig.add_trace(go.Heatmap(
        z=z, x=keys, y=queries, text=text, texttemplate="%{text}", zmin=0, zmax=1,
        colorscale=[[0, "#FFFFFF"], [1, OKABE_ITO["sky blue"]]], showscale=False,
        xgap=2, ygap=2, hovertemplate="query %{y}, key %{x}: weight %{z:.4f}<extra></extra>",
    ), row=1, col=2)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=queries,
                     ticktext=[f"q{i}: {c} key{'s' * (c != 1)}" for i, c in enumerate(counts)],
                     row=1, col=1)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=queries, side="right",
                     ticktext=[f"Σ = {s:.2f}" if counts[i] else "Σ = 0: zero output"
                               for i, s in enumerate(sums)], row=1, col=2)
    fig.update_xaxes(title_text="keys")
    what = _describe(mask, window, length, n_kv)
    align_note = f", {align}" if mask in ("causal", "sliding window", "causal + padding") else ""
    style(fig, (f"{what}{align_note}: N_Q = {n_q}, N_KV = {n_kv}<br><sup>last query sees keys "
                f"{_seen(allowed[-1])}; rows with no key: {empty}<br>blue: may attend; "
                "blank weight: masked</sup>"), height=HEIGHT + 40)
    fig.update_layout(margin={"t": 160, "l": 110, "r": 150})
    return fig


def mask_table(
    settings: Sequence[tuple[str, int, int, int, int, str]] = MASK_SETTINGS, *, seed: int = 0
) -> pd.DataFrame:
    """What each builder setting lets through: one row per ``(mask, n_q, n_kv, w, length, align)``.

    Args:
        settings: tuples as in :data:`MASK_SETTINGS`.
        seed: seed of the draw (for the largest weight of the last query).

    Returns:
        pd.DataFrame: the number of allowed (query, key) pairs, the keys seen per query,
        the number of rows with no key, the keys the last query sees and its largest
        weight ("its largest weight", 3 decimals), indexed by the setting.
    """
    rows = {}
    for mask, n_q, n_kv, window, length, align in settings:
        allowed, P = _builder_weights(mask, n_q, n_kv, window, length, align, seed)
        counts = allowed.sum(dim=-1).tolist()
        label = (mask, n_q, n_kv, window if mask == "sliding window" else "-",
                 length if "padding" in mask else "-", align if mask != "padding" else "-")
        rows[label] = {
            "allowed pairs": int(allowed.sum()),
            "keys per query": ", ".join(str(c) for c in counts),
            "rows with no key": sum(1 for c in counts if c == 0),
            "last query sees": _seen(allowed[-1]),
            "its largest weight": round(float(P[-1].max()), 3),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(
        table.index, names=["mask", "N_Q", "N_KV", "w", "length", "align"])
    return table


# ---------------------------------------------------------------------------------------
# norm placement: the variance of the residual stream across depth
# ---------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _variances(
    norm: str, n_layers: int, d_model: int, n_heads: int, n_tokens: int, batch: int,
    weight_scale: float, seed: int,
) -> tuple[float, ...]:
    # float64: after dozens of blocks, float32 rounding differs in the fourth digit from one
    # CPU to another (and explodes with the weight scale); float64 keeps every printed digit.
    with seeded(seed):
        blocks = [TransformerBlock(d_model, n_heads, norm=norm, dtype=torch.float64)
                  for _ in range(n_layers)]
    x = torch.randn(batch, n_tokens, d_model, generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64)
    out = [float(x.var())]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small run faster without a thread pool
    try:
        with torch.no_grad():
            for block in blocks:
                for name, W in block.named_parameters():
                    if name.rsplit(".", 1)[-1].startswith("W_"):
                        W.mul_(weight_scale)  # every weight matrix; norm gains stay 1
                x = block(x, causal=True)  # (B, N, d_model)
                out.append(float(x.var()))
    finally:
        torch.set_num_threads(threads)
    return tuple(out)


def residual_variances(
    norm: str,
    *,
    n_layers: int = 24,
    d_model: int = 64,
    n_heads: int = 4,
    n_tokens: int = 32,
    batch: int = 4,
    weight_scale: float = 1.0,
    seed: int = 0,
) -> list[float]:
    """The variance of the residual stream after each of ``n_layers`` fresh decoder blocks.

    The blocks are ``TransformerBlock(d_model, n_heads, norm=norm)`` (RMSNorm, SwiGLU,
    ``d_ff = 4 d_model``), created in order after ``torch.manual_seed(seed)`` (the global
    random state is restored afterwards); with ``weight_scale != 1`` every weight matrix
    ``W_*`` is multiplied by it, a stand-in for weights that grow during training. The
    input ``x`` has i.i.d. standard normal entries, ``(batch, n_tokens, d_model)``, drawn
    from ``torch.Generator().manual_seed(seed)``; each block is applied with
    ``causal=True``, in float64 on the CPU (so every CPU prints the same digits).

    Args:
        norm: one of :data:`PLACEMENTS`.
        n_layers: number of blocks.
        d_model: width of the residual stream.
        n_heads: heads per attention sublayer.
        n_tokens: tokens per sequence.
        batch: sequences.
        weight_scale: factor applied to every weight matrix (> 0).
        seed: seed of the weights and of the input.

    Returns:
        list[float]: ``n_layers + 1`` variances of all entries of ``x`` (unbiased), before
        the first block and after each block.
    """
    check_choice("norm", norm, list(PLACEMENTS))
    for name, value in (("n_layers", n_layers), ("d_model", d_model), ("n_heads", n_heads),
                        ("n_tokens", n_tokens), ("batch", batch)):
        check_positive_int(name, value)
    if isinstance(weight_scale, bool) or not isinstance(weight_scale, (int, float)) \
            or not weight_scale > 0:
        raise ValueError(f"weight_scale must be a positive number; got {weight_scale!r}")
    return list(_variances(norm, n_layers, d_model, n_heads, n_tokens, batch,
                           float(weight_scale), seed))


def norm_variance_table(
    depths: Sequence[int] = (0, 1, 2, 4, 8, 16, 24), *, n_layers: int = 24, seed: int = 0
) -> pd.DataFrame:
    """:func:`residual_variances` of the three placements at a few depths.

    Args:
        depths: numbers of blocks applied, each in ``[0, n_layers]``.
        n_layers: depth of the stack.
        seed: seed of the weights and of the input.

    Returns:
        pd.DataFrame: one column per placement (3 significant digits), indexed by depth.
    """
    runs = {norm: residual_variances(norm, n_layers=n_layers, seed=seed) for norm in PLACEMENTS}
    for depth in depths:
        if not 0 <= check_nonnegative_int("depths[...]", depth) <= n_layers:
            raise ValueError(f"depths must lie in [0, n_layers={n_layers}]; got {depth}")
    table = pd.DataFrame({f"{norm}-LN": rounded([runs[norm][k] for k in depths], digits=3)
                          for norm in PLACEMENTS}, index=list(depths))
    return table.rename_axis("blocks applied")


def weight_scale_table(
    scales: Sequence[float] = WEIGHT_SCALES, *, n_layers: int = 24, seed: int = 0
) -> pd.DataFrame:
    """The variance after ``n_layers`` blocks when every weight matrix is scaled.

    Args:
        scales: factors for :func:`residual_variances`'s ``weight_scale``.
        n_layers: depth of the stack.
        seed: seed of the weights and of the input.

    Returns:
        pd.DataFrame: one column per placement (3 significant digits), indexed by the
        weight scale.
    """
    rows = {}
    for c in scales:
        finals = {norm: residual_variances(norm, n_layers=n_layers, weight_scale=c, seed=seed)[-1]
                  for norm in PLACEMENTS}
        rows[c] = {f"{norm}-LN": rounded(v, digits=3) for norm, v in finals.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("weight scale")


def norm_variance_figure(
    *, n_layers: int = 24, scales: Sequence[float] = WEIGHT_SCALES, seed: int = 0
) -> go.Figure:
    """Left: variance of the residual stream against depth, at initialisation.
    Right: the variance after ``n_layers`` blocks against the weight scale.

    Both panels use :func:`residual_variances`, kept to 3 significant digits: with large
    weights the softmax saturates and near-ties between keys make the fourth digit differ
    from CPU to CPU, even in float64. Both y axes are logarithmic. The left
    panel marks each placement's final variance; colour, dash and marker symbol all tell
    the placements apart.

    Args:
        n_layers: depth of the stack.
        scales: weight scales of the right panel.
        seed: seed of the weights and of the input.

    Returns:
        go.Figure: six traces, three per panel.
    """
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=(
        "at initialisation: variance after each block",
        f"every weight × c: variance after {n_layers} blocks"))
    for norm, look in _PLACEMENT_LOOKS.items():
        v = residual_variances(norm, n_layers=n_layers, seed=seed)
        name = f"{norm}-LN"
        line = {"color": look["color"], "dash": look["dash"], "width": 2}
        fig.add_trace(go.Scatter(
            x=list(range(n_layers + 1)), y=rounded(v, digits=3), mode="lines+markers", name=name,
            legendgroup=norm, line=line, marker={"symbol": look["symbol"], "size": 6},
            hovertemplate=f"{name}<br>blocks %{{x}}<br>variance %{{y:.4g}}<extra></extra>",
        ), row=1, col=1)
        fig.add_annotation(text=f"{name}: {v[-1]:.3g}", x=n_layers, y=_log10(v[-1]),
                           xref="x", yref="y", xanchor="left", showarrow=False,
                           yshift=-10 if norm == "post" else 0,  # clear of the dashed line
                           font={"color": look["color"]})
        finals = [residual_variances(norm, n_layers=n_layers, weight_scale=c, seed=seed)[-1]
                  for c in scales]
        fig.add_trace(go.Scatter(
            x=list(scales), y=rounded(finals, digits=3), mode="lines+markers", name=name,
            legendgroup=norm, showlegend=False, line=line,
            marker={"symbol": look["symbol"], "size": 8},
            hovertemplate=f"{name}<br>c = %{{x}}<br>variance %{{y:.4g}}<extra></extra>",
        ), row=1, col=2)
    fig.update_xaxes(title_text="blocks applied", range=[0, n_layers + 6], row=1, col=1)
    fig.update_xaxes(title_text="weight scale c (log)", type="log", tickmode="array",
                     tickvals=list(scales), ticktext=[f"{c:g}" for c in scales], row=1, col=2)
    fig.update_yaxes(type="log", title_text="variance of the residual stream", tickmode="array",
                     tickvals=[0.5, 1, 2, 5, 10, 20, 50, 100], row=1, col=1)
    fig.update_yaxes(type="log", exponentformat="power", row=1, col=2)
    fig.add_hline(y=1, line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1})
    style(fig, (f"Norm placement in {n_layers} decoder blocks (RMSNorm, SwiGLU)<br><sup>"
                "dashed: variance 1, the input's</sup>"), height=HEIGHT + 60)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"t": 110, "b": 120})
    return fig


def _log10(x: float) -> float:
    return round(math.log10(x), 6)


# ---------------------------------------------------------------------------------------
# feed-forward networks
# ---------------------------------------------------------------------------------------


def feed_forward_table(d: int = 64) -> pd.DataFrame:
    """Parameter counts of :class:`attnlib.FeedForward` variants at width ``d`` (no biases).

    Rows: the ReLU and GELU MLPs with ``d_ff = 4d``; SwiGLU with the same ``d_ff = 4d``;
    SwiGLU with ``d_ff = round(8d/3)``, the width that matches the MLPs' count. The counts
    are read off modules built on the ``meta`` device (shapes only, no memory).

    Args:
        d: model width.

    Returns:
        pd.DataFrame: ``d_ff``, the number of weight matrices, the parameter count and the
        count divided by ``d²`` (3 decimals), indexed by the variant.
    """
    d = check_positive_int("d", d)
    variants = [("relu", 4 * d), ("gelu", 4 * d), ("swiglu", 4 * d), ("swiglu", round(8 * d / 3))]
    rows = {}
    for kind, d_ff in variants:
        ffn = FeedForward(d, d_ff, kind, device="meta")
        count = sum(p.numel() for p in ffn.parameters())
        label = f"{kind}, d_ff = {'4d' if d_ff == 4 * d else 'round(8d/3)'}"
        rows[label] = {"d_ff": d_ff, "matrices": len(list(ffn.parameters())),
                       "parameters": count, "parameters / d²": round(count / d**2, 3)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("feed-forward")
