"""Planted wrong answers for lesson 08's exercises."""

from __future__ import annotations

import math

import torch

from planted import Planted

# 08.2: Llama 3, d_head = 128, base 500,000; pair i turns by base^(-2i/d) per position
BASE, D = 500_000.0, 128
# 08.4: DeepSeek-V2, d_L = 512, d_R = 64, H = 128
D_L, D_R, H = 512, 64, 128


# 08.5: rope(X, positions, *, base)
def _rotate(X, angles):
    d = X.shape[-1]
    cos, sin = angles.cos().to(X.dtype), angles.sin().to(X.dtype)
    x_1, x_2 = X[..., : d // 2], X[..., d // 2:]
    return torch.cat((x_1 * cos - x_2 * sin, x_1 * sin + x_2 * cos), dim=-1)


def _theta(d, base):
    return base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)


def _counts_from_first(X, positions, *, base):
    """Reads only the first position and counts on from it."""
    start = int(positions[0])
    pos = torch.arange(start, start + X.shape[-2], dtype=torch.float64)
    return _rotate(X, pos[:, None] * _theta(X.shape[-1], base))


def _base_10000(X, positions, *, base):
    """Ignores base and uses 10,000."""
    return _rotate(X, positions.double()[:, None] * _theta(X.shape[-1], 10_000.0))


