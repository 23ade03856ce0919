"""Checked exercises of lesson 01: attention as a lookup."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlib.core.functional import attention, attention_weights, similarity
from attnlib.examples import KEYS, VALUES
from attnlib.exercises import as_tensor, checker, compare, numbers, scalar


def _toy_database() -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 01's keys and values, in float64."""
    return KEYS.to(torch.float64), VALUES.to(torch.float64)


def _relu_row() -> tuple[torch.Tensor, torch.Tensor]:
    """The toy keys and the query q = (2, 1) of exercise 01.1."""
    K, _ = _toy_database()
    return K, torch.tensor([[2.0, 1.0]], dtype=torch.float64)


def _relu_mistakes() -> list[tuple[torch.Tensor, str]]:
    K, q = _relu_row()
    return [
        (similarity(q, K, kernel="relu", scale=1.0)[0],
         "these are the scores A[0, j]; divide each by their sum Z[0, 0]."),
        (attention_weights(q, K, scale=1.0)[0],
         "these are the weights of the exponential kernel; use relu, max(s, 0)."),
    ]


@checker("01.1", mistakes=_relu_mistakes)
def _relu_weights(answer: object) -> str | None:
    """The relu weight row of q = (2, 1) on the toy keys, scale 1."""
    K, q = _relu_row()
    expected = attention_weights(q, K, kernel="relu", scale=1.0)[0]
    got = as_tensor(answer)
    if got is not None and got.shape == expected.shape and bool((got < 0).any()):
        return ("a weight is negative: relu turns a negative dot product into a score of 0, "
                "so no weight can be below 0.")
    return compare(answer, expected, rel=0.01, what="five weights, key 0 first",
                   mistakes=_relu_mistakes())


@numbers("01.3", rel=1e-6, what="one number of multiply-adds")
def _chat_cost():
    """Multiply-adds of Q K^T and A V for N_Q = 12, N_KV = 3000, d_QK = d_V = 128."""
    n_q, n_kv, width = 12, 3000, 128
    Q, K, V = (torch.empty(n, width, device="meta") for n in (n_q, n_kv, n_kv))
    with FlopCounterMode(display=False) as counter:  # shapes only: meta tensors hold no data
        attention(Q, K, V, impl="explicit")
    expected = counter.get_total_flops() // 2  # PyTorch counts 2 operations per multiply-add
    return scalar(expected), (
        (scalar(2 * expected), "that counts a multiply and an add separately; count each "
                               "multiply-add once."),
        # Half the count: one product only, or both products at half the width (d = 64).
        (scalar(expected // 2), "that is half the count: Q K^T takes d_QK = 128 multiply-adds "
                                "per entry and A V d_V = 128 per entry; count both products, "
                                "each at its width."),
        (scalar(n_kv * n_kv * 2 * width), "that recomputes every token of the conversation; "
                                          "only the question's N_Q tokens are queries."),
    )


@numbers("01.4", rel=1e-3, what="the new output, two numbers")
def _context_edit():
    """The output of q = (1, 2) after the third value moves from (4, 3) to (4, 9)."""
    K, V = _toy_database()
    q = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    V_new = V.clone()
    V_new[2] = torch.tensor([4.0, 9.0], dtype=torch.float64)
    expected = attention(q, K, V_new, impl="explicit")[0]
    before = attention(q, K, V, impl="explicit")[0]
    return expected, (
        (before, "that is the output before the edit; the third value changed."),
        (before + (V_new[2] - V[2]), "the edit enters weighted: add P[0, 2] times the change "
                                     "of v_2, not the whole change."),
        (V_new[2], "that is the new value itself; attention averages all five values."),
    )


@numbers("01.5", rel=1e-3, what="five weights, key 0 first")
def _tie_limit():
    """The tau -> 0 limit of the exponential weights of q = k_0: key 4 ties with key 0."""
    K, _ = _toy_database()
    q = K[[0]]  # a copy of key 0
    expected = attention_weights(q, K, scale=1e3)[0]  # tau = 0.001: e^-1000 is 0 in float64
    return expected, (
        (torch.eye(K.shape[0], dtype=torch.float64)[0],
         "that is the exact lookup's row e_0; but <k_0, k_4> = <k_0, k_0> = 1, so key 4 "
         "ties with key 0 at every temperature."),
        (attention_weights(q, K)[0], "these are the weights at the default scale; send the "
                                     "temperature to 0 (scale = 1/tau, tau -> 0)."),
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


def _scaled_logits(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    return Q @ K.mT / Q.shape[-1] ** 0.5  # (..., N_Q, N_KV)


@implementation("01.6")
def _kernel_lookup() -> Implementation:
    """Y = Z^-1 A V with A = f(Q K^T / sqrt(d_QK)), for a kernel f given as a function."""

    def reference(Q, K, V, f):
        return attention(Q, K, V, kernel=f, impl="explicit")

    def no_normalisation(Q, K, V, f):
        return f(_scaled_logits(Q, K)) @ V

    def columns(Q, K, V, f):
        A = f(_scaled_logits(Q, K))
        return A / A.sum(dim=-2, keepdim=True) @ V

    def whole_matrix(Q, K, V, f):
        A = f(_scaled_logits(Q, K))
        return A / A.sum(dim=(-2, -1), keepdim=True) @ V

    def unscaled(Q, K, V, f):
        A = f(Q @ K.mT)
        return A / A.sum(dim=-1, keepdim=True) @ V

    softplus = torch.nn.functional.softplus
    F32 = torch.float32
    cases = [
        function_case("float64, one query, exp kernel",
                      {"Q": randn(1, 4, seed=1), "K": randn(6, 4, seed=2),
                       "V": randn(6, 3, seed=3), "f": torch.exp}),
        function_case("float64, N_Q != N_KV, softplus kernel",
                      {"Q": randn(3, 4, seed=4), "K": randn(5, 4, seed=5),
                       "V": randn(5, 2, seed=6), "f": softplus}),
        function_case("float32, batch dims, d_V != d_QK, exp kernel",
                      {"Q": randn(2, 3, 8, seed=7, dtype=F32),
                       "K": randn(2, 7, 8, seed=8, dtype=F32),
                       "V": randn(2, 7, 5, seed=9, dtype=F32), "f": torch.exp}),
        function_case("float32, sigmoid kernel, more queries than keys",
                      {"Q": randn(9, 2, seed=10, dtype=F32), "K": randn(4, 2, seed=11, dtype=F32),
                       "V": randn(4, 1, seed=12, dtype=F32), "f": torch.sigmoid}),
    ]
    return Implementation(
        "a function lookup(Q, K, V, f) returning Y", reference, cases, (
            Mistake(no_normalisation, "you return A V: each row of A must be divided by its "
                                      "sum Z[i, i] = sum_j A[i, j], so that the weights of a "
                                      "query sum to 1."),
            Mistake(columns, "you divide each column of A by its sum (over the queries); Z "
                             "holds the row sums, one per query: sum over the keys, dim=-1."),
            Mistake(whole_matrix, "you divide A by the sum of all its entries; each query's "
                                  "row must be normalised by its own sum, keepdim over dim=-1."),
            Mistake(unscaled, "the kernel acts on the scaled dot product: A = f(Q K^T / "
                              "sqrt(d_QK)), with d_QK = Q.shape[-1]."),
        ))
