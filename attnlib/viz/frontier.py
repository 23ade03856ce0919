"""Figures and tables of lesson 09 (the frontier): tiling, top-k, random features, sinks.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`feature_count_figure` is the lesson's explorer. The table
builders return ``pandas.DataFrame`` objects. Every draw is seeded, in float64 on the CPU,
so the numbers are the same on any machine:

* tiling: :func:`largest_intermediate` records the largest tensor any operation creates,
  an exact, machine-independent measure of peak working memory; :func:`tiling_table`
  and :func:`tiling_figure` compare the explicit path with ``attnlib.tiled_attention``,
  and :func:`io_table` counts arithmetic and main-memory traffic;
* sparse attention: :func:`topk_table` and :func:`topk_figure` measure the error and the
  cost of top-k attention with exact and with cheap indexer scores;
* random features: :func:`feature_errors` and :func:`feature_count_figure`;
* attention sinks: :func:`sink_table`, and :func:`first_token_table` for trained models;
  usable context: :func:`needle_table`.

Lesson: 09_frontier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch.utils._python_dispatch import TorchDispatchMode

from attnlib._checks import check_bool, check_positive_int
from attnlib.analysis.approx import gaussian_features, positive_random_features, topk_attention
from attnlib.analysis.flash import tiled_attention
from attnlib.core.functional import attention
from attnlib.layers.gates import output_gate
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = [
    "FEATURE_COUNTS",
    "TOPK_VALUES",
    "feature_count_figure",
    "feature_errors",
    "first_token_table",
    "io_table",
    "largest_intermediate",
    "needle_table",
    "sink_table",
    "tiling_figure",
    "tiling_table",
    "topk_figure",
    "topk_table",
]

FEATURE_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The feature counts ``r`` of the explorer."""

TOPK_VALUES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
"""The values of ``k`` of the sparse-attention table and figure."""

F64 = torch.float64


# ---------------------------------------------------------------------------------------
# tiled attention: memory and traffic
# ---------------------------------------------------------------------------------------


