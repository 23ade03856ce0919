"""attnlib.analysis.approx against independent references: explicit Z^-1 A V with
A = phi(Q) phi(K)^T,
explicit loops over queries and keys, the closed form E[phi(q) . phi(k)] = exp(q . k), and a
column-vector re-derivation of the delta rule."""

from __future__ import annotations

import math

import pytest
import torch
from attnlib_testing import tolerances

from attnlib import attention
from attnlib.analysis.approx import (
    LinearAttentionState,
    delta_rule,
    elu_feature_map,
    gaussian_features,
    linear_attention,
    linear_attention_recurrent,
    performer_attention,
    positive_random_features,
    random_feature_kernel,
    topk_attention,
    topk_mask,
)

F64 = torch.float64


def _qkv(gen, n_q=6, n_kv=9, d=4, d_v=3, batch=(), device="cpu", dtype=F64):
    Q = torch.randn(*batch, n_q, d, generator=gen, dtype=dtype).to(device)
    K = torch.randn(*batch, n_kv, d, generator=gen, dtype=dtype).to(device)
    V = torch.randn(*batch, n_kv, d_v, generator=gen, dtype=dtype).to(device)
    return Q, K, V


def _explicit(A: torch.Tensor, V: torch.Tensor, visible=None) -> torch.Tensor:
    """Z^-1 A V row by row with Python loops; rows that see no key are zero."""
    n_q, n_kv = A.shape
    Y = torch.zeros(n_q, V.shape[-1], dtype=V.dtype)
    for i in range(n_q):
        keys = [j for j in range(n_kv) if visible is None or visible(i, j)]
        z = sum(float(A[i, j]) for j in keys)
        for j in keys:
            Y[i] += float(A[i, j]) / z * V[j].cpu()
    return Y


def _bottom_right(n_q, n_kv):
    return lambda i, j: j <= i + n_kv - n_q


# ---------------------------------------------------------------------------------------
# feature maps


def test_elu_feature_map_is_elu_plus_one(gen):
    X = torch.randn(5, 7, generator=gen, dtype=F64)
    ref = torch.where(X > 0, X + 1, torch.exp(X))  # elu(x) + 1 by cases
    torch.testing.assert_close(elu_feature_map(X), ref)
    assert (elu_feature_map(X) > 0).all()


def test_positive_random_features_by_a_loop(gen):
    X = torch.randn(4, 3, generator=gen, dtype=F64)
    Omega = torch.randn(3, 5, generator=gen, dtype=F64)
    phi = positive_random_features(X, Omega)
    for i in range(4):
        for m in range(5):
            dot = sum(float(X[i, a] * Omega[a, m]) for a in range(3))
            sq = sum(float(X[i, a]) ** 2 for a in range(3))
            assert math.isclose(
                float(phi[i, m]), math.exp(dot - sq / 2) / math.sqrt(5), rel_tol=1e-12
            )


