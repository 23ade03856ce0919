"""Checked exercises of lesson 06: grouped-query attention."""

from __future__ import annotations

from attnlib.exercises import numbers, scalar, whole_number
from attnlib.heads import kv_head_index
from attnlib.memory import LLAMA3_70B


@numbers("06.1", rel=1e-6, what="one number, multiply-adds per byte")
def _decode_intensity():
    """Multiply-adds of one decoding step's attention per byte of bf16 cache it reads, in a
    layer of Llama 3 70B: ``2 H N d_head / (2 G N d_head n_b) = H / (G n_b)``."""
    n_heads, n_kv, d_head, n_b, n = (LLAMA3_70B.n_heads, LLAMA3_70B.n_kv_heads,
                                     LLAMA3_70B.d_head, 2, 1000)
    macs = 2 * n_heads * n * d_head  # every query head: N logits and a sum of N values
    cache_bytes = 2 * n_kv * n * d_head * n_b  # K and V of the G key/value heads
    expected = macs / cache_bytes
    return scalar(expected), (
        (scalar(n_heads / n_kv), "that is per cached number; each bf16 number takes 2 bytes."),
        (scalar(1 / n_b), "that is the multi-head layer (G = H); Llama 3 70B has G = 8 "
                          "key/value heads for H = 64 query heads."),
        (scalar(cache_bytes / macs), "that is bytes per multiply-add, the inverse."),
        (scalar(expected / 2), "that counts the logits only; the weighted sum of the values "
                               "costs as many multiply-adds again."),
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
