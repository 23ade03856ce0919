"""attnlib.analysis.costs: multiply-add counts against PyTorch's FlopCounterMode, explicit sums and
the matrix products a decoding step runs; the growth exponent against numpy's least squares."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import tolerances
from torch.overrides import TorchFunctionMode

import attnlib
from attnlib import LatentCache, MultiHeadLatentAttention
from attnlib.analysis.costs import (
    DECODE_PATHS,
    H800,
    Chip,
    decode_step_macs,
    fit_exponent,
    generation_macs,
    mla_decode_cost,
)
from attnlib.core.rope import apply_rope

F64 = torch.float64


# --- multiply-add counts against PyTorch's counter and explicit loops ---------------------

SHAPE = dict(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, d_head=4, d_ff=40, vocab_size=30)


@pytest.mark.parametrize("use_cache", [False, True])
def test_generation_macs_match_pytorchs_flop_counter(use_cache):
    # FlopCounterMode sees every matrix product but the fused attention kernel (on the CPU)
    from torch.utils.flop_counter import FlopCounterMode

    model = attnlib.TinyDecoder(
        vocab_size=30, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=40, seed=0
    )
    with FlopCounterMode(display=False) as counter:
        model.generate(torch.tensor([[1, 2, 3]]), 5, use_cache=use_cache)
    steps = generation_macs(3, 5, use_cache=use_cache, **SHAPE)
    assert counter.get_total_flops() == 2 * sum(s["other"] for s in steps)


def test_attention_macs_match_the_formula_written_out():
    from torch.utils.flop_counter import FlopCounterMode

    Q, K, V = torch.randn(4, 3, 4), torch.randn(4, 7, 4), torch.randn(4, 7, 4)  # (H, N, d_head)
    with FlopCounterMode(display=False) as counter:
        torch.softmax(Q @ K.mT, dim=-1) @ V
    got = decode_step_macs(3, 7, **{**SHAPE, "n_layers": 1})["attention"]
    assert counter.get_total_flops() == 2 * got == 2 * 2 * 4 * 3 * 7 * 4


def test_generation_attention_sums_are_the_closed_forms():
    N = 50
    width = SHAPE["n_layers"] * SHAPE["n_heads"] * SHAPE["d_head"]
    recompute = sum(s["attention"] for s in generation_macs(1, N, use_cache=False, **SHAPE))
    cached = sum(s["attention"] for s in generation_macs(1, N, use_cache=True, **SHAPE))
    assert recompute == sum(2 * width * n * n for n in range(1, N + 1))
    assert cached == sum(2 * width * n for n in range(1, N + 1))
    assert recompute * 3 == cached * (2 * N + 1)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: decode_step_macs(0, 4, **SHAPE), ValueError, r"n_q .*got 0"),
        (lambda: decode_step_macs(1, 4, **{**SHAPE, "ffn": "swish"}), ValueError, r"ffn must"),
        (lambda: generation_macs(1, -1, use_cache=True, **SHAPE), ValueError, r"n_new .*-1"),
        (lambda: generation_macs(1, 2, use_cache=1, **SHAPE), TypeError, r"use_cache"),
    ],
)
def test_macs_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# --- the cost of one decoded token: mla_decode_cost --------------------------------------


class _MacSpy(TorchFunctionMode):
    """Add up the multiply-adds of every matrix product run: ``prod(batch) * m * k * n``."""

    MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)

    def __init__(self) -> None:
        super().__init__()
        self.macs = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.MATMULS:
            a, b = args[0], args[1]
            assert a.dim() >= 2 and b.dim() >= 2, "only matrix-matrix products occur here"
            batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            self.macs += math.prod(batch) * a.shape[-2] * a.shape[-1] * b.shape[-1]
        return func(*args, **(kwargs or {}))


def _toy_spec(H, d_in, d_head, d_v, d_L, d_LQ, d_R):
    return attnlib.analysis.memory.ModelSpec(
        "toy", n_layers=1, d_model=d_in, n_heads=H, n_kv_heads=H, d_head=d_head, vocab_size=1,
        d_latent=d_L, d_rope=d_R, d_latent_q=d_LQ, d_v=d_v,
    )


def _expanded_decode(mla, x, K_cache, V_cache, kR_cache):
    """One token decoded against a per-head K/V cache, written out; returns (Y, K, V, k_R)."""
    H, dh, dv = mla.n_heads, mla.d_head, mla.d_v
    n = K_cache.shape[1] + 1
    L = x @ mla.W_L  # (1, d_L); no latent norm in these tests
    L_Q = x if mla.W_LQ is None else x @ mla.W_LQ
    K_new = (L @ mla.W_LK).reshape(H, 1, dh)  # decompressed once, then cached
    V_new = (L @ mla.W_LV).reshape(H, 1, dv)
    K = torch.cat((K_cache, K_new), dim=1)  # (H, n, d_head)
    V = torch.cat((V_cache, V_new), dim=1)
    q = (L_Q @ mla.W_LQQ).reshape(H, 1, dh)
    logits = q @ K.mT  # (H, 1, n)
    k_R = kR_cache
    if mla.d_rope:
        pos = torch.tensor([n - 1])
        q_R = apply_rope((L_Q @ mla.W_QR).reshape(H, 1, mla.d_rope), pos)
        k_R = torch.cat((kR_cache, apply_rope(x @ mla.W_KR, pos)), dim=0)  # (n, d_R)
        logits = logits + q_R @ k_R.T  # the shared rotated key, read by every head
    P = torch.softmax(logits * mla.scale, dim=-1)
    Y = (P @ V).transpose(0, 1).reshape(1, H * dv) @ mla.W_O
    return Y, K, V, k_R


@pytest.mark.parametrize(("d_LQ", "d_R"), [(None, 0), (7, 0), (7, 2), (None, 4)])
def test_decode_cost_counts_the_matrix_products_run(d_LQ, d_R):
    """Rebuilt and absorbed against attnlib's two paths, expanded against the loop above."""
    H, d_in, d_head, d_v, d_L, n_old = 3, 10, 4, 5, 6, 8
    spec = _toy_spec(H, d_in, d_head, d_v, d_L, d_LQ, d_R)
    mla = MultiHeadLatentAttention(d_in, H, d_head, d_L, d_latent_q=d_LQ, d_rope=d_R, d_v=d_v,
                                   dtype=F64)
    X_old, x = torch.randn(1, n_old, d_in, dtype=F64), torch.randn(1, 1, d_in, dtype=F64)
    outputs = {}
    with torch.no_grad():
        for path, absorbed in (("rebuilt", False), ("absorbed", True)):
            cache = LatentCache()
            mla(X_old, causal=True, cache=cache)
            with _MacSpy() as spy:
                outputs[path] = mla(x, causal=True, cache=cache, absorbed=absorbed,
                                    impl="explicit")
            cost = mla_decode_cost(spec, n_old + 1, path=path)
            assert spy.macs == cost["macs"], path
            assert cache.nbytes == (n_old + 1) * cost["cache_values_per_token"] * 8
        # expanded: the per-head cache of the old tokens, then one decoded token
        L_old = X_old[0] @ mla.W_L
        K_c = (L_old @ mla.W_LK).reshape(n_old, H, d_head).transpose(0, 1)
        V_c = (L_old @ mla.W_LV).reshape(n_old, H, d_v).transpose(0, 1)
        kR_c = apply_rope(X_old[0] @ mla.W_KR, torch.arange(n_old)) if d_R else None
        with _MacSpy() as spy:
            Y, K, V, k_R = _expanded_decode(mla, x[0], K_c, V_c, kR_c)
    cost = mla_decode_cost(spec, n_old + 1, path="expanded")
    assert spy.macs == cost["macs"]
    held = K.numel() + V.numel() + (0 if k_R is None else k_R.numel())
    assert held == (n_old + 1) * cost["cache_values_per_token"]
    torch.testing.assert_close(Y, outputs["absorbed"][0], **tolerances(F64))
    torch.testing.assert_close(Y, outputs["rebuilt"][0], **tolerances(F64))


