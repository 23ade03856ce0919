"""The experiments of lesson 10 (randomised attention) as tables: estimators against their bounds.

All draws are seeded and made in float64 on the CPU, and the tables print statistical
summaries over many draws at digits that are the same on any machine.

* the toy: :func:`retrieval_head`, self-attention in which each token looks for one other;
* attention as an expectation: :func:`importance_table`, :func:`proposal_errors`,
  :func:`sampling_topk_table`;
* column sampling: :func:`product_table`;
* sketching the logits: :func:`sketch_table`, :func:`select_weight_table`;
* low rank: :func:`sequence_rank_table`, :func:`structure_table`, :func:`svd_table`;
* random features as a ratio estimator: :func:`feature_bias_table`;
* the chapter's summary: :func:`estimator_table`.

The figures of :mod:`attnlib.viz.randomised` draw the same numbers; the tables on a trained
model are :func:`attnlib.viz.randomised.trained_product_table`.

Lesson: 10_randomised_attention.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import pandas as pd
import torch

from attnlib._checks import check_choice, check_positive_int
from attnlib.analysis.approx import gaussian_features, positive_random_features, topk_attention
from attnlib.analysis.randomised import (
    gaussian_sketch,
    importance_attention,
    linformer_attention,
    multiply_adds,
    norm_proposal,
    nystrom_attention,
    product_probabilities,
    randomised_svd,
    sampled_product,
    sampled_product_mse,
    sampling_variance,
    sketch_attention,
    sketch_proposal,
    sketched_logits,
)
from attnlib.core.functional import attention, attention_weights
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.mla import mla_from_mha

__all__ = [
    "F64", "PROPOSALS", "QUERY", "SAMPLE_COUNTS", "SHARPNESS", "SKETCH_WIDTH", "error_curves",
    "estimator_table", "feature_bias_table", "feature_head", "head_of", "importance_bound",
    "importance_table", "one_thread", "product_table", "proposal_errors", "proposals",
    "proposals_of", "retrieval_head", "sampling_topk_table", "select_weight_table",
    "sequence_rank_table", "sketch_table", "structure_table", "svd_table",
]


F64 = torch.float64

SHARPNESS: dict[str, float] = {"flat": 1.0, "peaked": 8.0}
"""The two heads of the lesson: the factor ``beta`` on the queries of :func:`retrieval_head`."""

PROPOSALS: tuple[str, ...] = ("attention weights", "uniform", "key norms", "sketch")
"""The sampling distributions of the lesson: ``P`` itself (Monte Carlo) and three cheap ones."""

SAMPLE_COUNTS: tuple[int, ...] = (1, 4, 16, 64)
"""The sample counts ``m`` of the explorer."""

SKETCH_WIDTH = 16
"""``r`` of the lesson's sketch proposal and indexer."""

QUERY = 0
"""The query whose row of weights the lesson samples (token 0 of :func:`retrieval_head`)."""


def one_thread(fn: Callable) -> Callable:
    """Run ``fn`` on one CPU thread, then restore the thread count.

    The tables draw thousands of small estimates; one thread runs them fastest on a busy
    machine, and sums them in the same order on every machine.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper


@lru_cache(maxsize=8)
def _head(sharpness: float, n: int, d: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    K = torch.randn(n, d, generator=gen, dtype=F64)
    K = K * torch.exp(0.25 * torch.randn(n, 1, generator=gen, dtype=F64))  # varied key norms
    V = torch.randn(n, d, generator=gen, dtype=F64)
    targets = torch.randint(n, (n,), generator=gen)  # token i looks for token targets[i]
    noise = torch.randn(n, d, generator=gen, dtype=F64)
    Q = sharpness * (K[targets] + 0.3 * noise) / math.sqrt(d)
    return Q, K, V, targets


def retrieval_head(
    sharpness: float, *, n: int = 256, d: int = 64, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Self-attention of ``n`` tokens in which query ``i`` looks for key ``targets[i]``.

    Keys are ``N(0, I_d)`` rows times a log-normal length ``exp(0.25 g)``; values are
    ``N(0, I_d)``; ``targets`` are uniform; and ``Q = beta (K[targets] + 0.3 noise) / sqrt(d)``,
    so the target's logit is about ``beta`` and the others' are of size ``beta / sqrt(d)``.
    ``beta = 1`` gives flat rows of weights, ``beta = 8`` peaked ones (:data:`SHARPNESS`).

    Args:
        sharpness: ``beta``.
        n: tokens (``N_Q = N_KV = n``).
        d: ``d_QK = d_V``.
        seed: seed of the draw.

    Returns:
        ``Q, K, V`` of shape ``(n, d)`` in float64 and the int64 ``targets (n,)``.
    """
    for name, value in (("n", n), ("d", d)):
        check_positive_int(name, value)
    return tuple(t.clone() for t in _head(float(sharpness), n, d, seed))


