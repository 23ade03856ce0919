"""Checked exercises of lesson 13: attention as a kernel.

- 13.1: the backward of one tile, given Q, K, V, O, dO and the row log-sum-exp L;
- 13.2: a fused row-softmax kernel in Triton, one program per row.
"""

from __future__ import annotations

import torch

from attnlib.exercises.implement import Case, Implementation, Mistake, function_case, implementation
from attnlib.exercises.implement import randn as _randn
from attnlib.kernels.backward import attention_backward, attention_forward


@implementation("13.1")
def _tile_backward() -> Implementation:
    """dQ, dK, dV of one tile of softmax attention, P rebuilt from L = rowwise logsumexp."""

    def reference(Q, K, V, O, dO, L, scale):
        P = torch.exp(scale * Q @ K.mT - L[:, None])
        dV = P.mT @ dO
        dS = P * (dO @ V.mT - (dO * O).sum(-1, keepdim=True))
        return scale * dS @ K, scale * dS.mT @ Q, dV

    def no_rowsum(Q, K, V, O, dO, L, scale):
        P = torch.exp(scale * Q @ K.mT - L[:, None])
        dS = P * (dO @ V.mT)
        return scale * dS @ K, scale * dS.mT @ Q, P.mT @ dO

    def scale_twice(Q, K, V, O, dO, L, scale):
        dQ, dK, dV = reference(Q, K, V, O, dO, L, scale)
        return scale * dQ, scale * dK, dV

    def no_scale(Q, K, V, O, dO, L, scale):
        dQ, dK, dV = reference(Q, K, V, O, dO, L, scale)
        return dQ / scale, dK / scale, dV

    def p_not_transposed(Q, K, V, O, dO, L, scale):
        dQ, dK, _ = reference(Q, K, V, O, dO, L, scale)
        P = torch.exp(scale * Q @ K.mT - L[:, None])
        return dQ, dK, P @ dO

    def case(name, seed, N, d, dtype):
        Q, K, V = (_randn(N, d, seed=seed + i, dtype=dtype) for i in range(3))
        scale = d ** -0.5
        O = attention_forward(Q[None], K[None], V[None], scale=scale)[0][0]
        L = torch.logsumexp(scale * Q @ K.mT, dim=-1)
        dO = _randn(N, d, seed=seed + 3, dtype=dtype)
        expected = attention_backward(Q[None], K[None], V[None], O[None], dO[None], scale=scale)
        assert all(torch.allclose(a[0], b, atol=1e-6) for a, b in
                   zip(expected, reference(Q, K, V, O, dO, L, scale), strict=True))
        return function_case(name, {"Q": Q, "K": K, "V": V, "O": O, "dO": dO, "L": L},
                             scale=scale)

    return Implementation(
        "a function tile_backward(Q, K, V, O, dO, L, scale) returning (dQ, dK, dV)", reference,
        [case("float64, a 6 x 6 tile, d = 4", 5, 6, 4, torch.float64),
         case("float32, a 8 x 8 tile, d = 16", 11, 8, 16, torch.float32)],
        (
            Mistake(no_rowsum, "forgetting the rowsum(dO * O) term: dS = P * (dP - D) "
                               "with D = rowsum(dO * O); a row of P sums to 1, and D is the "
                               "part of the gradient that moves all of a row's weights at once."),
            Mistake(scale_twice, "the scale applied twice: S = scale Q K^T already carries it "
                                 "into P; dQ = scale dS K and dK = scale dS^T Q take it once."),
            Mistake(no_scale, "dQ = scale dS K and dK = scale dS^T Q: the chain rule through "
                              "S = scale Q K^T brings one factor scale."),
            Mistake(p_not_transposed, "dV = P^T dO: key j collects from every query that "
                                      "read it, so P is transposed."),
        ))


@implementation("13.2")
def _triton_softmax() -> Implementation:
    """A @triton.jit kernel softmax_kernel(X, Y, stride, n_cols, BLOCK), one program a row."""
    from attnlib.exercises import lesson_13_kernels as kernels

    def case(name, seed, rows, n, scale):
        x = _randn(rows, n, seed=seed, dtype=torch.float32, scale=scale)
        return Case(name, lambda fn: kernels.launch(fn, x.clone()), f"X {tuple(x.shape)}")

    return Implementation(
        "a @triton.jit kernel softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr)",
        kernels.softmax_reference,
        [case("4 rows of 16 (one block exactly)", 3, 4, 16, 1.0),
         case("3 rows of 10: BLOCK = 16 overhangs each row", 7, 3, 10, 1.0),
         case("2 rows of 20, logits up to about 300", 9, 2, 20, 100.0)],
        (
            Mistake(kernels.softmax_no_mask, "a load without a mask reads out of bounds: "
                    "n_cols = 10 is not a multiple of the block (BLOCK = 16), so the last 6 "
                    "lanes read the next row. Load with mask=cols < n_cols."),
            Mistake(kernels.softmax_zero_padding, "the masked lanes were filled with 0, and "
                    "exp(0 - max) counts in the sum: fill them with other=float('-inf')."),
            Mistake(kernels.softmax_no_max, "exp overflows to inf for logits above about 88.7 "
                    "in float32: subtract the row's max before exp."),
        ))
