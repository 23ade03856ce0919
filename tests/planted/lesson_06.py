"""Planted wrong answers for lesson 06's exercises."""

from __future__ import annotations

import torch

from planted import Planted

# 06.1: Llama 3 70B, H = 64, G = 8, d_head = 128, bf16 (2 bytes), N keys (N cancels);
# Gemma 3 27B, H = 32, G = 16, d_head = 128
H, G, D_HEAD, N_B, N = 64, 8, 128, 2, 1000
MACS = 2 * H * N * D_HEAD
MODELS = ((64, 8), (32, 16))  # (H, G)


def _both(formula):
    """formula(H, G) for Llama 3 70B and Gemma 3 27B."""
    return tuple(formula(h, g) for h, g in MODELS)

# 06.3: d = 8192
D = 8192


# 06.5: gqa(Q, K, V, *, causal=False)
def _softmax_attend(Q, K, V, mask=None):
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def _bottom_right(n_q, n_kv):
    return torch.ones(n_q, n_kv, dtype=torch.bool).tril(n_kv - n_q)


def _tiled_heads(Q, K, V, *, causal=False):
    """Repeats the G heads as a block, (0, 1, 0, 1, ...), with torch.cat."""
    r = Q.shape[-3] // K.shape[-3]
    K, V = torch.cat([K] * r, dim=-3), torch.cat([V] * r, dim=-3)
    mask = _bottom_right(Q.shape[-2], K.shape[-2]) if causal else None
    return _softmax_attend(Q, K, V, mask).nan_to_num(0.0)


def _top_left(Q, K, V, *, causal=False):
    """Aligns the causal mask top-left."""
    r = Q.shape[-3] // K.shape[-3]
    K, V = K.repeat_interleave(r, dim=-3), V.repeat_interleave(r, dim=-3)
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    mask = torch.ones(n_q, n_kv, dtype=torch.bool).tril() if causal else None
    return _softmax_attend(Q, K, V, mask)


def _nan_rows(Q, K, V, *, causal=False):
    """Right, except that a query with no allowed key gets the softmax of all -inf, nan."""
    r = Q.shape[-3] // K.shape[-3]
    K, V = K.repeat_interleave(r, dim=-3), V.repeat_interleave(r, dim=-3)
    mask = _bottom_right(Q.shape[-2], K.shape[-2]) if causal else None
    return _softmax_attend(Q, K, V, mask)


def _always_causal(Q, K, V, *, causal=False):
    """Applies the causal mask whatever causal says."""
    r = Q.shape[-3] // K.shape[-3]
    K, V = K.repeat_interleave(r, dim=-3), V.repeat_interleave(r, dim=-3)
    return _softmax_attend(Q, K, V, _bottom_right(Q.shape[-2], K.shape[-2])).nan_to_num(0.0)


def _groups_of_two(Q, K, V, *, causal=False):
    """Hard-codes two query heads per key/value head."""
    K, V = K.repeat_interleave(2, dim=-3), V.repeat_interleave(2, dim=-3)
    mask = _bottom_right(Q.shape[-2], K.shape[-2]) if causal else None
    return _softmax_attend(Q, K, V, mask).nan_to_num(0.0)


# 06.6: pool(W, n_heads, n_kv_heads)
def _every_g_th(W, n_heads, n_kv_heads):
    """Groups every G-th head together."""
    d_in, r = W.shape[0], n_heads // n_kv_heads
    return W.reshape(d_in, r, n_kv_heads, -1).mean(dim=1).reshape(d_in, -1)


def _group_sum(W, n_heads, n_kv_heads):
    """Sums the heads of a group."""
    d_in, r = W.shape[0], n_heads // n_kv_heads
    return W.reshape(d_in, n_kv_heads, r, -1).sum(dim=2).reshape(d_in, -1)


def _last_of_group(W, n_heads, n_kv_heads):
    """Keeps the last head of each group."""
    d_in, r = W.shape[0], n_heads // n_kv_heads
    return W.reshape(d_in, n_kv_heads, r, -1)[:, :, -1].reshape(d_in, -1)


