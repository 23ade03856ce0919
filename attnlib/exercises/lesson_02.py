"""Checked exercises of lesson 02: softmax attention."""

from __future__ import annotations

import math

import torch

from attnlib.core.functional import attention, attention_weights
from attnlib.exercises import numbers


def _worked_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The lesson's worked example: q = (1, 0); keys (1, 0), (0, 1), (-1, 0); values 10, 20, 30."""
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    V = torch.tensor([[10.0], [20.0], [30.0]], dtype=torch.float64)
    return q, K, V


@numbers("02.1", rel=1e-3, what="one number, the output y (a float)")
def _doubled_query():
    """Output of the worked example with the query doubled, q = (2, 0)."""
    q, K, V = _worked_example()

    def y(Q: torch.Tensor, **kw: float) -> torch.Tensor:
        return attention(Q, K, V, **kw).reshape(())  # a scalar output

    return y(2 * q), (
        (y(q), "that is the output for q = (1, 0); double the query."),
        (y(2 * q, scale=1.0), "the logits still need the factor 1/sqrt(d_QK) = 1/sqrt(2)."),
        (y(4 * q), "doubling the query doubles each logit once, not twice: check your scale."),
    )


@numbers("02.2", rel=1e-3, what="three numbers, dy/ds_j for j = 0, 1, 2")
def _output_gradient():
    """Gradient of the worked example's output y with respect to its three logits s_j."""
    q, K, V = _worked_example()
    s = (q @ K.mT / math.sqrt(2)).requires_grad_()  # (1, 3): the logits
    attention(s, torch.eye(3, dtype=torch.float64), V, scale=1.0, impl="explicit").sum().backward()
    expected = s.grad.reshape(3)
    p = attention_weights(q, K).reshape(3)
    return expected, (
        (p * V.reshape(3), "that is diag(p) v alone: the Jacobian of the softmax is "
                           "diag(p) - p p^T, and the - p p^T part moves the other weights."),
        (expected / math.sqrt(2), "that is the gradient with respect to the dot products "
                                  "<q, k_j>; the question asks for the logits s_j."),
        (V.reshape(3) - (p @ V.reshape(3)), "that is v_j - y; multiply by p_j."),
    )


@numbers("02.4", rel=1e-4,
         what="two numbers, the thresholds for float16 and bfloat16 in that order")
def _half_precision_overflow():
    """ln of the largest finite float16 and bfloat16: where e^x overflows in each."""
    dtypes = (torch.float16, torch.bfloat16)
    largest = torch.tensor([torch.finfo(dt).max for dt in dtypes], dtype=torch.float64)
    expected = largest.log()
    float32 = math.log(torch.finfo(torch.float32).max)
    return expected, (
        (largest, "those are the largest finite numbers themselves; the threshold is the "
                  "logit x with e^x equal to them: take the natural logarithm."),
        (largest.log10(), "use the natural logarithm (math.log), not log10: the exponential "
                          "is e^x."),
        (expected.flip(0), "the order is float16 first, then bfloat16."),
        (torch.tensor([float32, float32], dtype=torch.float64),
         "float16 has far fewer exponent bits than float32: look at "
         "torch.finfo(torch.float16).max."),
    )


# ---------------------------------------------------------------------------------------
# implementation exercises

from attnlib.exercises.implement import (  # noqa: E402
    Implementation,
    Mistake,
    function_case,
    implementation,
    randn,
)


def _logits(Q: torch.Tensor, K: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    return Q @ K.mT * (Q.shape[-1] ** -0.5 if scale is None else scale)


@implementation("02.5")
def _stable_softmax_attention() -> Implementation:
    """Softmax attention that survives logits beyond e^x's overflow point."""

    def reference(Q, K, V):
        return attention(Q, K, V, impl="explicit")

    def literal(Q, K, V):
        A = torch.exp(_logits(Q, K))
        return A / A.sum(dim=-1, keepdim=True) @ V

    def global_max(Q, K, V):
        S = _logits(Q, K)
        A = torch.exp(S - S.amax(dim=(-2, -1), keepdim=True))
        return A / A.sum(dim=-1, keepdim=True) @ V

    def over_queries(Q, K, V):
        return torch.softmax(_logits(Q, K), dim=-2) @ V

    def unscaled(Q, K, V):
        return torch.softmax(_logits(Q, K, 1.0), dim=-1) @ V

    def by_d(Q, K, V):
        return torch.softmax(_logits(Q, K, 1.0 / Q.shape[-1]), dim=-1) @ V

    F32 = torch.float32
    # a float32 case whose logits pass 100 (e^88.7 overflows float32); its second
    # query's logits sit over 100 below the first's, so the matrix's maximum underflows it
    Q_hot = torch.cat((randn(1, 4, seed=3, scale=12.0), randn(1, 4, seed=4, scale=0.1)))
    cases = [
        function_case("float64, small logits",
                      {"Q": randn(2, 4, seed=1), "K": randn(5, 4, seed=2),
                       "V": randn(5, 3, seed=5)}),
        function_case("float32, logits above 100 that overflow e^x",
                      {"Q": Q_hot.to(F32), "K": randn(6, 4, seed=6, scale=12.0, dtype=F32),
                       "V": randn(6, 2, seed=7, dtype=F32)}),
        function_case("float32, batch dims, N_Q != N_KV",
                      {"Q": randn(2, 3, 8, seed=8, dtype=F32),
                       "K": randn(2, 7, 8, seed=9, dtype=F32),
                       "V": randn(2, 7, 5, seed=10, dtype=F32)}),
        function_case("float64, logits above 1000 that overflow e^x in float64",
                      {"Q": randn(3, 2, seed=11, scale=30.0), "K": randn(4, 2, seed=12, scale=30.0),
                       "V": randn(4, 3, seed=13)}),
    ]
    return Implementation(
        "a function attend(Q, K, V) returning Y", reference, cases, (
            Mistake(literal, "e^x overflows to inf for logits above about 88.7 in float32 "
                             "(709.8 in float64), and inf / inf is nan: subtract each row's "
                             "maximum from its logits before the exponential."),
            Mistake(global_max, "you subtract the largest logit of the whole matrix; a query "
                                "whose logits all lie far below it underflows to 0 / 0. "
                                "Subtract each row's own maximum, amax(dim=-1, keepdim=True)."),
            Mistake(over_queries, "the softmax runs over the queries (dim=-2); each query's "
                                  "weights are a softmax over the keys, dim=-1."),
            Mistake(unscaled, "the logits need the factor 1/sqrt(d_QK) = Q.shape[-1] ** -0.5."),
            Mistake(by_d, "the factor is 1/sqrt(d_QK), not 1/d_QK."),
        ))