def test_gaussian_features_iid_moments():
    Omega = gaussian_features(4, 200_000, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert Omega.shape == (4, 200_000) and Omega.dtype == F64
    cov = Omega @ Omega.T / Omega.shape[1]
    torch.testing.assert_close(cov, torch.eye(4, dtype=F64), atol=0.02, rtol=0)
    assert Omega.mean().abs() < 0.01


@pytest.mark.parametrize(("d", "r"), [(4, 4), (4, 10), (8, 3)])
def test_gaussian_features_orthogonal_blocks(d, r):
    Omega = gaussian_features(
        d, r, orthogonal=True, generator=torch.Generator().manual_seed(1), dtype=F64
    )
    assert Omega.shape == (d, r)
    for start in range(0, r, d):
        block = Omega[:, start : start + d]
        unit = block / block.norm(dim=0)
        torch.testing.assert_close(unit.T @ unit, torch.eye(block.shape[1], dtype=F64))


def test_gaussian_features_orthogonal_lengths_are_chi():
    # each column is N(0, I_d): its squared length has mean d, and so do the orthogonal ones
    d = 6
    Omega = gaussian_features(
        d, 60_000, orthogonal=True, generator=torch.Generator().manual_seed(2), dtype=F64
    )
    sq = Omega.pow(2).sum(dim=0)
    assert abs(sq.mean().item() - d) < 0.05 * d
    assert abs(sq.var().item() - 2 * d) < 0.1 * 2 * d  # chi-squared(d): variance 2d


def test_gaussian_features_seeded_and_on_device(device):
    a = gaussian_features(3, 5, generator=torch.Generator().manual_seed(7), device=device)
    b = gaussian_features(3, 5, generator=torch.Generator().manual_seed(7))
    assert a.device.type == torch.device(device).type
    torch.testing.assert_close(a.cpu(), b)


# ---------------------------------------------------------------------------------------
# linear attention


@pytest.mark.parametrize(("n_q", "n_kv"), [(6, 6), (3, 7), (8, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_equals_explicit_quadratic_form(gen, n_q, n_kv, causal):
    Q, K, V = _qkv(gen, n_q, n_kv)
    A = elu_feature_map(Q) @ elu_feature_map(K).T  # (N_Q, N_KV)
    ref = _explicit(A, V, _bottom_right(n_q, n_kv) if causal else None)
    torch.testing.assert_close(linear_attention(Q, K, V, elu_feature_map, causal=causal), ref)


def test_linear_attention_batched_on_device(device, gen):
    Q, K, V = _qkv(gen, 5, 5, batch=(2, 3), device=device, dtype=torch.float32)
    Y = linear_attention(Q, K, V, elu_feature_map, causal=True)
    assert Y.shape == (2, 3, 5, 3) and Y.device.type == torch.device(device).type
    for b in range(2):
        for h in range(3):
            A = elu_feature_map(Q[b, h]) @ elu_feature_map(K[b, h]).T
            ref = _explicit(A.cpu().double(), V[b, h].cpu().double(), _bottom_right(5, 5))
            torch.testing.assert_close(Y[b, h].cpu().double(), ref, **tolerances(torch.float32))


def test_recurrent_form_equals_causal_parallel_form(gen):
    Q, K, V = _qkv(gen, 12, 12, batch=(2,))
    torch.testing.assert_close(
        linear_attention_recurrent(Q, K, V, elu_feature_map),
        linear_attention(Q, K, V, elu_feature_map, causal=True),
    )


def test_state_size_does_not_grow(gen):
    state = LinearAttentionState(elu_feature_map)
    assert state.nbytes == 0
    sizes = []
    for _t in range(50):
        q, k, v = (torch.randn(4, generator=gen, dtype=F64) for _ in range(3))
        state.step(q, k, v[:2])
        sizes.append(state.nbytes)
    assert set(sizes) == {(4 * 2 + 4) * 8}  # S: r x d_V, z: r, float64
    assert state.n_tokens == 50 and state.S.shape == (4, 2)


# ---------------------------------------------------------------------------------------
# random features


def test_random_feature_kernel_is_unbiased():
    gen = torch.Generator().manual_seed(3)
    d, r, draws = 4, 8, 4000
    Q = torch.randn(3, d, generator=gen, dtype=F64) * 0.7
    K = torch.randn(5, d, generator=gen, dtype=F64) * 0.7
    exact = torch.exp(Q @ K.T / math.sqrt(d))
    estimates = torch.stack(
        [
            random_feature_kernel(Q, K, gaussian_features(d, r, generator=gen, dtype=F64))
            for _ in range(draws)
        ]
    )  # (draws, N_Q, N_KV)
    mean = estimates.mean(dim=0)
    se = estimates.std(dim=0) / math.sqrt(draws)  # standard error of each mean
    assert ((mean - exact).abs() < 5 * se).all(), ((mean - exact) / se).abs().max()
    # a biased estimator (for example without the -|x|^2/2 term) would miss by many SEs
    assert (se < 0.05 * exact).all()


def test_random_feature_error_falls_like_one_over_sqrt_r():
    gen = torch.Generator().manual_seed(4)
    d = 8
    Q = torch.randn(6, d, generator=gen, dtype=F64) * 0.5
    K = torch.randn(6, d, generator=gen, dtype=F64) * 0.5
    exact = torch.exp(Q @ K.T / math.sqrt(d))
    rs = [16, 64, 256, 1024]
    errors = []
    for r in rs:
        e = [
            (
                (
                    random_feature_kernel(Q, K, gaussian_features(d, r, generator=gen, dtype=F64))
                    - exact
                ).norm()
                / exact.norm()
            ).item()
            for _ in range(100)
        ]
        errors.append(sum(e) / len(e))
    slope = (math.log(errors[-1]) - math.log(errors[0])) / (math.log(rs[-1]) - math.log(rs[0]))
    assert -0.6 < slope < -0.4, (slope, errors)


def test_orthogonal_features_have_lower_error():
    gen = torch.Generator().manual_seed(5)
    d, r = 8, 16
    Q = torch.randn(6, d, generator=gen, dtype=F64) * 0.5
    K = torch.randn(6, d, generator=gen, dtype=F64) * 0.5
    exact = torch.exp(Q @ K.T / math.sqrt(d))

    def err(orthogonal):
        e = [
            (
                (
                    random_feature_kernel(
                        Q,
                        K,
                        gaussian_features(d, r, orthogonal=orthogonal, generator=gen, dtype=F64),
                    )
                    - exact
                ).norm()
                / exact.norm()
            ).item()
            for _ in range(150)
        ]
        return sum(e) / len(e)

    assert err(True) < err(False)


@pytest.mark.parametrize("causal", [False, True])
def test_performer_equals_normalised_feature_kernel(gen, causal):
    Q, K, V = _qkv(gen, 7, 7, d=4)
    Omega = gaussian_features(4, 32, generator=gen, dtype=F64)
    A_hat = random_feature_kernel(Q, K, Omega)  # the estimate of exp(QK^T / sqrt(d))
    ref = _explicit(A_hat, V, _bottom_right(7, 7) if causal else None)
    torch.testing.assert_close(performer_attention(Q, K, V, Omega, causal=causal), ref)


def test_performer_approaches_softmax_and_survives_large_logits(gen):
    Q, K, V = _qkv(gen, 5, 8, d=4)
    Omega = gaussian_features(4, 100_000, generator=gen, dtype=F64)
    torch.testing.assert_close(
        performer_attention(Q * 0.5, K * 0.5, V, Omega),
        attention(Q * 0.5, K * 0.5, V),
        atol=0.03,
        rtol=0,
    )
    big = performer_attention(Q * 40, K * 40, V, Omega[:, :64].float().double())
    assert torch.isfinite(big).all()


def test_performer_scale(gen):
    Q, K, V = _qkv(gen, 4, 6, d=4)
    Omega = gaussian_features(4, 16, generator=gen, dtype=F64)
    torch.testing.assert_close(
        performer_attention(Q, K, V, Omega, scale=0.25),
        performer_attention(Q * 0.5, K * 0.5, V, Omega, scale=1.0),
    )


# ---------------------------------------------------------------------------------------
# top-k


def _topk_loop(Q, K, V, k, scores, causal):
    n_q, n_kv = scores.shape
    Y = torch.zeros(n_q, V.shape[-1], dtype=V.dtype)
    for i in range(n_q):
        visible = [j for j in range(n_kv) if not causal or j <= i + n_kv - n_q]
        chosen = sorted(visible, key=lambda j: (-float(scores[i, j]), j))[:k]
        if not chosen:
            continue
        logits = torch.tensor([float(Q[i] @ K[j]) / math.sqrt(Q.shape[-1]) for j in chosen])
        w = torch.softmax(logits.double(), dim=0)
        for wj, j in zip(w, chosen, strict=True):
            Y[i] += wj * V[j]
    return Y


@pytest.mark.parametrize("k", [1, 3, 5, 9, 20])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("indexer", [False, True])
def test_topk_attention_by_a_loop(gen, k, causal, indexer):
    Q, K, V = _qkv(gen, 6, 9)
    P = torch.randn(4, 2, generator=gen, dtype=F64)  # a cheap indexer: 2-dim projections
    scores = (Q @ P) @ (K @ P).T if indexer else Q @ K.T / 2
    got = topk_attention(Q, K, V, k, index_scores=scores if indexer else None, causal=causal)
    torch.testing.assert_close(got, _topk_loop(Q, K, V, k, scores, causal))


def test_topk_with_all_keys_is_full_attention(device, gen):
    Q, K, V = _qkv(gen, 5, 5, batch=(2,), device=device)
    torch.testing.assert_close(topk_attention(Q, K, V, 5), attention(Q, K, V))
    torch.testing.assert_close(
        topk_attention(Q, K, V, 5, causal=True), attention(Q, K, V, causal=True)
    )


def test_topk_mask_ties_and_few_visible():
    scores = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0]])
    assert topk_mask(scores, 2).tolist() == [[False, True, True, False, False]]
    allowed = torch.tensor([[True, False, False, False, True]])
    assert topk_mask(scores, 3, allowed=allowed).tolist() == [[True, False, False, False, True]]


# ---------------------------------------------------------------------------------------
# the delta rule


def _delta_columns(Q, K, V, beta, alpha=None):
    """The rule as the papers write it, column vectors and S of shape (d_V, d_QK):
    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t."""
    d, d_v = K.shape[-1], V.shape[-1]
    S = torch.zeros(d_v, d, dtype=F64)
    out = []
    for t in range(K.shape[0]):
        k, v, q = K[t][:, None], V[t][:, None], Q[t][:, None]
        a = 1.0 if alpha is None else float(alpha[t])
        S = a * S @ (torch.eye(d, dtype=F64) - beta[t] * k @ k.T) + beta[t] * v @ k.T
        out.append((S @ q).flatten())
    return torch.stack(out)


@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_matches_the_column_form(gen, gated):
    Q, K, V = _qkv(gen, 8, 8)
    K = K / K.norm(dim=-1, keepdim=True)
    beta = torch.rand(8, generator=gen, dtype=F64)
    alpha = torch.rand(8, generator=gen, dtype=F64) if gated else None
    torch.testing.assert_close(
        delta_rule(Q, K, V, beta, alpha=alpha), _delta_columns(Q, K, V, beta, alpha)
    )


def test_delta_rule_batched(gen):
    Q, K, V = _qkv(gen, 5, 5, batch=(2,))
    beta = torch.rand(2, 5, generator=gen, dtype=F64)
    Y = delta_rule(Q, K, V, beta)
    for b in range(2):
        torch.testing.assert_close(Y[b], _delta_columns(Q[b], K[b], V[b], beta[b]))


def test_delta_rule_overwrites_a_repeated_key():
    k = torch.tensor([[1.0, 0.0]], dtype=F64)
    K = k.repeat(3, 1)
    V = torch.tensor([[1.0], [5.0], [-2.0]], dtype=F64)
    Y = delta_rule(K, K, V, torch.ones(3, dtype=F64))
    assert Y.flatten().tolist() == [1.0, 5.0, -2.0]  # beta = 1: the last write wins
    # linear attention with the same key would return a running average instead
    Y_lin = linear_attention(K, K, V, lambda X: X.abs(), causal=True)
    torch.testing.assert_close(Y_lin.flatten(), torch.tensor([1.0, 3.0, 4 / 3], dtype=F64))


# ---------------------------------------------------------------------------------------
# input checks


q, k_, v = torch.randn(5, 4), torch.randn(7, 4), torch.randn(7, 3)
CASES = [
    ("phi-callable", lambda: linear_attention(q, k_, v, 3), TypeError, ["phi", "callable"]),
    (
        "phi-negative",
        lambda: linear_attention(q, k_, v, lambda X: X),
        ValueError,
        ["phi", "non-negative", "minimum"],
    ),
    (
        "phi-shape",
        lambda: linear_attention(q, k_, v, lambda X: X.sum(-1)),
        ValueError,
        ["phi", "(..., N, r)", "(5,)"],
    ),
    (
        "QK-width",
        lambda: linear_attention(torch.randn(5, 3), k_, v, elu_feature_map),
        ValueError,
        ["Q and K", "d_QK"],
    ),
    (
        "Omega-rows",
        lambda: positive_random_features(q, torch.randn(3, 8)),
        ValueError,
        ["Omega", "4 rows", "(3, 8)"],
    ),
    (
        "Omega-dtype",
        lambda: performer_attention(q, k_, v, torch.randn(4, 8).double()),
        TypeError,
        ["Omega", "float32", "float64"],
    ),
    ("r-zero", lambda: gaussian_features(4, 0), ValueError, ["r", ">= 1", "0"]),
    (
        "orthogonal-type",
        lambda: gaussian_features(4, 2, orthogonal=1),
        TypeError,
        ["orthogonal", "bool"],
    ),
    ("k-zero", lambda: topk_attention(q, k_, v, 0), ValueError, ["k", ">= 1", "0"]),
    (
        "index-shape",
        lambda: topk_attention(q, k_, v, 2, index_scores=torch.randn(5, 6)),
        ValueError,
        ["index_scores", "(..., 5, 7)", "(5, 6)"],
    ),
    (
        "allowed-dtype",
        lambda: topk_mask(torch.randn(2, 3), 1, allowed=torch.ones(2, 3)),
        TypeError,
        ["allowed", "bool", "float32"],
    ),
    (
        "beta-shape",
        lambda: delta_rule(q, q, torch.randn(5, 2), torch.rand(4)),
        ValueError,
        ["beta", "N = 5", "(4,)"],
    ),
    (
        "delta-rows",
        lambda: delta_rule(q, k_, v, torch.rand(7)),
        ValueError,
        ["Q and K", "same number of rows"],
    ),
    (
        "recurrent-rows",
        lambda: linear_attention_recurrent(q, k_, v, elu_feature_map),
        ValueError,
        ["Q and K", "same number of rows"],
    ),
    ("state-phi", lambda: LinearAttentionState("elu"), TypeError, ["phi", "callable", "str"]),
]


@pytest.mark.parametrize(("case", "thunk", "exc", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_named(case, thunk, exc, fragments):
    with pytest.raises(exc) as info:
        thunk()
    for fragment in fragments:
        assert fragment in str(info.value), (case, str(info.value))


def test_a_callback_feature_map_checks_its_own_arguments():
    """linear_attention calls phi with checked Q and K, and positive_random_features inside a
    lambda checks Omega as a direct call does (a ValueError naming Omega, not torch's
    'mat1 and mat2 shapes cannot be multiplied')."""
    Q, K, V = torch.randn(5, 4), torch.randn(7, 4), torch.randn(7, 2)
    wrong = torch.randn(3, 8)  # 3 rows for rows of width 4
    with pytest.raises(ValueError) as direct:
        positive_random_features(Q, wrong)
    with pytest.raises(ValueError) as inside:
        linear_attention(Q, K, V, lambda X: positive_random_features(X, wrong))
    assert str(inside.value) == str(direct.value)
    assert "Omega" in str(inside.value) and "(3, 8)" in str(inside.value)
