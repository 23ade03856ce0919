"""Planted wrong answers for lesson 04's exercises."""

from __future__ import annotations

import math

import torch

from planted import Planted

# 04.2: Llama 3 8B, d = 4096, d_ff = 14,336
D, D_FF = 4096, 14_336
# 04.3: x = (1, 3, 5, 7)
X = [1.0, 3.0, 5.0, 7.0]
MEAN_SQUARE = sum(x * x for x in X) / 4


# 04.5: causal(n_q, n_kv)
def _top_left(n_q, n_kv):
    """Query i sees keys 0..i, as if the queries came first."""
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril()


def _float_mask(n_q, n_kv):
    """The right pattern, in float (ones and zeros) instead of bool."""
    return torch.ones(n_q, n_kv).tril(n_kv - n_q)


def _strict(n_q, n_kv):
    """j < i: a query may not see its own position."""
    i = torch.arange(n_q)[:, None] + n_kv - n_q
    return torch.arange(n_kv)[None, :] < i


def _offset_clamped(n_q, n_kv):
    """Clamps the offset N_KV - N_Q at 0, which is wrong when there are more queries."""
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril(max(n_kv - n_q, 0))


def _upper(n_q, n_kv):
    """The upper triangle: the queries see the keys after them."""
    return torch.ones(n_q, n_kv, dtype=torch.bool).triu(n_kv - n_q)


# 04.6: block(X, attend, ffn, norm_1, norm_2)
def _post_norm(X, attend, ffn, norm_1, norm_2):
    """Normalises after each residual addition."""
    H = norm_1(X + attend(X))
    return norm_2(H + ffn(H))


def _swapped_norms(X, attend, ffn, norm_1, norm_2):
    """Gives the attention sublayer the second norm and the feed-forward the first."""
    H = X + attend(norm_2(X))
    return H + ffn(norm_1(H))


def _one_norm(X, attend, ffn, norm_1, norm_2):
    """Uses norm_1 before both sublayers."""
    H = X + attend(norm_1(X))
    return H + ffn(norm_1(H))


def _no_second_residual(X, attend, ffn, norm_1, norm_2):
    """Drops the residual around the feed-forward network."""
    H = X + attend(norm_1(X))
    return ffn(norm_2(H))


def _int_mask(n_q, n_kv):
    """The right pattern as int64 ones and zeros."""
    return torch.ones(n_q, n_kv, dtype=torch.long).tril(n_kv - n_q)


def _transposed(n_q, n_kv):
    """The transpose of the right mask, (N_KV, N_Q)."""
    return torch.ones(n_kv, n_q, dtype=torch.bool).tril(n_q - n_kv).mT


def _absolute_offset(n_q, n_kv):
    """The offset |N_KV - N_Q|, wrong when there are more queries than keys."""
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril(abs(n_kv - n_q))


def _next_key(n_q, n_kv):
    """The offset N_KV - N_Q + 1: each query also sees the key after it."""
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril(n_kv - n_q + 1)


def _one_query_special(n_q, n_kv):
    """Lets a single query see everything and aligns the rest top-left."""
    if n_q == 1:
        return torch.ones(1, n_kv, dtype=torch.bool)
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril()


def _final_norm(X, attend, ffn, norm_1, norm_2):
    """Normalises the layer's output with norm_2 as well."""
    H = X + attend(norm_1(X))
    return norm_2(H + ffn(norm_2(H)))


def _attend_raw(X, attend, ffn, norm_1, norm_2):
    """Attention reads X without its norm."""
    H = X + attend(X)
    return H + ffn(norm_2(H))


def _x_twice(X, attend, ffn, norm_1, norm_2):
    """Adds X again to the output."""
    H = X + attend(norm_1(X))
    return X + H + ffn(norm_2(H))


def _ffn_first(X, attend, ffn, norm_1, norm_2):
    """Runs the feed-forward sublayer before attention."""
    H = X + ffn(norm_2(X))
    return H + attend(norm_1(H))


