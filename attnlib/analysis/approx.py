"""Beyond exact softmax attention: linear attention, random features, top-k, the delta rule.

Everything here starts from ``Y = Z^-1 A V`` and changes one thing about it.

* **Linear attention.** A kernel that factors through a feature map,
  ``A = phi(Q) phi(K)^T`` with ``phi: R^{d_QK} -> R^r``, lets associativity reorder the
  product: ``A V = phi(Q) (phi(K)^T V)`` and ``A 1 = phi(Q) (phi(K)^T 1)``. The
  ``N_Q x N_KV`` matrix is never formed; the cost is ``O((N_Q + N_KV) r d_V)``, and a causal
  decoder carries a fixed-size state ``(phi(K)^T V, phi(K)^T 1)`` from token to token
  (Katharopoulos et al., 2020).
* **Random features.** Performer's positive features
  ``phi(x) = exp(x Omega - |x|^2 / 2) / sqrt(r)`` with Gaussian columns of ``Omega`` give an
  *unbiased* estimate of the exponential kernel, ``E[phi(q) . phi(k)] = exp(q . k)``, so
  softmax attention is approximated, with an error that falls like ``1/sqrt(r)``
  (Choromanski et al., 2021).
* **Top-k sparse attention.** Each query keeps only the ``k`` keys an indexer scores
  highest (DeepSeek Sparse Attention's idea); the rest of ``A``'s row is set to zero before
  the row normalisation.
* **The delta rule.** The recurrences of Gated DeltaNet and Kimi Delta Attention update a
  fixed-size state by *overwriting* what a key already retrieves; they leave the
  ``Z^-1 A V`` form (no normaliser, weights of either sign).

Lesson: 09_frontier.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlib._checks import (
    check_bool,
    check_like,
    check_matrix,
    check_optional_positive_float,
    check_positive_int,
    check_qkv,
    check_shape,
    check_tensor,
)
from attnlib.core.functional import attention
from attnlib.core.masks import causal_mask, query_positions

__all__ = [
    "LinearAttentionState",
    "delta_rule",
    "elu_feature_map",
    "gaussian_features",
    "linear_attention",
    "linear_attention_recurrent",
    "performer_attention",
    "positive_random_features",
    "random_feature_kernel",
    "topk_attention",
    "topk_mask",
]

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------------------------------
# feature maps
# ---------------------------------------------------------------------------------------


def elu_feature_map(X: torch.Tensor) -> torch.Tensor:
    """``phi(X) = elu(X) + 1`` entrywise: the positive feature map of linear transformers.

    With it, ``kappa(q, k) = phi(q) . phi(k) > 0`` is a valid attention kernel with
    ``r = d_QK`` features (Katharopoulos et al., 2020). It is a *different* kernel from
    softmax's ``exp(q . k / sqrt(d_QK))``, not an approximation of it.

    Args:
        X: ``(..., N, d_QK)`` queries or keys.

    Returns:
        ``(..., N, d_QK)``, every entry > 0.

    Example:
        >>> elu_feature_map(torch.tensor([[-1.0, 0.0, 2.0]]))
        tensor([[0.3679, 1.0000, 3.0000]])

    Lesson: 09_frontier.
    """
    check_tensor("X", X)
    return F.elu(X) + 1.0


def positive_random_features(
    X: torch.Tensor, Omega: torch.Tensor
) -> torch.Tensor:
    """``phi(X) = exp(X Omega - |X|^2 / 2) / sqrt(r)``: Performer's positive random features.

    For ``Omega`` with i.i.d. ``N(0, I)`` columns ``omega_l`` (``l = 0 .. r-1``),
    ``E[exp(omega . q - |q|^2/2) exp(omega . k - |k|^2/2)] = exp(q . k)``, so
    ``phi(q) . phi(k)`` is an unbiased estimate of ``exp(q . k)`` whose every term is
    positive (FAVOR+, Choromanski et al., 2021).

    Args:
        X: ``(..., N, d)`` rows (queries or keys, already multiplied by ``sqrt(scale)``).
        Omega: ``(d, r)`` projection, e.g. from :func:`gaussian_features`.

    Returns:
        ``(..., N, r)``, every entry > 0.

    Example:
        >>> X = torch.tensor([[1.0, 0.0]])
        >>> positive_random_features(X, torch.tensor([[0.0, 1.0], [0.0, 0.0]]))
        tensor([[0.4289, 1.1658]])

    Lesson: 09_frontier.
    """
    _check_projection(X, "X", Omega)
    r = Omega.shape[-1]
    log_phi = X @ Omega - 0.5 * X.pow(2).sum(dim=-1, keepdim=True)  # (..., N, r)
    return torch.exp(log_phi) / math.sqrt(r)


def gaussian_features(
    d: int,
    r: int,
    *,
    orthogonal: bool = False,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """A random projection ``Omega (d, r)`` whose columns are ``N(0, I_d)`` vectors.

    ``orthogonal=True`` draws Performer's block-orthogonal variant: within each block of
    ``d`` consecutive columns the directions are orthonormal (the Q factor of a Gaussian
    matrix, sign-corrected so it is Haar distributed) and each column gets an independent
    chi-distributed length (the norm of a fresh ``N(0, I_d)`` vector). Each column is then
    still exactly ``N(0, I_d)``, so the kernel estimate stays unbiased, and its variance is
    lower.

    Args:
        d: width of the rows to be projected (``d_QK``).
        r: number of features (columns).
        orthogonal: draw orthogonal blocks instead of independent columns.
        generator: random generator (a CPU generator; the draw is moved to ``device``).
        device: where the result lives (default: the default device).
        dtype: floating dtype (default: the default dtype).

    Returns:
        ``(d, r)`` tensor.

    Example:
        >>> Omega = gaussian_features(4, 6, orthogonal=True,
        ...                           generator=torch.Generator().manual_seed(0))
        >>> G = Omega[:, :4] / Omega[:, :4].norm(dim=0)  # the first block: orthonormal
        >>> Omega.shape, torch.allclose(G.T @ G, torch.eye(4), atol=1e-5)
        (torch.Size([4, 6]), True)

    Lesson: 09_frontier.
    """
    check_positive_int("d", d)
    check_positive_int("r", r)
    check_bool("orthogonal", orthogonal)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype; got {dtype}")
    work = torch.float64  # draw in float64 on the CPU: the same numbers on every device
    if not orthogonal:
        Omega = torch.randn(d, r, generator=generator, dtype=work)
    else:
        n_blocks = -(-r // d)  # ceil(r / d) blocks of d columns, the last one cut
        G = torch.randn(n_blocks, d, d, generator=generator, dtype=work)
        Qf, R = torch.linalg.qr(G)  # (n_blocks, d, d): orthonormal columns
        Qf = Qf * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar signs
        lengths = torch.randn(n_blocks, d, d, generator=generator, dtype=work).norm(dim=-2)
        blocks = Qf * lengths.unsqueeze(-2)  # column l of block b: direction x chi(d) length
        Omega = blocks.transpose(0, 1).reshape(d, n_blocks * d)[:, :r]  # (d, r)
    return Omega.to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------
# linear attention
# ---------------------------------------------------------------------------------------


def linear_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    phi: FeatureMap,
    *,
    causal: bool = False,
) -> torch.Tensor:
    """``Y = Z^-1 A V`` with ``A = phi(Q) phi(K)^T``, computed as ``phi(Q) (phi(K)^T V)``.

    By associativity the ``N_Q x N_KV`` matrix ``A`` is never formed:

    * ``numerator = phi(Q) (phi(K)^T V)`` and ``Z = diag(phi(Q) (phi(K)^T 1))``, cost
      ``O((N_Q + N_KV) r d_V)``;
    * ``causal=True`` replaces the two sums by prefix sums over the keys (bottom-right
      aligned, as :func:`attnlib.core.masks.causal_mask`): query ``i`` uses
      ``sum_{j <= i + N_KV - N_Q} phi(k_j)^T v_j``. A query with no visible key gets zeros.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        phi: feature map ``(..., N, d_QK) -> (..., N, r)`` with non-negative outputs, e.g.
            :func:`elu_feature_map`, or ``lambda X: positive_random_features(X, Omega)``.
        causal: apply the causal mask.

    Returns:
        ``(..., N_Q, d_V)``.

    Equivalent to ``attention(Q, K, V, kernel=...)`` with the kernel matrix
    ``A = phi(Q) @ phi(K).mT`` (``Z^-1 A V`` computed literally), in linear time.

    Example:
        >>> Q, K, V = torch.randn(5, 3), torch.randn(7, 3), torch.randn(7, 2)
        >>> A = elu_feature_map(Q) @ elu_feature_map(K).T
        >>> torch.allclose(linear_attention(Q, K, V, elu_feature_map),
        ...                A @ V / A.sum(-1, keepdim=True), atol=1e-5)
        True

    Lesson: 09_frontier.
    """
    _check_linear(Q, K, V, phi, causal=causal)
    phi_Q, phi_K = phi(Q), phi(K)  # (..., N_Q, r), (..., N_KV, r): phi checks its own inputs
    _check_features(phi_Q, phi_K, Q, K)  # a user's callable: its output is checked, never trusted
    return _linear_from_features(phi_Q, phi_K, V, causal)


def _linear_from_features(
    phi_Q: torch.Tensor, phi_K: torch.Tensor, V: torch.Tensor, causal: bool
) -> torch.Tensor:
    """``Z^-1 phi(Q) (phi(K)^T V)`` from the features, plain or with causal prefix sums."""
    n_q, n_kv = phi_Q.shape[-2], phi_K.shape[-2]
    if not causal:
        KV = phi_K.mT @ V  # (..., r, d_V)   phi(K)^T V
        z = phi_K.sum(dim=-2)  # (..., r)     phi(K)^T 1
        num = phi_Q @ KV  # (..., N_Q, d_V)
        den = (phi_Q * z.unsqueeze(-2)).sum(dim=-1, keepdim=True)  # (..., N_Q, 1) diagonal of Z
    else:
        KV = torch.cumsum(phi_K.unsqueeze(-1) * V.unsqueeze(-2), dim=-3)  # (..., N_KV, r, d_V)
        z = torch.cumsum(phi_K, dim=-2)  # (..., N_KV, r)
        last = query_positions(n_q, n_kv, device=phi_Q.device)  # last visible key
        seen = (last >= 0)[:, None]  # (N_Q, 1): does query i see any key?
        last = last.clamp(min=0)
        num = (phi_Q.unsqueeze(-2) @ KV[..., last, :, :]).squeeze(-2)  # (..., N_Q, d_V)
        den = (phi_Q * z[..., last, :]).sum(dim=-1, keepdim=True)  # (..., N_Q, 1)
        num, den = num * seen, den * seen
    return num / torch.where(den > 0, den, torch.ones_like(den))  # Z^-1 (A V); 0 if Z = 0


class LinearAttentionState:
    """The fixed-size state of causal linear attention, updated one token at a time.

    After tokens ``0 .. t`` the state holds ``S = sum_j phi(k_j)^T v_j`` of shape
    ``(..., r, d_V)`` and ``z = sum_j phi(k_j)`` of shape ``(..., r)``; the output of
    query ``q_t`` is ``y_t = phi(q_t) S / (phi(q_t) . z)``. Its size does not depend on how
    many tokens it has seen: this is a recurrent network whose hidden state is the two
    sums that causal linear attention needs.

    Args:
        phi: the feature map (as in :func:`linear_attention`).

    Attributes:
        S: ``(..., r, d_V)`` or ``None`` before the first step.
        z: ``(..., r)`` or ``None`` before the first step.
        n_tokens: tokens seen so far.

    Example:
        >>> state = LinearAttentionState(elu_feature_map)
        >>> for t in range(10):
        ...     y = state.step(torch.randn(3), torch.randn(3), torch.randn(2))
        >>> y.shape, tuple(state.S.shape), state.n_tokens, state.nbytes
        (torch.Size([2]), (3, 2), 10, 36)

    Lesson: 09_frontier.
    """

    def __init__(self, phi: FeatureMap) -> None:
        if not callable(phi):
            raise TypeError(f"phi must be a callable feature map; got {type(phi).__name__}")
        self.phi = phi
        self.S: torch.Tensor | None = None
        self.z: torch.Tensor | None = None
        self.n_tokens = 0

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Add token ``t``'s key and value to the state, then answer its query.

        Args:
            q: ``(..., d_QK)`` the new query.
            k: ``(..., d_QK)`` the new key.
            v: ``(..., d_V)`` the new value.

        Returns:
            ``(..., d_V)``: ``y_t = phi(q) S / (phi(q) . z)``.
        """
        _check_step(q, k, v)
        phi_q, phi_k = self.phi(q), self.phi(k)  # (..., r)
        S_new = phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # (..., r, d_V)  phi(k)^T v
        self.S = S_new if self.S is None else self.S + S_new
        self.z = phi_k if self.z is None else self.z + phi_k
        self.n_tokens += 1
        num = (phi_q.unsqueeze(-2) @ self.S).squeeze(-2)  # (..., d_V)
        den = (phi_q * self.z).sum(dim=-1, keepdim=True)  # (..., 1)
        return num / torch.where(den > 0, den, torch.ones_like(den))

    @property
    def nbytes(self) -> int:
        """Bytes held by ``S`` and ``z`` (0 before the first step)."""
        if self.S is None or self.z is None:
            return 0
        return self.S.numel() * self.S.element_size() + self.z.numel() * self.z.element_size()


