"""Checked exercises of lesson 08: rotary position embedding."""

from __future__ import annotations

import math

import torch

from attnlib.analysis.memory import DEEPSEEK_V2, LLAMA3_8B
from attnlib.core.rope import Llama3Scaling, apply_rope, rope_frequencies
from attnlib.exercises import as_tensor, checker, compare, numbers, scalar, whole_number


def _rope_dot(m: int, n: int) -> float:
    """<q R_m, k R_n> for exercise 08.1's d = 2, q = (1, 0) and k = (0, 1), as rows."""
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    return float(apply_rope(q, torch.tensor([m])) @ apply_rope(k, torch.tensor([n])).T)


def _rope_angle_mistakes() -> list[tuple[torch.Tensor, str]]:
    expected = _rope_dot(7, 4)
    return [
        (scalar(-expected), "the sign is flipped: that is sin(n - m); the query at m = 7 has "
                            "turned 3 radians further than the key, not less."),
        (scalar(math.sin(7 + 4)), "that adds the angles (m + n); rotating the key too "
                                  "subtracts its angle: only m - n survives."),
        (scalar(math.cos(3)), "that is the cosine: the key (0, 1) picks the second coordinate "
                              "of the turned query, (cos 3, sin 3)."),
        (scalar(math.sin(math.radians(3))), "the angles are in radians, not degrees "
                                            "(theta_0 = 1 radian per position)."),
        (scalar(expected / math.sqrt(2)), "the question asks for the plain dot product, "
                                          "without the 1/sqrt(d) scaling."),
        (scalar(_rope_dot(7, 0)), "that turns the query only; the key at n = 4 turns too, by 4 "
                                  "radians, and only the difference of the angles is left."),
        (scalar(_rope_dot(0, 4)), "that turns the key only; the query at m = 7 turns too, by 7 "
                                  "radians, and only the difference of the angles is left."),
    ]


@checker("08.1", mistakes=_rope_angle_mistakes)
def _rope_angle(answer: object) -> str | None:
    """<q R_7, k R_4> for d = 2, q = (1, 0), k = (0, 1): sin(7 - 4) = sin 3.

    A number in any one-element shape is read as that number: ``q_R @ k_R.T`` of two rows
    gives a (1, 1) tensor.
    """
    got = as_tensor(answer)
    if got is not None and got.numel() == 1:
        answer = got.reshape(())
    return compare(answer, scalar(_rope_dot(7, 4)), rel=1e-3,
                   what="one number, the dot product (a float)", mistakes=_rope_angle_mistakes())


@numbers("08.2", rel=1e-3, what="one wavelength, in positions (a float)")
def _slowest_wavelength():
    """Wavelength 2 pi / theta_63 of Llama 3's slowest pair (d_head = 128, b = 500,000)."""
    d, base = LLAMA3_8B.d_head, 500_000.0
    theta = rope_frequencies(d, base=base)
    expected = 2 * math.pi / float(theta[-1])
    return scalar(expected), (
        (scalar(1 / float(theta[-1])), "that is 1 / theta_63, positions per radian; a full "
                                       "turn takes 2 pi radians."),
        (scalar(float(theta[-1])), "that is the angle theta_63 itself; the wavelength is "
                                   "2 pi / theta_63."),
        (scalar(2 * math.pi * base), "that uses the exponent 1; theta_63 = b^(-2 * 63 / 128) = "
                                     "b^(-126/128)."),
        (scalar(2 * math.pi / float(rope_frequencies(d, base=10_000.0)[-1])),
         "that is base 10,000; Llama 3 uses 500,000."),
        (scalar(2 * math.pi * base ** (2 * 63 / 4096)), "the exponent divides by the head "
                                                        "width 128, not the model width."),
        (scalar(2 * math.pi / float(rope_frequencies(d, base=base, scaling=Llama3Scaling())[-1])),
         "that is Llama 3.1's wavelength, with its llama3 scaling (8 times slower); the "
         "question asks first for Llama 3's, without it."),
    )


