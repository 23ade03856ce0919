"""Checked exercises of lesson 07: multi-head latent attention."""

from __future__ import annotations

import torch

from attnlib.analysis.memory import DEEPSEEK_V2, DEEPSEEK_V3, LLAMA2_7B, LLAMA3_8B
from attnlib.exercises import numbers, scalar
from attnlib.layers.mla import MultiHeadLatentAttention


@numbers("07.1", rel=1e-9, what="one number of bytes")
def _deepseek_v3_cache():
    """Bytes per token of DeepSeek-V3's MLA cache, all layers, 16-bit: N_L (d_L + d_R) 2."""
    v3 = DEEPSEEK_V3
    per_layer = v3.d_latent + v3.d_rope
    return scalar(v3.kv_bytes_per_token(2)), (
        (scalar(v3.n_layers * v3.d_latent * 2), "that leaves out the rotary key: the cache "
                                                "holds d_L + d_R numbers per token and layer."),
        (scalar(2 * v3.n_layers * per_layer * 2), "there is no factor 2 for keys and values: "
                                                  "both are read off the one latent."),
        (scalar(per_layer * 2), "that is one layer; multiply by the number of layers."),
        (scalar(v3.n_layers * per_layer), "that counts numbers; in 16-bit each takes 2 bytes."),
        (scalar(v3.cache_bytes_per_token("mha")), "that is the multi-head cache over 128 "
                                                  "heads; the question asks for MLA's."),
    )


@numbers("07.2", rel=1e-3, what="one number, a factor")
def _fewer_heads_factor():
    """(2 H d_head) / (d_L + d_R) for H = 32, d_head = 128, d_L = 512, d_R = 64."""
    H, d_head, d_L, d_R = 32, 128, 512, 64
    return scalar(2 * H * d_head / (d_L + d_R)), (
        (scalar(2 * H * d_head / d_L), "that leaves out the rotary key: MLA caches d_L + d_R "
                                       "numbers per token and layer."),
        (scalar(H * d_head / (d_L + d_R)), "a multi-head cache holds keys and values: "
                                           "2 H d_head numbers."),
        (scalar((d_L + d_R) / (2 * H * d_head)), "that is the inverse: divide the MHA cache by "
                                                 "the MLA cache."),
        (scalar(2 * 8 * d_head / (d_L + d_R)), "that is against GQA with G = 8; the question "
                                               "asks for MHA over all 32 heads."),
    )


