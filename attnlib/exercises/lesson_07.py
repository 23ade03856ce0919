"""Checked exercises of lesson 07: multi-head latent attention."""

from __future__ import annotations

from attnlib.exercises import numbers, scalar, whole_number
from attnlib.memory import DEEPSEEK_V2, DEEPSEEK_V3, LLAMA3_8B
from attnlib.mla import MultiHeadLatentAttention


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


@whole_number("07.4", what="a whole number, a latent width")
def _exact_latent_width():
    """Smallest d_L at which mla_from_mha converts a Llama 3 8B layer exactly."""
    llama = LLAMA3_8B
    G, d_head, d_in = llama.n_kv_heads, llama.d_head, llama.d_model
    hints = {
        G * d_head: "that holds the keys only; the latent must carry keys and values, "
                    "[W_K | W_V].",
        d_in: "that is d_in; the rank of [W_K | W_V] is bounded by its columns too, "
              "2 G d_head, which is smaller.",
        2 * llama.n_heads * d_head: "that uses the 32 query heads; only the G = 8 key/value "
                                    "heads have their own K and V.",
    }
    return min(d_in, 2 * G * d_head), hints, ("not quite: what is the largest rank the matrix "
                                              "[W_K | W_V] of shape (d_in, 2 G d_head) can "
                                              "have?")