def linear_attention_recurrent(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, phi: FeatureMap
) -> torch.Tensor:
    """Causal linear attention token by token through a :class:`LinearAttentionState`.

    Args:
        Q: ``(..., N, d_QK)`` queries (self-attention: one per key).
        K: ``(..., N, d_QK)`` keys.
        V: ``(..., N, d_V)`` values.
        phi: the feature map.

    Returns:
        ``(..., N, d_V)``.

    Equivalent to ``linear_attention(Q, K, V, phi, causal=True)``: the recurrent form and
    the parallel form of the same computation.

    Example:
        >>> Q, K, V = torch.randn(6, 3), torch.randn(6, 3), torch.randn(6, 2)
        >>> torch.allclose(linear_attention_recurrent(Q, K, V, elu_feature_map),
        ...                linear_attention(Q, K, V, elu_feature_map, causal=True), atol=1e-6)
        True

    Lesson: 09_frontier.
    """
    _check_linear(Q, K, V, phi, per_token=True)
    state = LinearAttentionState(phi)
    ys = [state.step(Q[..., t, :], K[..., t, :], V[..., t, :])
          for t in range(Q.shape[-2])]
    return torch.stack(ys, dim=-2)  # (..., N, d_V)


# ---------------------------------------------------------------------------------------
# Performer: softmax attention through positive random features
# ---------------------------------------------------------------------------------------


