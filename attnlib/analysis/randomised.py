"""Randomised estimators of attention: sampling, sketching and low rank for ``Y = Z^-1 A V``.

Randomised numerical linear algebra enters attention wherever ``Y = Z^-1 A V`` has an
average, a product or a rank to exploit. Shapes are those of :func:`attnlib.attention`
(``Q (..., N_Q, d_QK)``, ``K (..., N_KV, d_QK)``, ``V (..., N_KV, d_V)``), ``P = Z^-1 A``,
and every estimator draws its randomness from a ``torch.Generator`` (CPU, float64 draws
moved to the inputs' device), so a seed fixes the result on any machine.

* **Attention as an expectation.** ``y_i = sum_j P_ij v_j = E_{j ~ P_i}[v_j]``.
  :func:`importance_attention` draws ``m`` keys per query from a proposal ``rho_i`` and
  returns the self-normalised estimate ``sum_s w_s v_{j_s} / sum_s w_s`` with
  ``w_s = A_{i j_s} / rho_{i j_s}``; with ``rho = P`` every weight is ``Z_ii`` and this is
  plain Monte Carlo, unbiased with variance :func:`sampling_variance` ``/ m``.
  :func:`norm_proposal` and :func:`sketch_proposal` are two cheap proposals;
  :func:`effective_sample_size` measures how far one is from ``P``.
* **Sampling columns for the product** ``A V`` (Drineas, Kannan and Mahoney):
  :func:`sampled_product`, with the optimal probabilities :func:`product_probabilities`
  and the exact expected error :func:`sampled_product_mse`.
* **Sketching the logits** (Johnson-Lindenstrauss): :func:`gaussian_sketch`,
  :func:`sketched_logits`, :func:`sketch_attention`.
* **Low rank along the sequence**: :func:`linformer_attention` (keys and values projected
  from ``N_KV`` rows to ``r``) and :func:`nystrom_attention` (landmark rows).
* **Low rank along the features**: :func:`randomised_svd` (Halko, Martinsson and Tropp)
  and :func:`randomised_mla_from_mha`, chapter 07's conversion computed with it.
* **Cost**: :func:`multiply_adds` counts one call of each estimator, and
  :func:`randomised_svd_multiply_adds` the matrix products of the randomised SVD.

Chapter 09's random features (:mod:`attnlib.analysis.approx`) are the same idea applied to the
kernel; the lesson revisits them in this chapter's language.

Lesson: 10_randomised_attention.
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import (
    broadcast_shape,
    check_choice,
    check_like,
    check_matrix,
    check_nonnegative_int,
    check_optional_positive_float,
    check_positive_int,
    check_qkv,
    check_shape,
    check_tensor,
)
from attnlib.analysis.approx import gaussian_features
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.mla import MultiHeadLatentAttention, mla_from_mha

__all__ = [
    "ESTIMATORS",
    "effective_sample_size",
    "gaussian_sketch",
    "importance_attention",
    "linformer_attention",
    "multiply_adds",
    "norm_proposal",
    "nystrom_attention",
    "product_probabilities",
    "randomised_mla_from_mha",
    "randomised_svd",
    "randomised_svd_multiply_adds",
    "sample_keys",
    "sampled_product",
    "sampled_product_mse",
    "sampling_variance",
    "sketch_attention",
    "sketch_proposal",
    "sketched_logits",
]

F64 = torch.float64


# ---------------------------------------------------------------------------------------
# attention as an expectation: Monte Carlo and importance sampling
# ---------------------------------------------------------------------------------------


def sample_keys(
    probs: torch.Tensor, m: int, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``m`` independent key indices per row, ``j ~ probs[..., :]``, by inverting the CDF.

    ``j_s = #{l : cumsum(probs)_l <= u_s}`` for ``u_s ~ Uniform(0, 1)`` drawn in float64 on
    the CPU, so the same generator gives the same indices on every device.

    Args:
        probs: ``(..., N)`` non-negative weights; each row is normalised by its sum.
        m: samples per row.
        generator: the random generator (default: PyTorch's global one).

    Returns:
        ``(..., m)`` int64 indices into the last dimension of ``probs``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> sample_keys(torch.tensor([0.0, 1.0, 0.0]), 4, generator=g)
        tensor([1, 1, 1, 1])

    Lesson: 10_randomised_attention.
    """
    _check_sampling(probs, m)
    cdf = torch.cumsum(probs.to(F64), dim=-1)  # (..., N)
    cdf = cdf / cdf[..., -1:]
    u = torch.rand(*probs.shape[:-1], m, generator=generator, dtype=F64).to(probs.device)
    j = torch.searchsorted(cdf.contiguous(), u.contiguous(), right=True)  # (..., m)
    return j.clamp(max=probs.shape[-1] - 1)  # u within rounding of 1 stays on the last key


