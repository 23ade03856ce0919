"""attnlib.models.convert: weights ported from Hugging Face's LlamaAttention and DeepseekV3Attention
give the same outputs as those modules (on tiny random configs), and modules laid out
otherwise are refused with a message naming the argument."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib import MultiHeadLatentAttention, causal_mask
from attnlib.models.convert import from_hf_llama_attention, mla_from_deepseek


def _tril(n: int, device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def test_from_hf_llama_attention_rejects_other_modules():
    with pytest.raises(TypeError) as info:
        from_hf_llama_attention(torch.nn.Linear(4, 4))
    for fragment in ("hf_attention", "LlamaAttention", "Linear"):
        assert fragment in str(info.value)


@pytest.mark.parametrize("H,G", [(4, 2), (4, 1), (4, 4)])
@torch.no_grad()
def test_from_hf_llama_attention_matches_llama_attention(H, G):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=H,
                                      num_key_value_heads=G, head_dim=6, rope_theta=5000.0,
                                      attn_implementation="eager")
    hf = LlamaAttention(config, layer_idx=0).eval()
    attn = from_hf_llama_attention(hf)
    assert (attn.n_heads, attn.n_kv_heads, attn.d_head, attn.rope_base) == (H, G, 6, 5000.0)
    assert torch.equal(attn.W_K, hf.k_proj.weight.T)
    X = torch.randn(2, 7, 16)
    cos_sin = LlamaRotaryEmbedding(config)(X, torch.arange(7)[None])
    allowed = causal_mask(7)
    additive = torch.zeros(7, 7).masked_fill(~allowed, torch.finfo(torch.float32).min)
    Y_hf = hf(X, position_embeddings=cos_sin, attention_mask=additive[None, None])[0]
    torch.testing.assert_close(attn(X, causal=True), Y_hf, rtol=2e-5, atol=1e-6)


def test_from_hf_llama_attention_rejects_biases():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaAttention

    config = transformers.LlamaConfig(hidden_size=8, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=4, attention_bias=True)
    with pytest.raises(ValueError, match="biases"):
        from_hf_llama_attention(LlamaAttention(config, layer_idx=0))


# --- Hugging Face's DeepseekV3Attention -> attnlib: mla_from_deepseek ----------------------


def _deepseek_attention(q_lora_rank, rope_interleave=True, **overrides):
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    config = transformers.DeepseekV3Config(**{
        "hidden_size": 24, "num_attention_heads": 3, "num_key_value_heads": 3,
        "kv_lora_rank": 7, "qk_nope_head_dim": 5, "qk_rope_head_dim": 4, "v_head_dim": 6,
        "q_lora_rank": q_lora_rank, "rope_interleave": rope_interleave, "rope_theta": 500.0,
        "attn_implementation": "eager", **overrides,
    })
    hf = DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        # transformers 5.0 has no q_a_layernorm without a query latent; later releases, None
        for norm in (hf.kv_a_layernorm, getattr(hf, "q_a_layernorm", None)):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    return config, hf


@pytest.mark.parametrize("q_lora_rank", [9, None])
@pytest.mark.parametrize("rope_interleave", [True, False])
@torch.no_grad()
def test_mla_from_deepseek_matches_hugging_face(q_lora_rank, rope_interleave):
    config, hf = _deepseek_attention(q_lora_rank, rope_interleave)
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    mla = mla_from_deepseek(hf)
    assert (mla.d_latent, mla.d_rope, mla.d_latent_q, mla.rope_base) == (7, 4, q_lora_rank, 500.0)
    X = torch.randn(2, 6, 24)
    pos = torch.arange(6).expand(2, 6)
    mask = torch.zeros(6, 6).masked_fill(~_tril(6, "cpu"), -math.inf)[None, None]
    Y_hf = hf(X, position_embeddings=DeepseekV3RotaryEmbedding(config)(X, pos),
              attention_mask=mask)[0]
    for absorbed in (False, True):
        torch.testing.assert_close(mla(X, causal=True, absorbed=absorbed), Y_hf,
                                   rtol=2e-5, atol=1e-6)


def test_mla_from_deepseek_rejects():
    with pytest.raises(TypeError, match="DeepseekV3Attention"):
        mla_from_deepseek(MultiHeadLatentAttention(8, 2, 2, 3))
    _, hf = _deepseek_attention(9, attention_bias=True)
    with pytest.raises(ValueError, match="bias"):
        mla_from_deepseek(hf)


# --- long-context checkpoints: Llama 3.1's scaling and YaRN ---------------------------------


@pytest.mark.parametrize("rope", [
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
], ids=["llama3", "yarn"])
@torch.no_grad()
def test_from_hf_llama_attention_ports_the_frequency_scaling(rope):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=8,
                                      max_position_embeddings=64, attn_implementation="eager",
                                      rope_parameters={**rope, "rope_theta": 500.0})
    hf = LlamaAttention(config, layer_idx=0).eval()
    attn = from_hf_llama_attention(hf)
    assert type(attn.rope_scaling).__name__ == {"llama3": "Llama3Scaling",
                                                "yarn": "YarnScaling"}[rope["rope_type"]]
    X = torch.randn(2, 9, 16)
    cos_sin = LlamaRotaryEmbedding(config)(X, torch.arange(9)[None])
    additive = torch.zeros(9, 9).masked_fill(~causal_mask(9), torch.finfo(torch.float32).min)
    Y_hf = hf(X, position_embeddings=cos_sin, attention_mask=additive[None, None])[0]
    torch.testing.assert_close(attn(X, causal=True), Y_hf, rtol=2e-5, atol=1e-6)


# DeepSeek-V3's rope_parameters (config.json of deepseek-ai/DeepSeek-V3), on a tiny model.
DEEPSEEK_V3_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                    "rope_theta": 10000.0}


@pytest.mark.parametrize("rope", [
    DEEPSEEK_V3_YARN,
    {**DEEPSEEK_V3_YARN, "mscale": 0.707, "mscale_all_dim": 0.707},  # DeepSeek-V2's
    {**DEEPSEEK_V3_YARN, "mscale": 1.0, "mscale_all_dim": 0.5},  # an attention factor != 1
], ids=["v3", "v2", "unequal"])
@pytest.mark.parametrize("q_lora_rank", [9, None])
@torch.no_grad()
def test_mla_from_deepseek_ports_yarn(rope, q_lora_rank):
    config, hf = _deepseek_attention(q_lora_rank, max_position_embeddings=163840,
                                     rope_parameters=rope, qk_rope_head_dim=8)
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    mla = mla_from_deepseek(hf)
    assert mla.rope_scaling.factor == 40.0 and mla.scale == pytest.approx(hf.scaling, rel=1e-12)
    X = torch.randn(2, 6, 24)
    pos = torch.arange(6).expand(2, 6)
    mask = torch.zeros(6, 6).masked_fill(~_tril(6, "cpu"), -math.inf)[None, None]
    Y_hf = hf(X, position_embeddings=DeepseekV3RotaryEmbedding(config)(X, pos),
              attention_mask=mask)[0]
    for absorbed in (False, True):
        torch.testing.assert_close(mla(X, causal=True, absorbed=absorbed), Y_hf,
                                   rtol=2e-5, atol=1e-6)


def test_converters_refuse_other_rope_scalings():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaAttention

    config = transformers.LlamaConfig(
        hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0})
    with pytest.raises(ValueError, match=r"rope_type 'default', 'llama3' or 'yarn'.*'linear'"):
        from_hf_llama_attention(LlamaAttention(config, layer_idx=0))