class _LargestTensor(TorchDispatchMode):
    """Records the number of elements of the largest tensor any operation returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):  # a view shares its input's memory: no new tensor
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def largest_intermediate(fn: Callable[..., object], *args: object, **kwargs: object) -> int:
    """The number of elements of the largest tensor created while ``fn(*args, **kwargs)`` runs.

    Every operation PyTorch dispatches is watched (a ``TorchDispatchMode``), so the count is
    exact and independent of the machine, unlike a measured peak of allocated memory. Views
    (transposes, slices) share their input's memory and are not counted.

    Args:
        fn: the computation, e.g. :func:`attnlib.attention`.
        *args: its positional arguments.
        **kwargs: its keyword arguments.

    Returns:
        int: elements of the largest tensor any operation returned.

    Example:
        >>> X = torch.ones(3, 4)
        >>> largest_intermediate(lambda A: A @ A.T, X)  # the (3, 3) product
        9
    """
    with _LargestTensor() as mode:
        fn(*args, **kwargs)
    return mode.largest


def _tiling_inputs(n: int, d: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, d, generator=gen) for _ in range(3))


def tiling_table(
    ns: Sequence[int] = (128, 256, 512, 1024),
    *,
    block_size: int = 64,
    d: int = 32,
    seed: int = 0,
) -> pd.DataFrame:
    """Largest intermediate of the explicit path and of ``tiled_attention``, measured.

    For each ``N``: one head of ``N`` queries, keys and values of width ``d`` (float32),
    the explicit ``Z^-1 A V`` (``attention(..., impl="explicit")``) and
    ``tiled_attention(..., block_size=block_size)``, each watched by
    :func:`largest_intermediate`.

    Args:
        ns: sequence lengths.
        block_size: keys per block of the tiled path.
        d: width of queries, keys and values.
        seed: seed of the draw.

    Returns:
        pd.DataFrame: the largest intermediate of each path in elements and in kB
        (float32, 1 kB = 1,000 bytes, 1 decimal), and their ratio, indexed by ``N``.
    """
    check_positive_int("block_size", block_size)
    rows = {}
    for n in ns:
        Q, K, V = _tiling_inputs(check_positive_int("ns[...]", n), d, seed)
        explicit = largest_intermediate(attention, Q, K, V, impl="explicit")
        tiled = largest_intermediate(tiled_attention, Q, K, V, block_size=block_size)
        rows[n] = {
            "explicit: elements": explicit,
            "tiled: elements": tiled,
            "explicit: kB": round(explicit * 4 / 1000, 1),
            "tiled: kB": round(tiled * 4 / 1000, 1),
            "ratio": round(explicit / tiled, 2),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("N")


def tiling_figure(
    ns: Sequence[int] = (128, 256, 512, 1024),
    *,
    block_size: int = 64,
    d: int = 32,
    seed: int = 0,
) -> go.Figure:
    """The largest intermediate (kB, float32) of both paths against ``N``, log-log.

    Uses :func:`tiling_table`; the reference lines are ``N^2`` and ``N * block_size``
    elements, the sizes of the full logit matrix and of one block of logits.

    Args:
        ns: sequence lengths.
        block_size: keys per block of the tiled path.
        d: width of queries, keys and values.
        seed: seed of the draw.

    Returns:
        go.Figure: two measured traces and two reference lines.
    """
    table = tiling_table(ns, block_size=block_size, d=d, seed=seed)
    x = list(table.index)
    fig = go.Figure()
    for name, col, color, symbol in (
        ("explicit Z⁻¹AV", "explicit", COLORS["reference"], "diamond"),
        (f"tiled, block {block_size}", "tiled", COLORS["main"], "circle"),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded([v * 4 / 1000 for v in table[f"{col}: elements"]], 3),
                mode="markers+lines",
                name=f"{name} (measured)",
                line={"color": color, "width": 2},
                marker={"symbol": symbol, "size": 9},
                hovertemplate=f"{name}<br>N = %{{x}}<br>%{{y:.1f}} kB<extra></extra>",
            )
        )
    for name, sizes, color in (
        ("N² elements", [n * n for n in x], COLORS["reference"]),
        (f"N × {block_size} elements", [n * block_size for n in x], COLORS["main"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded([s * 4 / 1000 for s in sizes], 3),
                mode="lines",
                name=name,
                line={"color": color, "dash": DASHES["marker"], "width": 1},
                hovertemplate=f"{name}<br>N = %{{x}}<br>%{{y:.1f}} kB<extra></extra>",
            )
        )
    fig.update_xaxes(
        type="log",
        title_text="tokens N",
        tickmode="array",
        tickvals=x,
        ticktext=[str(n) for n in x],
    )
    fig.update_yaxes(type="log", title_text="largest intermediate (kB, float32)")
    last = x[-1]
    style(
        fig,
        (
            f"Largest tensor created, one head, d = {d}<br><sup>at N = {last}: "
            f"{table.loc[last, 'ratio']:g}× smaller when tiled</sup>"
        ),
    )
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"}, margin={"b": 120}
    )
    return fig


def io_table(
    ns: Sequence[int] = (1024, 4096, 16384, 131072),
    *,
    d: int = 64,
    block_q: int = 128,
) -> pd.DataFrame:
    """Arithmetic and main-memory traffic of one head of ``N x N`` attention, counted.

    Multiply-adds are ``2 N^2 d`` on both paths (``Q K^T`` and ``P V``). Traffic counts the
    elements read from or written to main memory. The explicit path reads ``Q`` and ``K``,
    writes ``S``, reads it, writes ``P``, reads ``P`` and ``V`` and writes ``Y``:
    ``4 N^2 + 4 N d``. The tiled path keeps a block of ``block_q`` queries on chip and
    streams every key and value past it once per block: ``2 N d + 2 N^2 d / block_q``.

    Args:
        ns: sequence lengths.
        d: head width (queries, keys and values).
        block_q: queries per on-chip block.

    Returns:
        pd.DataFrame: multiply-adds, the traffic of each path, and the traffic ratio,
        indexed by ``N``.
    """
    check_positive_int("d", d)
    check_positive_int("block_q", block_q)
    rows = {}
    for n in ns:
        explicit = 4 * n * n + 4 * n * d
        tiled = 2 * n * d + 2 * n * n * d // block_q
        rows[n] = {
            "multiply-adds (both)": 2 * n * n * d,
            "traffic explicit": explicit,
            "traffic tiled": tiled,
            "traffic ratio": round(explicit / tiled, 2),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("N")


# ---------------------------------------------------------------------------------------
# top-k sparse attention
# ---------------------------------------------------------------------------------------


def _sparse_problem(n: int, d: int, d_index: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Peaked causal attention (logits of standard deviation about 2) and a cheap indexer."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(n, d, generator=gen, dtype=F64) * 1.5
    K = torch.randn(n, d, generator=gen, dtype=F64) * 1.5
    V = torch.randn(n, d, generator=gen, dtype=F64)
    P = torch.randn(d, d_index, generator=gen, dtype=F64)  # the indexer's projection
    return Q, K, V, P


@lru_cache(maxsize=16)
def _topk_rows(ks: tuple[int, ...], n: int, d: int, d_index: int, seed: int) -> dict:
    Q, K, V, P = _sparse_problem(n, d, d_index, seed)
    Y = attention(Q, K, V, causal=True)
    index = (Q @ P) @ (K @ P).T  # (N, N) the cheap scores: d_index multiply-adds each
    visible = [i + 1 for i in range(n)]  # causal: query i sees i + 1 keys
    full = sum(v * 2 * d for v in visible)  # q.k and the weighted sum of v: 2d per key
    rows = {}
    for k in ks:
        err = {}
        for name, scores in (("exact logits", None), ("indexer", index)):
            Y_k = topk_attention(Q, K, V, k, index_scores=scores, causal=True)
            err[name] = float((Y_k - Y).norm() / Y.norm())
        kept = sum(min(k, v) * 2 * d for v in visible)
        indexer = sum(v * d_index for v in visible) + 2 * n * d * d_index
        rows[k] = {
            "error, exact top-k": round(err["exact logits"], 4),
            "error, indexer top-k": round(err["indexer"], 4),
            "cost / full": round((kept + indexer) / full, 4),
        }
    return rows


def topk_table(
    ks: Sequence[int] = TOPK_VALUES,
    *,
    n: int = 128,
    d: int = 16,
    d_index: int = 4,
    seed: int = 0,
) -> pd.DataFrame:
    """Error and cost of causal top-k attention against ``k``.

    One head of ``n`` tokens of width ``d``: queries and keys with entries of standard
    deviation 1.5 (so each row of weights is peaked), values standard normal. The
    selection uses either the exact logits or a cheap indexer, the dot products of
    ``d_index``-dimensional random projections ``(Q P)(K P)^T``. The error is
    ``|Y_k - Y| / |Y|`` (Frobenius) against full causal attention. The cost counts
    multiply-adds: ``2 d`` per kept key, plus ``d_index`` per visible key for the indexer
    and ``2 n d d_index`` for its projections, divided by full attention's ``2 d`` per
    visible key.

    Args:
        ks: keys kept per query.
        n: tokens.
        d: width of queries, keys and values.
        d_index: width of the indexer's projections.
        seed: seed of the draw.

    Returns:
        pd.DataFrame: both errors and the relative cost of the indexer version (4
        decimals), indexed by ``k``.
    """
    for name, value in (("n", n), ("d", d), ("d_index", d_index)):
        check_positive_int(name, value)
    rows = _topk_rows(tuple(check_positive_int("ks[...]", k) for k in ks), n, d, d_index, seed)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("k")


def topk_figure(
    ks: Sequence[int] = TOPK_VALUES,
    *,
    n: int = 128,
    d: int = 16,
    d_index: int = 4,
    seed: int = 0,
) -> go.Figure:
    """Left: output error of top-k attention against ``k``. Right: its cost.

    The data are :func:`topk_table`'s; both x axes are logarithmic.

    Args:
        ks: keys kept per query.
        n: tokens.
        d: width of queries, keys and values.
        d_index: width of the indexer's projections.
        seed: seed of the draw.

    Returns:
        go.Figure: three traces (two errors, one cost).
    """
    table = topk_table(ks, n=n, d=d, d_index=d_index, seed=seed)
    x = list(table.index)
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.14,
        subplot_titles=("relative error of Y", "multiply-adds / full attention"),
    )
    _error_curves(
        fig, table, "k",
        (("error, exact top-k", COLORS["main"], "solid", "circle"),
         ("error, indexer top-k", OKABE_ITO["orange"], "dot", "square")),
        rename=("error, ", ""), col=1, marker_size=8,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=rounded(list(table["cost / full"]), 4),
            mode="lines+markers",
            name=f"cost with a {d_index}-dim indexer",
            showlegend=True,
            line={"color": COLORS["reference"], "width": 2},
            marker={"symbol": "diamond", "size": 8},
            hovertemplate="k = %{x}<br>cost %{y:.4f} of full<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_hline(
        y=1, line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1}, row=1, col=2
    )
    for c in (1, 2):
        _log_x(fig, x, "keys kept per query, k", col=c)
    fig.update_yaxes(type="log", row=1, col=1)
    return _two_panel_style(
        fig,
        f"Causal top-k attention, N = {n}, d = {d}<br><sup>the error reaches 0 only "
        f"at k = N; dashed: the cost of full attention</sup>",
        bottom=120,
    )


def _error_curves(
    fig: go.Figure,
    table: pd.DataFrame,
    x_name: str,
    looks: Sequence[tuple[str, str, str, str]],
    *,
    rename: tuple[str, str],
    col: int,
    marker_size: int | None = None,
) -> None:
    """One line per column of ``table`` (looks: column, colour, dash, symbol) against its index."""
    x = list(table.index)
    for column, color, dash, symbol in looks:
        marker = {"symbol": symbol} if marker_size is None else {"symbol": symbol,
                                                                  "size": marker_size}
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded(list(table[column]), 4),
                mode="lines+markers",
                name=column.replace(*rename),
                line={"color": color, "dash": dash, "width": 2},
                marker=marker,
                hovertemplate=f"{column}<br>{x_name} = %{{x}}<br>%{{y:.4f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )


def _log_x(fig: go.Figure, ticks: Sequence[int], title: str, *, col: int) -> None:
    """A logarithmic x axis in panel ``col`` with one labelled tick per value of ``ticks``."""
    fig.update_xaxes(type="log", title_text=title, tickmode="array", tickvals=list(ticks),
                     ticktext=[str(t) for t in ticks], row=1, col=col)


def _two_panel_style(fig: go.Figure, title: str, *, bottom: int) -> go.Figure:
    """The common style of the chapter's two-panel figures, legend in a row below them."""
    style(fig, title, height=HEIGHT + 40)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
                      margin={"t": 110, "b": bottom})
    return fig


