"""Checked exercises of lesson 03: multi-head attention."""

from __future__ import annotations

from attnlib.analysis.memory import GEMMA3_27B
from attnlib.core.functional import attention
from attnlib.core.heads import merge_heads, split_heads
from attnlib.examples import draw_layer
from attnlib.exercises import numbers, scalar
from attnlib.layers.gqa import MultiHeadAttention


@numbers("03.1", rel=1e-9, what="one number of parameters (an int)")
def _gemma_width_parameters():
    """Entries of W_Q, W_K, W_V, W_O of an MHA layer at Gemma 3 27B's widths (d, H, d_head)."""
    d, n_heads, d_head = GEMMA3_27B.d_model, GEMMA3_27B.n_heads, GEMMA3_27B.d_head
    layer = MultiHeadAttention(d, n_heads, d_head, device="meta")  # shapes only
    expected = sum(p.numel() for p in layer.parameters())
    width = n_heads * d_head
    return scalar(expected), (
        (scalar(4 * d * d), "that assumes H d_head = d_in; here H d_head = 32 x 128 = 4096 is "
                            "narrower than d_in = 5376."),
        (scalar(3 * d * width), "that is three matrices' worth: count W_Q, W_K, W_V and the "
                                "output matrix W_O, each with all H = 32 heads (here every head "
                                "has its own keys and values)."),
        (scalar(4 * d * d_head), "that is one head's share; the layer has H = 32 heads."),
        (scalar(4 * width * width), "the rows of W_Q, W_K, W_V are the d_in = 5376 input "
                                    "features, not H d_head."),
    )


@numbers("03.2", rel=1e-6, what="the output Y, a 4 x 6 tensor")
def _head_removed():
    """Output of the lesson's toy layer (H = 2, d_head = 3, d_in = 6, N = 4) with Y_1 set to 0."""
    n_heads = 2
    X, W_Q, W_K, W_V, W_O = draw_layer(n_heads, 3, d_in=6, n_tokens=4, seed=0)
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))  # (H, N, d_head)
    heads = attention(Q, K, V)  # (H, N, d_head): Y_0, Y_1
    Y = merge_heads(heads) @ W_O
    kept = heads.clone()
    kept[1] = 0.0
    expected = merge_heads(kept) @ W_O
    columns_zeroed = Y.clone()
    columns_zeroed[:, 3:] = 0.0
    first_removed = heads.clone()
    first_removed[0] = 0.0
    return expected, (
        (Y, "that is the layer's output with both heads; set Y_1 to zero first."),
        (columns_zeroed, "zeroing columns 3..5 of Y is not removing head 1: W_O mixes the "
                         "heads, so head 1 contributes Y_1 W_O^1 to every column."),
        (merge_heads(first_removed) @ W_O, "that is head 1's contribution Y_1 W_O^1, which is "
                                           "also the layer with head 0 removed: keep head 0's "
                                           "contribution and drop head 1's (heads count from "
                                           "0)."),
        (merge_heads(kept), "that is the concatenation (Y_0 0); multiply it by W_O."),
    )


# ---------------------------------------------------------------------------------------
# implementation exercises

import torch  # noqa: E402

from attnlib.exercises.implement import (  # noqa: E402
    Implementation,
    Mistake,
    function_case,
    implementation,
    randn,
)


def _mha(X, W_Q, W_K, W_V, W_O, n_heads, *, split, merge, scale=None):
    Q, K, V = (split(X @ W, n_heads) for W in (W_Q, W_K, W_V))  # (..., H, N, d_head)
    return merge(attention(Q, K, V, scale=scale, impl="explicit")) @ W_O


