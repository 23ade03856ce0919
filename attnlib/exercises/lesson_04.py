"""Checked exercises of lesson 04: masks and the transformer layer."""

from __future__ import annotations

import torch

from attnlib.analysis.memory import LLAMA3_8B
from attnlib.core.masks import causal_mask
from attnlib.exercises import numbers, scalar, whole_number
from attnlib.layers.blocks import FeedForward
from attnlib.layers.norms import layer_norm, rms_norm


@whole_number("04.1", what="a whole number of (query, key) pairs")
def _decode_pairs():
    """Allowed (query, key) pairs when 4 new tokens are decoded against 6 cached ones."""
    n_new, n_kv = 4, 10
    expected = int(causal_mask(n_new, n_kv).sum())
    hints = (
        # top-left alignment, or the new tokens alone: both give 1 + 2 + 3 + 4
        (int(torch.ones(n_new, n_kv, dtype=torch.bool).tril().sum()),
         "that counts only the pairs among the 4 new tokens, what the top-left mask allows "
         "(it treats them as positions 0 to 3); they are positions 6 to 9 and see every cached "
         "key too."),
        (int(causal_mask(n_kv).sum()), "that counts all ten tokens as queries; only the 4 new "
                                       "tokens ask, the cached ones are keys only."),
        (n_new * n_kv, "that is with no mask: a new token must not see the new tokens after it."),
    )
    return expected, hints, ("not quite: count, for each new token, the keys at or before "
                             "its position (rows of causal_mask(4, 10)).")


@numbers("04.2", rel=1e-6, what="one number of parameters")
def _swiglu_parameters():
    """Weights of one SwiGLU feed-forward network of Llama 3 8B (d = 4096, d_ff = 14,336)."""
    d, d_ff = LLAMA3_8B.d_model, 14_336  # d_ff: Table 3 of the Llama 3 paper
    count = sum(p.numel() for p in FeedForward(d, d_ff, "swiglu", device="meta").parameters())
    return scalar(count), (
        (scalar(2 * d * d_ff), "that counts two matrices; SwiGLU has three, W_gate, W_up and "
                               "W_down."),
        (scalar(count * LLAMA3_8B.n_layers), "that is all the layers; the question asks for "
                                             "one feed-forward network."),
        (scalar(8 * d * d), "that is a plain MLP with d_ff = 4d; use Llama 3's d_ff and three "
                            "matrices."),
    )


@numbers("04.3", rel=1e-3, what="four numbers, the normalised row")
def _rms_norm_row():
    """RMSNorm (gains 1, eps 1e-6) of the row x = (1, 3, 5, 7)."""
    x = torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=torch.float64)
    return rms_norm(x), (
        (layer_norm(x), "that is LayerNorm: RMSNorm does not subtract the mean first."),
        (x / x.norm(), "that divides by the Euclidean norm; the root mean square divides the "
                       "sum of squares by d = 4 before the square root."),
        (x / x.std(), "that divides by the standard deviation; RMSNorm divides by the root "
                      "mean square, sqrt(mean(x^2))."),
    )


# ---------------------------------------------------------------------------------------
# implementation exercises

from attnlib.core.functional import attention  # noqa: E402
from attnlib.exercises.implement import (  # noqa: E402
    Case,
    Implementation,
    Mistake,
    implementation,
    randn,
)


def _mask_case(n_q: int, n_kv: int) -> Case:
    return Case(f"N_Q = {n_q}, N_KV = {n_kv}", lambda fn: fn(n_q, n_kv), f"n_q {n_q}, n_kv {n_kv}")


