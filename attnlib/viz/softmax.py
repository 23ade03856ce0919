"""Figures and tables of lesson 02: the spread of the logits, saturation, temperature.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`weight_row_figure` into the lesson's explorer. The table builders return
``pandas.DataFrame`` objects, which notebooks render as HTML tables.

Random queries and keys have i.i.d. standard normal entries, drawn in float64 on the CPU
from ``torch.Generator().manual_seed(seed)`` (queries first, then keys), so a reader can
redraw exactly what a figure shows.

Lesson: 02_softmax_attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_positive_float, check_positive_int
from attnlib.core.functional import attention, attention_weights
from attnlib.viz.style import COLORS, DASHES, HEIGHT, SYMBOLS, rounded, style

__all__ = [
    "D_MAX",
    "SATURATION_DIMS",
    "TEMPERATURES",
    "WIDTHS",
    "logit_histogram_figure",
    "saturation_figure",
    "saturation_table",
    "softmax_jacobian",
    "temperature_table",
    "variance_table",
    "weight_row_figure",
    "weight_row_table",
]

D_MAX = 1024
"""Widest query and key the explorer draws; narrower ones are prefixes of the same draw."""

WIDTHS: tuple[int, ...] = (2, 8, 32, 128, 512)
"""The widths ``d_QK`` the explorer offers."""

TEMPERATURES: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0, 10.0)
"""The temperatures ``tau`` the explorer offers (``tau = 1`` is plain softmax attention)."""

SATURATION_DIMS: tuple[int, ...] = (2, 8, 32, 128, 512, 2048)
"""The widths ``d_QK`` of the saturation figure and table."""

_SCALED = "with 1/√d_QK"
_UNSCALED = "without 1/√d_QK"
_MEAN_MAX = "mean largest weight"
_MEDIAN_GAIN = "median gain ||J||"


def softmax_jacobian(P: torch.Tensor) -> torch.Tensor:
    """The Jacobian of the softmax at weights ``p``: ``J = diag(p) - p^T p`` (``p`` a row).

    ``J[j, l] = d p_j / d s_l`` for ``p = softmax(s)``. It is symmetric, positive
    semi-definite, and ``J 1 = 0`` (adding a constant to every logit changes nothing).

    Args:
        P: ``(..., N_KV)`` rows of attention weights.

    Returns:
        ``(..., N_KV, N_KV)``, one Jacobian per row.

    Example:
        >>> softmax_jacobian(torch.tensor([0.5, 0.5]))
        tensor([[ 0.2500, -0.2500],
                [-0.2500,  0.2500]])
    """
    return torch.diag_embed(P) - P.unsqueeze(-1) * P.unsqueeze(-2)  # (..., N_KV, N_KV)


def _draw(n_q: int, n_kv: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``Q`` (n_q, d) then ``K`` (n_kv, d), i.i.d. standard normal, float64, CPU."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(n_q, d, generator=gen, dtype=torch.float64)
    K = torch.randn(n_kv, d, generator=gen, dtype=torch.float64)
    return Q, K


def _entropy(P: torch.Tensor) -> torch.Tensor:
    """``H(p) = -sum_j p_j ln p_j`` in nats, with ``0 ln 0 = 0``."""
    return -torch.where(P > 0, P * P.log(), 0.0).sum(dim=-1)


def _dot_products(d_qk: int, n_pairs: int, seed: int) -> torch.Tensor:
    """``<q_n, k_n>`` for ``n_pairs`` independent pairs of random vectors of width d_QK."""
    q, k = _draw(n_pairs, n_pairs, d_qk, seed)
    return (q * k).sum(dim=-1)  # (n_pairs,)


def _normal_density(x: float, std: float) -> float:
    return math.exp(-0.5 * (x / std) ** 2) / (std * math.sqrt(2 * math.pi))


def logit_histogram_figure(
    d_qk: int = 128, *, n_pairs: int = 10_000, seed: int = 0, bins: int = 60
) -> go.Figure:
    """Dot products of random vectors have variance ``d_QK``; divided by ``√d_QK``, variance 1.

    ``n_pairs`` pairs ``(q, k)`` of width ``d_QK`` are drawn (``q`` rows first, then ``k``
    rows, see the module docstring). The left panel histograms ``<q, k>`` over
    ``±4.5 √d_QK`` with the normal density ``N(0, d_QK)``; the right one histograms the
    logits ``<q, k> / √d_QK`` over ``±4.5`` with ``N(0, 1)``. Bars are densities: counts
    divided by ``n_pairs`` times the bin width.

    Args:
        d_qk: the width ``d_QK`` of queries and keys.
        n_pairs: the number of random pairs.
        seed: seed of the generator.
        bins: number of bins in each panel.

    Returns:
        go.Figure: two bar traces and two density curves; one annotation per panel gives
        the measured standard deviation.
    """
    check_positive_int("d_qk", d_qk)
    check_positive_int("n_pairs", n_pairs)
    check_positive_int("bins", bins)
    if n_pairs < 2:
        raise ValueError(f"n_pairs must be >= 2 (a spread needs two samples); got {n_pairs}")
    dots = _dot_products(d_qk, n_pairs, seed)
    root = math.sqrt(d_qk)
    panels = (
        (dots, root, "⟨q, k⟩", f"N(0, d_QK) = N(0, {d_qk})"),
        (dots / root, 1.0, "⟨q, k⟩ / √d_QK", "N(0, 1)"),
    )
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "dot products ⟨q, k⟩: spread √d_QK", "logits ⟨q, k⟩ / √d_QK: spread 1"))
    for col, (x, std_ref, what, ref_name) in enumerate(panels, start=1):
        half = 4.5 * std_ref
        width = 2 * half / bins
        density = torch.histc(x, bins=bins, min=-half, max=half) / (n_pairs * width)
        centres = [-half + (b + 0.5) * width for b in range(bins)]
        t = [-half + 2 * half * b / 200 for b in range(201)]
        fig.add_trace(go.Bar(
            x=rounded(centres), y=rounded(density), width=round(width, 10),
            marker={"color": COLORS["main"], "line": {"width": 0}}, opacity=0.7,
            name=f"{what} (histogram)", showlegend=True,
            hovertemplate=f"{what} ≈ %{{x:.3f}}<br>density %{{y:.4f}}<extra></extra>",
        ), row=1, col=col)
        fig.add_trace(go.Scatter(
            x=rounded(t), y=rounded([_normal_density(v, std_ref) for v in t]), mode="lines",
            line={"color": COLORS["reference"], "dash": DASHES["reference"], "width": 2},
            name=ref_name, hovertemplate="%{x:.3f}<br>density %{y:.4f}<extra></extra>",
        ), row=1, col=col)
        fig.update_xaxes(range=[round(-half, 6), round(half, 6)], title_text=what,
                         row=1, col=col)
        ref = f"√d_QK = {root:.2f}" if col == 1 else "theory: 1"
        fig.add_annotation(
            text=f"std = {float(x.std()):.2f}<br>{ref}", showarrow=False, align="right",
            xref=f"x{'' if col == 1 else col} domain", yref=f"y{'' if col == 1 else col} domain",
            x=0.98, y=0.97, xanchor="right", yanchor="top", bgcolor="rgba(255,255,255,0.8)",
        )
    fig.update_yaxes(title_text="probability density", row=1, col=1)
    fig.update_layout(bargap=0, legend={"orientation": "h", "x": 0, "y": -0.22,
                                        "yanchor": "top"}, margin={"b": 120})
    style(fig, f"{n_pairs:,} random pairs (q, k), d_QK = {d_qk}", height=HEIGHT + 40)
    fig.update_layout(margin={"b": 120})
    return fig


def variance_table(
    dims: Sequence[int], *, n_pairs: int = 10_000, seed: int = 0
) -> pd.DataFrame:
    """The spread of ``<q, k>`` and of ``<q, k> / √d_QK``, one row per width ``d_QK``.

    Each row uses the draw of :func:`logit_histogram_figure` with the same ``n_pairs`` and
    ``seed``.

    Args:
        dims: widths ``d_QK``.
        n_pairs: random pairs per width.
        seed: seed of the generator.

    Returns:
        pd.DataFrame: the sample variance of ``<q, k>`` (1 decimal), its standard deviation,
        ``√d_QK`` and the standard deviation of the logits (3 decimals), indexed by
        ``d_QK``.
    """
    check_positive_int("n_pairs", n_pairs)
    rows = {}
    for d in dims:
        check_positive_int("dims[...]", d)
        dots = _dot_products(d, n_pairs, seed)
        rows[d] = {
            "var <q, k>": round(float(dots.var()), 1),
            "std <q, k>": round(float(dots.std()), 3),
            "sqrt(d_QK)": round(math.sqrt(d), 3),
            "std <q, k>/sqrt(d_QK)": round(float(dots.std()) / math.sqrt(d), 3),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("d_QK")


@lru_cache(maxsize=8)
def _saturation(
    dims: tuple[int, ...], n_kv: int, n_queries: int, seed: int
) -> dict[int, dict[tuple[str, str], float]]:
    """Mean largest weight and median gradient gain, with and without the scaling."""
    check_positive_int("n_kv", n_kv)
    check_positive_int("n_queries", n_queries)
    out = {}
    for d in dims:
        check_positive_int("dims[...]", d)
        Q, K = _draw(n_queries, n_kv, d, seed)
        row = {}
        for label, scale in ((_SCALED, None), (_UNSCALED, 1.0)):
            P = attention_weights(Q, K, scale=scale)  # (n_queries, n_kv)
            gain = torch.linalg.eigvalsh(softmax_jacobian(P))[..., -1]  # largest eigenvalue
            row[label, _MEAN_MAX] = float(P.amax(dim=-1).mean())
            row[label, _MEDIAN_GAIN] = float(gain.median())
        out[d] = row
    return out


def saturation_table(
    dims: Sequence[int] = SATURATION_DIMS, *, n_kv: int = 16, n_queries: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Saturation in numbers: the largest weight and the softmax's gradient gain, per ``d_QK``.

    For each width, ``n_queries`` random queries meet the same ``n_kv`` random keys
    (fresh ``Generator().manual_seed(seed)`` per width, queries first). For each query,
    ``p`` is its row of weights and ``J = diag(p) - p^T p`` the Jacobian of the softmax at
    ``p``; the gain ``||J||`` is its largest eigenvalue (its spectral norm: ``J`` is
    symmetric positive semi-definite), the most that a unit change of the logits can move
    ``p``. Columns come with the default scaling ``1/√d_QK`` and without it (``scale=1``).

    Args:
        dims: widths ``d_QK``.
        n_kv: keys per query, ``N_KV``.
        n_queries: queries per width.
        seed: seed of the generator.

    Returns:
        pd.DataFrame: two column groups (with and without the scaling), each with the mean
        over queries of the largest weight (3 decimals) and the median gain, written with
        3 significant digits (a string, since it spans many orders of magnitude); indexed
        by ``d_QK``.
    """
    stats = _saturation(tuple(dims), n_kv, n_queries, seed)
    rows = {d: {k: (round(v, 3) if k[1] == _MEAN_MAX else f"{v:.3g}")
                for k, v in row.items()} for d, row in stats.items()}
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("d_QK")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