def random_feature_kernel(
    Q: torch.Tensor, K: torch.Tensor, Omega: torch.Tensor, *, scale: float | None = None
) -> torch.Tensor:
    """The random-feature estimate ``phi(Q') phi(K')^T`` of ``A = exp(scale Q K^T)``.

    ``Q' = sqrt(scale) Q`` and ``K' = sqrt(scale) K``, so that ``Q' K'^T = scale Q K^T``,
    and ``phi`` is :func:`positive_random_features` with ``Omega``. Each entry is an
    unbiased estimate of the corresponding entry of ``A``.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        Omega: ``(d_QK, r)`` projection.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, N_KV)``, every entry > 0.

    Example:
        >>> Q, K = torch.zeros(2, 3), torch.zeros(4, 3)  # exp(0) = 1, and the estimate is exact
        >>> torch.allclose(random_feature_kernel(Q, K, torch.randn(3, 8)), torch.ones(2, 4))
        True

    Lesson: 09_frontier.
    """
    _check_performer(Q, K, None, Omega, False, scale)
    root = math.sqrt(1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale)
    phi_Q = positive_random_features(Q * root, Omega)  # (..., N_Q, r)
    phi_K = positive_random_features(K * root, Omega)  # (..., N_KV, r)
    return phi_Q @ phi_K.mT  # (..., N_Q, N_KV)


