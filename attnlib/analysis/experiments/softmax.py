"""The experiments of lesson 02 as tables: the spread of the logits, saturation, temperature.

Random queries and keys have i.i.d. standard normal entries, drawn in float64 on the CPU
from ``torch.Generator().manual_seed(seed)`` (queries first, then keys), so a reader can
redraw exactly what a table shows. The figures of :mod:`attnlib.viz.softmax` draw the same
numbers.

Lesson: 02_softmax_attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import torch

from attnlib._checks import check_positive_float, check_positive_int
from attnlib.core.functional import attention, attention_weights

__all__ = [
    "D_MAX", "MEAN_MAX", "MEDIAN_GAIN", "SATURATION_DIMS", "SCALED", "UNSCALED", "dot_products",
    "draw_queries_keys", "entropy", "saturation_stats", "saturation_table", "softmax_jacobian",
    "temperature_table", "variance_table", "weight_row_table",
]


D_MAX = 1024
"""Widest query and key the explorer draws; narrower ones are prefixes of the same draw."""

SATURATION_DIMS: tuple[int, ...] = (2, 8, 32, 128, 512, 2048)
"""The widths ``d_QK`` of the saturation figure and table."""

SCALED = "with 1/√d_QK"

UNSCALED = "without 1/√d_QK"

MEAN_MAX = "mean largest weight"

MEDIAN_GAIN = "median gain ||J||"


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


def draw_queries_keys(n_q: int, n_kv: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``Q`` (n_q, d) then ``K`` (n_kv, d), i.i.d. standard normal, float64, CPU."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(n_q, d, generator=gen, dtype=torch.float64)
    K = torch.randn(n_kv, d, generator=gen, dtype=torch.float64)
    return Q, K


def entropy(P: torch.Tensor) -> torch.Tensor:
    """``H(p) = -sum_j p_j ln p_j`` in nats, with ``0 ln 0 = 0``."""
    return -torch.where(P > 0, P * P.log(), 0.0).sum(dim=-1)


def dot_products(d_qk: int, n_pairs: int, seed: int) -> torch.Tensor:
    """``<q_n, k_n>`` for ``n_pairs`` independent pairs of random vectors of width d_QK."""
    q, k = draw_queries_keys(n_pairs, n_pairs, d_qk, seed)
    return (q * k).sum(dim=-1)  # (n_pairs,)


def variance_table(
    dims: Sequence[int], *, n_pairs: int = 10_000, seed: int = 0
) -> pd.DataFrame:
    """The spread of ``<q, k>`` and of ``<q, k> / √d_QK``, one row per width ``d_QK``.

    Each row uses the draw of :func:`~attnlib.viz.softmax.logit_histogram_figure` with the
    same ``n_pairs`` and ``seed``.

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
        dots = dot_products(d, n_pairs, seed)
        rows[d] = {
            "var <q, k>": round(float(dots.var()), 1),
            "std <q, k>": round(float(dots.std()), 3),
            "sqrt(d_QK)": round(math.sqrt(d), 3),
            "std <q, k>/sqrt(d_QK)": round(float(dots.std()) / math.sqrt(d), 3),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("d_QK")


@lru_cache(maxsize=8)
def saturation_stats(
    dims: tuple[int, ...], n_kv: int, n_queries: int, seed: int
) -> dict[int, dict[tuple[str, str], float]]:
    """Mean largest weight and median gradient gain, with and without the scaling."""
    check_positive_int("n_kv", n_kv)
    check_positive_int("n_queries", n_queries)
    out = {}
    for d in dims:
        check_positive_int("dims[...]", d)
        Q, K = draw_queries_keys(n_queries, n_kv, d, seed)
        row = {}
        for label, scale in ((SCALED, None), (UNSCALED, 1.0)):
            P = attention_weights(Q, K, scale=scale)  # (n_queries, n_kv)
            gain = torch.linalg.eigvalsh(softmax_jacobian(P))[..., -1]  # largest eigenvalue
            row[label, MEAN_MAX] = float(P.amax(dim=-1).mean())
            row[label, MEDIAN_GAIN] = float(gain.median())
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
    stats = saturation_stats(tuple(dims), n_kv, n_queries, seed)
    rows = {d: {k: (round(v, 3) if k[1] == MEAN_MAX else f"{v:.3g}")
                for k, v in row.items()} for d, row in stats.items()}
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("d_QK")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


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
        row["entropy (nats)"] = round(float(entropy(p)), 4)
        row["y"] = round(y, 4)
        rows[tau] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("tau")


def weight_row_table(
    settings: Sequence[tuple[float, int]], *, n_kv: int = 12, seed: int = 0
) -> pd.DataFrame:
    """The numbers :func:`~attnlib.viz.softmax.weight_row_figure` annotates, one row per
    setting ``(tau, d_QK)``.

    Args:
        settings: pairs ``(tau, d_qk)``, as on the twin's slider.
        n_kv: the number of keys.
        seed: seed of the generator (the figure's draw).

    Returns:
        pd.DataFrame: two column groups (with and without ``1/√d_QK``), each with the
        largest weight and the entropy in nats (3 decimals), indexed by ``(tau, d_QK)``.
    """
    check_positive_int("n_kv", n_kv)
    q_full, K_full = draw_queries_keys(1, n_kv, D_MAX, seed)
    rows = {}
    for tau, d_qk in settings:
        tau = check_positive_float("tau", tau)
        check_positive_int("d_qk", d_qk)
        if d_qk > D_MAX:
            raise ValueError(f"d_qk must be at most D_MAX = {D_MAX}; got {d_qk}")
        q, K = q_full[:, :d_qk], K_full[:, :d_qk]
        row = {}
        for label, scale in ((SCALED, 1.0 / (tau * math.sqrt(d_qk))), (UNSCALED, 1.0 / tau)):
            p = attention_weights(q, K, scale=scale)[0]
            row[label, "largest weight"] = round(float(p.max()), 3)
            row[label, "entropy (nats)"] = round(float(entropy(p)), 3)
        rows[tau, d_qk] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    table.index = pd.MultiIndex.from_tuples(table.index, names=["tau", "d_QK"])
    return table