def head_of(sharpness: str) -> tuple[torch.Tensor, ...]:
    check_choice("sharpness", sharpness, list(SHARPNESS))
    return _head(SHARPNESS[sharpness], 256, 64, 0)


@lru_cache(maxsize=4)
def proposals_of(sharpness: str) -> dict[str, torch.Tensor]:
    Q, K, _, _ = head_of(sharpness)
    return proposals(Q, K)


def _relative(Y_hat: torch.Tensor, Y: torch.Tensor) -> float:
    return float((Y_hat - Y).norm() / Y.norm())


def proposals(
    Q: torch.Tensor, K: torch.Tensor, *, r: int = SKETCH_WIDTH, seed: int = 1
) -> dict[str, torch.Tensor]:
    """The four sampling distributions of :data:`PROPOSALS`, each ``(N_Q, N_KV)``.

    ``P`` itself; uniform; :func:`attnlib.analysis.randomised.norm_proposal`; and
    :func:`attnlib.analysis.randomised.sketch_proposal` with a Gaussian sketch of width ``r``.
    """
    Omega = gaussian_sketch(Q.shape[-1], r, generator=torch.Generator().manual_seed(seed),
                            dtype=Q.dtype)
    P = attention_weights(Q, K)
    return {
        "attention weights": P,
        "uniform": torch.full_like(P, 1.0 / K.shape[-2]),
        "key norms": norm_proposal(Q, K),
        "sketch": sketch_proposal(Q, K, Omega),
    }


def importance_bound(P: torch.Tensor, V: torch.Tensor, rho: torch.Tensor, m: int) -> torch.Tensor:
    """The bound ``E|y_hat - y|^2 <= 4 (sum_j P_j^2 / rho_j) sum_c max_j (V_jc - y_c)^2 / m``.

    Agapiou et al. (2017, theorem 2.1) bound the mean squared error of self-normalised
    importance sampling by ``4 rho_bar / m`` for any test function with values in
    ``[-1, 1]``, where ``rho_bar = sum_j P_j^2 / rho_j``. Applied to each coordinate
    ``c`` of the values, centred at ``y`` (the estimate moves with a shift of the values),
    and summed over ``c``.

    Args:
        P: ``(..., N_KV)`` a row of weights.
        V: ``(N_KV, d_V)`` values.
        rho: ``(..., N_KV)`` the proposal.
        m: samples.

    Returns:
        ``(...)``.
    """
    rho = rho / rho.sum(dim=-1, keepdim=True)
    rho_bar = (P.pow(2) / rho).sum(dim=-1)
    y = P @ V  # (..., d_V)
    spread = (V - y.unsqueeze(-2)).abs().amax(dim=-2).pow(2).sum(dim=-1)  # sum_c max_j (.)^2
    return 4 * rho_bar * spread / m


@lru_cache(maxsize=128)
@one_thread
def _proposal_error(sharpness: str, proposal: str, m: int, draws: int) -> tuple[float, ...]:
    """Measured mean squared error, first-order value, bound and ESS per sample, for query 0."""
    Q, K, V, _ = head_of(sharpness)
    q = Q[QUERY : QUERY + 1]
    rho = proposals_of(sharpness)[proposal][QUERY : QUERY + 1]  # (1, N_KV)
    P = attention_weights(q, K)
    y = P @ V
    gen = torch.Generator().manual_seed(1000 + m)  # one seed per m: the same draws in any table
    Y_hat = importance_attention(q.expand(draws, 1, -1), K, V, rho, m, generator=gen)
    mse = float((Y_hat - y).pow(2).sum(dim=-1).mean())
    first = float(sampling_variance(P, V, rho)[0]) / m
    bound = float(importance_bound(P[0], V, rho[0], m))
    return mse, first, bound, float(1.0 / (P.pow(2) / rho).sum())


def error_curves(sharpness: str, proposal: str, ms: tuple[int, ...], draws: int) -> tuple:
    rows = [_proposal_error(sharpness, proposal, m, draws) for m in ms]
    mse, first, bound, ess = zip(*rows, strict=True)
    return mse, first, bound, ess[0]


