"""attnlib.core.rope: relative positions, the two pairings, and orthogonality."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.core.rope
from attnlib import GroupedQueryAttention, KVCache, MultiHeadLatentAttention, apply_rope
from attnlib.core.rope import rope_frequencies, rope_matrix, rope_permutation


def _explicit_rope(x, m, base, interleaved):
    """Rotate each pair of one vector with 2 x 2 rotation matrices, one pair at a time."""
    d = x.shape[-1]
    out = x.clone()
    for i in range(d // 2):
        p, q = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        a = m * base ** (-2 * i / d)
        rot = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                           dtype=x.dtype)
        out[[p, q]] = rot @ x[[p, q]]
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("base", [10000.0, 500000.0, 7.5])
def test_matches_explicit_rotations(interleaved, base, gen):
    X = torch.randn(6, 8, dtype=torch.float64, generator=gen)
    pos = torch.tensor([0, 1, 2, 5, 17, 1000])
    out = apply_rope(X, pos, base=base, interleaved=interleaved)
    for r in range(6):
        ref = _explicit_rope(X[r], int(pos[r]), base, interleaved)
        torch.testing.assert_close(out[r], ref)
        R = rope_matrix(int(pos[r]), 8, base=base, interleaved=interleaved)
        torch.testing.assert_close(out[r], R @ X[r])


def test_half_split_matches_hugging_face_rotate_half(gen):
    """q * cos + rotate_half(q) * sin, with cos/sin repeated over both halves (HF Llama)."""
    d, base = 8, 10000.0
    q = torch.randn(2, 3, 5, d, dtype=torch.float64, generator=gen)
    pos = torch.arange(5)
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = pos[:, None].double() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)

    def rotate_half(x):
        return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)

    ref = q * emb.cos() + rotate_half(q) * emb.sin()
    torch.testing.assert_close(apply_rope(q, pos, base=base), ref)


def test_interleaved_matches_complex_multiplication(gen):
    """Meta's original Llama code: view pairs as complex numbers, multiply by e^{i m theta}."""
    d = 6
    x = torch.randn(4, d, dtype=torch.float64, generator=gen)
    pos = torch.arange(4)
    theta = rope_frequencies(d)
    z = torch.view_as_complex(x.reshape(4, d // 2, 2).contiguous())
    ref = torch.view_as_real(z * torch.polar(torch.ones(4, d // 2, dtype=torch.float64),
                                             pos[:, None] * theta)).reshape(4, d)
    torch.testing.assert_close(apply_rope(x, pos, interleaved=True), ref)


@pytest.mark.parametrize("interleaved", [False, True])
def test_dot_product_depends_only_on_offset(interleaved, gen):
    q = torch.randn(16, dtype=torch.float64, generator=gen)
    k = torch.randn(16, dtype=torch.float64, generator=gen)

    def score(m, n):
        qm = apply_rope(q[None], torch.tensor([m]), interleaved=interleaved)[0]
        kn = apply_rope(k[None], torch.tensor([n]), interleaved=interleaved)[0]
        return torch.dot(qm, kn)

    for offset in (0, 1, 7, -3):
        values = torch.stack([score(m, m + offset) for m in (3, 10, 250, 4096)])
        torch.testing.assert_close(values, values[:1].expand(4))
    assert not torch.allclose(score(0, 1), score(0, 5))


@pytest.mark.parametrize("interleaved", [False, True])
def test_norms_are_kept(interleaved, gen):
    X = torch.randn(3, 50, 32, dtype=torch.float64, generator=gen)
    out = apply_rope(X, torch.arange(50) * 37, interleaved=interleaved)
    torch.testing.assert_close(out.norm(dim=-1), X.norm(dim=-1))
    R = rope_matrix(123, 32, interleaved=interleaved)
    torch.testing.assert_close(R @ R.T, torch.eye(32, dtype=torch.float64))


def test_pairings_agree_after_permuting_weight_columns(gen):
    """Interleaved RoPE on W_Q, W_K equals half-split RoPE on column-permuted weights."""
    d_in, d = 10, 8
    X = torch.randn(7, d_in, dtype=torch.float64, generator=gen)
    W_Q = torch.randn(d_in, d, dtype=torch.float64, generator=gen)
    W_K = torch.randn(d_in, d, dtype=torch.float64, generator=gen)
    pos = torch.arange(7)
    Qi = apply_rope(X @ W_Q, pos, interleaved=True)
    Ki = apply_rope(X @ W_K, pos, interleaved=True)
    perm = rope_permutation(d)
    Qh = apply_rope(X @ W_Q[:, perm], pos)
    Kh = apply_rope(X @ W_K[:, perm], pos)
    torch.testing.assert_close(Qi @ Ki.T, Qh @ Kh.T)
    torch.testing.assert_close(Qh, Qi[:, perm])
    # Without the permutation the two conventions give different logits.
    Qw, Kw = apply_rope(X @ W_Q, pos), apply_rope(X @ W_K, pos)
    assert not torch.allclose(Qi @ Ki.T, Qw @ Kw.T)


def test_positions_broadcast_per_sequence(gen):
    X = torch.randn(2, 3, 4, 8, generator=gen)  # (B, H, N, d)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])[:, None, :]  # (B, 1, N)
    out = apply_rope(X, pos)
    torch.testing.assert_close(out[1], apply_rope(X[1], torch.arange(10, 14)))


def test_bfloat16_keeps_dtype(device, gen):
    X = torch.randn(4, 16, generator=gen).to(device)
    out = apply_rope(X.bfloat16(), torch.arange(4, device=device))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), apply_rope(X, torch.arange(4, device=device)),
                               atol=2e-2, rtol=2e-2)


@settings(max_examples=30, deadline=None)
@given(half=st.integers(1, 8), m=st.integers(0, 5000), n=st.integers(0, 5000),
       base=st.floats(2.0, 1e6), interleaved=st.booleans(), seed=st.integers(0, 999))
def test_property_relative_position(half, m, n, base, interleaved, seed):
    g = torch.Generator().manual_seed(seed)
    d = 2 * half
    q, k = torch.randn(2, d, dtype=torch.float64, generator=g)
    qm = apply_rope(q[None], torch.tensor([m]), base=base, interleaved=interleaved)[0]
    kn = apply_rope(k[None], torch.tensor([n]), base=base, interleaved=interleaved)[0]
    k_rel = apply_rope(k[None], torch.tensor([n - m]), base=base, interleaved=interleaved)[0]
    torch.testing.assert_close(torch.dot(qm, kn), torch.dot(q, k_rel), atol=1e-9, rtol=1e-9)


def test_inference_mode_first_then_a_training_step():
    """Tables made under inference_mode must not leak into a later forward with autograd."""
    gqa = GroupedQueryAttention(16, 4, 2, 4, rope_base=10000.0)
    mla = MultiHeadLatentAttention(16, 4, 4, 6, d_rope=4)
    X = torch.randn(2, 6, 16)
    with torch.inference_mode():
        for module in (gqa, mla):
            module(X, causal=True)
            cache = KVCache() if module is gqa else None
            module(X[:, :3], causal=True, cache=cache)
        apply_rope(X, torch.arange(6))
    for module in (gqa, mla):
        loss = module(X, causal=True).square().sum() + apply_rope(X, torch.arange(6)).sum()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all()
                   for p in module.parameters())