def performer_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    Omega: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention approximated in linear time by positive random features (FAVOR+).

    ``Y ~= Z^-1 A V`` with ``A ~= phi(Q') phi(K')^T``, ``Q' = sqrt(scale) Q``,
    ``K' = sqrt(scale) K`` and ``phi`` = :func:`positive_random_features` with ``Omega``,
    computed by :func:`linear_attention`. For numerical safety the log-features of each
    query row are shifted by their maximum and those of the keys by one common maximum;
    both factors cancel in ``Z^-1 A``, so the result is unchanged.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        Omega: ``(d_QK, r)`` projection from :func:`gaussian_features`.
        causal: bottom-right aligned causal mask.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``; as ``r`` grows it approaches ``attention(Q, K, V)``.

    Equivalent to ``row_normalise(random_feature_kernel(Q, K, Omega)) @ V``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> Q, K = torch.randn(4, 8, generator=g) / 2, torch.randn(6, 8, generator=g) / 2
        >>> V = torch.randn(6, 2, generator=g)
        >>> Omega = gaussian_features(8, 4096, generator=g)
        >>> (performer_attention(Q, K, V, Omega) - attention(Q, K, V)).abs().max() < 0.05
        tensor(True)

    Lesson: 09_frontier.
    """
    _check_performer(Q, K, V, Omega, causal, scale)
    root = math.sqrt(1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale)
    Qs, Ks = Q * root, K * root

    def log_phi(X: torch.Tensor) -> torch.Tensor:  # log of positive_random_features, + const
        return X @ Omega - 0.5 * X.pow(2).sum(dim=-1, keepdim=True)  # (..., N, r)

    lq, lk = log_phi(Qs), log_phi(Ks)
    phi_Q = torch.exp(lq - lq.amax(dim=-1, keepdim=True))  # per-query factor: cancels in Z^-1
    phi_K = torch.exp(lk - lk.amax(dim=(-2, -1), keepdim=True))  # one factor for all keys
    return _linear_from_features(phi_Q, phi_K, V, causal)


# ---------------------------------------------------------------------------------------
# top-k sparse attention
# ---------------------------------------------------------------------------------------


def topk_mask(
    scores: torch.Tensor, k: int, *, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """For each query, True on the ``k`` allowed keys with the largest scores.

    Ties are broken towards the smaller key index, so the choice is deterministic. When a
    query has fewer than ``k`` allowed keys, all of them are kept.

    Args:
        scores: ``(..., N_Q, N_KV)`` indexer scores (larger = more relevant).
        k: keys kept per query (>= 1).
        allowed: optional bool ``(..., N_Q, N_KV)`` (broadcastable): the keys a query may
            see at all, such as a causal mask; True = may attend.

    Returns:
        Bool tensor of the broadcast shape of ``scores`` and ``allowed``.

    Example:
        >>> topk_mask(torch.tensor([[0.1, 0.9, 0.5, 0.9]]), 2).int()
        tensor([[0, 1, 0, 1]], dtype=torch.int32)

    Lesson: 09_frontier.
    """
    _check_topk_mask(scores, k, allowed)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices  # ties: smaller j
    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep.scatter_(-1, order[..., : min(k, scores.shape[-1])], True)
    return keep if allowed is None else keep & allowed


def topk_attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    k: int,
    *,
    index_scores: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention in which each query reads only its top-``k`` keys.

    ``S_i`` = the ``k`` visible keys with the largest indexer scores (all visible keys when
    fewer than ``k`` are visible; ties go to the smaller index), and
    ``A[i, j] = 1[j in S_i] exp(scale <q_i, k_j>)``, ``Y = Z^-1 A V``. The indexer scores
    default to the exact logits ``scale Q K^T``; DeepSeek Sparse Attention computes them
    with a small, cheap "lightning indexer" instead.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        k: keys kept per query (>= 1); ``k >= N_KV`` is full attention.
        index_scores: optional ``(..., N_Q, N_KV)`` scores that choose the keys.
        causal: only keys visible under the bottom-right causal mask can be chosen.
        scale: default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, d_V)``.

    Equivalent to ``attention(Q, K, V, mask=topk_mask(scores, k, allowed=causal_mask))``.

    Example:
        >>> Q, K, V = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
        >>> torch.allclose(topk_attention(Q, K, V, 5), attention(Q, K, V), atol=1e-6)
        True

    Lesson: 09_frontier.
    """
    _check_topk(Q, K, V, k, index_scores, causal, scale)
    s = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    if index_scores is None:
        index_scores = s * Q @ K.mT  # (..., N_Q, N_KV) the exact logits
    allowed = causal_mask(n_q, n_kv, device=Q.device) if causal else None
    keep = topk_mask(index_scores, k, allowed=allowed)  # (..., N_Q, N_KV)
    return attention(Q, K, V, mask=keep, scale=s)