@numbers("07.3", rel=1e-9, what="one number of entries")
def _merged_count():
    """Numbers in all W_LQK^h and W_LO of one DeepSeek-V2 layer."""
    v2 = DEEPSEEK_V2
    W = MultiHeadLatentAttention(v2.d_model, v2.n_heads, v2.d_head, v2.d_latent,
                                 d_latent_q=v2.d_latent_q, device="meta").merged_weights()
    n_qk, n_o = W["W_LQK"].numel(), W["W_LO"].numel()
    factors = (v2.d_latent_q * v2.n_heads * v2.d_head + 2 * v2.d_latent * v2.n_heads * v2.d_head
               + v2.n_heads * v2.d_head * v2.d_model)
    return scalar(n_qk + n_o), (
        (scalar(n_qk), "that is the W_LQK^h of all heads alone; add W_LO."),
        (scalar(n_o), "that is W_LO alone; add the W_LQK^h of all heads."),
        (scalar(n_qk // v2.n_heads + n_o), "W_LQK^h is one matrix per head: count all "
                                           f"{v2.n_heads} of them."),
        (scalar(factors), "that is the four factors W_LQQ, W_LK, W_LV and W_O; the question "
                          "asks for the merged matrices."),
    )


def _widths(formula) -> torch.Tensor:
    """``formula(d_in, H, G, d_head)`` for Llama 3 8B and Llama 2 7B."""
    return torch.tensor([float(formula(m.d_model, m.n_heads, m.n_kv_heads, m.d_head))
                         for m in (LLAMA3_8B, LLAMA2_7B)], dtype=torch.float64)


@numbers("07.4", rel=0.0, what="two whole numbers, latent widths, (Llama 3 8B, Llama 2 7B)")
def _exact_latent_width():
    """Smallest d_L at which mla_from_mha converts a layer of Llama 3 8B, and one of Llama 2
    7B, exactly: the rank bound of [W_K | W_V], min(d_in, 2 G d_head). In Llama 3 8B d_in / 2
    and H d_head / 2 equal 2 G d_head; Llama 2 7B (G = H) tells them apart, and needs the
    bound by d_in."""
    expected = _widths(lambda d_in, H, G, d_head: min(d_in, 2 * G * d_head))
    return expected, (
        (_widths(lambda d_in, H, G, d_head: G * d_head),
         "that is G d_head, half the rank bound: the keys only (or d_head taken as 64); the "
         "latent must carry keys and values, [W_K | W_V], with d_head = 128."),
        # d_in = H d_head in both models: the hint fits both
        (_widths(lambda d_in, H, G, d_head: d_in),
         "that is d_in (and H d_head): the rank of [W_K | W_V] is bounded by its rows and by "
         "its columns, 2 G d_head, whichever is smaller."),
        (_widths(lambda d_in, H, G, d_head: 2 * H * d_head),
         "that uses the query heads; only the G key/value heads have their own K and V (8 in "
         "Llama 3 8B), and the rank is bounded by the d_in rows too."),
        (_widths(lambda d_in, H, G, d_head: 2 * G * d_head),
         "that leaves out the bound by the rows: in Llama 2 7B, 2 G d_head = 8192 columns "
         "exceed d_in = 4096, and the rank is at most min(d_in, 2 G d_head)."),
        (_widths(lambda d_in, H, G, d_head: d_in // 2),
         "that is d_in / 2 (and H d_head / 2), which equals 2 G d_head in Llama 3 8B only by "
         "chance, and what Llama 2 7B read with G = 8 gives (it has G = H = 32): the rank of "
         "[W_K | W_V] is at most min(d_in, 2 G d_head)."),
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
from attnlib.layers.mla import mla_absorbed  # noqa: E402


def _step_case(name, seed, batch, H, d_LQ, d_L, d_head, d_R, n_kv, d_out, dtype, d_v=None):
    d_v = d_head if d_v is None else d_v
    r = {"L_Q": randn(*batch, 1, d_LQ, seed=seed, dtype=dtype),
         "L": randn(*batch, n_kv, d_L, seed=seed + 1, dtype=dtype),
         "q_R": randn(*batch, H, 1, d_R, seed=seed + 2, dtype=dtype),
         "k_R": randn(*batch, n_kv, d_R, seed=seed + 3, dtype=dtype),
         "W_LQQ": randn(d_LQ, H * d_head, seed=seed + 4, dtype=dtype, scale=d_LQ ** -0.5),
         "W_LK": randn(d_L, H * d_head, seed=seed + 5, dtype=dtype, scale=d_L ** -0.5),
         "W_LV": randn(d_L, H * d_v, seed=seed + 6, dtype=dtype, scale=d_L ** -0.5),
         "W_O": randn(H * d_v, d_out, seed=seed + 7, dtype=dtype, scale=(H * d_v) ** -0.5),
         "n_heads": H}
    return function_case(name, r)


@implementation("07.5")
def _absorbed_step() -> Implementation:
    """One decoding step of absorbed MLA with decoupled RoPE, from the latent cache L and k_R."""

    def reference(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
        return mla_absorbed(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R=q_R, k_R=k_R,
                            impl="explicit")

    def no_rope(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
        d_head = W_LK.shape[1] // n_heads
        return mla_absorbed(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, impl="explicit",
                            scale=(d_head + q_R.shape[-1]) ** -0.5)

    def head_scale(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
        return mla_absorbed(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R=q_R, k_R=k_R,
                            scale=(W_LK.shape[1] // n_heads) ** -0.5, impl="explicit")

    def keys_as_values(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
        return mla_absorbed(L_Q, L, W_LQQ, W_LK, W_LK, W_O, n_heads, q_R=q_R, k_R=k_R,
                            impl="explicit")

    def strided_keys(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
        d_L, d_head = W_LK.shape[0], W_LK.shape[1] // n_heads
        W_LK = W_LK.reshape(d_L, d_head, n_heads).transpose(1, 2).reshape(d_L, -1)
        return mla_absorbed(L_Q, L, W_LQQ, W_LK, W_LV, W_O, n_heads, q_R=q_R, k_R=k_R,
                            impl="explicit")

    cases = [
        _step_case("float64, H = 2, 5 cached tokens", 1, (), 2, 6, 4, 3, 2, 5, 4, torch.float64),
        _step_case("float32, batch dims, H = 4, 7 cached tokens", 11, (2,), 4, 8, 6, 4, 2, 7, 5,
                   torch.float32),
        _step_case("float64, one cached token", 21, (), 3, 4, 4, 2, 4, 1, 3, torch.float64),
        _step_case("float64, two batch dims, values of width d_v = 2 != d_head = 4", 31, (2, 1),
                   2, 5, 3, 4, 3, 4, 3, torch.float64, d_v=2),
    ]
    return Implementation(
        "a function step(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads) returning "
        "(..., 1, d_out)", reference, cases, (
            Mistake(no_rope, "the logits have a rotary part too: concatenate q_R to each "
                             "head's absorbed query and k_R to L, so that the logit is "
                             "Q_h (W_LK^h)^T L^T + q_R,h k_R^T."),
            Mistake(head_scale, "with the rotary part a logit sums d_head + d_R products: "
                                "scale by 1/sqrt(d_head + d_R), not 1/sqrt(d_head)."),
            Mistake(keys_as_values, "the averaged latent rows are mapped to values by W_LV^h; "
                                    "W_LK^h turns the query into latent coordinates."),
            Mistake(strided_keys, "head h of W_LK is its column block h d_head to (h + 1) "
                                  "d_head - 1, not every H-th column."),
        ))