def test_no_process_wide_table_cache():
    """cos/sin are computed per call: no function of attnlib.core.rope memoises its results."""
    cached = [name for name, f in vars(attnlib.core.rope).items() if hasattr(f, "cache_info")]
    assert cached == []


# --- frequency scalings of long-context checkpoints, against Hugging Face ------------------

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.7}


def _scaling(params: dict):
    if params["rope_type"] == "llama3":
        return attnlib.core.rope.Llama3Scaling(
            factor=params["factor"], low_freq_factor=params["low_freq_factor"],
            high_freq_factor=params["high_freq_factor"],
            original_max_positions=params["original_max_position_embeddings"])
    return attnlib.core.rope.YarnScaling(
        factor=params["factor"], original_max_positions=params["original_max_position_embeddings"],
        beta_fast=params["beta_fast"], beta_slow=params["beta_slow"], mscale=params["mscale"],
        mscale_all_dim=params["mscale_all_dim"])


@pytest.mark.parametrize("params", [LLAMA3, YARN], ids=["llama3", "yarn"])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_scaled_cos_sin_match_hugging_faces_rotary_embedding(params, base):
    """cos and sin (attention factor included) equal LlamaRotaryEmbedding's for the same
    rope_parameters, at positions inside and far beyond the pretraining context."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    d = 32
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2, head_dim=d,
                                      max_position_embeddings=4096,
                                      rope_parameters={**params, "rope_theta": base})
    hf = LlamaRotaryEmbedding(config)
    pos = torch.tensor([[0, 1, 5, 63, 64, 300, 1000]])
    cos_hf, sin_hf = hf(torch.zeros(1, 7, 64), pos)  # (1, N, d): both halves the same
    scaling = _scaling(params)
    tables = attnlib.core.rope.rope_tables(pos[0], d, base=base, scaling=scaling)
    torch.testing.assert_close(tables.cos, cos_hf[0], rtol=0, atol=2e-4)
    half = d // 2  # rotate_half's sign lives in the first half of attnlib's sin
    signed = torch.cat((-sin_hf[0, :, :half], sin_hf[0, :, half:]), -1)
    torch.testing.assert_close(tables.sin, signed, rtol=0, atol=2e-4)
    assert scaling.attention_factor == pytest.approx(hf.attention_scaling, rel=1e-12)
    theta = rope_frequencies(d, base=base, scaling=scaling)
    torch.testing.assert_close(theta, hf.inv_freq.double(), rtol=1e-6, atol=0)


def test_scalings_slow_only_the_long_wavelengths():
    d, base = 64, 10000.0
    plain = rope_frequencies(d, base=base)
    for scaling in (_scaling(LLAMA3), _scaling(YARN)):
        ratio = rope_frequencies(d, base=base, scaling=scaling) / plain
        assert ratio[0] == 1.0 and ratio[-1] == pytest.approx(1 / scaling.factor)
        assert bool((ratio[1:] <= ratio[:-1] * (1 + 1e-12)).all())  # fast to slow: monotone


def test_deepseek_v3_yarn_frequencies_and_softmax_factor():
    """DeepSeek-V3's published rope_parameters (YaRN, factor 40 over 4,096 positions, d_R 64)
    against DeepseekV3RotaryEmbedding and DeepseekV3Attention's softmax scale."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    params = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
              "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
              "rope_theta": 10000.0}
    config = transformers.DeepseekV3Config(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=None,
        kv_lora_rank=16, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=16,
        max_position_embeddings=163840, rope_parameters=params)
    yarn = attnlib.core.rope.YarnScaling(40.0, 4096, mscale=1.0, mscale_all_dim=1.0)
    hf = DeepseekV3RotaryEmbedding(config)
    torch.testing.assert_close(rope_frequencies(64, base=10000.0, scaling=yarn),
                               hf.inv_freq.double(), rtol=1e-6, atol=0)
    assert yarn.attention_factor == hf.attention_scaling == 1.0
    scale = DeepseekV3Attention(config, layer_idx=0).scaling
    assert scale == pytest.approx(yarn.softmax_factor / math.sqrt(128 + 64), rel=1e-12)
    mla = MultiHeadLatentAttention(64, 2, 128, 16, d_rope=64, d_v=16, rope_scaling=yarn)
    assert mla.scale == pytest.approx(scale, rel=1e-12)


