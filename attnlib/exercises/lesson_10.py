"""Checked exercises of lesson 10: randomised attention."""

from __future__ import annotations

import math

import torch

from attnlib.analysis.randomised import (
    effective_sample_size,
    product_probabilities,
    sampling_variance,
)
from attnlib.exercises import as_tensor, checker, compare, numbers, scalar

F64 = torch.float64


@numbers("10.1", rel=1e-3, what="one number, the mean squared error")
def _sampled_row_error():
    """E (y_hat - y)^2 of Monte Carlo, m = 4 draws from P_0 = (0.5, 0.25, 0.25), v = (0, 2, 4)."""
    p = torch.tensor([[0.5, 0.25, 0.25]], dtype=F64)
    v = torch.tensor([[0.0], [2.0], [4.0]], dtype=F64)
    variance = float(sampling_variance(p, v)[0])
    second_moment = float(p @ v.pow(2))
    return scalar(variance / 4), (
        (scalar(variance), "that is the variance of one sample; the mean of m = 4 "
                           "independent samples has a quarter of it."),
        (scalar(math.sqrt(variance / 4)), "that is the standard deviation; the question "
                                          "asks for the mean squared error."),
        (scalar(second_moment / 4), "that uses E[v^2] without subtracting y^2: the "
                                    "variance is sum_j P_j (v_j - y)^2."),
    )


@numbers("10.2", rel=1e-3, what="three probabilities, rho_0, rho_1, rho_2")
def _optimal_columns():
    """The probabilities p_j ∝ |A_:j| |V_j| for the lesson's 2 x 3 matrix A and V = (1, 2, 2)."""
    A = torch.tensor([[4.0, 0.0, 1.0], [2.0, 1.0, 0.0]], dtype=F64)
    V = torch.tensor([[1.0], [2.0], [2.0]], dtype=F64)
    columns, rows = A.norm(dim=0), V.norm(dim=1)
    return product_probabilities(A, V), (
        (columns / columns.sum(), "those use the column norms of A only; weigh each "
                                  "column by the norm of its row of V too."),
        ((columns * rows).pow(2) / (columns * rows).pow(2).sum(),
         "those are proportional to the squared products; the optimum is proportional "
         "to |A_:j| |V_j| itself."),
        (torch.full((3,), 1 / 3, dtype=F64), "uniform probabilities are not optimal here: "
                                             "the first column is much heavier."),
    )


ESS_DRAWS = 50  # m of exercise 10.3; N = 100 keys. With m = N, 1/sum_j P_j^2 would be the ESS.


def _ess_example() -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 10.3's weights (0.9, 0.1/99, ..., 0.1/99) and the uniform proposal, N = 100."""
    P = torch.full((1, 100), 0.1 / 99, dtype=F64)
    P[0, 0] = 0.9
    return P, torch.full((1, 100), 0.01, dtype=F64)


def _ess_mistakes() -> list[tuple[torch.Tensor, str]]:
    P, uniform = _ess_example()
    m, n = ESS_DRAWS, P.shape[-1]
    expected = float(effective_sample_size(P, uniform, m=m)[0])
    squares = float(P.pow(2).sum())
    return [
        (scalar(expected / m), f"that is the ESS per draw; the question asks for the ESS of "
                               f"all {m} draws."),
        (scalar(n * squares), "that is N sum_j P_j^2 = 1 + chi^2, the factor by which the "
                              "draws are discounted: divide m by it."),
        (scalar(m * squares), "that multiplies m by sum_j P_j^2; the draws are divided by the "
                              "discount 1 + chi^2 = N sum_j P_j^2."),
        (scalar(m / squares), f"that is m / sum_j P_j^2, {n} times too large: the discount "
                              "1 + chi^2 = sum_j P_j^2 / rho_j is N sum_j P_j^2 for the uniform "
                              "rho_j = 1/N."),
        (scalar(1 / squares), "that is 1 / sum_j P_j^2, the effective number of keys, which "
                              "counts keys, not draws: m uniform draws are worth m / N of it."),
        (scalar(n / (m * squares)), "that swaps m and N: m draws over N keys are worth "
                                    "m / (N sum_j P_j^2)."),
    ]


@checker("10.3", mistakes=_ess_mistakes)
def _uniform_ess(answer: object) -> str | None:
    """ESS of m = 50 uniform draws for weights (0.9, 0.1/99, ..., 0.1/99) over N = 100 keys."""
    P, uniform = _ess_example()
    expected = float(effective_sample_size(P, uniform, m=ESS_DRAWS)[0])
    got = as_tensor(answer)
    if got is not None and got.numel() == 1:
        answer = got.reshape(())  # one number, however it is wrapped
    return compare(answer, scalar(expected), rel=1e-3,
                   what="one number, an effective sample size", mistakes=_ess_mistakes())