def _d_head_from_rows(W, n_heads, n_kv_heads):
    """Reads d_head from the rows of W."""
    d_in, r = W.shape[0], n_heads // n_kv_heads
    return W.reshape(d_in, n_kv_heads, r, d_in // n_heads).mean(dim=2).reshape(d_in, -1)


PLANTED = [
    # 06.1: multiply-adds per byte of a decoding step, (Llama 3 70B, Gemma 3 27B)
    Planted("06.1", "K alone counted in the bytes",
            _both(lambda h, g: 2 * h * N * D_HEAD / (g * N * D_HEAD * N_B)),
            names=r"per byte of K alone"),
    Planted("06.1", "an FP8 cache", _both(lambda h, g: 2 * h * N * D_HEAD / (2 * g * N * D_HEAD)),
            names=r"2 bytes"),
    Planted("06.1", "multiply-adds per cached number",
            _both(lambda h, g: 2 * h * N * D_HEAD / (2 * g * N * D_HEAD)),
            names=r"per cached number"),
    Planted("06.1", "bytes per multiply-add",
            _both(lambda h, g: (2 * g * N * D_HEAD * N_B) / (2 * h * N * D_HEAD)),
            names=r"inverse"),
    Planted("06.1", "the key/value heads of all layers read", (
        MACS / (80 * 2 * G * N * D_HEAD * N_B),
        2 * 32 * N * D_HEAD / (62 * 2 * 16 * N * D_HEAD * N_B)),
            avoid=r"inverse|multi-head|per cached|half"),
    # the old question (Llama 3 70B alone, 4.0) passed these two
    Planted("06.1", "G / n_b", _both(lambda h, g: g / N_B), names=r"G / n_b"),
    Planted("06.1", "d_head / (2 G n_b)", _both(lambda h, g: D_HEAD / (2 * g * N_B)),
            names=r"d_head / \(2 G n_b\)"),
    # numbers that coincide with a catalogued formula: the hint names both causes
    Planted("06.1", "Gemma's G read as 8", (64 / (8 * N_B), 32 / (8 * N_B)),
            names=r"G taken as 8"),
    Planted("06.1", "FLOPs per byte", _both(lambda h, g: 2 * h / (g * N_B)), names=r"FLOPs"),
    Planted("06.1", "a float32 cache", _both(lambda h, g: h / (g * 4)), names=r"float32"),
    Planted("06.1", "Llama's answer written for both", (4.0, 4.0),
            avoid=r"inverse|multi-head|half"),
    # 06.2: query heads 13 and 23, H = 32, G = 8
    Planted("06.2", "h mod s", (13 % 4, 23 % 4), names=r"h mod s"),
    Planted("06.2", "h / s rounded up", (-(-13 // 4), -(-23 // 4)), names=r"rounded up"),
    Planted("06.2", "the 1-based head", (13 // 4 + 1, 23 // 4 + 1), names=r"1-based"),
    Planted("06.2", "h mod G", (13 % 8, 23 % 8), names=r"interleaved"),
    Planted("06.2", "Llama 3 70B's group size, s = 8", (13 // 8, 23 // 8),
            names=r"another model's group size"),
    Planted("06.2", "h / s not rounded", (13 / 4, 23 / 4), names=r"not rounded"),
    Planted("06.2", "h divided by s = 2", (13 // 2, 23 // 2), avoid=r"interleaved|1-based|h // G"),
    # the old question (head 13 alone, 13 / 4 = 3.25) passed rounding to the nearest
    Planted("06.2", "h / s rounded to the nearest", (round(13 / 4), round(23 / 4)),
            names=r"nearest"),
    Planted("06.2", "h / s rounded half up", (int(13 / 4 + 0.5), int(23 / 4 + 0.5)),
            names=r"nearest"),
    # 06.3: entries of W_K and W_V saved
    Planted("06.3", "d_head left out", 2 * D * (H - G), avoid=r"one matrix|keep|80 layers"),
    Planted("06.3", "W_Q and W_O counted too", 4 * D * (H - G) * D_HEAD, names=r"W_Q and W_O"),
    Planted("06.3", "W_K alone", D * (H - G) * D_HEAD, names=r"one matrix"),
    Planted("06.3", "d = 4096", 2 * 4096 * (H - G) * D_HEAD, names=r"d = 4096"),
    Planted("06.3", "bytes, not entries", 2 * 2 * D * (H - G) * D_HEAD, names=r"bytes"),
    Planted("06.3", "H / G heads kept", 2 * D * (H // G) * D_HEAD, names=r"keep"),
    Planted("06.3", "what the grouped layer keeps", 2 * D * G * D_HEAD, names=r"keep"),
    Planted("06.3", "the whole multi-head W_K and W_V", 2 * D * H * D_HEAD,
            avoid=r"one matrix|keep|80 layers|W_Q"),
    # 06.5: gqa
    Planted("06.5", "KV heads tiled with torch.cat", _tiled_heads, names=r"h % G"),
    Planted("06.5", "the causal mask top-left", _top_left, names=r"bottom-right"),
    Planted("06.5", "nan in rows with no allowed key", _nan_rows, names=r"nan"),
    Planted("06.5", "always causal", _always_causal),
    Planted("06.5", "two query heads per KV head hard-coded", _groups_of_two),
    # 06.6: pool
    Planted("06.6", "every G-th head grouped", _every_g_th, names=r"consecutive"),
    Planted("06.6", "the group summed", _group_sum, names=r"sum"),
    Planted("06.6", "the last head of each group", _last_of_group),
    Planted("06.6", "d_head read from d_in", _d_head_from_rows),
]