def test_scaling_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="scaling must be None"):
        apply_rope(torch.randn(3, 4), torch.arange(3), scaling={"rope_type": "yarn"})
    with pytest.raises(ValueError, match="rope_scaling needs rope_base"):
        GroupedQueryAttention(16, 4, 2, 4, rope_scaling=attnlib.core.rope.Llama3Scaling())
    with pytest.raises(ValueError, match="high_freq_factor must be larger"):
        attnlib.core.rope.Llama3Scaling(low_freq_factor=4.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match="factor"):
        attnlib.core.rope.YarnScaling(factor=0.0, original_max_positions=4096)


@pytest.mark.parametrize("interleaved", [False, True])
def test_full_width_tables_rotate_pairs_by_the_per_pair_formula(interleaved, gen):
    """X C + swap(X) S is (x cos - y sin, x sin + y cos) on every pair, bit for bit."""
    X = torch.randn(2, 3, 5, 8, generator=gen)
    pos = torch.arange(5) * 37
    angles = pos.double()[:, None] * rope_frequencies(8, base=500.0)  # (5, 4)
    cos, sin = angles.cos().float(), angles.sin().float()
    x, y = (X[..., 0::2], X[..., 1::2]) if interleaved else (X[..., :4], X[..., 4:])
    rx, ry = x * cos - y * sin, x * sin + y * cos  # the per-pair formula
    per_pair = torch.stack((rx, ry), -1).flatten(-2) if interleaved else torch.cat((rx, ry), -1)
    tables = attnlib.core.rope.rope_tables(pos, 8, base=500.0, interleaved=interleaved)
    assert tables.cos.shape == tables.sin.shape == (5, 8) and torch.equal(tables.positions, pos)
    assert torch.equal(attnlib.core.rope.rope_rotate(X, tables, interleaved=interleaved), per_pair)
    assert torch.equal(apply_rope(X, pos, base=500.0, interleaved=interleaved), per_pair)
