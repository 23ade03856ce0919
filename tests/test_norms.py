"""attnlib.layers.norms: LayerNorm and RMSNorm against torch's own (``nn.LayerNorm``,
``F.layer_norm``, ``nn.RMSNorm``, ``F.rms_norm``) and the formulas written out, in float32,
float64 and bfloat16, and what bad input gets."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import randomise, tolerances

from attnlib.layers.norms import LayerNorm, RMSNorm, layer_norm, rms_norm

F64 = torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_layer_norm_matches_torch(device, gen, dtype):
    x = (3 * torch.randn(4, 5, 16, generator=gen, dtype=dtype) + 2).to(device)
    ours = LayerNorm(16, eps=1e-5, device=device, dtype=dtype)
    theirs = torch.nn.LayerNorm(16, eps=1e-5, device=device, dtype=dtype)
    randomise(ours, gen)
    with torch.no_grad():
        theirs.weight.copy_(ours.gamma)
        theirs.bias.copy_(ours.beta)
    torch.testing.assert_close(ours(x), theirs(x), **tolerances(dtype))
    ref = F.layer_norm(x, (16,), ours.gamma, ours.beta, 1e-5)
    torch.testing.assert_close(layer_norm(x, ours.gamma, ours.beta, 1e-5), ref, **tolerances(dtype))
    # with unit gains and zero shifts each row has mean 0 and biased variance ~1
    y = layer_norm(x.to(F64))
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 5, dtype=F64, device=device))
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.full((4, 5), 1.0, dtype=F64,
                               device=device), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_rms_norm_matches_formula_and_torch(device, gen, dtype):
    x = (torch.randn(3, 7, 12, generator=gen, dtype=dtype) + 1).to(device)
    norm = RMSNorm(12, eps=1e-6, device=device, dtype=dtype)
    randomise(norm, gen)
    # the formula, one row at a time: x / sqrt(sum(x_i^2) / d + eps) * g
    ref = torch.empty_like(x)
    for b in range(3):
        for n in range(7):
            row = x[b, n]
            ref[b, n] = row / torch.sqrt(sum(v * v for v in row) / 12 + 1e-6) * norm.g
    torch.testing.assert_close(norm(x), ref, **tolerances(dtype))
    torch_norm = torch.nn.RMSNorm(12, eps=1e-6, device=device, dtype=dtype)
    with torch.no_grad():
        torch_norm.weight.copy_(norm.g)
    torch.testing.assert_close(norm(x), torch_norm(x), **tolerances(dtype))
    # no recentring: a constant row c maps to c / sqrt(c^2 + eps) * g, about sign(c) * g
    const = torch.full((12,), -4.0, dtype=dtype, device=device)
    expected = -4.0 / math.sqrt(16.0 + 1e-6) * norm.g.detach()
    torch.testing.assert_close(rms_norm(const, norm.g), expected, **tolerances(dtype))


def test_norms_in_bfloat16_compute_in_float32(device, gen):
    x = torch.randn(2, 9, 32, generator=gen).to(device)
    g = torch.rand(32, generator=gen).to(device) + 0.5
    b = torch.randn(32, generator=gen).to(device)
    xb, gb, bb = x.bfloat16(), g.bfloat16(), b.bfloat16()
    ref_ln = F.layer_norm(xb.float(), (32,), gb.float(), bb.float()).bfloat16()
    ref_rms = F.rms_norm(xb.float(), (32,), gb.float(), 1e-6).bfloat16()
    out_ln, out_rms = layer_norm(xb, gb, bb), rms_norm(xb, gb)
    assert out_ln.dtype == out_rms.dtype == torch.bfloat16
    torch.testing.assert_close(out_ln, ref_ln, **tolerances(torch.bfloat16))
    torch.testing.assert_close(out_rms, ref_rms, **tolerances(torch.bfloat16))


@pytest.mark.parametrize(
    ("call", "error", "fragments"),
    [
        (lambda: RMSNorm(8)(torch.zeros(2, 6)), ValueError, ["x", "last dimension 8", "(2, 6)"]),
        (lambda: LayerNorm(8)(torch.zeros(2, 8).long()), TypeError, ["x", "floating", "int64"]),
        (lambda: rms_norm(torch.zeros(2, 4), torch.ones(5)), ValueError, ["g", "(4,)", "(5,)"]),
        (lambda: layer_norm(torch.zeros(2, 4), beta=torch.ones(2)), ValueError, ["beta", "(2,)"]),
        (lambda: rms_norm(torch.zeros(2, 4), eps=-1.0), ValueError, ["eps", "> 0", "-1.0"]),
        (lambda: LayerNorm(4, eps="small"), TypeError, ["eps", "number"]),
    ],
)
def test_bad_input_names_the_argument(call, error, fragments):
    with pytest.raises(error) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_rms_norm_module_computes_the_function(dtype):
    """RMSNorm calls PyTorch's one-call rms_norm where it can: the same numbers as the
    formula of :func:`rms_norm` (bit for bit on the CPU), and the formula elsewhere."""
    g = torch.Generator().manual_seed(0)
    for d in (16, 129):
        norm = RMSNorm(d, eps=1e-6, dtype=dtype)
        with torch.no_grad():
            norm.g.copy_(torch.randn(d, generator=g, dtype=dtype))
        x = 3 * torch.randn(2, 7, d, generator=g, dtype=dtype)
        expected = rms_norm(x, norm.g, 1e-6)
        if x.device.type == "cpu":
            assert torch.equal(norm(x), expected)
        torch.testing.assert_close(norm(x), expected)
    half = RMSNorm(16, dtype=torch.bfloat16)
    xh = torch.randn(3, 16, generator=g).to(torch.bfloat16)
    assert torch.equal(half(xh), rms_norm(xh, half.g, half.eps))
