"""Checked exercises of lesson 06: grouped-query attention."""

from __future__ import annotations

import math

import torch

from attnlib.analysis.memory import GEMMA3_27B, LLAMA3_70B
from attnlib.core.heads import kv_head_index
from attnlib.exercises import numbers, scalar


def _per_model(formula) -> torch.Tensor:
    """``formula(H, G, d_head, n_b)`` for a layer of Llama 3 70B and one of Gemma 3 27B, bf16."""
    return torch.tensor([float(formula(m.n_heads, m.n_kv_heads, m.d_head, 2))
                         for m in (LLAMA3_70B, GEMMA3_27B)], dtype=torch.float64)


@numbers("06.1", rel=1e-6, what="two numbers, multiply-adds per byte, (Llama 3 70B, Gemma 3 27B)")
def _decode_intensity():
    """Multiply-adds of one decoding step's attention per byte of bf16 cache it reads, in a
    layer of Llama 3 70B and one of Gemma 3 27B:
    ``2 H N d_head / (2 G N d_head n_b) = H / (G n_b)``. Gemma's second number tells apart
    the formulas that give Llama's 4 by chance (G / n_b, d_head / (2 G n_b))."""
    n = 1000  # any N: it cancels
    expected = _per_model(lambda H, G, d_head, n_b: (2 * H * n * d_head)  # logits and sums
                          / (2 * G * n * d_head * n_b))  # K and V of the G key/value heads
    return expected, (
        (_per_model(lambda H, G, d_head, n_b: H / G),
         "that is H / G, twice the answer: multiply-adds per cached number (or per byte of K "
         "alone, or FLOPs per byte, two a multiply-add). Each bf16 number takes 2 bytes, the "
         "step reads K and V, and a multiply-add counts once."),
        (_per_model(lambda H, G, d_head, n_b: 1 / n_b),
         "that is the multi-head layer (G = H); Llama 3 70B has G = 8 key/value heads for "
         "H = 64 query heads, Gemma 3 27B G = 16 for H = 32."),
        (1 / expected, "that is bytes per multiply-add, the inverse."),
        (expected / 2, "that is half the answer, what one product alone gives (or 4 bytes a "
                       "number, float32): count both products, the logits and the weighted "
                       "sum of the values, for all H query heads, over a bf16 cache."),
        (_per_model(lambda H, G, d_head, n_b: G / n_b),
         "that is G / n_b: the cache grows with G, so G divides; the arithmetic grows with "
         "the H query heads, which multiply: H / (G n_b)."),
        (_per_model(lambda H, G, d_head, n_b: d_head / (2 * G * n_b)),
         "Llama's number is right and Gemma's twice too large, which is what d_head / (2 G n_b) "
         "gives, or H / (G n_b) with Gemma's G taken as 8 (it has G = 16 for H = 32): d_head "
         "cancels, since each multiply-add and each cached number is one coordinate of a head; "
         "the H query heads do not, H / (G n_b)."),
    )