@whole_number("08.4", what="a whole number of cached numbers (an int)", floats="equal")
def _per_head_rotary_cache():
    """DeepSeek-V2's cache per token and layer if every head had its own rotated key."""
    ds = DEEPSEEK_V2
    hints = (
        (ds.d_latent + ds.d_rope, "that is the real design, with one rotated key shared by all "
                                  "heads; the question gives each head its own."),
        (ds.n_heads * ds.d_rope, "that is the rotary keys alone; the latent L is still cached."),
        (ds.values_per_token_per_layer("mha"), "that is a full multi-head cache; the latent "
                                               "stays, only the rotary keys multiply."),
        (ds.d_latent + 2 * ds.n_heads * ds.d_rope, "that caches a rotary query per head too; "
                                                   "queries are never cached."),
        (ds.n_layers * (ds.d_latent + ds.n_heads * ds.d_rope), "that is all 60 layers; the "
                                                               "question asks for one layer."),
    )
    return ds.d_latent + ds.n_heads * ds.d_rope, hints, (
        "not quite: add the latent width d_L and one rotary key of width d_R for each of the "
        "H heads.")


# ---------------------------------------------------------------------------------------
# implementation exercises

from attnlib.exercises.implement import (  # noqa: E402
    Implementation,
    Mistake,
    function_case,
    implementation,
    randn,
)


def _half_split(X, positions, base, exponent=2.0):
    d = X.shape[-1]
    theta = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions.to(torch.float64)[..., None] * theta  # (N, d/2)
    cos, sin = angles.cos().to(X.dtype), angles.sin().to(X.dtype)
    x_1, x_2 = X[..., : d // 2], X[..., d // 2:]
    return torch.cat((x_1 * cos - x_2 * sin, x_1 * sin + x_2 * cos), dim=-1)


@implementation("08.5")
def _rope_at_offset() -> Implementation:
    """RoPE with half-split pairs (i, i + d/2) at the given positions, theta_i = base^(-2i/d)."""

    def reference(X, positions, *, base):
        return apply_rope(X, positions, base=base)

    def interleaved(X, positions, *, base):
        return apply_rope(X, positions, base=base, interleaved=True)

    def backwards(X, positions, *, base):
        return apply_rope(X, -positions, base=base)

    def from_zero(X, positions, *, base):
        return apply_rope(X, torch.arange(X.shape[-2]), base=base)

    def exponent(X, positions, *, base):
        return _half_split(X, positions, base, exponent=1.0)

    F32 = torch.float32
    cases = [
        function_case("float64, positions 0..4", {"X": randn(5, 4, seed=1),
                                                  "positions": torch.arange(5)}, base=10000.0),
        function_case("float32, heads, a cached chunk at positions 10..13",
                      {"X": randn(2, 3, 4, 8, seed=2, dtype=F32),
                       "positions": torch.arange(10, 14)}, base=10000.0),
        function_case("float32, one decoded token at position 100, base 500,000",
                      {"X": randn(1, 2, 1, 6, seed=3, dtype=F32),
                       "positions": torch.tensor([100])}, base=500000.0),
        function_case("float64, odd N, positions 3..9, base 10",
                      {"X": randn(3, 7, 2, seed=4), "positions": torch.arange(3, 10)}, base=10.0),
        function_case("float64, positions out of order and with gaps (7, 2, 30, 3)",
                      {"X": randn(2, 4, 4, seed=5), "positions": torch.tensor([7, 2, 30, 3])},
                      base=100.0),
    ]
    return Implementation(
        "a function rope(X, positions, *, base) returning the rotated X", reference, cases, (
            Mistake(interleaved, "you rotate the pairs (2i, 2i + 1), the interleaved layout; "
                                 "this book's (and Llama's) layout pairs coordinate i with "
                                 "i + d/2."),
            Mistake(backwards, "your rotation runs the other way: the pair (x_1, x_2) becomes "
                               "(x_1 cos - x_2 sin, x_1 sin + x_2 cos), a rotation by +m theta."),
            Mistake(from_zero, "you number the rows 0, 1, ... instead of reading positions: in "
                               "a cached step the new rows sit at positions N_cached, "
                               "N_cached + 1, ..., and only the positions argument knows them."),
            Mistake(exponent, "the frequencies are theta_i = base^(-2i/d), i = 0 .. d/2 - 1; "
                              "yours use base^(-i/d)."),
        ))
