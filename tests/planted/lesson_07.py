"""Planted wrong answers for lesson 07's exercises."""

from __future__ import annotations

import torch

from planted import Planted

# 07.1: DeepSeek-V3: 61 layers, d_L = 512, d_R = 64, 16-bit
LAYERS, D_L, D_R = 61, 512, 64
# 07.3: DeepSeek-V2: d_LQ = 1536, d_L = 512, H = 128, d_head = 128, d = 5120
D_LQ, H2, D_HEAD2, D2 = 1536, 128, 128, 5120


# 07.5: step(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads)
def _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads, *, scale=None, rope=True,
              value_split=None, over_heads=False):
    H = n_heads
    d_head = W_LK.shape[1] // H
    Q = (L_Q @ W_LQQ).unflatten(-1, (H, d_head)).transpose(-3, -2)  # (..., H, 1, d_head)
    W_LK_h = W_LK.unflatten(1, (H, d_head)).transpose(0, 1)  # (H, d_L, d_head)
    S = Q @ W_LK_h.mT @ L.unsqueeze(-3).mT  # (..., H, 1, N_KV)
    if rope:
        S = S + q_R @ k_R.unsqueeze(-3).mT
    S = S * ((d_head + (q_R.shape[-1] if rope else 0)) ** -0.5 if scale is None else scale)
    P = torch.softmax(S, dim=-3 if over_heads else -1)
    L_avg = P @ L.unsqueeze(-3)  # (..., H, 1, d_L)
    W_LV_h = (value_split or (lambda W: W.unflatten(1, (H, -1)).transpose(0, 1)))(W_LV)
    return (L_avg @ W_LV_h).transpose(-3, -2).flatten(-2) @ W_O


def _values_by_d_head(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
    """Splits W_LV into heads of width d_head, read off W_LK."""
    d_head = W_LK.shape[1] // n_heads
    return _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads,
                     value_split=lambda W: W.reshape(W.shape[0], n_heads, d_head).transpose(0, 1))


def _values_strided(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
    """Takes every H-th column of W_LV as a head."""
    return _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads,
                     value_split=lambda W: W.reshape(W.shape[0], -1, n_heads).permute(2, 0, 1))


def _no_rope_head_scale(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
    """Leaves out the rotary part and scales by 1/sqrt(d_head)."""
    return _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads, rope=False)


def _latent_scale(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
    """Scales by 1/sqrt(d_L + d_R), the width of the cached row."""
    return _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads,
                     scale=(L.shape[-1] + k_R.shape[-1]) ** -0.5)


def _over_heads(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
    """Takes the softmax over the heads instead of the cached tokens."""
    return _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads, over_heads=True)


def _unscaled(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads):
    """Forgets the scale."""
    return _absorbed(L_Q, L, q_R, k_R, W_LQQ, W_LK, W_LV, W_O, n_heads, scale=1.0)


PLANTED = [
    # 07.1: bytes per token of DeepSeek-V3's cache
    Planted("07.1", "DeepSeek-V2's 60 layers", 60 * (D_L + D_R) * 2,
            avoid=r"rotary|factor 2|one layer|numbers|multi-head|round"),
    Planted("07.1", "numbers, not bytes", LAYERS * (D_L + D_R), names=r"2 bytes"),
    Planted("07.1", "the latent alone", LAYERS * D_L * 2, names=r"rotary"),
    Planted("07.1", "a rotary key per head", LAYERS * (D_L + 128 * D_R) * 2,
            avoid=r"rotary|factor 2|one layer|numbers|multi-head"),
    Planted("07.1", "keys and values each a latent", 2 * LAYERS * (D_L + D_R) * 2,
            names=r"no factor 2"),
    # 07.2: (2 H d_head) / (d_L + d_R), H = 32
    Planted("07.2", "DeepSeek-V2's 128 heads", 2 * 128 * 128 / (D_L + D_R),
            avoid=r"rotary|GQA|inverse|keys and values"),
    Planted("07.2", "keys only, latent only", 32 * 128 / D_L,
            avoid=r"GQA|inverse"),
    Planted("07.2", "against G = 8", 2 * 8 * 128 / (D_L + D_R), names=r"GQA"),
    Planted("07.2", "the inverse", (D_L + D_R) / (2 * 32 * 128), names=r"inverse"),
    # 07.3: numbers in the merged matrices of one layer
    Planted("07.3", "W_LO taken as W_O", H2 * D_LQ * D_L + H2 * D_HEAD2 * D2,
            avoid=r"alone|four factors|all \d+ of them"),
    Planted("07.3", "W_LQK^h as (d_LQ, d_head)", H2 * D_LQ * D_HEAD2 + H2 * D_L * D2,
            avoid=r"alone|four factors|all \d+ of them"),
    Planted("07.3", "the four factors", D_LQ * H2 * D_HEAD2 + 2 * D_L * H2 * D_HEAD2
            + H2 * D_HEAD2 * D2, names=r"four factors"),
    Planted("07.3", "W_LQK of one head and W_LO", D_LQ * D_L + H2 * D_L * D2,
            names=r"one matrix per head"),
    # 07.4: the smallest exact latent width, (Llama 3 8B, Llama 2 7B)
    Planted("07.4", "the width of K alone", (8 * 128, 32 * 128), names=r"keys only"),
    Planted("07.4", "the query heads' keys and values", (2 * 32 * 128, 2 * 32 * 128),
            names=r"query heads"),
    Planted("07.4", "the model width", (4096, 4096), names=r"d_in"),
    Planted("07.4", "2 G d_head plus d_R", (2 * 8 * 128 + 64, 2 * 32 * 128 + 64),
            avoid=r"keys only|query heads|is d_in"),
    # the old question (Llama 3 8B alone, 2,048) passed these two
    Planted("07.4", "half the model width", (4096 // 2, 4096 // 2), names=r"d_in / 2"),
    Planted("07.4", "Llama 2 7B read as G = 8", (2 * 8 * 128, 2 * 8 * 128), names=r"G = 8"),
    Planted("07.4", "d_head read as 64", (min(4096, 2 * 8 * 64), min(4096, 2 * 32 * 64)),
            names=r"64"),
    Planted("07.4", "half the query heads' width", (32 * 128 // 2, 32 * 128 // 2),
            names=r"H d_head / 2"),
    Planted("07.4", "2 G d_head without the bound by d_in", (2 * 8 * 128, 2 * 32 * 128),
            names=r"bound by the rows"),
    # 07.5: one absorbed decoding step
    Planted("07.5", "W_LV split with d_head", _values_by_d_head),
    Planted("07.5", "W_LV's heads strided", _values_strided),
    Planted("07.5", "no rotary part, 1/sqrt(d_head)", _no_rope_head_scale),
    Planted("07.5", "scaled by 1/sqrt(d_L + d_R)", _latent_scale),
    Planted("07.5", "softmax over the heads", _over_heads),
    Planted("07.5", "no scale", _unscaled),
]