def _kv_heads_of(formula) -> torch.Tensor:
    """``formula(h, s, G)`` for query heads 13 and 23 of a layer with H = 32 and G = 8."""
    return torch.tensor([float(formula(h, 32 // 8, 8)) for h in (13, 23)], dtype=torch.float64)


@numbers("06.2", rel=0.0, what="two head indices (ints), for query heads 13 and 23")
def _kv_heads_of_13_and_23():
    """The key/value heads that query heads 13 and 23 read when H = 32 and G = 8 (0-based).
    Head 23 tells apart rounding h / s to the nearest (23 / 4 = 5.75 gives 6), which at
    head 13 (3.25) gives the right 3."""
    kv = kv_head_index(32, 8)
    expected = torch.tensor([float(kv[13]), float(kv[23])], dtype=torch.float64)
    return expected, (
        (_kv_heads_of(lambda h, s, G: h // G),
         "that is h // 8, what dividing by G (or by another model's group size) gives: query "
         "head h reads KV head h // s, with the group size s = H / G = 32 / 8 = 4."),
        (_kv_heads_of(lambda h, s, G: h / s),
         "that is h / s, not rounded: a head index is a whole number, g(h) = h // s, which "
         "rounds down."),
        (_kv_heads_of(lambda h, s, G: h % s),
         "that is h mod s, the position of the query head inside its group; the group itself "
         "is h // s, with s = H / G = 4."),
        (_kv_heads_of(lambda h, s, G: h % G),
         "that is h mod G, an interleaved grouping; PyTorch and Hugging Face group consecutive "
         "query heads, g(h) = h // s."),
        (_kv_heads_of(lambda h, s, G: (h - 1) // s + 1),
         "that is a 1-based answer (or h / s rounded up): heads count from 0, and "
         "g(h) = h // s rounds down."),
        (_kv_heads_of(lambda h, s, G: math.floor(h / s + 0.5)),
         "that rounds h / s to the nearest: query head 23 has h / s = 5.75 and reads KV "
         "head 5; g(h) = h // s always rounds down."),
    )


@numbers("06.3", rel=1e-9, what="one number of entries (an int)")
def _weights_saved():
    """Entries of W_K and W_V saved in one Llama 3 70B layer by G = 8 instead of G = H = 64."""
    d, n_heads, n_kv, d_head = (LLAMA3_70B.d_model, LLAMA3_70B.n_heads, LLAMA3_70B.n_kv_heads,
                                LLAMA3_70B.d_head)
    expected = 2 * d * (n_heads - n_kv) * d_head
    return scalar(expected), (
        (scalar(expected // 2), "that is half the answer, what one matrix gives (or d = 4096): "
                                "W_K and W_V both shrink, and Llama 3 70B has d = 8192."),
        (scalar(2 * d * n_kv * d_head), "that is 2 d G d_head, what W_K and W_V keep (H / G is "
                                        "also 8 here); the question asks how many entries they "
                                        "lose, 2 d (H - G) d_head."),
        (scalar(expected * LLAMA3_70B.n_layers), "that is all 80 layers; the question asks for "
                                                 "one layer."),
        (scalar(4 * d * (n_heads - n_kv) * d_head), "that is twice the answer, what counting "
                                                    "bytes (2 a bf16 entry) or W_Q and W_O too "
                                                    "would give: count entries, and only W_K "
                                                    "and W_V shrink."),
    )


# ---------------------------------------------------------------------------------------
# implementation exercises


from attnlib.core.masks import causal_mask  # noqa: E402
from attnlib.exercises.implement import (  # noqa: E402
    Implementation,
    Mistake,
    function_case,
    implementation,
    randn,
)
from attnlib.layers.gqa import grouped_query_attention  # noqa: E402


def _expanded(Q, K, V, repeat, *, causal=False, top_left=False, keep_nan=False):
    H, G = Q.shape[-3], K.shape[-3]
    K, V = repeat(K, H // G), repeat(V, H // G)  # (..., H, N_KV, d)
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    if causal:
        n_q, n_kv = S.shape[-2:]
        M = (torch.ones(n_q, n_kv, dtype=torch.bool).tril() if top_left
             else causal_mask(n_q, n_kv))
        S = S.masked_fill(~M, float("-inf"))
    P = torch.softmax(S, dim=-1)
    return (P if keep_nan else P.nan_to_num(0.0)) @ V  # a row with no key: zeros


def _interleave(KV, r):
    return KV.repeat_interleave(r, dim=-3)


def _tile(KV, r):
    return KV.repeat(*([1] * (KV.dim() - 3)), r, 1, 1)


def _gqa_case(name, seed, batch, H, G, n_q, n_kv, d, dtype, causal):
    inputs = {"Q": randn(*batch, H, n_q, d, seed=seed, dtype=dtype),
              "K": randn(*batch, G, n_kv, d, seed=seed + 1, dtype=dtype),
              "V": randn(*batch, G, n_kv, d, seed=seed + 2, dtype=dtype)}
    return function_case(name, inputs, causal=causal)


@implementation("06.5")
def _gqa_forward() -> Implementation:
    """Attention of H query heads over G shared KV heads: head h reads KV head h // (H / G)."""

    def reference(Q, K, V, *, causal=False):
        return grouped_query_attention(Q, K, V, causal=causal, impl="explicit")

    def tiled(Q, K, V, *, causal=False):
        return _expanded(Q, K, V, _tile, causal=causal)

    def first_head(Q, K, V, *, causal=False):
        return _expanded(Q, K[..., :1, :, :], V[..., :1, :, :], _interleave, causal=causal)

    def top_left(Q, K, V, *, causal=False):
        return _expanded(Q, K, V, _interleave, causal=causal, top_left=True)

    def nan_rows(Q, K, V, *, causal=False):
        return _expanded(Q, K, V, _interleave, causal=causal, keep_nan=True)

    F32 = torch.float32
    F64 = torch.float64
    cases = [
        _gqa_case("float64, H = 4, G = 2, N_Q = 3, N_KV = 5", 1, (), 4, 2, 3, 5, 4, F64, False),
        _gqa_case("float32, batch dims, H = 6, G = 3, causal", 11, (2,), 6, 3, 5, 5, 4, F32, True),
        _gqa_case("float32, G = 1 (MQA), N_Q = 2 at the end of N_KV = 7, causal", 21, (1,),
                  4, 1, 2, 7, 8, F32, True),
        _gqa_case("float64, G = H (MHA), causal", 31, (), 3, 3, 4, 4, 2, F64, True),
        _gqa_case("float64, H = 8, G = 2, N_Q = 3 at the end of N_KV = 6, causal", 41, (), 8, 2,
                  3, 6, 4, F64, True),
        _gqa_case("float32, H = 4, G = 2, N_Q = 5 > N_KV = 3, causal: the first two queries see "
                  "no key (their rows are zeros)", 51, (2,), 4, 2, 5, 3, 4, F32, True),
    ]
    return Implementation(
        "a function gqa(Q, K, V, *, causal=False) returning (..., H, N_Q, d_v)", reference, cases, (
            Mistake(tiled, "your heads read KV head h % G: Tensor.repeat tiles the G heads "
                           "(0, 1, 0, 1, ...), while query head h belongs to group h // (H / G): "
                           "use repeat_interleave(H // G, dim=-3) (0, 0, 1, 1, ...)."),
            Mistake(top_left, "the causal mask must be bottom-right aligned: with N_Q < N_KV "
                              "the queries are the last N_Q positions (attnlib.causal_mask(n_q, "
                              "n_kv)), not the first."),
            Mistake(first_head, "every query head reads KV head 0; the G KV heads are shared "
                                "by groups of H / G consecutive query heads."),
            Mistake(nan_rows, "right but for the queries that see no key (N_Q > N_KV, causal): "
                              "a masked softmax gives NaN there, and the exercise asks for a row "
                              "of zeros, as attnlib gives (torch.nan_to_num(P, 0.0))."),
        ))


@implementation("06.6")
def _mean_pool_heads() -> Implementation:
    """W_K of G KV heads from H: KV head g is the mean of heads g r .. g r + r - 1, r = H / G."""

    def reference(W, n_heads, n_kv_heads):
        d_in, d_head, r = W.shape[0], W.shape[1] // n_heads, n_heads // n_kv_heads
        return W.reshape(d_in, n_kv_heads, r, d_head).mean(dim=2).reshape(d_in, -1)

    def strided(W, n_heads, n_kv_heads):
        d_in, d_head, r = W.shape[0], W.shape[1] // n_heads, n_heads // n_kv_heads
        return W.reshape(d_in, r, n_kv_heads, d_head).mean(dim=1).reshape(d_in, -1)

    def summed(W, n_heads, n_kv_heads):
        return reference(W, n_heads, n_kv_heads) * (n_heads // n_kv_heads)

    def first_of_group(W, n_heads, n_kv_heads):
        d_in, d_head, r = W.shape[0], W.shape[1] // n_heads, n_heads // n_kv_heads
        return W.reshape(d_in, n_kv_heads, r, d_head)[:, :, 0].reshape(d_in, -1)

    def columns(W, n_heads, n_kv_heads):
        d_in, r = W.shape[0], n_heads // n_kv_heads
        return W.reshape(d_in, -1, r).mean(dim=-1)

    cases = [
        function_case("float64, H = 4 to G = 2", {"W": randn(5, 4 * 3, seed=1), "n_heads": 4,
                                                    "n_kv_heads": 2}),
        function_case("float32, H = 6 to G = 2", {"W": randn(4, 6 * 2, seed=2,
                                                              dtype=torch.float32), "n_heads": 6,
                                                              "n_kv_heads": 2}),
        function_case("float64, H = 4 to G = 1 (MQA)", {"W": randn(3, 4 * 2, seed=3),
                                                          "n_heads": 4, "n_kv_heads": 1}),
    ]
    return Implementation(
        "a function pool(W, n_heads, n_kv_heads) returning (d_in, G d_head)", reference, cases, (
            Mistake(strided, "a group is H / G CONSECUTIVE heads (query heads g r to g r + r - 1 "
                             "read KV head g), not every G-th head: reshape to (d_in, G, r, "
                             "d_head) and average over the r axis."),
            Mistake(summed, "you sum the heads of a group; the conversion averages them "
                            "(the mean is the matrix closest to all of them)."),
            Mistake(first_of_group, "you keep the first head of each group; the conversion "
                                    "averages all r = H / G heads of the group."),
            Mistake(columns, "you average neighbouring columns inside a head; average whole "
                             "heads: reshape to (d_in, G, r, d_head) and take the mean over r."),
        ))