PLANTED = [
    # 04.1: 4 new tokens after 6 cached ones
    Planted("04.1", "a query may not see itself", 6 + 7 + 8 + 9,
            avoid=r"top-left|ten tokens|no mask"),
    Planted("04.1", "the pairs among the new tokens only", 1 + 2 + 3 + 4, names=r"new tokens"),
    Planted("04.1", "the cached keys only", 4 * 6, avoid=r"top-left|ten tokens|no mask"),
    Planted("04.1", "all ten tokens as queries", 10 * 11 // 2, names=r"all ten"),
    Planted("04.1", "one pair too few", 35, avoid=r"top-left|ten tokens|no mask"),
    Planted("04.1", "the new tokens' pairs plus each cached key once", 10 + 6,
            avoid=r"top-left|ten tokens|no mask"),
    # 04.2: SwiGLU parameters
    Planted("04.2", "with biases", 3 * D * D_FF + 2 * D_FF + D,
            avoid=r"two matrices|all the layers|plain MLP"),
    Planted("04.2", "d_ff = 4d with three matrices", 3 * D * 4 * D,
            avoid=r"two matrices|all the layers|plain MLP"),
    Planted("04.2", "two matrices", 2 * D * D_FF, names=r"three"),
    Planted("04.2", "W_gate counted twice", 4 * D * D_FF, avoid=r"two matrices|all the layers"),
    Planted("04.2", "Llama 3 70B's width 8,192", 3 * 8_192 * D_FF,
            avoid=r"two matrices|all the layers|plain MLP"),
    Planted("04.2", "d_ff = 8d/3 = 10,923", 3 * D * 10_923,
            avoid=r"close|tolerance|two matrices|all the layers|plain MLP"),
    Planted("04.2", "bytes in bfloat16, not weights", 2 * 3 * D * D_FF,
            avoid=r"two matrices|all the layers|plain MLP"),
    # 04.3: RMSNorm of (1, 3, 5, 7)
    Planted("04.3", "the sample variance's d - 1", [x / math.sqrt(sum(y * y for y in X) / 3)
                                                    for x in X], avoid=r"LayerNorm|Euclidean"),
    Planted("04.3", "no square root", [x / MEAN_SQUARE for x in X],
            avoid=r"LayerNorm|Euclidean|standard deviation"),
    Planted("04.3", "divided by the largest entry", [x / 7 for x in X],
            avoid=r"LayerNorm|Euclidean|standard deviation"),
    Planted("04.3", "the mean subtracted first", [(x - 4) / math.sqrt(5) for x in X],
            names=r"LayerNorm"),
    Planted("04.3", "multiplied by the root mean square", [x * math.sqrt(MEAN_SQUARE) for x in X],
            avoid=r"LayerNorm|Euclidean|standard deviation"),
    Planted("04.3", "divided by the mean |x|", [x / (sum(X) / 4) for x in X],
            avoid=r"LayerNorm|Euclidean|standard deviation|close"),
    # 04.5: causal(n_q, n_kv)
    Planted("04.5", "aligned top-left", _top_left, names=r"top-left"),
    Planted("04.5", "a float mask", _float_mask, names=r"dtype"),
    Planted("04.5", "the diagonal left out", _strict, names=r"its own position"),
    Planted("04.5", "the offset clamped at 0", _offset_clamped),
    Planted("04.5", "the upper triangle", _upper),
    Planted("04.5", "an int64 mask", _int_mask, names=r"dtype"),
    Planted("04.5", "transposed", _transposed),
    Planted("04.5", "the offset |N_KV - N_Q|", _absolute_offset),
    Planted("04.5", "each query sees the next key", _next_key),
    Planted("04.5", "one query sees all, the rest top-left", _one_query_special),
    # 04.6: a pre-norm layer
    Planted("04.6", "post-norm", _post_norm, names=r"post-norm"),
    Planted("04.6", "the two norms swapped", _swapped_norms),
    Planted("04.6", "norm_1 before both sublayers", _one_norm, names=r"own norm"),
    Planted("04.6", "no residual around the feed-forward", _no_second_residual),
    Planted("04.6", "a final norm_2 on the output", _final_norm),
    Planted("04.6", "attention reads X un-normalised", _attend_raw),
    Planted("04.6", "X added twice", _x_twice),
    Planted("04.6", "the feed-forward before attention", _ffn_first),
]