def importance_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    proposal: torch.Tensor,
    m: int,
    *,
    generator: torch.Generator | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Self-normalised importance sampling of ``y_i = E_{j ~ P_i}[v_j]`` with ``m`` keys.

    For each query draw ``j_1 .. j_m ~ rho_i`` (the rows of ``proposal``), compute only
    those ``m`` kernel values, and average::

        w_s = A_{i j_s} / rho_{i j_s},    y_hat_i = sum_s w_s v_{j_s} / sum_s w_s.

    Biased (a ratio of two averages) but consistent; its mean squared error is
    ``sampling_variance(P, V, proposal) / m`` to first order in ``1/m``. With
    ``proposal = P`` every ``w_s = Z_ii`` and ``y_hat_i`` is the plain mean of the sampled
    values, the unbiased Monte Carlo estimate (which needs all of ``P`` to sample from).
    ``rho`` must be positive wherever ``P`` is.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        proposal: ``(..., N_Q, N_KV)`` sampling weights ``rho`` (rows are normalised).
        m: keys sampled per query.
        generator: the random generator.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``.

    Equivalent to ``attention(Q, K, V)`` as ``m -> infinity``.

    Example:
        >>> from attnlib import attention
        >>> g = torch.Generator().manual_seed(0)
        >>> Q, K, V = (torch.randn(n, 4, generator=g) for n in (2, 6, 6))
        >>> rho = torch.full((2, 6), 1 / 6)  # uniform
        >>> Y = importance_attention(Q, K, V, rho, 20_000, generator=g)
        >>> torch.allclose(Y, attention(Q, K, V), atol=0.05)
        True

    Lesson: 10_randomised_attention.
    """
    _check_importance(Q, K, V, proposal, m, scale)
    scale = _scale(Q, scale)
    batch = broadcast_shape(Q.shape[:-2], K.shape[:-2], V.shape[:-2], proposal.shape[:-2])
    rho = proposal.expand(*batch, *proposal.shape[-2:])
    rho = rho / rho.sum(dim=-1, keepdim=True)  # (..., N_Q, N_KV)
    j = sample_keys(rho, m, generator=generator)  # (..., N_Q, m)
    K_s = _rows(K.expand(*batch, *K.shape[-2:]), j)  # (..., N_Q, m, d_QK)
    V_s = _rows(V.expand(*batch, *V.shape[-2:]), j)  # (..., N_Q, m, d_V)
    logits = scale * (K_s @ Q.expand(*batch, *Q.shape[-2:]).unsqueeze(-1)).squeeze(-1)
    log_w = logits - torch.log(torch.gather(rho, -1, j))  # (..., N_Q, m) log(A_ij / rho_ij)
    w = torch.exp(log_w - log_w.amax(dim=-1, keepdim=True))  # a common factor cancels
    return (w.unsqueeze(-2) @ V_s).squeeze(-2) / w.sum(dim=-1, keepdim=True)  # (..., N_Q, d_V)


def _rows(X: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """``X[..., j[..., i, s], :]``: for each query ``i`` its sampled rows, ``(..., N_Q, m, d)``."""
    n_q, m = j.shape[-2:]
    flat = torch.gather(X, -2, j.reshape(*j.shape[:-2], n_q * m, 1).expand(
        *j.shape[:-2], n_q * m, X.shape[-1]))
    return flat.reshape(*j.shape, X.shape[-1])


def sampling_variance(
    P: torch.Tensor, V: torch.Tensor, proposal: torch.Tensor | None = None
) -> torch.Tensor:
    """``sigma_i^2 = sum_j P_ij^2 / rho_ij |v_j - y_i|^2``: ``m`` times the error of one query.

    With ``proposal=None`` (``rho = P``) this is ``sum_j P_ij |v_j - y_i|^2``, the total
    variance of the values under ``P_i``, and ``E|y_hat_i - y_i|^2 = sigma_i^2 / m``
    exactly for the Monte Carlo estimate. For another proposal it is the first-order
    (large ``m``) mean squared error of self-normalised importance sampling, times ``m``.

    Args:
        P: ``(..., N_Q, N_KV)`` attention weights (rows sum to 1).
        V: ``(..., N_KV, d_V)`` values.
        proposal: ``(..., N_Q, N_KV)`` the sampling distribution ``rho`` (rows normalised),
            positive wherever ``P`` is.

    Returns:
        ``(..., N_Q)``.

    Example:
        >>> P = torch.tensor([[0.5, 0.5]]); V = torch.tensor([[0.0], [2.0]])
        >>> sampling_variance(P, V)  # values 0 and 2 with equal weight: variance 1
        tensor([1.])

    Lesson: 10_randomised_attention.
    """
    _check_weights(P, V, proposal)
    Y = P @ V  # (..., N_Q, d_V)
    spread = (V.unsqueeze(-3) - Y.unsqueeze(-2)).pow(2).sum(dim=-1)  # (..., N_Q, N_KV)
    if proposal is None:
        return (P * spread).sum(dim=-1)
    rho = proposal / proposal.sum(dim=-1, keepdim=True)
    return (P.pow(2) / rho * spread).sum(dim=-1)


def effective_sample_size(
    P: torch.Tensor, proposal: torch.Tensor, m: int = 1
) -> torch.Tensor:
    """``ESS_i = m / sum_j P_ij^2 / rho_ij = m / (1 + chi^2(P_i || rho_i))``.

    The number of draws from ``P_i`` itself that ``m`` draws from ``rho_i`` are worth: ``m``
    when ``rho = P``, and far fewer when the proposal misses where ``P`` puts its weight.
    (The sample version, ``(sum_s w_s)^2 / sum_s w_s^2``, estimates it from the weights.)

    Args:
        P: ``(..., N_Q, N_KV)`` attention weights.
        proposal: ``(..., N_Q, N_KV)`` sampling distribution (rows normalised).
        m: draws.

    Returns:
        ``(..., N_Q)``.

    Example:
        >>> P = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
        >>> effective_sample_size(P, torch.full((1, 4), 0.25), m=100)  # half the draws miss
        tensor([50.])

    Lesson: 10_randomised_attention.
    """
    _check_weights(P, None, proposal, m)
    rho = proposal / proposal.sum(dim=-1, keepdim=True)
    return m / (P.pow(2) / rho).sum(dim=-1)


def norm_proposal(
    Q: torch.Tensor, K: torch.Tensor, *, scale: float | None = None
) -> torch.Tensor:
    """``rho_ij ∝ exp(scale |q_i| |k_j|)``: the largest kernel value key ``j`` could reach.

    By Cauchy-Schwarz ``A_ij <= exp(scale |q_i| |k_j|)``, so this proposal knows the key
    norms (``N_KV`` numbers, computed once) and nothing of their directions; the weights
    ``A_ij / rho_ij`` are then bounded.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, N_KV)``, rows summing to 1.

    Example:
        >>> norm_proposal(torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 2.0]]))
        tensor([[0.5000, 0.5000]])

    Lesson: 10_randomised_attention.
    """
    _check_logits(Q, K, None, None, scale)
    scale = _scale(Q, scale)
    # (..., N_Q, N_KV): the largest logit key j could reach with query i
    envelope = scale * Q.norm(dim=-1, keepdim=True) * K.norm(dim=-1).unsqueeze(-2)
    return torch.softmax(envelope, dim=-1)


def sketch_proposal(
    Q: torch.Tensor,
    K: torch.Tensor,
    Omega: torch.Tensor,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """``rho_i = softmax(sketched_logits(Q, K, Omega))_i``: an indexer's guess at ``P``.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        Omega: ``(d_QK, r)`` sketch from :func:`gaussian_sketch`.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, N_KV)``, rows summing to 1.

    Equivalent to ``attention_weights(Q @ Omega, K @ Omega, scale=scale)``.

    Example:
        >>> from attnlib import attention_weights
        >>> Q, K = torch.randn(3, 4), torch.randn(5, 4)
        >>> rho = sketch_proposal(Q, K, torch.eye(4))  # Omega = I: no sketching at all
        >>> torch.allclose(rho, attention_weights(Q, K), atol=1e-6)
        True

    Lesson: 10_randomised_attention.
    """
    _check_logits(Q, K, None, Omega, scale)
    return torch.softmax(sketched_logits(Q, K, Omega, scale=scale), dim=-1)


# ---------------------------------------------------------------------------------------
# sampling columns: approximate matrix multiplication
# ---------------------------------------------------------------------------------------


def product_probabilities(A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``p_j = |A[:, j]| |V[j, :]| / sum_l |A[:, l]| |V[l, :]|``: the optimal column sampling.

    Among all distributions, these probabilities minimise the expected squared error of
    :func:`sampled_product` (Drineas, Kannan and Mahoney, 2006), which then equals
    ``((sum_j |A_:j| |V_j|)^2 - |A V|_F^2) / m <= |A|_F^2 |V|_F^2 / m``.

    Args:
        A: ``(..., N_Q, N_KV)``.
        V: ``(..., N_KV, d_V)``.

    Returns:
        ``(..., N_KV)``, summing to 1.

    Example:
        >>> product_probabilities(torch.tensor([[3.0, 1.0]]), torch.tensor([[1.0], [1.0]]))
        tensor([0.7500, 0.2500])

    Lesson: 10_randomised_attention.
    """
    _check_product(A, V)
    c = A.norm(dim=-2) * V.norm(dim=-1)  # (..., N_KV)
    return c / c.sum(dim=-1, keepdim=True)