def saturation_figure(
    dims: Sequence[int] = SATURATION_DIMS, *, n_kv: int = 16, n_queries: int = 1000,
    seed: int = 0,
) -> go.Figure:
    """The numbers of :func:`saturation_table` against ``d_QK``, on logarithmic axes.

    Left: the mean largest weight, from ``1/N_KV`` (uniform, dotted line) to 1 (one-hot).
    Right: the median gain ``||J||`` of the softmax, whose collapse is the vanishing
    gradient. Colour, line dash and marker symbol all tell the two scalings apart.

    Args:
        dims: widths ``d_QK``.
        n_kv: keys per query, ``N_KV``.
        n_queries: queries per width.
        seed: seed of the generator.

    Returns:
        go.Figure: four traces, ``(largest weight, gain) x (with, without the scaling)``.
    """
    stats = _saturation(tuple(dims), n_kv, n_queries, seed)
    dims = list(stats)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=(
        "largest weight (mean over queries)", "gain ||J|| (median over queries)"))
    looks = {
        _SCALED: {"color": COLORS["main"], "dash": DASHES["measured"], "symbol": "circle"},
        _UNSCALED: {"color": COLORS["reference"], "dash": DASHES["marker"],
                    "symbol": SYMBOLS["word"]},
    }
    for col, stat in enumerate((_MEAN_MAX, _MEDIAN_GAIN), start=1):
        for label, look in looks.items():
            fig.add_trace(go.Scatter(
                x=dims, y=rounded([stats[d][label, stat] for d in dims], digits=3),
                mode="lines+markers", name=f"{stat}, {label}", legendgroup=label,
                line={"color": look["color"], "dash": look["dash"], "width": 2},
                marker={"color": look["color"], "symbol": look["symbol"], "size": 9},
                hovertemplate=f"{label}<br>d_QK = %{{x}}<br>{stat} %{{y:.3g}}<extra></extra>",
            ), row=1, col=col)
    fig.add_hline(y=round(1 / n_kv, 6), row=1, col=1,
                  line={"color": COLORS["marker"], "dash": "dot", "width": 1.5})
    fig.add_annotation(text=f"uniform: 1/N_KV = 1/{n_kv}", x=0.02, y=round(1 / n_kv, 6),
                       xref="x domain", yref="y", xanchor="left", yanchor="bottom",
                       showarrow=False)
    fig.update_xaxes(type="log", title_text="d_QK (log scale)")
    fig.update_yaxes(range=[0, 1.05], title_text="weight", row=1, col=1)
    gains = [stats[d][label, _MEDIAN_GAIN] for d in dims for label in looks]
    low = math.floor(math.log10(max(min(gains), 1e-300)))
    fig.update_yaxes(type="log", title_text="largest eigenvalue of J", dtick=1,
                     exponentformat="power", range=[low - 0.3, 0.2], row=1, col=2)
    style(fig, f"Saturation: {n_queries:,} queries, {n_kv} keys", height=HEIGHT + 60)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.25, "yanchor": "top"},
                      margin={"b": 140})
    return fig