# ---------------------------------------------------------------------------------------
# the delta rule: a fixed-size state that is not a row-normalised kernel
# ---------------------------------------------------------------------------------------


def delta_rule(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    beta: torch.Tensor,
    *,
    alpha: torch.Tensor | None = None,
) -> torch.Tensor:
    """The (gated) delta rule: ``S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``.

    Rows are tokens, so the state ``S_t`` is ``(d_QK, d_V)`` and token ``t`` reads
    ``y_t = q_t S_t``. Without ``alpha`` (or with ``alpha = 1``) this is DeltaNet's rule:
    before writing ``v_t`` under the key ``k_t``, it removes ``beta_t`` times what the state
    already returns for ``k_t``, since ``S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})``.
    ``alpha_t in (0, 1]`` is Gated DeltaNet's decay of the whole state. Keys are usually
    L2-normalised first; this function uses them as given. There is no normaliser ``Z``.

    Args:
        Q: ``(..., N, d_QK)`` queries.
        K: ``(..., N, d_QK)`` keys.
        V: ``(..., N, d_V)`` values.
        beta: ``(..., N)`` write strengths, one per token.
        alpha: optional ``(..., N)`` decays, one per token.

    Returns:
        ``(..., N, d_V)``: the rows ``y_t = q_t S_t``.

    Example:
        >>> K = torch.eye(3)  # orthonormal keys, beta = 1: each value is stored exactly
        >>> V = torch.tensor([[1.0], [2.0], [3.0]])
        >>> delta_rule(K, K, V, torch.ones(3)).flatten()
        tensor([1., 2., 3.])

    Lesson: 09_frontier.
    """
    _check_delta(Q, K, V, beta, alpha)
    n = K.shape[-2]
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2], beta.shape[:-1])
    S = torch.zeros(*batch, K.shape[-1], V.shape[-1], dtype=V.dtype, device=V.device)
    ys = []
    for t in range(n):
        q, k, v = Q[..., t, :], K[..., t, :], V[..., t, :]  # (..., d_QK), (..., d_QK), (..., d_V)
        b = beta[..., t, None, None]  # (..., 1, 1)
        if alpha is not None:
            S = alpha[..., t, None, None] * S  # Gated DeltaNet: decay the whole state
        retrieved = (k.unsqueeze(-2) @ S).squeeze(-2)  # (..., d_V)  k_t S_{t-1}
        S = S + b * k.unsqueeze(-1) * (v - retrieved).unsqueeze(-2)  # (..., d_QK, d_V)
        ys.append((q.unsqueeze(-2) @ S).squeeze(-2))  # (..., d_V)  y_t = q_t S_t
    return torch.stack(ys, dim=-2)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def _check_projection(X: object, name: str, Omega: object) -> None:
    """``Omega (d, r)`` projects the rows of ``X (..., N, d)``, with ``X``'s dtype and device."""
    check_tensor(name, X)
    check_matrix("Omega", Omega, rows=X.shape[-1])
    check_like("Omega", Omega, X, f"{name}'s")


