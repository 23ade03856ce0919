"""Figures of lesson 10 (randomised attention), and the tables on a trained model.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`proposal_figure` is the lesson's explorer. The estimators'
experiments and their tables are in :mod:`attnlib.analysis.experiments.randomised`;
:func:`trained_heads` and :func:`trained_product_table` read the trained ``book`` model.

Lesson: 10_randomised_attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_choice, check_positive_int
from attnlib.analysis.experiments.randomised import (
    F64,
    PROPOSALS,
    QUERY,
    SAMPLE_COUNTS,
    error_curves,
    head_of,
    one_thread,
    proposals_of,
)
from attnlib.analysis.randomised import (
    product_probabilities,
    sampled_product,
    sampled_product_mse,
)
from attnlib.core.functional import attention_weights
from attnlib.core.heads import repeat_kv, split_heads
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = ["TRAINED_MODEL", "proposal_figure", "trained_heads", "trained_product_table"]


# Each proposal's error curve in proposal_figure: its own colour (all opaque, none of the
# palette's pale ones) and its own marker, so that colour is not the only signal.
_PROPOSAL_COLORS: dict[str, str] = {
    "attention weights": COLORS["main"],
    "uniform": OKABE_ITO["bluish green"],
    "key norms": OKABE_ITO["reddish purple"],
    "sketch": OKABE_ITO["black"],
}

_PROPOSAL_SYMBOLS: dict[str, str] = {
    "attention weights": "circle",
    "uniform": "square",
    "key norms": "triangle-up",
    "sketch": "diamond",
}


# ---------------------------------------------------------------------------------------
# attention as an expectation: proposals, errors, bounds
# ---------------------------------------------------------------------------------------


def proposal_figure(
    proposal: str = "sketch", m: int = 16, sharpness: str = "peaked"
) -> go.Figure:
    """The explorer: one query's weights and a proposal, and the error against ``m`` and the bound.

    Left: the 32 largest weights ``P_0j`` of query 0 (bars, keys sorted by weight) and the
    proposal ``rho_0j`` on the same keys (markers), with its ESS per sample. Right: the
    root-mean-square error of importance sampling against ``m`` (200 draws per point) for
    every proposal, the chosen one bold with its first-order curve and its bound, and a
    circle at the chosen ``m``.

    Args:
        proposal: one of :data:`PROPOSALS`.
        m: samples, one of :data:`SAMPLE_COUNTS`.
        sharpness: ``"flat"`` or ``"peaked"``.

    Returns:
        go.Figure.
    """
    check_choice("proposal", proposal, PROPOSALS)
    check_choice("m", m, SAMPLE_COUNTS)
    Q, K, _, _ = head_of(sharpness)
    P = attention_weights(Q[QUERY : QUERY + 1], K)[0]
    rho = proposals_of(sharpness)[proposal][QUERY]
    order = torch.argsort(P, descending=True, stable=True)[:32]
    curves = {p: error_curves(sharpness, p, SAMPLE_COUNTS, 200) for p in PROPOSALS}
    mse, first, bound, ess = curves[proposal]
    k = SAMPLE_COUNTS.index(m)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        f"query {QUERY}: its 32 largest weights", "error of y_hat against m (200 draws)"))
    fig.add_trace(go.Bar(x=list(range(32)), y=rounded(P[order], digits=4), name="weights P_0j",
                         marker={"color": COLORS["main"]},
                         hovertemplate="rank %{x}<br>P = %{y:.4f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=list(range(32)), y=rounded(rho[order], digits=4), mode="markers",
                             name=f"proposal ρ ({proposal})",
                             marker={"color": OKABE_ITO["orange"], "symbol": "diamond", "size": 9,
                                     "line": {"color": OKABE_ITO["black"], "width": 1}},
                             hovertemplate="rank %{x}<br>ρ = %{y:.4f}<extra></extra>"),
                  row=1, col=1)
    for name, (errs, _, _, _) in curves.items():
        chosen = name == proposal  # every curve opaque in its own colour; the chosen one bold
        fig.add_trace(go.Scatter(
            x=list(SAMPLE_COUNTS), y=rounded([math.sqrt(e) for e in errs], digits=4),
            mode="lines+markers", name=f"measured, {name}",
            line={"color": _PROPOSAL_COLORS[name], "width": 4 if chosen else 2},
            marker={"symbol": _PROPOSAL_SYMBOLS[name], "size": 10 if chosen else 7},
            hovertemplate=f"{name}<br>m = %{{x}}<br>rms error %{{y:.4f}}<extra></extra>"),
            row=1, col=2)
    for values, label, dash in ((first, "first order", DASHES["held-out"]),
                                (bound, "bound", DASHES["marker"])):
        fig.add_trace(go.Scatter(
            x=list(SAMPLE_COUNTS), y=rounded([math.sqrt(v) for v in values], digits=4),
            mode="lines", name=f"{label}, {proposal}",
            line={"color": COLORS["reference"], "dash": dash, "width": 2},
            hoverinfo="skip"), row=1, col=2)
    fig.add_trace(go.Scatter(x=[m], y=[rounded(math.sqrt(mse[k]), digits=4)], mode="markers",
                             showlegend=False, hovertemplate="m = %{x}<br>%{y:.4f}<extra></extra>",
                             marker={"color": COLORS["marker"], "size": 14,
                                     "symbol": "circle-open", "line": {"width": 2}}),
                  row=1, col=2)
    fig.update_xaxes(title_text="keys, by weight", row=1, col=1)
    fig.update_yaxes(title_text="weight", row=1, col=1)
    fig.update_xaxes(type="log", title_text="samples m", tickmode="array",
                     tickvals=list(SAMPLE_COUNTS), ticktext=[str(s) for s in SAMPLE_COUNTS],
                     row=1, col=2)
    fig.update_yaxes(type="log", title_text="rms |y_hat - y|", row=1, col=2)
    style(fig, f"{sharpness} head, {proposal}, m = {m}: ESS = {ess * m:.2f} of {m} draws<br>"
               f"<sup>rms error {math.sqrt(mse[k]):.3f}; bound {math.sqrt(bound[k]):.3f}</sup>",
          height=HEIGHT + 60)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.25, "yanchor": "top"},
                      margin={"t": 110, "b": 150})
    return fig


TRAINED_MODEL = "book"
"""The trained model whose attention :func:`trained_product_table` samples
(:func:`attnlib.models.pretrained.load`): four layers of four heads over the book's own text."""