def temperature_table(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, taus: Sequence[float]
) -> pd.DataFrame:
    """One query's weights and output at several temperatures ``tau``.

    Row ``tau`` calls ``attnlib.attention_weights`` and ``attnlib.attention`` with
    ``scale = 1 / (tau √d_QK)``: the logits ``<q, k_j> / √d_QK`` divided by ``tau``.

    Args:
        Q: ``(1, d_QK)``, one query.
        K: ``(N_KV, d_QK)`` keys.
        V: ``(N_KV, 1)`` scalar values.
        taus: temperatures, each ``> 0``.

    Returns:
        pd.DataFrame: ``scale``, the weights ``p_0 ... p_{N_KV - 1}``, the entropy in nats and
        the output ``y`` (4 decimals), indexed by ``tau``.
    """
    if Q.dim() != 2 or Q.shape[0] != 1:
        raise ValueError(f"Q must hold one query, shape (1, d_QK); got shape {tuple(Q.shape)}")
    if V.dim() != 2 or V.shape[-1] != 1:
        raise ValueError(f"V must hold scalar values, shape (N_KV, 1); got shape "
                         f"{tuple(V.shape)}")
    rows = {}
    for tau in taus:
        tau = check_positive_float("taus[...]", tau)
        scale = 1.0 / (tau * math.sqrt(Q.shape[-1]))
        p = attention_weights(Q, K, scale=scale)[0].detach().to("cpu", torch.float64)
        y = attention(Q, K, V, scale=scale, impl="explicit")[0, 0].item()
        row = {"scale": round(scale, 4)}
        row.update({f"p_{j}": round(float(w), 4) for j, w in enumerate(p)})
        row["entropy (nats)"] = round(float(_entropy(p)), 4)
        row["y"] = round(y, 4)
        rows[tau] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("tau")


