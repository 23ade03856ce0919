"""Checked exercises of lesson 02: softmax attention."""

from __future__ import annotations

import math

import torch

from attnlib.core import attention, attention_weights
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