def _float32_angles(X, positions, *, base):
    """Computes the angles in float32 whatever the input's dtype."""
    d = X.shape[-1]
    theta = base ** (-2 * torch.arange(d // 2, dtype=torch.float32) / d)
    return _rotate(X, positions.float()[:, None] * theta)


def _pairs_interleaved(X, positions, *, base):
    """Rotates the neighbouring pairs (2i, 2i + 1)."""
    angles = positions.double()[:, None] * _theta(X.shape[-1], base)
    cos, sin = angles.cos().to(X.dtype), angles.sin().to(X.dtype)
    x_1, x_2 = X[..., 0::2], X[..., 1::2]
    out = torch.stack((x_1 * cos - x_2 * sin, x_1 * sin + x_2 * cos), dim=-1)
    return out.flatten(-2)


def _i_from_one(X, positions, *, base):
    """Numbers the pairs from 1: theta_i = base^(-2(i + 1)/d)."""
    d = X.shape[-1]
    theta = base ** (-2 * torch.arange(1, d // 2 + 1, dtype=torch.float64) / d)
    return _rotate(X, positions.double()[:, None] * theta)


def _clockwise(X, positions, *, base):
    """Rotates by -m theta."""
    return _rotate(X, -positions.double()[:, None] * _theta(X.shape[-1], base))


def _relative_to_first(X, positions, *, base):
    """Subtracts the first position from every position."""
    pos = (positions - positions[0]).double()
    return _rotate(X, pos[:, None] * _theta(X.shape[-1], base))


def _from_smallest(X, positions, *, base):
    """Counts on from the smallest position."""
    pos = (torch.arange(X.shape[-2]) + positions.min()).double()
    return _rotate(X, pos[:, None] * _theta(X.shape[-1], base))


def _width_from_axis_1(X, positions, *, base):
    """Reads the width from X.shape[1] instead of the last axis."""
    theta = base ** (-2 * torch.arange(X.shape[-1] // 2, dtype=torch.float64) / X.shape[1])
    return _rotate(X, positions.double()[:, None] * theta)


def _width_8(X, positions, *, base):
    """Divides the exponent by 8, the lesson's width, whatever the input's."""
    theta = base ** (-2 * torch.arange(X.shape[-1] // 2, dtype=torch.float64) / 8)
    return _rotate(X, positions.double()[:, None] * theta)


def _first_half_only(X, positions, *, base):
    """Turns the first half and leaves the second as it was."""
    d = X.shape[-1]
    angles = positions.double()[:, None] * _theta(d, base)
    x_1, x_2 = X[..., : d // 2], X[..., d // 2:]
    return torch.cat((x_1 * angles.cos().to(X.dtype) - x_2 * angles.sin().to(X.dtype), x_2), -1)


def _float32_out(X, positions, *, base):
    """Returns float32 whatever the input's dtype."""
    return _rotate(X, positions.double()[:, None] * _theta(X.shape[-1], base)).float()


def _base_500000(X, positions, *, base):
    """Ignores base and uses 500,000."""
    return _rotate(X, positions.double()[:, None] * _theta(X.shape[-1], 500_000.0))


def _sorted_positions(X, positions, *, base):
    """Sorts the positions first."""
    pos = positions.sort().values.double()
    return _rotate(X, pos[:, None] * _theta(X.shape[-1], base))


PLANTED = [
    # 08.1: <q R_7, k R_4> for q = (1, 0), k = (0, 1)
    Planted("08.1", "only the query rotated", math.sin(7.0), names=r"turns the query only"),
    Planted("08.1", "only the key rotated", -math.sin(4.0), names=r"turns the key only"),
    Planted("08.1", "pair 1's angle, 1e-4 per position", math.sin(3e-4),
            avoid=r"degrees|m \+ n|cosine|only"),
    Planted("08.1", "one product term, cos 7 sin 4", math.cos(7.0) * math.sin(4.0),
            avoid=r"m \+ n|cosine|degrees|only"),
    Planted("08.1", "sin(-11)", math.sin(-11.0), avoid=r"m \+ n|adds|only"),
    Planted("08.1", "neither rotated", 0.0, avoid=r"m \+ n|cosine|degrees|sign"),
    Planted("08.1", "n - m", math.sin(4.0 - 7.0), names=r"sign"),
    Planted("08.1", "the angle 3 itself", 3.0, avoid=r"m \+ n|cosine|degrees"),
    # 08.2: the wavelength of pair 63
    Planted("08.2", "base 10,000", 2 * math.pi * 10_000.0 ** (126 / 128), names=r"10,000"),
    Planted("08.2", "positions per radian", BASE ** (126 / 128), names=r"positions per radian"),
    Planted("08.2", "the exponent -i/d", 2 * math.pi * BASE ** (63 / 128),
            avoid=r"10,000|positions per radian|model width"),
    Planted("08.2", "pair 64, one past the last", 2 * math.pi * BASE, names=r"126/128"),
    Planted("08.2", "the fastest pair", 2 * math.pi, avoid=r"10,000|positions per radian"),
    Planted("08.2", "pair 62", 2 * math.pi * BASE ** (124 / 128),
            avoid=r"10,000|positions per radian|exponent|3\.1"),
    Planted("08.2", "half a turn", math.pi * BASE ** (126 / 128),
            avoid=r"10,000|positions per radian|exponent|3\.1"),
    Planted("08.2", "base 1,000,000", 2 * math.pi * 1e6 ** (126 / 128),
            avoid=r"10,000|positions per radian|exponent|3\.1"),
    Planted("08.2", "head width 64", 2 * math.pi * BASE ** (126 / 64),
            avoid=r"10,000|positions per radian|3\.1"),
    # 08.4: cached numbers per token and layer with a rotary key per head
    Planted("08.4", "the shared rotary key", D_L + D_R, names=r"real design"),
    Planted("08.4", "a latent per head too", H * (D_L + D_R),
            avoid=r"real design|alone|multi-head|query|layers"),
    Planted("08.4", "a rotary query cached too", D_L + 2 * H * D_R, names=r"query"),
    Planted("08.4", "the rotary keys alone", H * D_R, names=r"latent"),
    Planted("08.4", "bytes in bf16", 2 * (D_L + H * D_R),
            avoid=r"real design|alone|multi-head|query|layers"),
    Planted("08.4", "64 heads", D_L + 64 * D_R, avoid=r"real design|alone|multi-head|query|layers"),
    Planted("08.4", "the shared key kept as well", D_L + (H + 1) * D_R,
            avoid=r"real design|alone|multi-head|query|layers"),
    Planted("08.4", "widths swapped", D_R + H * D_L,
            avoid=r"real design|alone|multi-head|query|layers"),
    # 08.5: rope at given positions
    Planted("08.5", "positions counted on from the first", _counts_from_first),
    Planted("08.5", "base 10,000 always", _base_10000),
    Planted("08.5", "angles in float32", _float32_angles, avoid=r"rotat|pair|base"),
    Planted("08.5", "interleaved pairs", _pairs_interleaved, names=r"interleaved"),
    Planted("08.5", "pairs numbered from 1", _i_from_one),
    Planted("08.5", "rotated by -m theta", _clockwise, names=r"other way"),
    Planted("08.5", "positions relative to the first", _relative_to_first,
            avoid=r"interleaved|other way|base\^\(-i/d\)"),
    Planted("08.5", "counted on from the smallest position", _from_smallest,
            avoid=r"interleaved|other way|base\^\(-i/d\)"),
    Planted("08.5", "width read from axis 1", _width_from_axis_1,
            avoid=r"interleaved|other way|number the rows"),
    Planted("08.5", "exponent over 8", _width_8, avoid=r"interleaved|other way|number the rows"),
    Planted("08.5", "first half turned only", _first_half_only,
            avoid=r"interleaved|other way|number the rows|base\^\(-i/d\)"),
    Planted("08.5", "float32 out", _float32_out, names=r"dtype"),
    Planted("08.5", "base 500,000 always", _base_500000,
            avoid=r"interleaved|other way|number the rows"),
    Planted("08.5", "positions sorted", _sorted_positions,
            avoid=r"interleaved|other way|base\^\(-i/d\)"),
]
