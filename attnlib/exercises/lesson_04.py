"""Checked exercises of lesson 04: masks and the transformer layer."""

from __future__ import annotations

import torch

from attnlib.exercises import numbers, scalar, whole_number
from attnlib.layers import FeedForward
from attnlib.masks import causal_mask
from attnlib.memory import LLAMA3_8B
from attnlib.norms import layer_norm, rms_norm


@whole_number("04.1", what="a whole number of (query, key) pairs")
def _decode_pairs():
    """Allowed (query, key) pairs when 4 new tokens are decoded against 6 cached ones."""
    n_new, n_kv = 4, 10
    expected = int(causal_mask(n_new, n_kv).sum())
    hints = {
        # top-left alignment, or the new tokens alone (both give 1 + 2 + 3 + 4)
        int(torch.ones(n_new, n_kv, dtype=torch.bool).tril().sum()):
            "that is the top-left mask, which treats the new tokens as positions 0 to 3 and "
            "hides the cached keys from them; they are positions 6 to 9 and see every "
            "cached key.",
        int(causal_mask(n_kv).sum()): "that counts all ten tokens as queries; only the 4 new "
                                      "tokens ask, the cached ones are keys only.",
        n_new * n_kv: "that is with no mask: a new token must not see the new tokens after it.",
    }
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
