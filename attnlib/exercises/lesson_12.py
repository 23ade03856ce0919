"""Checked exercises of lesson 12: one token through the model."""

from __future__ import annotations

import torch

from attnlib.exercises import whole_number
from attnlib.exercises.implement import Implementation, Mistake, function_case, implementation
from attnlib.exercises.implement import randn as _randn
from attnlib.layers.norms import rms_norm


@implementation("12.1")
def _next_char_logits() -> Implementation:
    """The model's last step: the final RMSNorm with gains g, then the tied head E^T."""

    def reference(x, g, E, eps):
        return rms_norm(x, g, eps) @ E.mT  # (N, d) @ (d, V) -> (N, V)

    def no_gain(x, g, E, eps):
        return rms_norm(x, None, eps) @ E.mT

    def by_norm(x, g, E, eps):
        return x / x.norm(dim=-1, keepdim=True) * g @ E.mT

    def layer_norm(x, g, E, eps):
        c = x - x.mean(dim=-1, keepdim=True)
        return rms_norm(c, g, eps) @ E.mT

    def norm_over_tokens(x, g, E, eps):
        return x * torch.rsqrt(x.square().mean(dim=0, keepdim=True) + eps) * g @ E.mT

    def case(name, seed, N, d, V, dtype, *, size=5.0, eps=1e-6):
        x = _randn(N, d, seed=seed, dtype=dtype, scale=size)
        g = 1 + _randn(d, seed=seed + 1, dtype=dtype, scale=0.3)
        E = _randn(V, d, seed=seed + 2, dtype=dtype, scale=0.1)
        return function_case(name, {"x": x, "g": g, "E": E}, eps=eps)

    return Implementation(
        "a function next_char_logits(x, g, E, eps) returning (N, V) logits", reference,
        [case("float64, 3 tokens, d = 8, V = 11", 3, 3, 8, 11, torch.float64),
         case("float32, 5 tokens, d = 16, V = 7", 7, 5, 16, 7, torch.float32),
         case("float64, a small stream (mean square about 0.01) and eps = 0.05", 11, 4, 6, 5,
              torch.float64, size=0.1, eps=0.05)],
        (
            Mistake(no_gain, "the final norm has trained gains g: multiply the normalised "
                             "stream by g, coordinate by coordinate, before the head."),
            Mistake(by_norm, "RMSNorm divides by the root mean square sqrt(mean(x^2) + eps), "
                             "not by the length |x|: the two differ by a factor sqrt(d)."),
            Mistake(layer_norm, "RMSNorm does not subtract the mean; that is LayerNorm."),
            Mistake(norm_over_tokens, "the mean square is over a token's d coordinates "
                                      "(the last axis), not over the tokens."),
        ))


@whole_number("12.2", what="one whole number of bytes", floats="whole")
def _cache_after_prompt():
    """Bytes the float32 caches of book and its G = 1 conversion hold after 40 characters."""
    n_layers, n_heads, d_head, n_tokens, G = 4, 4, 16, 40, 1
    full = 2 * n_layers * n_heads * d_head * 4 * n_tokens
    grouped = 2 * n_layers * G * d_head * 4 * n_tokens
    return grouped, (
        (full, "that is the full multi-head cache (G = H = 4); with G = 1 each layer keeps "
               "one key head and one value head."),
        (grouped // 2, "a layer keeps a key and a value per KV head: count both (the factor 2)."),
        # N_L = 4 and float32's 4 bytes: a quarter is either slip
        (grouped // 4, "that is a quarter: count every one of the 4 layers, each with its own "
                       "cache, and 4 bytes per float32 number."),
        (grouped * 2, "the shipped weights are float32, 4 bytes a number, not 8."),
    ), "count 2 N_L G d_head numbers per token, 4 bytes each, for 40 tokens."