# ---------------------------------------------------------------------------------------
# random features
# ---------------------------------------------------------------------------------------

_RF_N, _RF_D, _RF_DRAWS, _RF_SIGMA = 16, 8, 100, 0.5


def _rf_problem(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(_RF_N, _RF_D, generator=gen, dtype=F64) * _RF_SIGMA
    K = torch.randn(_RF_N, _RF_D, generator=gen, dtype=F64) * _RF_SIGMA
    V = torch.randn(_RF_N, _RF_D, generator=gen, dtype=F64)
    return Q, K, V


def _rf_estimates(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    r: int,
    orthogonal: bool,
    draws: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``draws`` estimates of ``A`` and of ``Y``, from consecutive groups of ``r`` columns.

    One projection of ``draws * r`` columns is drawn and cut into groups of ``r``; each
    group is a projection with the right distribution (for orthogonal features with
    ``r < d``, a group is part of one orthogonal block).
    """
    Omega = gaussian_features(_RF_D, draws * r, orthogonal=orthogonal, generator=gen, dtype=F64)
    root = _RF_D**-0.25  # sqrt(scale), scale = 1 / sqrt(d)
    fq = positive_random_features(Q * root, Omega) * math.sqrt(draws)  # 1/sqrt(r) per group
    fk = positive_random_features(K * root, Omega) * math.sqrt(draws)
    fq, fk = fq.reshape(_RF_N, draws, r), fk.reshape(_RF_N, draws, r)
    A_hat = torch.einsum("idr,jdr->dij", fq, fk)  # (draws, N, N)
    Y_hat = A_hat @ V / A_hat.sum(dim=-1, keepdim=True)  # Z^-1 A V with each estimate
    return A_hat, Y_hat


@lru_cache(maxsize=64)
def _feature_error(r: int, orthogonal: bool, seed: int) -> tuple[float, float]:
    Q, K, V = _rf_problem(seed)
    A = torch.exp(Q @ K.T / math.sqrt(_RF_D))
    Y = attention(Q, K, V)
    gen = torch.Generator().manual_seed(seed + 1)
    A_hat, Y_hat = _rf_estimates(Q, K, V, r, orthogonal, _RF_DRAWS, gen)
    err_A = (A_hat - A).flatten(1).norm(dim=-1) / A.norm()  # (draws,)
    err_Y = (Y_hat - Y).flatten(1).norm(dim=-1) / Y.norm()
    return float(err_A.mean()), float(err_Y.mean())


def feature_errors(rs: Sequence[int] = FEATURE_COUNTS, *, seed: int = 0) -> pd.DataFrame:
    """Mean relative error of Performer's estimate of ``A`` and of ``Y`` against ``r``.

    One head of 16 queries, keys and values of width 8 (queries and keys with entries of
    standard deviation 0.5, values standard normal), and 100 draws
    of ``Omega`` per setting, i.i.d. or block-orthogonal
    (:func:`attnlib.analysis.approx.gaussian_features`). Errors are Frobenius norms relative to the
    exact ``A = exp(Q K^T / sqrt(d))`` and ``Y = attention(Q, K, V)``.

    Args:
        rs: feature counts.
        seed: seed of the problem (the draws use ``seed + 1``).

    Returns:
        pd.DataFrame: four columns of mean errors (4 decimals) and ``sqrt(r)`` times the
        i.i.d. error of ``A``, indexed by ``r``.
    """
    rows = {}
    for r in rs:
        r = check_positive_int("rs[...]", r)
        iid_A, iid_Y = _feature_error(r, False, seed)
        orth_A, orth_Y = _feature_error(r, True, seed)
        rows[r] = {
            "error of A, i.i.d.": round(iid_A, 4),
            "error of A, orthogonal": round(orth_A, 4),
            "error of Y, i.i.d.": round(iid_Y, 4),
            "error of Y, orthogonal": round(orth_Y, 4),
            "√r × error of A, i.i.d.": round(math.sqrt(r) * iid_A, 3),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("r")


def feature_count_figure(r: int = 16, orthogonal: bool = False, *, seed: int = 0) -> go.Figure:
    """The explorer: Performer's kernel estimate for ``r`` features, and its error against ``r``.

    Left: every entry of one estimate ``A_hat`` (one draw of ``Omega``) against the exact
    ``A = exp(Q K^T / sqrt(d))``; a perfect estimate lies on the diagonal. Right: the mean
    relative error of ``Y`` over 100 draws against ``r`` (:func:`feature_errors`) for i.i.d.
    and orthogonal features, the curve ``c / sqrt(r)`` through the i.i.d. error at
    ``r = 1``, and a marker at the chosen ``r``; the title gives its error.

    Args:
        r: number of random features, one of :data:`FEATURE_COUNTS` for the right panel.
        orthogonal: draw block-orthogonal features.
        seed: seed of the problem.

    Returns:
        go.Figure: a scatter of ``N^2`` points and four curves.
    """
    r = check_positive_int("r", r)
    check_bool("orthogonal", orthogonal)
    Q, K, V = _rf_problem(seed)
    A = torch.exp(Q @ K.T / math.sqrt(_RF_D))
    A_hat = _rf_estimates(Q, K, V, r, orthogonal, 1, torch.Generator().manual_seed(seed))[0][0]
    table = feature_errors(FEATURE_COUNTS, seed=seed)
    kind = "orthogonal" if orthogonal else "i.i.d."
    err_Y = _feature_error(r, orthogonal, seed)[1]
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.14,
        subplot_titles=(
            f"one estimate, r = {r}: entries of A",
            "mean relative error of Y (100 draws)",
        ),
    )
    top = float(max(A.max(), A_hat.max()))
    fig.add_trace(
        go.Scatter(
            x=[0, round(top, 3)],
            y=[0, round(top, 3)],
            mode="lines",
            name="exact = estimate",
            line={"color": COLORS["marker"], "dash": DASHES["marker"], "width": 1},
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=rounded(A.flatten(), 3),
            y=rounded(A_hat.flatten(), 3),
            mode="markers",
            name=f"entries of A_hat ({kind})",
            marker={"color": COLORS["main"], "size": 5, "opacity": 0.6},
            hovertemplate="exact %{x:.3f}<br>estimate %{y:.3f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    rs = list(table.index)
    _error_curves(
        fig, table, "r",
        (("error of Y, i.i.d.", COLORS["main"], "solid", "circle"),
         ("error of Y, orthogonal", OKABE_ITO["bluish green"], "dot", "square")),
        rename=("error of Y, ", "mean error, "), col=2,
    )
    c = float(table.loc[rs[0], "error of Y, i.i.d."]) * math.sqrt(rs[0])
    fig.add_trace(
        go.Scatter(
            x=rs,
            y=rounded([c / math.sqrt(x) for x in rs], 4),
            mode="lines",
            name="c / √r",
            line={"color": COLORS["reference"], "dash": DASHES["marker"], "width": 1},
            hoverinfo="skip",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Scatter(
            x=[r],
            y=[round(err_Y, 4)],
            mode="markers",
            name=f"r = {r}",
            showlegend=False,
            marker={
                "color": COLORS["marker"],
                "size": 14,
                "symbol": "circle-open",
                "line": {"width": 2},
            },
            hovertemplate="r = %{x}<br>error %{y:.4f}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="exact exp(q·k/√d)", row=1, col=1)
    fig.update_yaxes(title_text="estimate φ(q)·φ(k)", row=1, col=1)
    _log_x(fig, rs, "features r", col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    return _two_panel_style(
        fig,
        f"Positive random features, r = {r} ({kind})<br><sup>mean relative error of "
        f"Y: {err_Y:.4f}; dashed: c/√r, the rate of each entry's standard deviation</sup>",
        bottom=130,
    )


# ---------------------------------------------------------------------------------------
# attention sinks, and usable context
# ---------------------------------------------------------------------------------------


def sink_table(
    tolerances: Sequence[float] = (0.1, 0.03, 0.01),
    *,
    n: int = 16,
    n_idle: int = 12,
    n_active: int = 4,
    d: int = 8,
    seed: int = 0,
) -> pd.DataFrame:
    """The share of attention on token 0 a head needs to output (almost) nothing.

    A sequence of ``n`` tokens whose token 0 has the value 0 (a "beginning" token that
    carries nothing), and random keys and values elsewhere. ``n_idle`` queries must output
    a vector of norm at most ``eps`` (they have nothing to read); ``n_active`` queries read
    one content token each (their logit to it is raised by 6). Without a gate, an idle
    query can only shrink its output by moving weight onto token 0: its logit to token 0
    gets the smallest bias ``b`` with ``(1 - p_0) |y_content| <= eps``. With the output gate
    of :func:`attnlib.layers.gates.output_gate` the logits stay as drawn and the gate is set to
    ``eps / |y|`` instead. No parameter is trained: each is solved for in closed form.

    Args:
        tolerances: the values of ``eps``.
        n: tokens, including token 0.
        n_idle: queries that must output (almost) zero.
        n_active: queries that read a content token.
        d: width of queries, keys and values.
        seed: seed of the draw.

    Returns:
        pd.DataFrame: the mean share of attention on token 0 over all queries, without
        and with the gate, and the idle queries' largest output norm with the gate (4
        decimals), indexed by ``eps``.
    """
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(n_idle + n_active, d, generator=gen, dtype=F64)
    K = torch.randn(n, d, generator=gen, dtype=F64)
    V = torch.randn(n, d, generator=gen, dtype=F64)
    V[0] = 0.0  # token 0 carries nothing
    S = Q @ K.T / math.sqrt(d)  # (N_Q, N) logits as drawn
    targets = torch.arange(n_active) % (n - 1) + 1
    S[n_idle + torch.arange(n_active), targets] += 6.0  # active queries find their token
    P = torch.softmax(S, dim=-1)
    Y = P @ V  # (N_Q, d)
    content = torch.softmax(S[:n_idle, 1:], dim=-1) @ V[1:]  # idle rows: mean of the content
    rows = {}
    for eps in tolerances:
        # without a gate: p_0 = 1 - eps / |content|, reached by a bias on the logit of token 0
        p0 = (1 - eps / content.norm(dim=-1)).clamp(min=0)  # (n_idle,)
        b = torch.log(p0 / (1 - p0)) + torch.logsumexp(S[:n_idle, 1:], dim=-1) - S[:n_idle, 0]
        S_sink = S.clone()
        S_sink[:n_idle, 0] += b.clamp(min=0)
        P_sink = torch.softmax(S_sink, dim=-1)
        # with a gate: logits unchanged, the gate of each idle query set to eps / |y|
        gate_logit = torch.zeros(n_idle + n_active, 1, dtype=F64)
        gate_logit[:n_idle, 0] = torch.logit(eps / Y[:n_idle].norm(dim=-1))
        gate_logit[n_idle:, 0] = 20.0  # active queries: gate open
        Y_gated = output_gate(Y, gate_logit, torch.ones(1, d, dtype=F64))
        rows[eps] = {
            "share on token 0, no gate": round(float(P_sink[:, 0].mean()), 4),
            "share on token 0, gated": round(float(P[:, 0].mean()), 4),
            "largest idle |y|, gated": round(float(Y_gated[:n_idle].norm(dim=-1).max()), 4),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("tolerance eps")


def needle_table(
    ns: Sequence[int] = (4096, 32768, 131072, 1048576), *, gap: float = 10.0
) -> pd.DataFrame:
    """The weight on one relevant key whose logit exceeds ``N - 1`` others by ``gap``.

    ``p = e^gap / (e^gap + N - 1)``, and the gap needed for ``p = 1/2`` is ``ln(N - 1)``.

    Args:
        ns: numbers of keys.
        gap: logit advantage of the relevant key.

    Returns:
        pd.DataFrame: the weight (4 decimals) and the gap needed for one half (2
        decimals), indexed by ``N``.
    """
    rows = {}
    for n in ns:
        p = math.exp(gap) / (math.exp(gap) + n - 1)
        rows[n] = {
            f"weight on the needle, gap {gap:g}": round(p, 4),
            "gap needed for weight 0.5": round(math.log(n - 1), 2),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("N")


def first_token_table(models: dict[str, torch.nn.Module], ids: torch.Tensor) -> pd.DataFrame:
    """The share of attention on position 0, layer by layer, in trained decoders.

    For each model, :func:`attnlib.models.probes.first_token_share` on ``ids`` (in float64, so the
    numbers are the same on every CPU): the mean over heads of the weight that queries
    ``1 .. N-1`` put on position 0, and the largest share of any one head. An attention sink
    shows as a share far above :func:`attnlib.models.probes.uniform_first_token_share`.

    Args:
        models: trained decoders by name, e.g. ``{"book": attnlib.models.pretrained.load("book")}``.
        ids: ``(B, N)`` token ids, e.g. held-out text.

    Returns:
        pd.DataFrame: two columns per model (4 decimals), indexed by layer.
    """
    from attnlib.models.probes import first_token_share

    columns = {}
    for name, model in models.items():
        share = first_token_share(model, ids)  # (n_layers, n_heads)
        columns[f"{name}: mean over heads"] = share.mean(dim=-1).numpy().round(4)
        columns[f"{name}: largest head"] = share.amax(dim=-1).numpy().round(4)
    return pd.DataFrame(columns).rename_axis("layer")