def proposal_errors(
    sharpness: str = "peaked",
    proposal: str = "sketch",
    ms: Sequence[int] = SAMPLE_COUNTS,
    *,
    draws: int = 200,
) -> pd.DataFrame:
    """Mean squared error of importance sampling for query 0 against ``m``, with theory.

    For each ``m``: the error over ``draws`` draws, the first-order value
    ``sampling_variance / m`` and the bound :func:`importance_bound`.

    Args:
        sharpness: ``"flat"`` or ``"peaked"`` (:data:`SHARPNESS`).
        proposal: one of :data:`PROPOSALS`.
        ms: sample counts.
        draws: independent estimates per ``m``.

    Returns:
        pd.DataFrame indexed by ``m``: ``"E|y_hat - y|^2 (measured)"``,
        ``"first order"``, ``"bound"`` (4 significant digits) and ``"ESS / m"``.
    """
    check_choice("proposal", proposal, PROPOSALS)
    check_positive_int("draws", draws)
    ms = tuple(check_positive_int("ms[...]", m) for m in ms)
    mse, first, bound, ess = error_curves(sharpness, proposal, ms, draws)
    rows = {
        m: {"E|y_hat - y|^2 (measured)": _significant(e, 4), "first order": _significant(f, 4),
            "bound": _significant(b, 4), "ESS / m": round(ess, 4)}
        for m, e, f, b in zip(ms, mse, first, bound, strict=True)
    }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("m")


def importance_table(
    ms: Sequence[int] = (16, 64), *, sharpness: str = "peaked", draws: int = 200
) -> pd.DataFrame:
    """Every proposal of :data:`PROPOSALS` for query 0: ESS, measured error, first order, bound.

    Args:
        ms: sample counts.
        sharpness: ``"flat"`` or ``"peaked"``.
        draws: independent estimates per setting.

    Returns:
        pd.DataFrame indexed by (proposal, ``m``) with the draws, ``ESS / m``, the measured
        ``E|y_hat - y|^2``, its first-order value and the bound (4 significant digits).
    """
    frames = {p: proposal_errors(sharpness, p, ms, draws=draws) for p in PROPOSALS}
    table = pd.concat(frames, names=["proposal"])
    table.insert(0, "draws", draws)
    return table


@lru_cache(maxsize=4)
@one_thread
def _topk_rows(ms: tuple[int, ...], draws: int) -> dict:
    Q, K, V, _ = head_of("peaked")
    P, Y = attention_weights(Q, K), attention(Q, K, V)
    rho = proposals_of("peaked")["sketch"]
    Omega = gaussian_sketch(Q.shape[-1], SKETCH_WIDTH, generator=torch.Generator().manual_seed(1),
                            dtype=F64)  # the sketch behind rho
    scores = sketched_logits(Q, K, Omega)
    rows = {}
    for m in ms:
        gen = torch.Generator().manual_seed(m)
        sampled = {name: sum(_relative(importance_attention(Q, K, V, prop, m, generator=gen), Y)
                             for _ in range(draws)) / draws
                   for name, prop in (("P", P), ("sketch", rho))}
        rows[m] = {
            "Monte Carlo from P": round(sampled["P"], 3),
            "top-k, exact logits": round(_relative(topk_attention(Q, K, V, m), Y), 3),
            "importance, sketch": round(sampled["sketch"], 3),
            "top-k, sketch": round(
                _relative(topk_attention(Q, K, V, m, index_scores=scores), Y), 3),
        }
    return rows


def sampling_topk_table(ms: Sequence[int] = (4, 16, 64), *, draws: int = 10) -> pd.DataFrame:
    """Sampling against top-k at equal cost (``k = m``), every query of the peaked head.

    Monte Carlo from ``P`` and top-k by the exact logits both need every logit; importance
    sampling from the sketch proposal (:func:`proposals`) and top-k by the same sketch's
    logits both pay for the indexer. Relative errors of ``Y``, means over ``draws`` draws
    for the sampled estimates (3 decimals).

    Args:
        ms: samples per query, equal to the keys kept.
        draws: draws per sampled estimate.

    Returns:
        pd.DataFrame indexed by ``m = k``.
    """
    check_positive_int("draws", draws)
    rows = _topk_rows(tuple(check_positive_int("ms[...]", m) for m in ms), draws)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("m = k")


@lru_cache(maxsize=4)
@one_thread
def _product_rows(ms: tuple[int, ...], draws: int) -> dict:
    Q, K, V, _ = head_of("peaked")
    A = torch.exp(Q @ K.T / math.sqrt(Q.shape[-1]))  # (N, N) the kernel matrix
    AV, Z = A @ V, A.sum(dim=-1, keepdim=True)
    norm = float(AV.norm())
    n = K.shape[0]
    probs = {"optimal": product_probabilities(A, V),
             "uniform": torch.full((n,), 1.0 / n, dtype=F64)}
    rows = {}
    for m in ms:
        row: dict[str, float | int] = {"draws": draws}
        for name, rho in probs.items():
            gen = torch.Generator().manual_seed(m)
            est = sampled_product(A.expand(draws, n, n), V, m, probs=rho, generator=gen)
            measured = float((est - AV).pow(2).sum(dim=(-2, -1)).mean().sqrt()) / norm
            row[f"{name}: measured"] = round(measured, 3)
            row[f"{name}: formula"] = round(
                float(sampled_product_mse(A, V, m, probs=rho).sqrt()) / norm, 3)
            if name == "optimal":  # the same estimates, each row divided by its own Z_ii
                Y, Y_hat = AV / Z, est / Z
                row["error of Y = Z^-1 A V, optimal"] = round(
                    float((Y_hat - Y).pow(2).sum(dim=(-2, -1)).mean().sqrt() / Y.norm()), 3)
        row["bound |A| |V| / √m"] = round(float(A.norm() * V.norm()) / math.sqrt(m) / norm, 3)
        rows[m] = row
    return rows


