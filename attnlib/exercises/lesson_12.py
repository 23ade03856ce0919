"""Checked exercises of lesson 12: one token through the model."""

from __future__ import annotations

import torch

from attnlib.analysis.memory import LLAMA3_70B
from attnlib.exercises import numbers
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


def _cache_bytes(formula) -> torch.Tensor:
    """``formula(N_L, H, G, d_head, n_b, N)`` for book at G = 1 in float32 and for Llama 3 70B
    in bf16, 40 tokens each."""
    shapes = ((4, 4, 1, 16, 4, 40),  # book converted to G = 1, float32
              (LLAMA3_70B.n_layers, LLAMA3_70B.n_heads, LLAMA3_70B.n_kv_heads,
               LLAMA3_70B.d_head, 2, 40))
    return torch.tensor([float(formula(*shape)) for shape in shapes], dtype=torch.float64)


@numbers("12.2", rel=0.0, what="two whole numbers of bytes, (book, Llama 3 70B)")
def _cache_after_prompt():
    """Bytes the float32 caches of book's G = 1 conversion hold after 40 characters, and those
    of Llama 3 70B in bf16 after 40 tokens: 2 N_L G d_head n_b N. In book N_L = H = 4 = the
    bytes of a float32, so formulas that swap them give book's number; Llama 3 70B's
    (80 layers, H = 64, G = 8, 2 bytes) tells them apart."""
    expected = _cache_bytes(lambda n_l, h, g, d, n_b, n: 2 * n_l * g * d * n_b * n)
    return expected, (
        (_cache_bytes(lambda n_l, h, g, d, n_b, n: 2 * n_l * h * d * n_b * n),
         "that is the full multi-head cache (G = H); a layer keeps a key and a value for each "
         "of its G key/value heads: 1 in book's G = 1 conversion, 8 in Llama 3 70B."),
        (expected / 2, "a layer keeps a key and a value per KV head: count both (the factor 2)."),
        (_cache_bytes(lambda n_l, h, g, d, n_b, n: 2 * g * d * n_b * n),
         "that is one layer: count every layer, each with its own cache, 4 in book and 80 in "
         "Llama 3 70B."),
        (_cache_bytes(lambda n_l, h, g, d, n_b, n: 2 * n_l * g * d * n),
         "that counts numbers, not bytes: each takes 4 bytes in float32 (book) and 2 in bf16 "
         "(Llama 3 70B)."),
        (_cache_bytes(lambda n_l, h, g, d, n_b, n: 2 * n_l * g * d * 8 * n if n_b == 4
                      else 2 * n_l * g * d * n_b * n),
         "the shipped weights of book are float32, 4 bytes a number, not 8."),
        (_cache_bytes(lambda n_l, h, g, d, n_b, n: 2 * n_l * g * d * 4 * n),
         "Llama 3 70B's cache is in bf16, 2 bytes a number, not float32's 4."),
    )