def weight_row_figure(
    tau: float = 1.0, d_qk: int = 128, *, n_kv: int = 12, seed: int = 0
) -> go.Figure:
    """One query's row of weights over ``N_KV`` keys, with and without the ``√d_QK``.

    The query and the keys are the first ``d_QK`` columns of one draw of width
    :data:`D_MAX` (query first, then keys; see the module docstring), so raising ``d_QK``
    adds coordinates to the same vectors. Left: ``softmax(<q, k_j> / (tau √d_QK))``, the
    weights of ``attnlib.attention_weights(q, K, scale=1 / (tau √d_QK))``. Right:
    ``softmax(<q, k_j> / tau)``, the same without the ``√d_QK``. Each panel's title gives its
    scale, its largest weight (dashed line) and its entropy ``H(p) = -Σ p_j ln p_j`` in
    nats, whose maximum ``ln N_KV`` belongs to the uniform row (dotted line at ``1/N_KV``).

    Args:
        tau: the temperature, ``> 0``.
        d_qk: the width of queries and keys, ``1 <= d_QK <=`` :data:`D_MAX`.
        n_kv: the number of keys.
        seed: seed of the generator.

    Returns:
        go.Figure: two bar traces of ``N_KV`` bars each (weights rounded to 4 decimals).
    """
    tau = check_positive_float("tau", tau)
    check_positive_int("d_qk", d_qk)
    check_positive_int("n_kv", n_kv)
    if d_qk > D_MAX:
        raise ValueError(f"d_qk must be at most D_MAX = {D_MAX}; got {d_qk}")
    q_full, K_full = _draw(1, n_kv, D_MAX, seed)
    q, K = q_full[:, :d_qk], K_full[:, :d_qk]  # prefixes of one draw
    panels = (  # scale = 1/(tau sqrt(d_QK)) with the scaling, 1/tau without it
        ("with 1/√d_QK", 1.0 / (tau * math.sqrt(d_qk)), COLORS["main"]),
        ("without 1/√d_QK", 1.0 / tau, COLORS["reference"]),
    )
    weights = [attention_weights(q, K, scale=scale)[0] for _, scale, _ in panels]
    titles = [
        f"{name}: scale = {scale:.4f}<br>largest weight = {float(p.max()):.3f} (dashed)"
        f"<br>entropy H = {float(_entropy(p)):.3f} nats"
        for (name, scale, _), p in zip(panels, weights, strict=True)
    ]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.08)
    keys = list(range(n_kv))  # key j = 0 .. N_KV - 1, the book's indexing
    uniform = round(1 / n_kv, 6)
    for col, ((name, _, color), p) in enumerate(zip(panels, weights, strict=True), start=1):
        fig.add_trace(go.Bar(
            x=keys, y=rounded(p, 4), marker={"color": color}, name=name,
            hovertemplate="key %{x}<br>weight %{y:.4f}<extra></extra>",
        ), row=1, col=col)
        fig.add_hline(y=round(float(p.max()), 4), row=1, col=col,
                      line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1.5})
        fig.add_hline(y=uniform, row=1, col=col,
                      line={"color": COLORS["marker"], "dash": "dot", "width": 1})
    fig.update_xaxes(title_text="key j", dtick=1)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_yaxes(title_text="weight p_j", row=1, col=1)
    fig.update_layout(showlegend=False, bargap=0.15)
    for a in fig.layout.annotations:  # the two panel titles
        a.font = {"size": 12}
    style(fig, (f"One query, {n_kv} random keys: τ = {tau:g}, d_QK = {d_qk}<br><sup>dotted: "
                f"the uniform row, every weight 1/{n_kv}, entropy ln {n_kv} = "
                f"{math.log(n_kv):.3f} nats (the maximum)</sup>"), height=HEIGHT + 40)
    fig.update_layout(margin={"t": 150})
    return fig


