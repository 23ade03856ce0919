"""Checked exercises of lesson 03: multi-head attention."""

from __future__ import annotations

from attnlib.core import attention
from attnlib.examples import draw_layer
from attnlib.exercises import numbers, scalar
from attnlib.gqa import MultiHeadAttention
from attnlib.heads import merge_heads, split_heads
from attnlib.memory import GEMMA3_27B


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
        (scalar(3 * d * width), "that counts W_Q, W_K and W_V only; add the output matrix W_O."),
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
        (merge_heads(first_removed) @ W_O, "that removes head 0; heads count from 0, and head "
                                           "1 is the second block of columns."),
        (merge_heads(kept), "that is the concatenation (Y_0 0); multiply it by W_O."),
    )