@implementation("04.5")
def _bottom_right_mask() -> Implementation:
    """The causal mask of N_Q queries at the end of N_KV keys: M[i, j] = j <= i + N_KV - N_Q."""

    def ones(n_q, n_kv):
        return torch.ones(n_q, n_kv, dtype=torch.bool)

    def top_left(n_q, n_kv):
        return ones(n_q, n_kv).tril()

    def strict(n_q, n_kv):
        return ones(n_q, n_kv).tril(n_kv - n_q - 1)

    def inverted(n_q, n_kv):
        return ~causal_mask(n_q, n_kv)

    def offset_sign(n_q, n_kv):
        return ones(n_q, n_kv).tril(n_q - n_kv)

    cases = [_mask_case(4, 4), _mask_case(1, 6), _mask_case(3, 7), _mask_case(2, 5),
             _mask_case(5, 3)]
    return Implementation(
        "a function causal(n_q, n_kv) returning a bool tensor (N_Q, N_KV)", causal_mask, cases, (
            Mistake(top_left, "your mask is aligned top-left (query i sees keys 0..i); the "
                              "queries are the LAST N_Q positions, so query i sits at "
                              "position i + N_KV - N_Q and sees the keys up to it."),
            Mistake(offset_sign, "the diagonal offset has the wrong sign: query i sees keys "
                                 "up to i + (N_KV - N_Q), tril(diagonal=n_kv - n_q)."),
            Mistake(strict, "a query may attend to its own position: the diagonal j = i + "
                            "N_KV - N_Q is True."),
            Mistake(inverted, "True means 'may attend' here, and your mask marks the hidden "
                              "keys instead."),
        ))


def _block_case(name, seed, batch, N, d, dtype):
    X = randn(*batch, N, d, seed=seed, dtype=dtype)
    W_V = randn(d, d, seed=seed + 1, dtype=dtype, scale=d ** -0.5)
    W_1 = randn(d, 2 * d, seed=seed + 2, dtype=dtype, scale=d ** -0.5)
    W_2 = randn(2 * d, d, seed=seed + 3, dtype=dtype, scale=(2 * d) ** -0.5)
    g_1 = 1 + 0.5 * randn(d, seed=seed + 4, dtype=dtype)
    g_2 = 1 + 0.5 * randn(d, seed=seed + 5, dtype=dtype)

    def attend(H):  # a causal single-head sublayer, queries and keys the normalised rows
        return attention(H, H, H @ W_V, causal=True, impl="explicit")

    def ffn(H):
        return torch.relu(H @ W_1) @ W_2

    def norm_1(H):
        return rms_norm(H, g_1)

    def norm_2(H):
        return rms_norm(H, g_2)

    def run(fn):
        return fn(X.clone(), attend, ffn, norm_1, norm_2)

    return Case(name, run, f"X {tuple(X.shape)}")


@implementation("04.6")
def _pre_norm_block() -> Implementation:
    """A pre-norm layer: H = X + attend(norm_1(X)), Y = H + ffn(norm_2(H))."""

    def reference(X, attend, ffn, norm_1, norm_2):
        H = X + attend(norm_1(X))
        return H + ffn(norm_2(H))

    def post_norm(X, attend, ffn, norm_1, norm_2):
        H = norm_1(X + attend(X))
        return norm_2(H + ffn(H))

    def normalised_residual(X, attend, ffn, norm_1, norm_2):
        H = norm_1(X)
        H = H + attend(H)
        G = norm_2(H)
        return G + ffn(G)

    def parallel(X, attend, ffn, norm_1, norm_2):
        return X + attend(norm_1(X)) + ffn(norm_2(X))

    def one_norm(X, attend, ffn, norm_1, norm_2):
        H = X + attend(norm_1(X))
        return H + ffn(norm_1(H))

    cases = [
        _block_case("float64, N = 5, d = 4", 1, (), 5, 4, torch.float64),
        _block_case("float32, batch dims, N = 6, d = 8", 11, (2,), 6, 8, torch.float32),
    ]
    return Implementation(
        "a function block(X, attend, ffn, norm_1, norm_2) returning Y", reference, cases, (
            Mistake(post_norm, "that is the post-norm layer (the original Transformer's), "
                               "norm(X + attend(X)); pre-norm normalises only the input of "
                               "each sublayer and adds the sublayer's output to X unnormalised."),
            Mistake(normalised_residual, "the residual stream must carry X itself: add "
                                         "attend(norm_1(X)) to X, not to norm_1(X)."),
            Mistake(parallel, "the feed-forward sublayer reads the attention sublayer's "
                              "result H = X + attend(norm_1(X)), not X (that is the parallel "
                              "layout of GPT-J)."),
            Mistake(one_norm, "each sublayer has its own norm, with its own gains: the "
                              "feed-forward reads norm_2(H)."),
        ))