@lru_cache(maxsize=1)
def _trained_heads() -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    from attnlib.models import pretrained, probes, tasks  # loaded on first use: they read weights

    model = pretrained.load(TRAINED_MODEL).to(F64)
    ids, _ = tasks.book_held_out(n_tokens=128, n_windows=1)  # (1, N) held-out characters
    maps = probes.attention_maps(model, ids, dtype=None)
    heads = []
    with torch.no_grad():
        h = model.E[ids]  # the residual stream, walked block by block (pre-norm blocks)
        for block, P in zip(model.blocks, maps, strict=True):
            attn = block.attn
            X = block.attn_norm(h)  # what the block hands its attention
            V = repeat_kv(split_heads(X @ attn.W_V, attn.n_kv_heads), attn.n_heads)
            heads.append((P[0], V[0]))  # (H, N, N), (H, N, d_head)
            h = block(h, causal=True)
    return tuple(heads)


def trained_heads() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's weights ``P`` and values ``V`` in the trained model, on held-out text.

    The model :data:`TRAINED_MODEL` runs in float64 on the first 128 characters of the
    held-out part of its corpus (:func:`attnlib.models.tasks.book_held_out`); ``P`` comes from
    :func:`attnlib.models.probes.attention_maps` and ``V_h = X W_V^h`` from the input ``X`` of
    each attention sublayer, so ``P_h V_h`` is head ``h``'s output before ``W_O``.

    Returns:
        list of ``(P (H, N, N), V (H, N, d_head))``, one per layer (copies).
    """
    return [(P.clone(), V.clone()) for P, V in _trained_heads()]


@lru_cache(maxsize=4)
@one_thread
def _trained_rows(ms: tuple[int, ...], draws: int) -> dict:
    rows = {}
    for layer, (P, V) in enumerate(_trained_heads()):
        H, n = P.shape[0], P.shape[-1]
        Y = P @ V  # (H, N, d_head): every head's output
        norm = float(Y.norm())
        probs = {"optimal": product_probabilities(P, V),  # (H, N): one distribution per head
                 "uniform": torch.full((H, n), 1.0 / n, dtype=F64)}
        for m in ms:
            row: dict[str, float | int] = {"draws": draws}
            for name, rho in probs.items():
                gen = torch.Generator().manual_seed(3000 + 100 * layer + m)
                est = sampled_product(P.expand(draws, H, n, n), V, m, probs=rho, generator=gen)
                measured = float((est - Y).pow(2).sum(dim=(-3, -2, -1)).mean().sqrt()) / norm
                row[f"{name}: measured"] = round(measured, 3)
                row[f"{name}: formula"] = round(
                    float(sampled_product_mse(P, V, m, probs=rho).sum().sqrt()) / norm, 3)
            bound = (P.norm(dim=(-2, -1)) * V.norm(dim=(-2, -1))).pow(2).sum().sqrt()
            row["bound |P| |V| / √m"] = round(float(bound) / math.sqrt(m) / norm, 3)
            rows[(layer, m)] = row
    return rows


def trained_product_table(ms: Sequence[int] = (8, 32), *, draws: int = 200) -> pd.DataFrame:
    """Column sampling of ``Y_h = P_h V_h`` in every layer of the trained model.

    For each layer of :func:`trained_heads` and each ``m``, ``draws`` estimates by
    :func:`attnlib.analysis.randomised.sampled_product`, each head sampling ``m`` of its ``N``
    keys for all of its queries, with the optimal probabilities of each head and with
    uniform ones. Root-mean-square errors of the layer's heads together, relative to
    ``(sum_h |P_h V_h|_F^2)^{1/2}``, measured and from
    :func:`attnlib.analysis.randomised.sampled_product_mse`, and the bound
    ``(sum_h |P_h|_F^2 |V_h|_F^2 / m)^{1/2}`` of the optimal probabilities (3 decimals).

    Args:
        ms: keys sampled per head.
        draws: estimates per setting.

    Returns:
        pd.DataFrame indexed by (layer, ``m``).
    """
    check_positive_int("draws", draws)
    rows = _trained_rows(tuple(check_positive_int("ms[...]", m) for m in ms), draws)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["layer", "m"])
