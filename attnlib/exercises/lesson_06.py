"""Checked exercises of lesson 06: grouped-query attention."""

from __future__ import annotations

from attnlib.exercises import numbers, scalar, whole_number
from attnlib.heads import kv_head_index
from attnlib.memory import LLAMA3_8B, LLAMA3_70B


@numbers("06.1", rel=1e-9, what="one number of bytes (an int)")
def _llama3_8b_cache():
    """Bytes per token of Llama 3 8B's KV cache, all layers, 16-bit numbers."""
    expected = LLAMA3_8B.kv_bytes_per_token()  # 2 N_L G d_head b
    return scalar(expected), (
        (scalar(LLAMA3_8B.cache_bytes_per_token("mha")),
         "that counts one key/value head per query head (H = 32); the cache holds the "
         "G = 8 key/value heads only."),
        (scalar(expected // 2), "half the answer: count both K and V, and 2 bytes per "
                                "16-bit number."),
        (scalar(expected // LLAMA3_8B.n_layers), "that is one layer; the cache holds every "
                                                 "layer's keys and values."),
        (scalar(expected // 2 // LLAMA3_8B.n_layers),
         "that is one layer in numbers, not bytes; multiply by the layers and by 2 bytes."),
    )


@whole_number("06.2", what="a head index (an int)")
def _kv_head_of_13():
    """The key/value head that query head 13 reads when H = 32 and G = 8 (0-based)."""
    n_heads, n_kv_heads, h = 32, 8, 13
    expected = int(kv_head_index(n_heads, n_kv_heads)[h])
    s = n_heads // n_kv_heads
    hints = {
        h // n_kv_heads: "that divides by G; divide by the group size s = H / G = 4.",
        h % n_kv_heads: "that is h mod G, an interleaved grouping; PyTorch and Hugging Face "
                        "group consecutive query heads, g(h) = h // s.",
        (h - 1) // s + 1: "that mixes conventions: the 1-based formula floor((h - 1) / s) + 1 "
                          "needs the 1-based head number 14; counted from 0, g(h) = h // s.",
    }
    return expected, hints, (f"not quite: with s = H / G = {s}, query head h reads KV head "
                             "h // s.")


@numbers("06.3", rel=1e-9, what="one number of entries (an int)")
def _weights_saved():
    """Entries of W_K and W_V saved in one Llama 3 70B layer by G = 8 instead of G = H = 64."""
    d, n_heads, n_kv, d_head = (LLAMA3_70B.d_model, LLAMA3_70B.n_heads, LLAMA3_70B.n_kv_heads,
                                LLAMA3_70B.d_head)
    expected = 2 * d * (n_heads - n_kv) * d_head
    return scalar(expected), (
        (scalar(expected // 2), "that is one matrix; W_K and W_V both shrink."),
        (scalar(2 * d * n_kv * d_head), "that is what W_K and W_V keep; the question asks how "
                                        "many entries they lose."),
        (scalar(expected * LLAMA3_70B.n_layers), "that is all 80 layers; the question asks for "
                                                 "one layer."),
        (scalar(4 * d * (n_heads - n_kv) * d_head), "W_Q and W_O keep their size: only W_K and "
                                                    "W_V shrink."),
    )