def sampled_product(
    A: torch.Tensor,
    V: torch.Tensor,
    m: int,
    *,
    probs: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``A V ~ (1/m) sum_s A[:, j_s] V[j_s, :] / p_{j_s}`` with ``j_s ~ p``: ``m`` columns of ``A``.

    Every term has expectation ``sum_j p_j A_:j V_j / p_j = A V``, so the estimate is
    unbiased; its expected squared error is :func:`sampled_product_mse`. The columns are
    shared by every row of ``A``: for attention, ``m`` keys are kept for all queries.

    Args:
        A: ``(..., N_Q, N_KV)``, for attention the kernel matrix (or ``P``).
        V: ``(..., N_KV, d_V)``.
        m: columns sampled (with replacement).
        probs: ``(..., N_KV)`` sampling probabilities, positive wherever a column of ``A``
            and a row of ``V`` are both non-zero; default :func:`product_probabilities`.
        generator: the random generator.

    Returns:
        ``(..., N_Q, d_V)``.

    Equivalent to ``A @ V`` in expectation.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> A, V = torch.rand(3, 50, generator=g), torch.randn(50, 2, generator=g)
        >>> est = sampled_product(A.expand(4000, 3, 50), V, 10, generator=g).mean(0)  # 4000 draws
        >>> torch.allclose(est, A @ V, atol=0.5)  # A V has entries up to about 5
        True

    Lesson: 10_randomised_attention.
    """
    _check_product(A, V, m, probs)
    batch = broadcast_shape(A.shape[:-2], V.shape[:-2])
    A, V = A.expand(*batch, *A.shape[-2:]), V.expand(*batch, *V.shape[-2:])
    p = (product_probabilities(A, V) if probs is None
         else probs / probs.sum(-1, keepdim=True))
    p = p.expand(*batch, A.shape[-1])
    j = sample_keys(p, m, generator=generator)  # (..., m)
    A_s = torch.gather(A, -1, j.unsqueeze(-2).expand(*j.shape[:-1], A.shape[-2], m))
    V_s = torch.gather(V, -2, j.unsqueeze(-1).expand(*j.shape, V.shape[-1]))  # (..., m, d_V)
    weights = 1.0 / (m * torch.gather(p, -1, j))  # (..., m): 1 / (m p_j)
    return (A_s * weights.unsqueeze(-2)) @ V_s  # (..., N_Q, d_V)


def sampled_product_mse(
    A: torch.Tensor,
    V: torch.Tensor,
    m: int,
    *,
    probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """``E|A V - estimate|_F^2 = (sum_j |A_:j|^2 |V_j|^2 / p_j - |A V|_F^2) / m``, exactly.

    The expected squared Frobenius error of :func:`sampled_product` with ``m`` columns
    drawn from ``probs`` (default: :func:`product_probabilities`).

    Args:
        A: ``(..., N_Q, N_KV)``.
        V: ``(..., N_KV, d_V)``.
        m: columns sampled.
        probs: ``(..., N_KV)`` sampling probabilities.

    Returns:
        ``(...)``, a scalar tensor for matrices.

    Example:
        >>> A, V = torch.eye(2), torch.eye(2)
        >>> sampled_product_mse(A, V, 1)  # (2 / 0.5 - 2) / 1
        tensor(2.)

    Lesson: 10_randomised_attention.
    """
    _check_product(A, V, m, probs)
    p = (product_probabilities(A, V) if probs is None
         else probs / probs.sum(-1, keepdim=True))
    c2 = A.norm(dim=-2).pow(2) * V.norm(dim=-1).pow(2)  # (..., N_KV)
    return ((c2 / p).sum(dim=-1) - (A @ V).pow(2).sum(dim=(-2, -1))) / m


def _scale(Q: torch.Tensor, scale: float | None) -> float:
    """The logits' scale: ``1/sqrt(d_QK)`` unless given."""
    return 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale


# ---------------------------------------------------------------------------------------
# sketching the logits
# ---------------------------------------------------------------------------------------


def gaussian_sketch(
    d: int,
    r: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """A Johnson-Lindenstrauss sketch ``Omega (d, r)`` with independent ``N(0, 1/r)`` entries.

    ``E[Omega Omega^T] = I_d``, so ``(q Omega) . (k Omega)`` is an unbiased estimate of
    ``q . k`` with variance ``(|q|^2 |k|^2 + (q . k)^2) / r``.

    Args:
        d: width of the rows to sketch (``d_QK``).
        r: sketch width.
        generator: the random generator.
        device: where the result lives.
        dtype: floating dtype (default: the default dtype).

    Returns:
        ``(d, r)``.

    Equivalent to ``attnlib.analysis.approx.gaussian_features(d, r) / sqrt(r)``.

    Example:
        >>> Omega = gaussian_sketch(3, 100_000, generator=torch.Generator().manual_seed(0))
        >>> torch.allclose(Omega @ Omega.T, torch.eye(3), atol=0.02)
        True

    Lesson: 10_randomised_attention.
    """
    # gaussian_features checks d, r and dtype: this function adds only the factor
    return gaussian_features(d, r, generator=generator, device=device, dtype=dtype) / math.sqrt(r)


def sketched_logits(
    Q: torch.Tensor,
    K: torch.Tensor,
    Omega: torch.Tensor,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """``S_hat = scale (Q Omega)(K Omega)^T``: the logits from ``r``-dimensional sketches.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        Omega: ``(d_QK, r)`` sketch.
        scale: default ``1/sqrt(d_QK)`` (the scale of the unsketched logits).

    Returns:
        ``(..., N_Q, N_KV)``.

    Example:
        >>> Q, K = torch.randn(2, 3), torch.randn(4, 3)
        >>> torch.allclose(sketched_logits(Q, K, torch.eye(3), scale=1.0), Q @ K.T, atol=1e-6)
        True

    Lesson: 10_randomised_attention.
    """
    _check_logits(Q, K, None, Omega, scale)
    return _scale(Q, scale) * (Q @ Omega) @ (K @ Omega).mT  # (..., N_Q, N_KV)


def sketch_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    Omega: torch.Tensor,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """``Y_hat = softmax(S_hat) V``: attention *weighted* by the sketched logits.

    The error of each logit, of order ``scale |q| |k| / sqrt(r)``, passes through the
    exponential as a factor ``exp(error)`` on the kernel value.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        Omega: ``(d_QK, r)`` sketch.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``.

    Equivalent to ``attention(Q @ Omega, K @ Omega, V, scale=scale)``.

    Example:
        >>> from attnlib import attention
        >>> Q, K, V = torch.randn(2, 3), torch.randn(4, 3), torch.randn(4, 2)
        >>> torch.allclose(sketch_attention(Q, K, V, torch.eye(3)), attention(Q, K, V), atol=1e-6)
        True

    Lesson: 10_randomised_attention.
    """
    _check_logits(Q, K, V, Omega, scale)
    return sketch_proposal(Q, K, Omega, scale=scale) @ V


# ---------------------------------------------------------------------------------------
# low rank along the sequence: Linformer and Nystrom
# ---------------------------------------------------------------------------------------


def linformer_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    E: torch.Tensor,
    F: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """``Y_hat = softmax(scale Q (E K)^T) (F V)``: keys and values projected to ``r`` rows.

    Linformer (Wang et al., 2020) learns ``E`` and ``F``; with ``F = None`` one projection
    serves both. The ``N_Q x N_KV`` matrix becomes ``N_Q x r``.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        E: ``(r, N_KV)`` projection of the keys along the sequence.
        F: ``(r, N_KV)`` projection of the values (default ``E``).
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``.

    Equivalent to ``attention(Q, E @ K, F @ V, scale=scale)``.

    Example:
        >>> from attnlib import attention
        >>> Q, K, V = torch.randn(2, 3), torch.randn(4, 3), torch.randn(4, 2)
        >>> torch.allclose(linformer_attention(Q, K, V, torch.eye(4)), attention(Q, K, V),
        ...                atol=1e-6)
        True

    Lesson: 10_randomised_attention.
    """
    _check_linformer(Q, K, V, E, F, scale)
    F = E if F is None else F
    return torch.softmax(_scale(Q, scale) * Q @ (E @ K).mT, dim=-1) @ (F @ V)  # (..., N_Q, d_V)


LANDMARKS: tuple[str, ...] = ("means", "sampled")
"""How :func:`nystrom_attention` picks its landmarks: segment means, or sampled tokens."""


def nystrom_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    r: int,
    *,
    landmarks: str = "means",
    generator: torch.Generator | None = None,
    iterations: int = 6,
    scale: float | None = None,
) -> torch.Tensor:
    """Nystrom attention from ``r`` landmark queries ``Q~`` and keys ``K~``::

        P_hat = softmax(s Q K~^T) pinv(softmax(s Q~ K~^T)) softmax(s Q~ K^T),  Y_hat = P_hat V.

    ``landmarks="means"`` takes the means of ``r`` consecutive segments of the rows, as
    Nystromformer does (Xiong et al., 2021); ``"sampled"`` takes ``r`` tokens drawn
    uniformly without replacement (self-attention: the same tokens for queries and keys).
    ``pinv`` is Nystromformer's iterative pseudo-inverse of ``W = softmax(s Q~ K~^T)``,
    ``Z <- Z (13 I - W Z (15 I - W Z (7 I - W Z))) / 4`` from ``Z = W^T / (|W|_1 |W|_inf)``,
    ``iterations`` times; it damps the small singular values that an exact pseudo-inverse
    would blow up. No ``N_Q x N_KV`` matrix is formed; the approximation is good when
    ``P`` is close to rank ``r``.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        r: landmarks, at most ``min(N_Q, N_KV)``.
        landmarks: one of :data:`LANDMARKS`.
        generator: the random generator (``"sampled"``).
        iterations: steps of the iterative pseudo-inverse (Nystromformer uses 6).
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``.

    Example:
        >>> from attnlib import attention
        >>> g = torch.Generator().manual_seed(0)
        >>> Q, K, V = (torch.randn(6, n, generator=g, dtype=torch.float64) for n in (3, 3, 2))
        >>> Y = nystrom_attention(Q, K, V, 6, iterations=30)  # every token a landmark
        >>> torch.allclose(Y, attention(Q, K, V), atol=1e-9)  # exact up to rounding
        True

    Lesson: 10_randomised_attention.
    """
    _check_nystrom(Q, K, V, r, landmarks, iterations, scale)
    s = _scale(Q, scale)
    if landmarks == "means":
        Q_l, K_l = _segment_means(Q, r), _segment_means(K, r)  # (..., r, d_QK)
    else:
        tokens = torch.randperm(Q.shape[-2], generator=generator)[:r].to(Q.device)
        Q_l, K_l = Q[..., tokens, :], K[..., tokens, :]
    F_ = torch.softmax(s * Q @ K_l.mT, dim=-1)  # (..., N_Q, r)
    W = torch.softmax(s * Q_l @ K_l.mT, dim=-1)  # (..., r, r)
    B = torch.softmax(s * Q_l @ K.mT, dim=-1)  # (..., r, N_KV)
    return F_ @ (_iterative_pinv(W, iterations) @ (B @ V))  # (..., N_Q, d_V), never N_Q x N_KV


def _iterative_pinv(W: torch.Tensor, iterations: int) -> torch.Tensor:
    """Nystromformer's approximate Moore-Penrose inverse of the ``(r, r)`` matrices ``W``."""
    eye = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device)
    norms = W.abs().sum(dim=-2).amax(dim=-1) * W.abs().sum(dim=-1).amax(dim=-1)  # |W|_1 |W|_inf
    Z = W.mT / norms[..., None, None]
    for _ in range(iterations):
        WZ = W @ Z
        Z = 0.25 * Z @ (13 * eye - WZ @ (15 * eye - WZ @ (7 * eye - WZ)))
    return Z


def _segment_means(X: torch.Tensor, r: int) -> torch.Tensor:
    """Means of ``r`` consecutive, near-equal segments of the rows of ``X``: ``(..., r, d)``."""
    return torch.stack([seg.mean(dim=-2) for seg in torch.tensor_split(X, r, dim=-2)], dim=-2)


# ---------------------------------------------------------------------------------------
# low rank along the features: the randomised SVD and MLA
# ---------------------------------------------------------------------------------------


def randomised_svd(
    W: torch.Tensor,
    rank: int,
    *,
    oversample: int = 8,
    power_iterations: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rank-``k`` SVD ``W ~ U_k S_k Vh_k`` by the randomised range finder (Halko et al.).

    With ``l = k + p`` (``p = oversample``) and ``t = power_iterations``::

        Y = (W W^T)^t W Omega,   Omega (n, l) Gaussian;   Q = orth(Y)   (m, l)
        B = Q^T W  (l, n) = U_B S Vh;   U = Q U_B,  truncated to the first k.

    ``Q`` is re-orthonormalised after every product (subspace iteration), which keeps the
    power iterations accurate in floating point. The matrix products cost
    :func:`randomised_svd_multiply_adds`; the exact SVD costs of order ``m n min(m, n)``.

    Args:
        W: ``(m, n)`` matrix.
        rank: ``k``, the rank returned.
        oversample: ``p``, extra test vectors (``k + p <= min(m, n)``).
        power_iterations: ``t``, applications of ``W W^T``.
        generator: the random generator (``Omega`` is drawn in float64 on the CPU).

    Returns:
        ``U (m, k)``, ``S (k,)``, ``Vh (k, n)``, in ``W``'s dtype and device.

    Example:
        >>> W = torch.randn(40, 5, dtype=torch.float64) @ torch.randn(5, 30, dtype=torch.float64)
        >>> U, S, Vh = randomised_svd(W, 5, generator=torch.Generator().manual_seed(0))
        >>> torch.allclose(U * S @ Vh, W)  # rank 5: recovered exactly
        True

    Lesson: 10_randomised_attention.
    """
    _check_svd(W, rank, oversample, power_iterations)
    k, p, t = rank, oversample, power_iterations
    Omega = torch.randn(W.shape[1], k + p, generator=generator, dtype=F64).to(W.device, W.dtype)
    Qm = torch.linalg.qr(W @ Omega).Q  # (m, l): an orthonormal basis of the sample Y = W Omega
    for _ in range(t):  # subspace iteration: Y = (W W^T)^t W Omega, re-orthonormalised
        Qm = torch.linalg.qr(W @ torch.linalg.qr(W.mT @ Qm).Q).Q
    U_B, S, Vh = torch.linalg.svd(Qm.mT @ W, full_matrices=False)  # B = Q^T W, (l, n)
    return Qm @ U_B[:, :k], S[:k], Vh[:k]  # (m, k), (k,), (k, n)


def randomised_svd_multiply_adds(
    m: int, n: int, rank: int, oversample: int = 8, power_iterations: int = 1
) -> int:
    """Multiply-adds of the matrix products of :func:`randomised_svd` on an ``(m, n)`` matrix.

    ``(2 + 2 t) m n l + m l k`` with ``l = k + p``: ``W Omega``, ``t`` pairs ``W^T Q`` and
    ``W Z``, ``B = Q^T W``, and ``U = Q U_B``. The QR factorisations of the thin ``(m, l)``
    and ``(n, l)`` matrices and the SVD of ``B`` add ``O((m + n) l^2)``, not counted here.

    Args:
        m: rows of ``W``.
        n: columns of ``W``.
        rank: ``k``.
        oversample: ``p``.
        power_iterations: ``t``.

    Returns:
        int.

    Example:
        >>> randomised_svd_multiply_adds(100, 50, 5, oversample=5, power_iterations=0)
        105000

    Lesson: 10_randomised_attention.
    """
    _check_svd_size(m, n, rank, oversample, power_iterations)
    ell = rank + oversample
    return (2 + 2 * power_iterations) * m * n * ell + m * ell * rank


def randomised_mla_from_mha(
    attn: GroupedQueryAttention,
    d_latent: int,
    *,
    oversample: int = 8,
    power_iterations: int = 1,
    generator: torch.Generator | None = None,
) -> MultiHeadLatentAttention:
    """:func:`attnlib.mla_from_mha` with the randomised SVD of ``W_KV = [W_K | W_V]``.

    The same conversion as chapter 07's (``W_L = U_r S_r^{1/2}``, the group columns
    ``S_r^{1/2} V_r^T`` repeated for the query heads), with ``(U_r, S_r, V_r)`` from
    :func:`randomised_svd`. Its weight error is at least Eckart-Young's
    ``(sum_{i >= r} s_i^2)^{1/2}`` and, with a few power iterations, close to it. When
    ``d_latent + oversample`` reaches the rank of ``W_KV`` the range finder sees the whole
    range and the result is the exact conversion ``mla_from_mha(attn, d_latent)``.

    Args:
        attn: the source, a :class:`attnlib.GroupedQueryAttention` without RoPE.
        d_latent: ``r``, with ``r + oversample <= min(d_in, 2 G d_head)``.
        oversample: ``p``.
        power_iterations: ``t``.
        generator: the random generator.

    Returns:
        A :class:`attnlib.MultiHeadLatentAttention` like ``mla_from_mha(attn, d_latent)``'s.

    Example:
        >>> gqa = GroupedQueryAttention(16, n_heads=4, n_kv_heads=2, d_head=2)
        >>> mla = randomised_mla_from_mha(gqa, 6, oversample=2)  # 6 + 2 = 8 = rank of W_KV
        >>> X = torch.randn(1, 5, 16)
        >>> torch.allclose(mla(X), mla_from_mha(gqa, 6)(X), atol=1e-4)
        True

    Lesson: 10_randomised_attention (the exact conversion: 07_mla).
    """
    _check_conversion(attn, d_latent, oversample, power_iterations)

    def svd(W_KV: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return randomised_svd(W_KV, r, oversample=oversample, power_iterations=power_iterations,
                              generator=generator)

    return mla_from_mha(attn, d_latent, svd=svd)


# ---------------------------------------------------------------------------------------
# cost: multiply-adds of one call of each estimator
# ---------------------------------------------------------------------------------------

ESTIMATORS: tuple[str, ...] = (
    "exact",
    "monte carlo",
    "importance, uniform",
    "importance, norms",
    "importance, sketch",
    "top-k, exact logits",
    "top-k, sketch",
    "sampled product",
    "sketched logits",
    "linformer",
    "nystrom",
    "random features",
)
"""The estimators :func:`multiply_adds` counts, in the order of the lesson's table."""


def multiply_adds(
    estimator: str,
    n_q: int,
    n_kv: int,
    d_qk: int,
    d_v: int,
    size: int,
    *,
    d_sketch: int = 0,
) -> int:
    """Multiply-adds of one call of ``estimator`` for ``N_Q`` queries and ``N_KV`` keys.

    One dot product of width ``d`` counts ``d``; a weighted sum of ``n`` rows of width
    ``d`` counts ``n d``. Exponentials, sampling and normalisation (``O(N_Q N_KV)`` at most)
    are not counted. ``size`` is ``m`` (samples or columns), ``k`` (kept keys) or ``r``
    (projected rows, landmarks, features); ``d_sketch`` is the sketch width ``r`` of the
    estimators that use one as an indexer::

        exact                 N_Q N_KV (d_QK + d_V)
        monte carlo           N_Q N_KV d_QK + N_Q m d_V          (all logits, to sample P_i)
        importance, uniform   N_Q m (d_QK + d_V)
        importance, norms     N_Q m (d_QK + d_V) + (N_Q + N_KV) d_QK + N_Q N_KV
        importance, sketch    N_Q m (d_QK + d_V) + indexer
        top-k, exact logits   N_Q N_KV d_QK + N_Q k d_V
        top-k, sketch         N_Q k (d_QK + d_V) + indexer
        sampled product       N_Q N_KV d_QK + N_Q m d_V          (column norms need all of A)
        sketched logits       indexer + N_Q N_KV d_V             (indexer of width r = size)
        linformer             r N_KV (d_QK + d_V) + N_Q r (d_QK + d_V)
        nystrom               (N_Q + N_KV) d_QK + r (N_Q + N_KV + r) d_QK + r N_KV d_V
                              + r^2 d_V + N_Q r d_V + 4 i r^3    (i steps of the pinv)
        random features       (N_Q + N_KV) d_QK r + N_KV r d_V + N_Q r d_V + (N_Q + N_KV) r

    with ``indexer = (N_Q + N_KV) d_QK r + N_Q N_KV r`` for ``r = d_sketch``.

    Args:
        estimator: one of :data:`ESTIMATORS`.
        n_q: ``N_Q``.
        n_kv: ``N_KV``.
        d_qk: ``d_QK``.
        d_v: ``d_V``.
        size: ``m``, ``k`` or ``r`` (ignored by ``"exact"``).
        d_sketch: sketch width of ``"importance, sketch"`` and ``"top-k, sketch"``.

    Returns:
        int.

    Example:
        >>> multiply_adds("exact", 12, 3000, 128, 128, 0)  # exercise 01.3
        9216000

    Lesson: 10_randomised_attention.
    """
    _check_cost(estimator, n_q, n_kv, d_qk, d_v, size, d_sketch)

    def indexer(r: int) -> int:  # sketch Q and K to width r, then every sketched logit
        return (n_q + n_kv) * d_qk * r + n_q * n_kv * r

    logits, n = n_q * n_kv * d_qk, n_q + n_kv
    costs = {
        "exact": logits + n_q * n_kv * d_v,
        "monte carlo": logits + n_q * size * d_v,
        "importance, uniform": n_q * size * (d_qk + d_v),
        "importance, norms": n_q * size * (d_qk + d_v) + n * d_qk + n_q * n_kv,
        "importance, sketch": n_q * size * (d_qk + d_v) + indexer(d_sketch),
        "top-k, exact logits": logits + n_q * size * d_v,
        "top-k, sketch": n_q * size * (d_qk + d_v) + indexer(d_sketch),
        "sampled product": logits + n_q * size * d_v,
        "sketched logits": indexer(size) + n_q * n_kv * d_v,
        "linformer": size * n_kv * (d_qk + d_v) + n_q * size * (d_qk + d_v),
        "nystrom": (n * d_qk  # segment means (one addition per entry)
                    + size * (n + size) * d_qk  # Q K~^T, Q~ K~^T, Q~ K^T
                    + 4 * 6 * size**3  # six steps of the pseudo-inverse, 4 products each
                    + size * n_kv * d_v + size * size * d_v + n_q * size * d_v),
        "random features": (n * d_qk * size  # X Omega for the queries and the keys
                            + n_kv * size * d_v + n_q * size * d_v  # phi(K)^T V, phi(Q) (.)
                            + n * size),  # the normaliser phi(Q) (phi(K)^T 1)
    }
    return costs[estimator]


# ---------------------------------------------------------------------------------------
# checks: one per public function, on the arguments a caller passes
# ---------------------------------------------------------------------------------------


def _check_sampling(probs: object, m: object) -> None:
    check_tensor("probs", probs)
    check_positive_int("m", m)
    if (probs < 0).any() or not (probs.sum(dim=-1) > 0).all():
        raise ValueError("probs must be non-negative with a positive sum in every row; got "
                         f"minimum {probs.min().item():.4g}")


def _check_distribution(
    name: str, rho: object, n_q: int, n_kv: int, like: torch.Tensor, whose: str
) -> None:
    """``rho (..., N_Q, N_KV)``: non-negative weights with a positive sum in every row."""
    check_tensor(name, rho, min_dim=2)
    check_shape(name, rho, (n_q, n_kv), f"(..., N_Q, N_KV) = (..., {n_q}, {n_kv})")
    check_like(name, rho, like, whose)
    if (rho < 0).any() or not (rho.sum(dim=-1) > 0).all():
        raise ValueError(f"{name} must be non-negative with a positive sum in every row; got "
                         f"minimum {rho.min().item():.4g}")


def _check_importance(Q, K, V, proposal, m, scale) -> None:
    check_qkv(Q, K, V)
    check_optional_positive_float("scale", scale)
    _check_distribution("proposal", proposal, Q.shape[-2], K.shape[-2], Q, "Q's")
    if broadcast_shape(Q.shape[:-2], K.shape[:-2], V.shape[:-2], proposal.shape[:-2]) is None:
        raise ValueError("the batch dimensions of proposal must broadcast with those of Q, K "
                         f"and V; got proposal {tuple(proposal.shape)} and Q {tuple(Q.shape)}")
    check_positive_int("m", m)


def _check_weights(P, V, proposal, m=None) -> None:
    """``P (..., N_Q, N_KV)``, with ``V (..., N_KV, d_V)`` and ``proposal`` like ``P``."""
    check_tensor("P", P, min_dim=2)
    if V is not None:
        check_tensor("V", V, min_dim=2)
        if V.shape[-2] != P.shape[-1]:
            raise ValueError(f"V must have one row per column of P (N_KV = {P.shape[-1]}); "
                             f"got P {tuple(P.shape)} and V {tuple(V.shape)}")
        check_like("V", V, P, "P's")
    if proposal is not None:
        _check_distribution("proposal", proposal, P.shape[-2], P.shape[-1], P, "P's")
    if m is not None:
        check_positive_int("m", m)


def _check_logits(Q, K, V, Omega, scale) -> None:
    """Queries and keys (and values), with a sketch ``Omega (d_QK, r)`` when one is given."""
    check_qkv(Q, K, V)
    check_optional_positive_float("scale", scale)
    if Omega is not None:
        check_matrix("Omega", Omega, rows=Q.shape[-1])
        check_like("Omega", Omega, Q, "Q's")


def _check_product(A, V, m=None, probs=None) -> None:
    check_tensor("A", A, min_dim=2)
    check_tensor("V", V, min_dim=2)
    if A.shape[-1] != V.shape[-2]:
        raise ValueError(
            f"A's columns must match V's rows (N_KV) to form A V; got A {tuple(A.shape)} and "
            f"V {tuple(V.shape)}"
        )
    if broadcast_shape(A.shape[:-2], V.shape[:-2]) is None:
        raise ValueError("the batch dimensions (all but the last two) of A and V must "
                         f"broadcast; got A {tuple(A.shape)} and V {tuple(V.shape)}")
    if m is not None:
        check_positive_int("m", m)
    if probs is not None:
        check_tensor("probs", probs)
        if probs.shape[-1] != A.shape[-1] or (probs < 0).any():
            raise ValueError(f"probs must be non-negative of shape (..., N_KV) with N_KV = "
                             f"{A.shape[-1]}; got shape {tuple(probs.shape)}")


def _check_linformer(Q, K, V, E, F, scale) -> None:
    _check_logits(Q, K, V, None, scale)
    for name, W in (("E", E), ("F", E if F is None else F)):
        check_matrix(name, W)
        if W.shape[-1] != K.shape[-2]:
            raise ValueError(f"{name} must have N_KV = {K.shape[-2]} columns (it mixes the "
                             f"keys' rows); got shape {tuple(W.shape)}")
        check_like(name, W, K, "K's")


def _check_nystrom(Q, K, V, r, landmarks, iterations, scale) -> None:
    _check_logits(Q, K, V, None, scale)
    check_positive_int("r", r)
    check_choice("landmarks", landmarks, LANDMARKS)
    check_positive_int("iterations", iterations)
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    if r > min(n_q, n_kv):
        raise ValueError(f"r must be at most min(N_Q, N_KV) = {min(n_q, n_kv)}; got {r}")
    if landmarks == "sampled" and n_q != n_kv:
        raise ValueError(f'landmarks="sampled" picks tokens of a self-attention (N_Q = N_KV); '
                         f"got N_Q = {n_q} and N_KV = {n_kv}")


def _check_range_finder(rank, oversample, power_iterations, limit, limit_name, rank_name) -> None:
    check_positive_int(rank_name, rank)
    check_nonnegative_int("oversample", oversample)
    check_nonnegative_int("power_iterations", power_iterations)
    if rank + oversample > limit:
        raise ValueError(f"{rank_name} + oversample must be at most {limit_name} = {limit}; "
                         f"got {rank} + {oversample}")


def _check_svd(W, rank, oversample, power_iterations) -> None:
    check_matrix("W", W)
    _check_range_finder(rank, oversample, power_iterations, min(W.shape), "min(m, n)", "rank")


def _check_svd_size(m, n, rank, oversample, power_iterations) -> None:
    for name, value in (("m", m), ("n", n), ("rank", rank)):
        check_positive_int(name, value)
    check_nonnegative_int("oversample", oversample)
    check_nonnegative_int("power_iterations", power_iterations)


def _check_conversion(attn, d_latent, oversample, power_iterations) -> None:
    if not isinstance(attn, GroupedQueryAttention):
        raise TypeError(f"attn must be an attnlib.GroupedQueryAttention; got {type(attn).__name__}")
    if attn.rope_base is not None:
        raise ValueError("attn.rope_base must be None: RoPE rotates each key after W_K, so "
                         "[W_K | W_V] has no exact latent factorisation; got "
                         f"attn.rope_base={attn.rope_base!r}")
    r_max = min(attn.d_in, 2 * attn.n_kv_heads * attn.d_head)
    _check_range_finder(d_latent, oversample, power_iterations, r_max,
                        "min(d_in, 2 G d_head)", "d_latent")


def _check_cost(estimator, n_q, n_kv, d_qk, d_v, size, d_sketch) -> None:
    check_choice("estimator", estimator, ESTIMATORS)
    for name, value in (("n_q", n_q), ("n_kv", n_kv), ("d_qk", d_qk), ("d_v", d_v)):
        check_positive_int(name, value)
    check_nonnegative_int("size", size)
    check_nonnegative_int("d_sketch", d_sketch)