def product_table(ms: Sequence[int] = (16, 64, 128), *, draws: int = 200) -> pd.DataFrame:
    """Column sampling of ``A V`` for the peaked head: optimal and uniform probabilities.

    ``A = exp(Q K^T / sqrt(d))``; for each ``m``, ``draws`` estimates by
    :func:`attnlib.analysis.randomised.sampled_product`. Root-mean-square errors relative to
    ``|A V|_F``, measured and from :func:`attnlib.analysis.randomised.sampled_product_mse`, and the
    bound ``|A|_F |V|_F / sqrt(m)`` of the optimal probabilities; and the error of
    ``Y = Z^-1 A V`` when the optimal estimate of ``A V`` is divided by the exact ``Z``
    (3 decimals).

    Args:
        ms: columns sampled.
        draws: estimates per ``m``.

    Returns:
        pd.DataFrame indexed by ``m``.
    """
    check_positive_int("draws", draws)
    rows = _product_rows(tuple(check_positive_int("ms[...]", m) for m in ms), draws)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("m")


@lru_cache(maxsize=8)
@one_thread
def _sketch_rows(rs: tuple[int, ...], eps: float, draws: int) -> dict:
    Q, K, _, targets = head_of("peaked")
    q, k = Q[QUERY], K[targets[QUERY]]  # a query and the key it looks for
    exact, size = float(q @ k), float(q.norm() * k.norm())
    gen = torch.Generator().manual_seed(3)
    rows = {}
    for r in rs:
        est = torch.cat([  # draws estimates, in chunks of 1,000 sketches
            ((q @ Omega) * (k @ Omega)).reshape(-1, r).sum(dim=-1)
            for Omega in (gaussian_features(q.shape[0], min(1000, draws - start) * r,
                                            generator=gen, dtype=F64) / math.sqrt(r)
                          for start in range(0, draws, 1000))
        ])
        variance = (size**2 + exact**2) / r
        rows[r] = {
            "draws": draws,
            "variance / formula": round(float(est.var()) / variance, 2),
            f"P(|error| > {eps}|q||k|)": round(float(((est - exact).abs() > eps * size)
                                                      .double().mean()), 4),
            "bound": round(min(1.0, 4 * math.exp(-r * (eps**2 - eps**3) / 4)), 4),
        }
    return rows


def sketch_table(
    rs: Sequence[int] = (16, 64, 256), *, eps: float = 0.5, draws: int = 500
) -> pd.DataFrame:
    """The Johnson-Lindenstrauss estimate of ``q . k`` for query 0 and the key it looks for.

    For each sketch width ``r``, ``draws`` independent sketches: the measured variance
    over the formula ``(|q|^2 |k|^2 + (q . k)^2) / r``, the frequency of an error above
    ``eps |q| |k|`` and the bound ``4 exp(-r (eps^2 - eps^3) / 4)`` (capped at 1).

    Args:
        rs: sketch widths.
        eps: the relative error of the tail.
        draws: sketches per width.

    Returns:
        pd.DataFrame indexed by ``r``.
    """
    check_positive_int("draws", draws)
    if not 0 < eps < 1:
        raise ValueError(f"eps must lie in (0, 1); got {eps}")
    rows = _sketch_rows(tuple(check_positive_int("rs[...]", r) for r in rs), float(eps), draws)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("r")