# ---------------------------------------------------------------------------------------
# implementation exercises

from attnlib.analysis.randomised import importance_attention  # noqa: E402
from attnlib.exercises.implement import (  # noqa: E402
    Case,
    CheckFailedError,
    Implementation,
    Mistake,
    implementation,
    randn,
)

REPLICATES = 400  # seeds per statistical case: the means' standard errors fall as 1/sqrt(400)


def _sampled(Q, K, rho, m, generator):
    j = torch.multinomial(rho, m, replacement=True, generator=generator)  # (N_Q, m)
    logits = (K[j] * Q[:, None, :]).sum(-1) * Q.shape[-1] ** -0.5  # (N_Q, m)
    return j, logits, torch.gather(rho, -1, j)


def _estimator_case(name, seed, n_q, n_kv, d, d_v, m, dtype, uniform):
    Q = randn(n_q, d, seed=seed, dtype=dtype)
    K = randn(n_kv, d, seed=seed + 1, dtype=dtype)
    V = randn(n_kv, d_v, seed=seed + 2, dtype=dtype)
    rho = (torch.full((n_q, n_kv), 1 / n_kv, dtype=dtype) if uniform
           else torch.softmax(0.5 * (Q @ K.T) * d ** -0.5 + randn(n_q, n_kv, seed=seed + 3,
                                                                  dtype=dtype), dim=-1))

    def run(fn):
        def once(seed):
            return fn(Q.clone(), K.clone(), V.clone(), rho.clone(), m,
                      torch.Generator().manual_seed(seed))

        out = torch.stack([once(r) for r in range(REPLICATES)])
        again = once(0)
        if not (isinstance(again, torch.Tensor) and torch.equal(again, out[0])):
            raise CheckFailedError("two calls with generators of the same seed return "
                                   "different estimates: draw every key with "
                                   "generator=generator")
        return out

    return Case(name, run, f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}, "
                           f"m = {m}, {REPLICATES} seeds", statistical=True)


@implementation("10.6")
def _importance_estimator() -> Implementation:
    """Self-normalised importance sampling of an attention row, with m keys drawn from rho."""

    def reference(Q, K, V, rho, m, generator):
        return importance_attention(Q, K, V, rho, m, generator=generator)

    def unweighted(Q, K, V, rho, m, generator):
        j, _, _ = _sampled(Q, K, rho, m, generator)
        return V[j].mean(dim=-2)

    def not_divided(Q, K, V, rho, m, generator):
        j, logits, _ = _sampled(Q, K, rho, m, generator)
        w = torch.exp(logits)
        return (w[..., None] * V[j]).sum(-2) / w.sum(-1, keepdim=True)

    def over_m(Q, K, V, rho, m, generator):
        j, logits, rho_j = _sampled(Q, K, rho, m, generator)
        w = torch.exp(logits) / rho_j
        return (w[..., None] * V[j]).sum(-2) / m

    def inverted(Q, K, V, rho, m, generator):
        j, logits, rho_j = _sampled(Q, K, rho, m, generator)
        w = rho_j / torch.exp(logits)
        return (w[..., None] * V[j]).sum(-2) / w.sum(-1, keepdim=True)

    cases = [
        _estimator_case("float64, a proposal near P", 1, 2, 12, 4, 2, 8, torch.float64, False),
        _estimator_case("float32, uniform proposal", 11, 3, 16, 4, 3, 16, torch.float32, True),
        _estimator_case("float64, d_QK = 16, more queries than keys", 21, 6, 4, 16, 2, 16,
                        torch.float64, False),
    ]
    return Implementation(
        "a function estimate(Q, K, V, rho, m, generator) returning (N_Q, d_V)", reference,
        cases, (
            Mistake(unweighted, "the plain mean of the sampled values estimates the average "
                                "under rho, not under P: weigh each draw j by A_ij / rho_ij."),
            Mistake(not_divided, "the weights are A_ij / rho_ij: dividing by the proposal "
                                 "undoes the preference rho gave the keys it draws often."),
            Mistake(over_m, "sum_s w_s v_js / m estimates Z y, the row's sum A v: divide by "
                            "sum_s w_s, which estimates Z, instead of by m."),
            Mistake(inverted, "the weights are A_ij / rho_ij, not rho_ij / A_ij."),
        ), z=5.0)