def test_decode_cost_deepseek_v2_closed_forms():
    spec, n, b = attnlib.analysis.memory.DEEPSEEK_V2, 4096, 2
    H, dh, dv, dL, dR, dLQ, d = 128, 128, 128, 512, 64, 1536, 5120
    cost = {p: mla_decode_cost(spec, n, path=p) for p in DECODE_PATHS}
    assert cost["expanded"]["cache_values_per_token"] == 2 * H * dh + dR == 32_832
    assert cost["absorbed"]["cache_values_per_token"] == cost["rebuilt"]["cache_values_per_token"]
    assert cost["absorbed"]["cache_bytes"] == n * (dL + dR) * b
    per_key = {p: c["macs_attention"] // n for p, c in cost.items()}
    assert per_key == {"expanded": H * (dh + dR + dv),
                       "rebuilt": H * (dL * (dh + dv) + dh + dR + dv),
                       "absorbed": H * (2 * dL + dR)}
    weights = d * dLQ + dLQ * H * (dh + dR) + d * (dL + dR) + dL * H * (dh + dv) + H * dv * d
    assert {c["weight_bytes"] for c in cost.values()} == {weights * b}
    for c in cost.values():
        assert c["macs"] == c["macs_projections"] + c["macs_attention"]
    # the projections differ only by what is applied once per token
    base = cost["rebuilt"]["macs_projections"]
    assert cost["expanded"]["macs_projections"] - base == dL * H * (dh + dv)
    assert cost["absorbed"]["macs_projections"] - base == H * dh * dL + H * dL * dv


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: mla_decode_cost(attnlib.analysis.memory.LLAMA3_8B, 8), ValueError, "d_latent"),
    (lambda: mla_decode_cost("DeepSeek-V2", 8), TypeError, "spec"),
    (lambda: mla_decode_cost(attnlib.analysis.memory.DEEPSEEK_V2, 0), ValueError, "n_ctx"),
    (lambda: mla_decode_cost(attnlib.analysis.memory.DEEPSEEK_V2, 8, path="naive"), ValueError,
     "path"),
    (lambda: mla_decode_cost(attnlib.analysis.memory.DEEPSEEK_V2, 8, bytes_per_elem=0), ValueError,
     "bytes_per_elem"),
])
def test_decode_cost_rejects(call, error, name):
    with pytest.raises(error, match=name):
        call()