@one_thread
def select_weight_table(
    rs: Sequence[int] = (8, 16, 32, 64), *, k: int = 16, draws: int = 4
) -> pd.DataFrame:
    """Select keys with a sketch, or weight them with it: the peaked head, all queries.

    For each sketch width ``r`` (``draws`` sketches): how often each query's target key is
    among the sketch's top ``k``; the relative error of ``Y`` when the sketch *selects* the
    ``k`` keys and the exact logits weight them (``topk_attention`` with the sketched
    logits as indexer scores); and when the sketched logits *weight* every key
    (``sketch_attention``).

    Args:
        rs: sketch widths.
        k: keys selected.
        draws: sketches per width.

    Returns:
        pd.DataFrame indexed by ``r`` (means over the draws, 3 decimals).
    """
    check_positive_int("k", k)
    check_positive_int("draws", draws)
    Q, K, V, targets = head_of("peaked")
    Y = attention(Q, K, V)
    gen = torch.Generator().manual_seed(4)
    rows = {}
    for r in rs:
        found, select, weight = [], [], []
        for _ in range(draws):
            Omega = gaussian_sketch(Q.shape[-1], check_positive_int("rs[...]", r), generator=gen,
                                    dtype=F64)
            S_hat = sketched_logits(Q, K, Omega)
            top = S_hat.topk(k, dim=-1).indices  # (N, k)
            found.append(float((top == targets[:, None]).any(dim=-1).double().mean()))
            select.append(_relative(topk_attention(Q, K, V, k, index_scores=S_hat), Y))
            weight.append(_relative(sketch_attention(Q, K, V, Omega), Y))
        rows[r] = {"target in the sketch's top k": round(sum(found) / draws, 3),
                   "error, sketch selects": round(sum(select) / draws, 3),
                   "error, sketch weights": round(sum(weight) / draws, 3)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("r")


@lru_cache(maxsize=4)
@one_thread
def _sequence_rows(rs: tuple[int, ...]) -> dict:
    rows = {}
    for sharpness in SHARPNESS:
        Q, K, V, _ = head_of(sharpness)
        Y = attention(Q, K, V)
        gen = torch.Generator().manual_seed(5)
        for r in rs:
            E = torch.randn(r, K.shape[-2], generator=gen, dtype=F64) / math.sqrt(r)
            rows[(sharpness, r)] = {
                "Linformer, random E": round(_relative(linformer_attention(Q, K, V, E), Y), 3),
                "Nystrom, segment means": round(_relative(nystrom_attention(Q, K, V, r), Y), 3),
                "Nystrom, sampled tokens": round(_relative(nystrom_attention(
                    Q, K, V, r, landmarks="sampled", generator=gen), Y), 3),
            }
    return rows


def sequence_rank_table(rs: Sequence[int] = (8, 32, 128)) -> pd.DataFrame:
    """Relative error of ``Y`` for Linformer and Nystrom attention against ``r``, both heads.

    Linformer with one random ``N(0, 1/r)`` projection ``E = F`` (untrained), Nystrom with
    ``r`` segment means and with ``r`` sampled tokens as landmarks.

    Args:
        rs: projected rows or landmarks.

    Returns:
        pd.DataFrame indexed by (head, ``r``), 3 decimals.
    """
    rows = _sequence_rows(tuple(check_positive_int("rs[...]", r) for r in rs))
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.names = ["head", "r"]
    return table


def _layer(beta: float, decaying: bool, *, n: int = 256, d_in: int = 64, d_head: int = 32):
    """A one-head layer whose ``[W_K | W_V]`` has a flat or a decaying spectrum, and its input."""
    gen = torch.Generator().manual_seed(6)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(6)
        layer = GroupedQueryAttention(d_in, 1, 1, d_head, dtype=F64)
    W_KV = torch.randn(d_in, 2 * d_head, generator=gen, dtype=F64) / math.sqrt(d_in)
    if decaying:  # same singular vectors, singular values exp(-i / 4), same Frobenius norm
        U, S, Vh = torch.linalg.svd(W_KV, full_matrices=False)
        s = torch.exp(-torch.arange(S.shape[0], dtype=F64) / 4)
        W_KV = (U * s) @ Vh * (W_KV.norm() / s.norm())
    with torch.no_grad():
        layer.W_K.copy_(W_KV[:, :d_head])
        layer.W_V.copy_(W_KV[:, d_head:])
        layer.W_Q.mul_(beta)
    X = torch.randn(1, n, d_in, generator=gen, dtype=F64)
    return layer, X


@one_thread
def structure_table(*, r: int = 32, d_latent: int = 16) -> pd.DataFrame:
    """Which structure each low-rank method needs: Nystrom (sequence) against MLA (features).

    One head of 256 tokens (``d_in = 64``, ``d_head = 32``) whose ``[W_K | W_V]`` has a
    flat (random) or a decaying spectrum, with queries scaled for flat or peaked rows of P.
    Nystrom attention with ``r`` segment means replaces the head's attention on every
    input; ``mla_from_mha(layer, d_latent)`` replaces its weights once.

    Args:
        r: Nystrom landmarks.
        d_latent: MLA's latent width (the source caches ``2 d_head = 64`` numbers a token).

    Returns:
        pd.DataFrame indexed by (spectrum of W_KV, rows of P), 3 decimals.
    """
    check_positive_int("r", r)
    check_positive_int("d_latent", d_latent)
    rows = {}
    for spectrum, decaying in (("flat", False), ("decaying", True)):
        for rows_of_P, beta in (("flat", 1.0), ("peaked", 6.0)):
            layer, X = _layer(beta, decaying)
            with torch.no_grad():
                Y = layer(X)
                Q, K, V = X @ layer.W_Q, X @ layer.W_K, X @ layer.W_V
                largest = float(attention_weights(Q, K).amax(dim=-1).mean())
                Y_nys = nystrom_attention(Q, K, V, r) @ layer.W_O
                Y_mla = mla_from_mha(layer, d_latent)(X)
            rows[(spectrum, rows_of_P)] = {
                "mean largest weight": round(largest, 3),
                f"error, Nystrom r = {r}": round(_relative(Y_nys, Y), 3),
                f"error, MLA d_L = {d_latent}": round(_relative(Y_mla, Y), 3),
            }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.names = ["spectrum of W_KV", "rows of P"]
    return table


def _svd_matrix(n: int = 128, seed: int = 7) -> torch.Tensor:
    """``U diag(exp(-j / 8)) Psi^T``, Haar-random ``U`` and ``Psi``: a slowly decaying spectrum."""
    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=F64)).Q
    Psi = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=F64)).Q
    return (U * torch.exp(-torch.arange(n, dtype=F64) / 8)) @ Psi.T