def _check_linear(Q, K, V, phi, *, causal=False, per_token=False) -> None:
    check_qkv(Q, K, V)
    check_bool("causal", causal)
    if not callable(phi):
        raise TypeError(f"phi must be a callable feature map; got {type(phi).__name__}")
    if per_token:
        _check_one_query_per_key(Q, K)


def _check_one_query_per_key(Q: torch.Tensor, K: torch.Tensor) -> None:
    if Q.shape[-2] != K.shape[-2]:
        raise ValueError(
            "Q and K must have the same number of rows N (one query per token); got "
            f"Q {tuple(Q.shape)} and K {tuple(K.shape)}"
        )


def _check_performer(Q, K, V, Omega, causal, scale) -> None:
    check_qkv(Q, K, V)
    check_bool("causal", causal)
    check_optional_positive_float("scale", scale)
    check_matrix("Omega", Omega, rows=Q.shape[-1])
    check_like("Omega", Omega, Q, "Q's")


def _check_topk(Q, K, V, k, index_scores, causal, scale) -> None:
    check_qkv(Q, K, V)
    check_bool("causal", causal)
    check_optional_positive_float("scale", scale)
    check_positive_int("k", k)
    if index_scores is not None:
        n_q, n_kv = Q.shape[-2], K.shape[-2]
        check_shape("index_scores", check_tensor("index_scores", index_scores), (n_q, n_kv),
                    f"(..., N_Q, N_KV) = (..., {n_q}, {n_kv})")


