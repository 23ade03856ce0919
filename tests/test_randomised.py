"""attnlib.analysis.randomised against independent references: PyTorch's SDPA, explicit loops, exact
enumeration of every outcome, closed forms, and seeded statistical checks of the bounds.

Statistical tests are seeded, so each one gives the same verdict on every run. Their
tolerances are set so that an unseeded draw of a correct implementation would fail rarely:
a mean is compared with its target at 5 standard errors (two-sided normal tail about
6e-7 per coordinate, so below 1e-4 for a test of up to a hundred coordinates), and a
tail frequency with a bound at the bound plus 5 binomial standard errors (again below
1e-6). Each test states its own case where it differs.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import attnlib
from attnlib.analysis import randomised as R

F64 = torch.float64


def _qkv(seed, n_q=5, n_kv=12, d=4, d_v=3, scale=1.0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(n_q, d, generator=gen, dtype=F64) * scale
    K = torch.randn(n_kv, d, generator=gen, dtype=F64) * scale
    V = torch.randn(n_kv, d_v, generator=gen, dtype=F64)
    return Q.to(device), K.to(device), V.to(device)


def _sdpa_weights(Q, K):
    """P = softmax(Q K^T / sqrt(d)) by SDPA on one-hot values (an independent route to P)."""
    eye = torch.eye(K.shape[-2], dtype=K.dtype, device=K.device)
    return F.scaled_dot_product_attention(Q, K, eye)


# ---------------------------------------------------------------------------------------
# sampling keys


def test_sample_keys_frequencies_match_the_probabilities():
    probs = torch.tensor([0.5, 0.0, 0.2, 0.3], dtype=F64)
    draws = 100_000
    j = R.sample_keys(probs, draws, generator=torch.Generator().manual_seed(0))
    assert j.shape == (draws,) and j.dtype == torch.int64
    counts = torch.bincount(j, minlength=4).double()
    assert counts[1] == 0  # a zero-probability key is never drawn
    se = (draws * probs * (1 - probs)).sqrt()
    assert ((counts - draws * probs).abs() <= 5 * se + 1e-12).all()


def test_sample_keys_normalises_rows_and_batches():
    probs = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]], dtype=F64)
    j = R.sample_keys(probs, 7, generator=torch.Generator().manual_seed(1))
    assert j.tolist() == [[0] * 7, [2] * 7]


def test_sample_keys_same_on_every_device(device):
    probs = torch.softmax(torch.randn(3, 9, generator=torch.Generator().manual_seed(2)), -1)
    a = R.sample_keys(probs.to(device), 5, generator=torch.Generator().manual_seed(3))
    b = R.sample_keys(probs, 5, generator=torch.Generator().manual_seed(3))
    assert a.device.type == torch.device(device).type
    assert torch.equal(a.cpu(), b)


@pytest.mark.parametrize(
    ("probs", "m", "error", "match"),
    [
        (torch.tensor([0.5, -0.1]), 3, ValueError, "non-negative"),
        (torch.zeros(3), 3, ValueError, "positive sum"),
        (torch.ones(3), 0, ValueError, "m must be a positive int"),
        ([0.5, 0.5], 3, TypeError, "probs must be a torch.Tensor"),
    ],
)
def test_sample_keys_rejects_bad_input(probs, m, error, match):
    with pytest.raises(error, match=match):
        R.sample_keys(probs, m)


# ---------------------------------------------------------------------------------------
# importance sampling


def test_importance_attention_is_the_self_normalised_estimate_by_a_loop():
    Q, K, V = _qkv(4)
    rho = torch.softmax(torch.randn(5, 12, generator=torch.Generator().manual_seed(5),
                                    dtype=F64), -1)
    m = 6
    Y = R.importance_attention(Q, K, V, rho, m, generator=torch.Generator().manual_seed(6))
    j = R.sample_keys(rho, m, generator=torch.Generator().manual_seed(6))  # the same draws
    for i in range(5):
        w = [math.exp(float(Q[i] @ K[int(s)]) / 2.0) / float(rho[i, int(s)]) for s in j[i]]
        y = sum(wt * V[int(s)] for wt, s in zip(w, j[i], strict=True)) / sum(w)
        torch.testing.assert_close(Y[i], y)


def test_monte_carlo_from_P_is_unbiased_with_variance_over_m():
    Q, K, V = _qkv(7, n_q=3)
    P = _sdpa_weights(Q, K)
    Y = F.scaled_dot_product_attention(Q, K, V)
    draws, m = 20_000, 4
    est = R.importance_attention(Q.expand(draws, 3, 4), K, V, P, m,
                                 generator=torch.Generator().manual_seed(8))  # (draws, 3, 3)
    se = est.std(dim=0) / math.sqrt(draws)
    assert ((est.mean(dim=0) - Y).abs() <= 5 * se).all()  # unbiased
    var = torch.tensor([sum(float(P[i, j]) * float((V[j] - Y[i]).pow(2).sum())
                            for j in range(12)) for i in range(3)], dtype=F64)  # by a loop
    torch.testing.assert_close(R.sampling_variance(P, V), var)
    sq = (est - Y).pow(2).sum(dim=-1)  # (draws, 3)
    assert ((sq.mean(0) - var / m).abs() <= 5 * sq.std(0) / math.sqrt(draws)).all()


def test_importance_attention_converges_to_sdpa(device):
    Q, K, V = _qkv(9, device=device)
    rho = torch.full((5, 12), 1 / 12, dtype=F64, device=device)
    Y = R.importance_attention(Q, K, V, rho, 200_000, generator=torch.Generator().manual_seed(10))
    assert Y.device.type == torch.device(device).type
    # first-order standard deviation sqrt(sampling_variance / m); 5 of them per query
    sd = (R.sampling_variance(_sdpa_weights(Q, K), V, rho) / 200_000).sqrt()
    err = (Y - F.scaled_dot_product_attention(Q, K, V)).norm(dim=-1)
    assert (err <= 5 * sd).all()


def test_importance_with_P_equals_the_mean_of_the_sampled_values():
    Q, K, V = _qkv(11)
    P = _sdpa_weights(Q, K)
    j = R.sample_keys(P, 9, generator=torch.Generator().manual_seed(12))
    Y = R.importance_attention(Q, K, V, P, 9, generator=torch.Generator().manual_seed(12))
    torch.testing.assert_close(Y, V[j].mean(dim=-2))


def test_importance_error_below_the_agapiou_bound():
    """E|y_hat - y|^2 <= 4 rho_bar sum_c max_j (V_jc - y_c)^2 / m (Agapiou et al., 2017)."""
    Q, K, V = _qkv(13, n_q=1, n_kv=40, scale=2.0)
    P = _sdpa_weights(Q, K)
    y = P @ V
    rho = torch.full((1, 40), 1 / 40, dtype=F64)
    for m in (2, 8, 32):
        est = R.importance_attention(Q.expand(4000, 1, 4), K, V, rho, m,
                                     generator=torch.Generator().manual_seed(m))
        mse = float((est - y).pow(2).sum(-1).mean())
        # sum_c max_j (V_jc - y_c)^2 and rho_bar = sum P^2 / rho, computed by hand
        spread = sum(max(float(V[j, c] - y[0, c]) ** 2 for j in range(40)) for c in range(3))
        rho_bar = float((P[0] ** 2 / rho[0]).sum())
        assert mse <= 4 * rho_bar * spread / m


def test_effective_sample_size_and_first_order_variance():
    P = torch.tensor([[0.7, 0.2, 0.1]], dtype=F64)
    rho = torch.tensor([[1 / 3, 1 / 3, 1 / 3]], dtype=F64)
    assert float(R.effective_sample_size(P, P, m=10)[0]) == pytest.approx(10.0)
    expected = 10 / (3 * (0.49 + 0.04 + 0.01))
    assert float(R.effective_sample_size(P, rho, m=10)[0]) == pytest.approx(expected)
    V = torch.tensor([[1.0], [0.0], [-1.0]], dtype=F64)
    y = 0.7 - 0.1
    first = sum(p * p / (1 / 3) * (v - y) ** 2 for p, v in zip((0.7, 0.2, 0.1), (1, 0, -1),
                                                              strict=True))
    assert float(R.sampling_variance(P, V, rho)[0]) == pytest.approx(first)


def test_norm_proposal_is_the_cauchy_schwarz_envelope():
    Q, K, _ = _qkv(14)
    rho = R.norm_proposal(Q, K)
    torch.testing.assert_close(rho.sum(-1), torch.ones(5, dtype=F64))
    env = torch.exp(Q.norm(dim=-1)[:, None] * K.norm(dim=-1)[None, :] / 2.0)  # scale 1/sqrt(4)
    torch.testing.assert_close(rho, env / env.sum(-1, keepdim=True))
    A = torch.exp(Q @ K.T / 2.0)
    assert (A <= env * (1 + 1e-12)).all()  # the weights A / rho are bounded


def test_sketch_proposal_with_the_identity_is_P():
    Q, K, _ = _qkv(15)
    torch.testing.assert_close(R.sketch_proposal(Q, K, torch.eye(4, dtype=F64)),
                               _sdpa_weights(Q, K))


def test_importance_attention_rejects_bad_input():
    Q, K, V = _qkv(16)
    with pytest.raises(ValueError, match=r"proposal must have shape \(\.\.\., N_Q, N_KV\)"):
        R.importance_attention(Q, K, V, torch.ones(5, 11, dtype=F64), 3)
    with pytest.raises(ValueError, match="proposal must be non-negative"):
        R.importance_attention(Q, K, V, -torch.ones(5, 12, dtype=F64), 3)
    with pytest.raises(TypeError, match="proposal must have Q's dtype"):
        R.importance_attention(Q, K, V, torch.ones(5, 12), 3)
    with pytest.raises(ValueError, match="m must be a positive int"):
        R.importance_attention(Q, K, V, torch.ones(5, 12, dtype=F64), 0)
    with pytest.raises(ValueError, match="Q and K must share the last dimension"):
        R.importance_attention(Q, K[:, :3], V, torch.ones(5, 12, dtype=F64), 3)


# ---------------------------------------------------------------------------------------
# sampling columns for A V


def _A_V(seed=17, n_q=3, n_kv=5):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(n_q, n_kv, generator=gen, dtype=F64) ** 3,
            torch.randn(n_kv, 2, generator=gen, dtype=F64))


def test_product_probabilities_by_a_loop():
    A, V = _A_V()
    c = [math.sqrt(sum(float(A[i, j]) ** 2 for i in range(3)))
         * math.sqrt(sum(float(V[j, k]) ** 2 for k in range(2))) for j in range(5)]
    torch.testing.assert_close(R.product_probabilities(A, V),
                               torch.tensor([x / sum(c) for x in c], dtype=F64))


@pytest.mark.parametrize("m", [1, 2])
def test_sampled_product_mse_by_enumerating_every_outcome(m):
    A, V = _A_V()
    AV = A @ V
    for p in (R.product_probabilities(A, V), torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25],
                                                          dtype=F64)):
        mean, mse = torch.zeros_like(AV), 0.0
        for js in itertools.product(range(5), repeat=m):  # every sequence of m columns
            prob = math.prod(float(p[j]) for j in js)
            est = sum(torch.outer(A[:, j], V[j]) / float(p[j]) for j in js) / m
            mean += prob * est
            mse += prob * float((est - AV).pow(2).sum())
        torch.testing.assert_close(mean, AV)  # unbiased, exactly
        assert float(R.sampled_product_mse(A, V, m, probs=p)) == pytest.approx(mse, rel=1e-10)


def test_optimal_probabilities_minimise_the_error_and_meet_the_bound():
    A, V = _A_V(18, n_q=6, n_kv=30)
    best = float(R.sampled_product_mse(A, V, 4))
    gen = torch.Generator().manual_seed(19)
    for _ in range(50):
        other = torch.rand(30, generator=gen, dtype=F64) + 0.01
        assert best <= float(R.sampled_product_mse(A, V, 4, probs=other)) + 1e-12
    assert best <= float(A.norm() ** 2 * V.norm() ** 2) / 4  # Drineas, Kannan and Mahoney


def test_sampled_product_is_unbiased_and_its_mse_matches_the_formula():
    A, V = _A_V(20, n_q=4, n_kv=20)
    draws, m = 20_000, 3
    est = R.sampled_product(A.expand(draws, 4, 20), V, m,
                            generator=torch.Generator().manual_seed(21))
    se = est.std(dim=0) / math.sqrt(draws)
    assert ((est.mean(dim=0) - A @ V).abs() <= 5 * se).all()
    sq = (est - A @ V).pow(2).sum(dim=(-2, -1))
    assert abs(float(sq.mean()) - float(R.sampled_product_mse(A, V, m))) <= 5 * float(
        sq.std() / math.sqrt(draws))
    one = R.sampled_product(A, V, m, generator=torch.Generator().manual_seed(22))
    assert one.shape == (4, 2)


def test_sampled_product_rejects_bad_input():
    A, V = _A_V()
    with pytest.raises(ValueError, match="A's columns must match V's rows"):
        R.sampled_product(A, V[:4], 2)
    with pytest.raises(ValueError, match="probs must be non-negative"):
        R.sampled_product(A, V, 2, probs=torch.ones(4, dtype=F64))


# ---------------------------------------------------------------------------------------
# sketching the logits


def test_gaussian_sketch_is_features_over_sqrt_r():
    a = R.gaussian_sketch(6, 10, generator=torch.Generator().manual_seed(23), dtype=F64)
    b = attnlib.analysis.approx.gaussian_features(6, 10,
                                                  generator=torch.Generator().manual_seed(23),
                                         dtype=F64)
    torch.testing.assert_close(a, b / math.sqrt(10))


def test_sketched_dot_product_mean_variance_and_jl_tail():
    gen = torch.Generator().manual_seed(24)
    q, k = torch.randn(8, generator=gen, dtype=F64), torch.randn(8, generator=gen, dtype=F64)
    r, draws = 32, 20_000
    # draws sketches of width r side by side: N(0, 1/r) entries
    Omega = attnlib.analysis.approx.gaussian_features(8, r * draws, generator=gen,
                                                      dtype=F64) / math.sqrt(r)
    est = ((q @ Omega) * (k @ Omega)).reshape(draws, r).sum(-1)
    exact, size = float(q @ k), float(q.norm() * k.norm())
    assert abs(float(est.mean()) - exact) <= 5 * float(est.std()) / math.sqrt(draws)
    variance = (size**2 + exact**2) / r
    # the sample variance of 20,000 draws is within 5% of the truth here (its relative
    # standard deviation is about sqrt(2 / 20,000) times a kurtosis factor below 3)
    assert float(est.var()) == pytest.approx(variance, rel=0.05)
    for eps in (0.5, 0.7):
        freq = float(((est - exact).abs() > eps * size).double().mean())
        bound = 4 * math.exp(-r * (eps**2 - eps**3) / 4)
        assert freq <= bound + 5 * math.sqrt(bound * (1 - min(bound, 1)) / draws)


def test_sketched_logits_and_sketch_attention_with_the_identity_are_exact(device):
    Q, K, V = _qkv(25, device=device)
    eye = torch.eye(4, dtype=F64, device=device)
    torch.testing.assert_close(R.sketched_logits(Q, K, eye, scale=1.0), Q @ K.T)
    torch.testing.assert_close(R.sketch_attention(Q, K, V, eye),
                               F.scaled_dot_product_attention(Q, K, V))


def test_sketch_attention_is_attention_of_the_sketched_rows():
    Q, K, V = _qkv(26)
    Omega = R.gaussian_sketch(4, 3, generator=torch.Generator().manual_seed(27), dtype=F64)
    torch.testing.assert_close(
        R.sketch_attention(Q, K, V, Omega),
        F.scaled_dot_product_attention(Q @ Omega, K @ Omega, V, scale=0.5))  # 1/sqrt(d_QK)


def test_sketch_rejects_a_wrong_omega():
    Q, K, V = _qkv(28)
    with pytest.raises(ValueError, match="Omega must have 4 rows"):
        R.sketch_attention(Q, K, V, torch.eye(3, dtype=F64))


# ---------------------------------------------------------------------------------------
# low rank along the sequence


def test_linformer_is_attention_over_projected_keys_and_values(device):
    Q, K, V = _qkv(29, device=device)
    gen = torch.Generator().manual_seed(30)
    E = torch.randn(4, 12, generator=gen, dtype=F64).to(device)
    Fm = torch.randn(4, 12, generator=gen, dtype=F64).to(device)
    torch.testing.assert_close(R.linformer_attention(Q, K, V, E, Fm),
                               F.scaled_dot_product_attention(Q, E @ K, Fm @ V))
    torch.testing.assert_close(R.linformer_attention(Q, K, V, torch.eye(12, dtype=F64,
                                                                          device=device)),
                               F.scaled_dot_product_attention(Q, K, V))
    with pytest.raises(ValueError, match="E must have N_KV = 12 columns"):
        R.linformer_attention(Q, K, V, E[:, :11])


def test_iterative_pinv_converges_to_the_pseudo_inverse():
    W = torch.softmax(torch.randn(6, 6, generator=torch.Generator().manual_seed(31),
                                  dtype=F64), -1)
    torch.testing.assert_close(R._iterative_pinv(W, 40), torch.linalg.pinv(W))


def test_nystrom_by_its_formula_and_exact_with_every_token():
    Q, K, V = _qkv(32, n_q=12, n_kv=12)
    s = 0.5
    Ql = torch.stack([Q[3 * a:3 * a + 3].mean(0) for a in range(4)])  # 4 segment means
    Kl = torch.stack([K[3 * a:3 * a + 3].mean(0) for a in range(4)])
    W = torch.softmax(s * Ql @ Kl.T, -1)
    ref = (torch.softmax(s * Q @ Kl.T, -1) @ torch.linalg.pinv(W)
           @ torch.softmax(s * Ql @ K.T, -1) @ V)
    torch.testing.assert_close(R.nystrom_attention(Q, K, V, 4, iterations=60), ref)
    torch.testing.assert_close(R.nystrom_attention(Q, K, V, 12, iterations=60),
                               F.scaled_dot_product_attention(Q, K, V))
    sampled = R.nystrom_attention(Q, K, V, 12, landmarks="sampled", iterations=60,
                                  generator=torch.Generator().manual_seed(33))
    torch.testing.assert_close(sampled, F.scaled_dot_product_attention(Q, K, V))


def test_nystrom_rejects_bad_input():
    Q, K, V = _qkv(34)
    with pytest.raises(ValueError, match="r must be at most min"):
        R.nystrom_attention(Q, K, V, 6)
    with pytest.raises(ValueError, match='landmarks="sampled"'):
        R.nystrom_attention(Q, K, V, 3, landmarks="sampled")
    with pytest.raises(ValueError, match="landmarks must be one of"):
        R.nystrom_attention(Q, K, V, 3, landmarks="random")


# ---------------------------------------------------------------------------------------
# the randomised SVD and MLA


def _spectrum_matrix(m=60, n=40, seed=35, decay=6.0):
    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(m, n, generator=gen, dtype=F64)).Q
    Psi = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=F64)).Q
    s = torch.exp(-torch.arange(n, dtype=F64) / decay)
    return (U * s) @ Psi.T, s


def test_randomised_svd_recovers_a_low_rank_matrix_exactly():
    gen = torch.Generator().manual_seed(36)
    W = torch.randn(30, 5, generator=gen, dtype=F64) @ torch.randn(5, 20, generator=gen,
                                                                   dtype=F64)
    U, S, Vh = R.randomised_svd(W, 5, oversample=3, power_iterations=0, generator=gen)
    torch.testing.assert_close((U * S) @ Vh, W)
    torch.testing.assert_close(S, torch.linalg.svdvals(W)[:5])
    torch.testing.assert_close(U.T @ U, torch.eye(5, dtype=F64))


def test_randomised_svd_meets_the_halko_bound_and_approaches_eckart_young():
    """Corollary 10.10 of Halko et al. plus the truncation, on the mean over 200 draws.

    The bound is on the expectation; the mean of 200 draws exceeds it only if the mean
    exceeds its expectation by more than the gap, which here is several times the largest
    error ever drawn, so a false failure is out of reach.
    """
    W, s = _spectrum_matrix()
    k = 8
    gen = torch.Generator().manual_seed(37)
    for p, t in ((2, 0), (5, 0), (5, 1)):
        errs = []
        for _ in range(200):
            U, S, Vh = R.randomised_svd(W, k, oversample=p, power_iterations=t, generator=gen)
            errs.append(float(torch.linalg.svdvals(W - (U * S) @ Vh)[0]))
        q = 2 * t + 1
        bound = float(s[k]) + ((1 + math.sqrt(k / (p - 1))) * float(s[k]) ** q
                               + math.e * math.sqrt(k + p) / p
                               * float(s[k:].pow(2 * q).sum().sqrt())) ** (1 / q)
        assert min(errs) >= float(s[k]) * (1 - 1e-9)  # never better than Eckart-Young
        assert sum(errs) / len(errs) <= bound
    U, S, Vh = R.randomised_svd(W, k, oversample=5, power_iterations=3, generator=gen)
    assert float((W - (U * S) @ Vh).norm()) == pytest.approx(float(s[k:].norm()), rel=1e-3)


def test_randomised_svd_multiply_adds_match_pytorch_counter():
    W, _ = _spectrum_matrix(50, 30)
    for t in (0, 2):
        with FlopCounterMode(display=False) as counter:
            R.randomised_svd(W, 6, oversample=4, power_iterations=t)
        assert counter.get_total_flops() // 2 == R.randomised_svd_multiply_adds(50, 30, 6, 4, t)


def test_randomised_svd_rejects_bad_input():
    W, _ = _spectrum_matrix(10, 8)
    with pytest.raises(ValueError, match="rank \\+ oversample must be at most"):
        R.randomised_svd(W, 6, oversample=3)
    with pytest.raises(ValueError, match="power_iterations must be a non-negative int"):
        R.randomised_svd(W, 2, power_iterations=-1)


def _gqa_with(W_KV, n_heads=4, n_kv_heads=2, d_head=4, seed=38):
    torch.manual_seed(seed)
    gqa = attnlib.GroupedQueryAttention(W_KV.shape[0], n_heads, n_kv_heads, d_head, dtype=F64)
    with torch.no_grad():
        gqa.W_K.copy_(W_KV[:, : n_kv_heads * d_head])
        gqa.W_V.copy_(W_KV[:, n_kv_heads * d_head:])
    return gqa


def test_randomised_mla_matches_the_exact_conversion():
    W, _ = _spectrum_matrix(24, 16, decay=3.0)
    gqa = _gqa_with(W)
    X = torch.randn(2, 7, 24, generator=torch.Generator().manual_seed(39), dtype=F64)
    with torch.no_grad():
        whole = R.randomised_mla_from_mha(gqa, 12, oversample=4,
                                          generator=torch.Generator().manual_seed(40))
        assert isinstance(whole, attnlib.MultiHeadLatentAttention) and whole.d_latent == 12
        # d_L + p = 16 = rank: the range finder sees the whole range, so the result is the
        # exact truncated SVD; at d_L = 16 it is the source itself
        torch.testing.assert_close(whole(X), attnlib.mla_from_mha(gqa, 12)(X))
        full = R.randomised_mla_from_mha(gqa, 16, oversample=0,
                                         generator=torch.Generator().manual_seed(40))
        torch.testing.assert_close(full(X, causal=True), gqa(X, causal=True))
        fast = R.randomised_mla_from_mha(gqa, 6, oversample=4, power_iterations=4,
                                         generator=torch.Generator().manual_seed(41))
        exact = attnlib.mla_from_mha(gqa, 6)
        # the same rank-6 approximation of [W_K | W_V]: the products W_L W_LK and W_L W_LV
        torch.testing.assert_close(fast.W_L @ fast.W_LK, exact.W_L @ exact.W_LK, atol=1e-6,
                                   rtol=0)
        torch.testing.assert_close(fast(X), exact(X), atol=1e-6, rtol=0)


def test_mla_from_mha_svd_hook():
    W, _ = _spectrum_matrix(24, 16)
    gqa = _gqa_with(W)

    def truncated(W_KV, r):
        U, S, Vh = torch.linalg.svd(W_KV, full_matrices=False)
        return U[:, :r], S[:r], Vh[:r]

    a, b = attnlib.mla_from_mha(gqa, 5), attnlib.mla_from_mha(gqa, 5, svd=truncated)
    for name in ("W_L", "W_LK", "W_LV", "W_LQQ", "W_O"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name))
    with pytest.raises(TypeError, match="svd must be a callable"):
        attnlib.mla_from_mha(gqa, 5, svd="randomised")


# ---------------------------------------------------------------------------------------
# multiply-adds


def _counted(fn, *args, **kwargs):
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops() // 2


def test_multiply_adds_of_the_matrix_product_estimators_match_pytorch():
    n_q, n_kv, d, d_v, r = 6, 12, 4, 3, 4
    Q, K, V = _qkv(42, n_q, n_kv, d, d_v)
    assert _counted(attnlib.attention, Q, K, V, impl="explicit") == R.multiply_adds(
        "exact", n_q, n_kv, d, d_v, 0)
    E = torch.randn(r, n_kv, dtype=F64)
    assert _counted(R.linformer_attention, Q, K, V, E) == R.multiply_adds(
        "linformer", n_q, n_kv, d, d_v, r)
    # Nystrom: every product is counted; the segment means are additions, (N_Q + N_KV) d
    assert _counted(R.nystrom_attention, Q, K, V, r) == R.multiply_adds(
        "nystrom", n_q, n_kv, d, d_v, r) - (n_q + n_kv) * d
    # random features: the normaliser phi(Q) (phi(K)^T 1) is (N_Q + N_KV) r, elementwise
    Omega = attnlib.analysis.approx.gaussian_features(d, r, dtype=F64)
    assert _counted(attnlib.analysis.approx.performer_attention, Q, K, V, Omega) == R.multiply_adds(
        "random features", n_q, n_kv, d, d_v, r) - (n_q + n_kv) * r


def test_multiply_adds_of_the_sampling_estimators_by_hand():
    n_q, n_kv, d, d_v = 10, 100, 8, 6
    assert R.multiply_adds("monte carlo", n_q, n_kv, d, d_v, 5) == 10 * 100 * 8 + 10 * 5 * 6
    assert R.multiply_adds("importance, uniform", n_q, n_kv, d, d_v, 5) == 10 * 5 * 14
    assert (R.multiply_adds("importance, sketch", n_q, n_kv, d, d_v, 5, d_sketch=2)
            == 10 * 5 * 14 + 110 * 8 * 2 + 10 * 100 * 2)
    assert (R.multiply_adds("top-k, sketch", n_q, n_kv, d, d_v, 5, d_sketch=2)
            == R.multiply_adds("importance, sketch", n_q, n_kv, d, d_v, 5, d_sketch=2))
    assert R.multiply_adds("importance, norms", n_q, n_kv, d, d_v, 5) == 700 + 110 * 8 + 1000
    assert R.multiply_adds("sketched logits", n_q, n_kv, d, d_v, 3) == (
        110 * 8 * 3 + 1000 * 3 + 1000 * 6)
    assert set(R.ESTIMATORS) >= {"exact", "sampled product", "top-k, exact logits"}
    with pytest.raises(ValueError, match="estimator must be one of"):
        R.multiply_adds("magic", 1, 1, 1, 1, 1)


@pytest.mark.parametrize(
    ("thunk", "error", "match"),
    [
        (lambda Q, K, V: R.sketched_logits(Q, K, torch.eye(4)), TypeError,
         "Omega must have Q's dtype torch.float64; got torch.float32"),
        (lambda Q, K, V: R.sampling_variance(torch.ones(5, 12, dtype=F64), V[:11]), ValueError,
         r"V must have one row per column of P \(N_KV = 12\)"),
        (lambda Q, K, V: R.sampling_variance(torch.ones(5, 12, dtype=F64), V,
                                             torch.ones(5, 11, dtype=F64)),
         ValueError, r"proposal must have shape \(\.\.\., N_Q, N_KV\) = \(\.\.\., 5, 12\)"),
        (lambda Q, K, V: R.effective_sample_size(torch.ones(5, 12, dtype=F64),
                                                 torch.zeros(5, 12, dtype=F64)),
         ValueError, "proposal must be non-negative with a positive sum in every row"),
        (lambda Q, K, V: R.norm_proposal(Q, K, scale=0.0), ValueError,
         "scale must be a finite positive number"),
        (lambda Q, K, V: R.linformer_attention(Q, K, V, torch.eye(12)), TypeError,
         "E must have K's dtype"),
        (lambda Q, K, V: R.randomised_mla_from_mha(
            attnlib.GroupedQueryAttention(8, 2, 1, 4, rope_base=10000.0), 2), ValueError,
         "attn.rope_base must be None"),
        (lambda Q, K, V: R.randomised_mla_from_mha(
            attnlib.GroupedQueryAttention(8, 2, 1, 4), 4, oversample=8), ValueError,
         r"d_latent \+ oversample must be at most min\(d_in, 2 G d_head\) = 8; got 4 \+ 8"),
        (lambda Q, K, V: R.randomised_mla_from_mha(torch.eye(3), 2), TypeError,
         "attn must be an attnlib.GroupedQueryAttention; got Tensor"),
        (lambda Q, K, V: R.gaussian_sketch(4, 0), ValueError, "r must be a positive int"),
        (lambda Q, K, V: R.importance_attention(Q.expand(3, 5, 4), K, V,
                                                torch.ones(2, 5, 12, dtype=F64), 3),
         ValueError, "the batch dimensions of proposal must broadcast"),
        (lambda Q, K, V: R.sampled_product(torch.ones(3, 5, 12, dtype=F64),
                                           torch.ones(2, 12, 3, dtype=F64), 2),
         ValueError, "the batch dimensions .* of A and V must broadcast"),
    ],
)
def test_bad_input_names_the_argument_and_the_rule(thunk, error, match):
    with pytest.raises(error, match=match):
        thunk(*_qkv(55))