def _split_no_swap(X, n_heads):
    *batch, N, width = X.shape
    return X.reshape(*batch, n_heads, N, width // n_heads)


def _merge_no_swap(Y):
    *batch, H, N, d = Y.shape
    return Y.reshape(*batch, N, H * d)


def _split_strided(X, n_heads):
    *batch, N, width = X.shape
    return X.reshape(*batch, N, width // n_heads, n_heads).permute(
        *range(len(batch)), -1, -3, -2)


def _merge_strided(Y):
    *batch, H, N, d = Y.shape
    return Y.permute(*range(len(batch)), -2, -1, -3).reshape(*batch, N, d * H)


def _layer_inputs(seed, batch, N, d_in, H, d_head, d_out, dtype):
    X = randn(*batch, N, d_in, seed=seed, dtype=dtype)
    Ws = [randn(d_in, H * d_head, seed=seed + k, dtype=dtype, scale=d_in ** -0.5)
          for k in (1, 2, 3)]
    W_O = randn(H * d_head, d_out, seed=seed + 4, dtype=dtype, scale=(H * d_head) ** -0.5)
    return {"X": X, "W_Q": Ws[0], "W_K": Ws[1], "W_V": Ws[2], "W_O": W_O, "n_heads": H}


@implementation("03.5")
def _multi_head_attention() -> Implementation:
    """Split, attend and merge H heads: Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head)) V_h) W_O."""

    def reference(X, W_Q, W_K, W_V, W_O, n_heads):
        return _mha(X, W_Q, W_K, W_V, W_O, n_heads, split=split_heads, merge=merge_heads)

    def split_no_swap(X, W_Q, W_K, W_V, W_O, n_heads):
        return _mha(X, W_Q, W_K, W_V, W_O, n_heads, split=_split_no_swap, merge=merge_heads)

    def merge_no_swap(X, W_Q, W_K, W_V, W_O, n_heads):
        return _mha(X, W_Q, W_K, W_V, W_O, n_heads, split=split_heads, merge=_merge_no_swap)

    def strided(X, W_Q, W_K, W_V, W_O, n_heads):
        return _mha(X, W_Q, W_K, W_V, W_O, n_heads, split=_split_strided, merge=_merge_strided)

    def input_slices(X, W_Q, W_K, W_V, W_O, n_heads):
        return _mha(X, W_Q, W_K, W_V, W_O, n_heads, split=split_heads, merge=merge_heads,
                    scale=(W_Q.shape[0] // n_heads) ** -0.5)

    def model_width(X, W_Q, W_K, W_V, W_O, n_heads):
        return _mha(X, W_Q, W_K, W_V, W_O, n_heads, split=split_heads, merge=merge_heads,
                    scale=W_Q.shape[1] ** -0.5)

    F32 = torch.float32
    cases = [
        function_case("float64, H = 2, d_head = 3",
                      _layer_inputs(10, (), 5, 6, 2, 3, 4, torch.float64)),
        function_case("float32, batch dims, H = 3, odd N",
                      _layer_inputs(20, (2,), 7, 8, 3, 2, 8, F32)),
        function_case("float64, H = 4, d_out != d_in", _layer_inputs(30, (1, 2), 4, 6, 4, 2, 3,
                                                                     torch.float64)),
    ]
    return Implementation(
        "a function multi_head(X, W_Q, W_K, W_V, W_O, n_heads) returning Y", reference, cases, (
            Mistake(split_no_swap, "reshaping (..., N, H d_head) straight to (..., H, N, "
                                   "d_head) mixes tokens across heads: reshape to (..., N, H, "
                                   "d_head) first, then swap the axes -3 and -2."),
            Mistake(merge_no_swap, "the merge reshapes (..., H, N, d_head) without moving the "
                                   "head axis back: transpose to (..., N, H, d_head) first, "
                                   "then reshape to (..., N, H d_head)."),
            Mistake(strided, "head h is the column block h d_head to (h + 1) d_head - 1 of "
                             "X W_Q, not every H-th column: reshape to (..., N, H, d_head)."),
            Mistake(model_width, "each head scales its logits by 1/sqrt(d_head), its own "
                                 "width, not by 1/sqrt(H d_head)."),
            Mistake(input_slices, "each head scales its logits by 1/sqrt(d_head) with d_head "
                                  "= W_Q.shape[1] // H, the columns of W_Q; d_in // H from its "
                                  "rows agrees only when H d_head = d_in."),
        ))