def _check_topk_mask(scores: object, k: object, allowed: object) -> None:
    check_tensor("scores", scores, min_dim=2)
    check_positive_int("k", k)
    if allowed is not None:
        _check_allowed(allowed, scores)


def _check_delta(Q, K, V, beta, alpha) -> None:
    check_qkv(Q, K, V)
    _check_one_query_per_key(Q, K)
    for name, g in (("beta", beta), ("alpha", alpha)):
        if g is not None:
            n = K.shape[-2]
            check_shape(name, check_tensor(name, g), (n,), f"(..., N) with N = {n} tokens")


def _check_features(phi_Q: object, phi_K: object, Q: torch.Tensor, K: torch.Tensor) -> None:
    """phi must map (..., N, d) to (..., N, r) with one r for queries and keys, entries >= 0."""
    for name, out, x in (("phi(Q)", phi_Q, Q), ("phi(K)", phi_K, K)):
        if not isinstance(out, torch.Tensor) or out.shape[:-1] != x.shape[:-1]:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"phi must map rows (..., N, d_QK) to features (..., N, r); {name} has "
                f"{got} for an input of shape {tuple(x.shape)}"
            )
        if (out < 0).any():
            raise ValueError(
                f"phi must return non-negative features (Z must be a sum of similarities); "
                f"{name} has a minimum of {out.min().item():.4g}"
            )
    if phi_Q.shape[-1] != phi_K.shape[-1]:
        raise ValueError(
            "phi must give queries and keys the same number of features r; got "
            f"{phi_Q.shape[-1]} and {phi_K.shape[-1]}"
        )


def _check_allowed(allowed: object, scores: torch.Tensor) -> None:
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
        got = allowed.dtype if isinstance(allowed, torch.Tensor) else type(allowed).__name__
        raise TypeError(f"allowed must be a bool tensor (True = may attend); got {got}")
    try:
        torch.broadcast_shapes(allowed.shape, scores.shape)
    except RuntimeError as err:
        raise ValueError(
            f"allowed must broadcast to the scores' shape {tuple(scores.shape)}; got "
            f"{tuple(allowed.shape)}"
        ) from err


def _check_step(q: object, k: object, v: object) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the last dimension d_QK; got {tuple(q.shape)} and "
            f"{tuple(k.shape)}"
        )