@one_thread
def svd_table(
    settings: Sequence[tuple[int, int]] = ((2, 0), (8, 0), (8, 1), (8, 2)),
    *,
    rank: int = 16,
    draws: int = 50,
    W: torch.Tensor | None = None,
) -> pd.DataFrame:
    """The randomised SVD against the exact one and against Halko et al.'s bound.

    For each (oversampling ``p``, power iterations ``t``), ``draws`` randomised SVDs of
    rank ``k``: the mean and largest spectral error ``|W - U_k S_k Vh_k|_2``, the bound
    ``s_k + [(1 + sqrt(k/(p-1))) s_k^q + e sqrt(k+p)/p (sum_{j>=k} s_j^(2q))^(1/2)]^(1/q)``
    with ``q = 2t + 1``
    (the range finder's expected error, corollary 10.10, plus the truncation), and the
    mean Frobenius error over Eckart-Young's optimum ``(sum_{j>=k} s_j^2)^(1/2)``.
    Singular values ``s_j`` count from 0, so ``s_k`` is the largest one dropped.

    Args:
        settings: pairs ``(p, t)`` with ``p >= 2``.
        rank: ``k >= 2``.
        draws: randomised SVDs per setting.
        W: the matrix (default: 128 x 128 with singular values ``exp(-j / 8)``).

    Returns:
        pd.DataFrame indexed by (``p``, ``t``), 4 decimals.
    """
    check_positive_int("draws", draws)
    W = _svd_matrix() if W is None else W
    s = torch.linalg.svdvals(W)
    k = rank
    optimum = float(s[k:].norm())
    gen = torch.Generator().manual_seed(8)
    rows = {}
    for p, t in settings:
        spectral, frobenius = [], []
        for _ in range(draws):
            U, S, Vh = randomised_svd(W, k, oversample=p, power_iterations=t, generator=gen)
            E = W - (U * S) @ Vh
            spectral.append(float(torch.linalg.svdvals(E)[0]))
            frobenius.append(float(E.norm()))
        q = 2 * t + 1
        tail = float(s[k:].pow(2 * q).sum().sqrt())
        bound = float(s[k]) + ((1 + math.sqrt(k / (p - 1))) * float(s[k]) ** q
                               + math.e * math.sqrt(k + p) / p * tail) ** (1 / q)
        rows[(p, t)] = {
            "draws": draws,
            "spectral error, mean": round(sum(spectral) / draws, 4),
            "spectral error, largest": round(max(spectral), 4),
            "bound on the mean": round(bound, 4),
            "exact SVD: s_k": round(float(s[k]), 4),
            "Frobenius / Eckart-Young": round(sum(frobenius) / draws / optimum, 4),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.names = ["p", "t"]
    return table


def feature_head(seed: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The small head of :func:`feature_bias_table`: ``Q (4, 8)``, ``K (16, 8)``, ``V (16, 2)``.

    Queries and keys have entries of standard deviation 0.3, values are standard normal;
    float64.
    """
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(4, 8, generator=gen, dtype=F64) * 0.3
    K = torch.randn(16, 8, generator=gen, dtype=F64) * 0.3
    V = torch.randn(16, 2, generator=gen, dtype=F64)
    return Q, K, V


def _delta_bias(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``r`` times the first-order bias of ``Z_hat^-1 A_hat V`` for one random feature.

    With ``x' = x d^(-1/4)``, one feature gives ``f_j = exp(w . (q' + k_j') - (|q'|^2 +
    |k_j'|^2) / 2)``, with ``E f_j = A_j`` and ``E f_j f_l = exp(|2 q' + k_j' + k_l'|^2 / 2
    - |q'|^2 - (|k_j'|^2 + |k_l'|^2) / 2)``. For the ratio ``n / z`` of ``n = sum_j f_j v_j``
    and ``z = sum_j f_j``, averaged over ``r`` features, the delta method gives the bias
    ``(y Var z - Cov(n, z)) / (r Z^2)``.
    """
    root = Q.shape[-1] ** -0.25
    q, k = Q * root, K * root  # (N_Q, d), (N_KV, d)
    A = torch.exp(q @ k.T)  # (N_Q, N_KV)
    x = 2 * q[:, None, None, :] + k[None, :, None, :] + k[None, None, :, :]  # (N_Q, N, N, d)
    second = torch.exp(x.pow(2).sum(-1) / 2 - q.pow(2).sum(-1)[:, None, None]
                       - (k.pow(2).sum(-1)[:, None] + k.pow(2).sum(-1)[None, :]) / 2)
    C = second - A[:, :, None] * A[:, None, :]  # Cov(f_j, f_l), (N_Q, N_KV, N_KV)
    Z = A.sum(-1)  # (N_Q,)
    Y = A @ V / Z[:, None]
    var_z = C.sum(dim=(-2, -1))  # (N_Q,)
    cov_nz = torch.einsum("ijl,jc->ic", C, V)  # (N_Q, d_V)
    return (Y * var_z[:, None] - cov_nz) / Z[:, None] ** 2


@lru_cache(maxsize=4)
@one_thread
def _feature_bias_rows(rs: tuple[int, ...], draws: int) -> dict:
    Q, K, V = feature_head()
    Y = attention(Q, K, V)
    predicted = _delta_bias(Q, K, V)
    gen = torch.Generator().manual_seed(10)
    root = Q.shape[-1] ** -0.25
    rows = {}
    for r in rs:
        total = torch.zeros_like(Y)
        total_sq = torch.zeros_like(Y)
        for _ in range(draws // 500):  # in chunks of 500 draws
            Omega = gaussian_features(Q.shape[-1], 500 * r, generator=gen, dtype=F64)
            fq = positive_random_features(Q * root, Omega).reshape(Q.shape[0], 500, r)
            fk = positive_random_features(K * root, Omega).reshape(K.shape[0], 500, r)
            A_hat = torch.einsum("idr,jdr->dij", fq, fk)  # (500, N_Q, N_KV), each unbiased
            Y_hat = A_hat @ V / A_hat.sum(dim=-1, keepdim=True)
            total += Y_hat.sum(0)
            total_sq += Y_hat.pow(2).sum(0)
        mean = total / draws
        se = ((total_sq / draws - mean.pow(2)) / draws).sqrt()
        bias = mean - Y
        rows[r] = {
            "draws": draws,
            "|bias| (measured)": _significant(bias.norm(), 3),
            "standard error": _significant(se.norm(), 2),
            "r × |bias|": round(r * float(bias.norm()), 3),
            "r × |bias|, first order": round(float(predicted.norm()), 3),
        }
    return rows


def feature_bias_table(rs: Sequence[int] = (4, 16, 64), *, draws: int = 20_000) -> pd.DataFrame:
    """The bias of Performer's ``Z_hat^-1 A_hat V``: measured over many draws, and first order.

    Four queries and 16 keys of width 8 (entries of standard deviation 0.3) and values of
    width 2; for each ``r``, ``draws`` independent i.i.d. projections ``Omega``. The bias
    is the Frobenius norm of the mean estimate minus ``Y``, beside the standard error of
    that mean and the delta method's first-order value (``r`` times the bias tends to it).

    Args:
        rs: feature counts.
        draws: projections per ``r`` (a multiple of 500).

    Returns:
        pd.DataFrame indexed by ``r``.
    """
    check_positive_int("draws", draws)
    if draws % 500:
        raise ValueError(f"draws must be a multiple of 500; got {draws}")
    rows = _feature_bias_rows(tuple(check_positive_int("rs[...]", r) for r in rs), draws)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("r")


_NEEDS = {
    "monte carlo": ("yes", "every logit (to sample P_i)"),
    "importance, uniform": ("no, O(1/m)", "nothing"),
    "importance, norms": ("no, O(1/m)", "key norms"),
    "importance, sketch": ("no, O(1/m)", "a sketch Omega"),
    "top-k, exact logits": ("no", "every logit"),
    "top-k, sketch": ("no", "a sketch Omega"),
    "sampled product": ("A V: yes", "every logit (column norms of A)"),
    "sketched logits": ("no", "a sketch Omega (and every weight)"),
    "linformer": ("no", "trained projections E, F"),
    "nystrom": ("no", "landmarks (segment means)"),
    "random features": ("A: yes; Y: O(1/r)", "features Omega"),
}


def _largest_size(estimator: str, budget: float, n: int, d: int, d_sketch: int) -> int:
    """The largest ``m``, ``k`` or ``r`` whose cost stays within ``budget`` (0 if none)."""
    size = 0
    while multiply_adds(estimator, n, n, d, d, size + 1, d_sketch=d_sketch) <= budget:
        size += 1
        if size >= n:
            break
    return size


def estimator_table(
    fraction: float = 0.25, *, draws: int = 5, r_sketch: int = SKETCH_WIDTH
) -> pd.DataFrame:
    """Every estimator of the chapter at equal cost, on the flat and the peaked head.

    Each estimator gets the largest size (``m``, ``k`` or ``r``) whose multiply-adds
    (:func:`attnlib.analysis.randomised.multiply_adds`) stay within ``fraction`` of exact
    attention. Four cannot: they need every logit (or weight every key) first, which
    costs half of exact attention when ``d_QK = d_V``; they get that half plus the same
    budget. Errors are relative Frobenius errors of ``Y`` against exact attention, means
    over ``draws`` draws for the random ones (3 decimals).

    Args:
        fraction: the budget, a fraction of exact attention's multiply-adds.
        draws: draws per random estimator.
        r_sketch: the sketch width of the indexers.

    Returns:
        pd.DataFrame indexed by estimator.
    """
    check_positive_int("draws", draws)
    check_positive_int("r_sketch", r_sketch)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1); got {fraction}")
    return _estimator_table(float(fraction), draws, r_sketch).copy()


@lru_cache(maxsize=4)
@one_thread
def _estimator_table(fraction: float, draws: int, r_sketch: int) -> pd.DataFrame:
    n, d = 256, 64
    exact = multiply_adds("exact", n, n, d, d, 0)
    rows = {}
    for estimator, (unbiased, needs) in _NEEDS.items():
        hungry = needs.startswith("every logit") or estimator == "sketched logits"
        budget = (0.5 + fraction if hungry else fraction) * exact
        size = _largest_size(estimator, budget, n, d, r_sketch)
        errors = {}
        for head in SHARPNESS:
            Q, K, V, _ = head_of(head)
            gen = torch.Generator().manual_seed(11)
            runs = 1 if estimator.startswith(("top-k", "nystrom")) else draws
            errors[head] = sum(_relative(_estimate(estimator, Q, K, V, size, r_sketch, gen),
                                         attention(Q, K, V)) for _ in range(runs)) / runs
        cost = multiply_adds(estimator, n, n, d, d, size, d_sketch=r_sketch)
        rows[estimator] = {
            "size": size,
            "multiply-adds / exact": round(cost / exact, 3),
            "error, flat head": round(errors["flat"], 3),
            "error, peaked head": round(errors["peaked"], 3),
            "unbiased": unbiased,
            "needs in advance": needs,
        }
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("estimator")
    table["size"] = table["size"].astype(int)
    return table


def _estimate(
    estimator: str,
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    size: int,
    r_sketch: int,
    gen: torch.Generator,
) -> torch.Tensor:
    """One draw of ``estimator`` with size ``size`` (``m``, ``k`` or ``r``)."""
    from attnlib.analysis.approx import performer_attention

    d = Q.shape[-1]
    if estimator in ("importance, sketch", "top-k, sketch"):
        Omega = gaussian_sketch(d, r_sketch, generator=gen, dtype=F64)
    if estimator == "monte carlo":
        return importance_attention(Q, K, V, attention_weights(Q, K), size, generator=gen)
    if estimator == "importance, uniform":
        return importance_attention(Q, K, V, torch.ones(Q.shape[0], K.shape[0], dtype=F64),
                                    size, generator=gen)
    if estimator == "importance, norms":
        return importance_attention(Q, K, V, norm_proposal(Q, K), size, generator=gen)
    if estimator == "importance, sketch":
        return importance_attention(Q, K, V, sketch_proposal(Q, K, Omega), size, generator=gen)
    if estimator == "top-k, exact logits":
        return topk_attention(Q, K, V, size)
    if estimator == "top-k, sketch":
        return topk_attention(Q, K, V, size, index_scores=sketched_logits(Q, K, Omega))
    if estimator == "sampled product":
        A = torch.exp(Q @ K.T / math.sqrt(d))
        return sampled_product(A, V, size, generator=gen) / A.sum(-1, keepdim=True)
    if estimator == "sketched logits":
        return sketch_attention(Q, K, V, gaussian_sketch(d, size, generator=gen, dtype=F64))
    if estimator == "linformer":
        E = torch.randn(size, K.shape[0], generator=gen, dtype=F64) / math.sqrt(size)
        return linformer_attention(Q, K, V, E)
    if estimator == "nystrom":
        return nystrom_attention(Q, K, V, size)
    Omega = gaussian_features(d, size, generator=gen, dtype=F64)  # random features
    return performer_attention(Q, K, V, Omega)


def _significant(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits, which every CPU prints alike (-0.0 as 0.0)."""
    return float(f"{float(x):.{digits}g}") + 0.0
