"""The experiments of lesson 09 (the frontier) as tables: tiling, top-k, features, sinks.

Every draw is seeded, in float64 on the CPU, so the numbers are the same on any machine:

* tiling: :func:`largest_intermediate` records the largest tensor any operation creates
  (a ``TorchDispatchMode``), an exact, machine-independent measure of peak working memory;
  :func:`tiling_table` compares the explicit path with ``attnlib.tiled_attention``, and
  :func:`io_table` counts arithmetic and main-memory traffic;
* sparse attention: :func:`topk_table` measures the error and the cost of top-k attention
  with exact and with cheap indexer scores;
* random features: :func:`feature_errors`;
* attention sinks: :func:`sink_table`; usable context: :func:`needle_table`.

The figures of :mod:`attnlib.viz.frontier` draw the same numbers.

Lesson: 09_frontier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnlib._checks import check_positive_int
from attnlib.analysis.approx import gaussian_features, positive_random_features, topk_attention
from attnlib.analysis.flash import tiled_attention
from attnlib.core.functional import attention
from attnlib.layers.gates import output_gate

__all__ = [
    "F64", "FEATURE_COUNTS", "TOPK_VALUES", "feature_error", "feature_errors", "io_table",
    "largest_intermediate", "needle_table", "rf_estimates", "rf_problem", "sink_table",
    "tiling_table", "topk_table",
]


FEATURE_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The feature counts ``r`` of the explorer."""

TOPK_VALUES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
"""The values of ``k`` of the sparse-attention table and figure."""

F64 = torch.float64


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


# The random-feature problem: N queries and keys of width d, scaled by sigma; draws per width.
RF_N, RF_D, RF_DRAWS, RF_SIGMA = 16, 8, 100, 0.5


def rf_problem(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(RF_N, RF_D, generator=gen, dtype=F64) * RF_SIGMA
    K = torch.randn(RF_N, RF_D, generator=gen, dtype=F64) * RF_SIGMA
    V = torch.randn(RF_N, RF_D, generator=gen, dtype=F64)
    return Q, K, V


def rf_estimates(
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
    Omega = gaussian_features(RF_D, draws * r, orthogonal=orthogonal, generator=gen, dtype=F64)
    root = RF_D**-0.25  # sqrt(scale), scale = 1 / sqrt(d)
    fq = positive_random_features(Q * root, Omega) * math.sqrt(draws)  # 1/sqrt(r) per group
    fk = positive_random_features(K * root, Omega) * math.sqrt(draws)
    fq, fk = fq.reshape(RF_N, draws, r), fk.reshape(RF_N, draws, r)
    A_hat = torch.einsum("idr,jdr->dij", fq, fk)  # (draws, N, N)
    Y_hat = A_hat @ V / A_hat.sum(dim=-1, keepdim=True)  # Z^-1 A V with each estimate
    return A_hat, Y_hat


@lru_cache(maxsize=64)
def feature_error(r: int, orthogonal: bool, seed: int) -> tuple[float, float]:
    Q, K, V = rf_problem(seed)
    A = torch.exp(Q @ K.T / math.sqrt(RF_D))
    Y = attention(Q, K, V)
    gen = torch.Generator().manual_seed(seed + 1)
    A_hat, Y_hat = rf_estimates(Q, K, V, r, orthogonal, RF_DRAWS, gen)
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
        iid_A, iid_Y = feature_error(r, False, seed)
        orth_A, orth_Y = feature_error(r, True, seed)
        rows[r] = {
            "error of A, i.i.d.": round(iid_A, 4),
            "error of A, orthogonal": round(orth_A, 4),
            "error of Y, i.i.d.": round(iid_Y, 4),
            "error of Y, orthogonal": round(orth_Y, 4),
            "√r × error of A, i.i.d.": round(math.sqrt(r) * iid_A, 3),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("r")


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
