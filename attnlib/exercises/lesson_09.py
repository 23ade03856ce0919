"""Checked exercises of lesson 09: the frontier."""

from __future__ import annotations

import math

import torch

from attnlib.approx import LinearAttentionState
from attnlib.exercises import as_tensor, checker, compare, numbers, scalar, whole_number
from attnlib.flash import tiled_attention


@checker("09.1")
def _online_softmax_output(answer: object) -> str | None:
    """Output of the online softmax for logits (0, 2 | 4, 1) and values (1, 2 | 3, 4)."""
    # one query whose logits are q . k_j: q = (1), keys (0, 2, 4, 1), scale 1
    t = torch.tensor([[0.0], [2.0], [4.0], [1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    q = torch.ones(1, 1, dtype=torch.float64)
    expected = tiled_attention(q, t, v, block_size=2, scale=1.0).reshape(())
    no_rescale = (math.exp(-2) * 1 + 2 + 3 + math.exp(-3) * 4) / (math.exp(-2) + 1 + 1
                                                                   + math.exp(-3))
    block_means = (float(torch.softmax(t[:2, 0], 0) @ v[:2, 0])
                   + float(torch.softmax(t[2:, 0], 0) @ v[2:, 0])) / 2
    got = as_tensor(answer)
    if got is not None and got.numel() == 1:
        answer = got.reshape(())
    return compare(
        answer, expected, rel=1e-3, what="one number, the output o / l",
        mistakes=(
            (scalar(no_rescale), "that skips the rescaling: when the second block raises the "
                                 "maximum from 2 to 4, multiply the old l and o by e^(2 - 4) "
                                 "before adding the new terms."),
            (scalar(block_means), "that averages the two blocks' outputs; the blocks must be "
                                  "weighted by their shares of the normaliser l."),
            (scalar(float(v.mean())), "that is the plain mean of the values: the weights are a "
                                      "softmax of the logits, not uniform."),
        ),
    )


@whole_number("09.2", what="a whole number of bytes", floats="whole")
def _recurrent_state_bytes():
    """Bytes of the linear-attention state of one sequence: 48 layers, 32 heads, r = d_V = 128."""
    layers, heads, r, d_v = 48, 32, 128, 128
    state = LinearAttentionState(lambda x: x.abs())  # any feature map that keeps r = 128
    state.step(torch.ones(heads, r, dtype=torch.bfloat16),
               torch.ones(heads, r, dtype=torch.bfloat16),
               torch.ones(heads, d_v, dtype=torch.bfloat16))
    hints = {
        layers * heads * r * d_v * 2: "that counts S_t only; the state also holds the "
                                      "normaliser z_t, r more numbers per head.",
        layers * heads * (r * d_v + r): "that counts numbers; bfloat16 takes 2 bytes each.",
        heads * (r * d_v + r) * 2: "that is one layer; the question asks for all 48.",
        layers * heads * (r * d_v + r) * 4: "that is float32; bfloat16 takes 2 bytes.",
    }
    return layers * state.nbytes, hints, ("not quite: per head, S_t has r x d_V numbers and "
                                          "z_t has r; multiply by heads, layers and bytes per "
                                          "number.")


@numbers("09.3", rel=1e-3, what="one number, a fraction between 0 and 1")
def _sparse_query_cost():
    """Multiply-adds of one sparse query (indexer + top-k) over those of full attention."""
    n, d, index_cost, k = 131_072, 128, 64, 2_048
    expected = (n * index_cost + k * 2 * d) / (n * 2 * d)
    return scalar(expected), (
        (scalar(k / n), "that counts the attention to the top-k keys only; the indexer scores "
                        "every one of the 131,072 keys first."),
        (scalar(index_cost / (2 * d)), "that is the indexer alone; add the attention to the "
                                       "2,048 chosen keys."),
        (scalar(100 * expected), "that is a percentage; give the fraction."),
    )