def weight_row_table(
    settings: Sequence[tuple[float, int]], *, n_kv: int = 12, seed: int = 0
) -> pd.DataFrame:
    """The numbers :func:`weight_row_figure` annotates, one row per setting ``(tau, d_QK)``.

    Args:
        settings: pairs ``(tau, d_qk)``, as on the twin's slider.
        n_kv: the number of keys.
        seed: seed of the generator (the figure's draw).

    Returns:
        pd.DataFrame: two column groups (with and without ``1/√d_QK``), each with the
        largest weight and the entropy in nats (3 decimals), indexed by ``(tau, d_QK)``.
    """
    check_positive_int("n_kv", n_kv)
    q_full, K_full = _draw(1, n_kv, D_MAX, seed)
    rows = {}
    for tau, d_qk in settings:
        tau = check_positive_float("tau", tau)
        check_positive_int("d_qk", d_qk)
        if d_qk > D_MAX:
            raise ValueError(f"d_qk must be at most D_MAX = {D_MAX}; got {d_qk}")
        q, K = q_full[:, :d_qk], K_full[:, :d_qk]
        row = {}
        for label, scale in ((_SCALED, 1.0 / (tau * math.sqrt(d_qk))), (_UNSCALED, 1.0 / tau)):
            p = attention_weights(q, K, scale=scale)[0]
            row[label, "largest weight"] = round(float(p.max()), 3)
            row[label, "entropy (nats)"] = round(float(_entropy(p)), 3)
        rows[tau, d_qk] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    table.index = pd.MultiIndex.from_tuples(table.index, names=["tau", "d_QK"])
    return table