# --- growth exponents -----------------------------------------------------------------


def test_fit_exponent_recovers_a_power_law():
    x = np.array([3.0, 10.0, 40.0, 200.0])
    assert fit_exponent(x, 7 * x**2.5) == pytest.approx(2.5)


def test_fit_exponent_is_least_squares_on_logs():
    x = [128, 256, 512, 1024]
    y = [0.3, 1.1, 5.0, 17.0]
    expected = np.polyfit(np.log(x), np.log(y), 1)[0]
    assert fit_exponent(x, y) == pytest.approx(expected)
    assert fit_exponent([1, 2, 4], [5, 20, 80]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="same length"):
        fit_exponent([1, 2], [1, 2, 3])


def test_chip_roofline_against_its_closed_form():
    # The H800's break-even, by hand: 990e12 FLOP/s / 2 FLOPs per multiply-add / 3.35e12 B/s.
    assert H800.break_even == pytest.approx(990e12 / 2 / 3.35e12, rel=1e-15)
    assert round(H800.break_even, 1) == 147.8
    chip = Chip("toy", peak_flops=8.0, bandwidth=2.0)  # 4 multiply-adds/s, 2 bytes/s
    assert chip.macs_per_second == 4.0 and chip.break_even == 2.0
    assert chip.seconds(macs=12, n_bytes=3) == (1.5, 3.0)
    # Below the break-even a kernel waits on memory, above it on arithmetic.
    assert chip.bound(macs=3.9, n_bytes=2) == "memory"
    assert chip.bound(macs=4.1, n_bytes=2) == "compute"
    # MLA's absorbed decoding path at 32,768 keys sits just below the H800's break-even.
    cost = mla_decode_cost(attnlib.analysis.memory.DEEPSEEK_V2, 32_768, path="absorbed")
    intensity = cost["macs_attention"] / cost["cache_bytes"]
    assert 0.5 * H800.break_even < intensity < H800.break_even
    assert H800.bound(cost["macs_attention"], cost["cache_bytes"]) == "memory"


@pytest.mark.parametrize("field", ["peak_flops", "bandwidth"])
@pytest.mark.parametrize("bad", [0, -1.0, math.inf])
def test_chip_rejects_a_number_that_is_not_positive(field, bad):
    given = {"peak_flops": 1e12, "bandwidth": 1e12, field: bad}
    with pytest.raises(ValueError, match=field):
        Chip("bad", **given)
    with pytest.raises(ValueError, match="n_bytes"):
        H800.seconds(macs=1.0, n_bytes=0)
