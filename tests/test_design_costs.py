"""What the 2025-2026 designs cost: attnlib.analysis.memory's layer schedules and
attnlib.analysis.costs' multiply-adds per decoded token, against counts made here.

Every expected number is typed as the literal arithmetic of the published configuration,
counted on real tensors (attnlib's own caches for full, sliding and MLA layers; Hugging
Face's caches for Qwen3-Next, DeepSeek-V3.2 and DeepSeek-V4, built from small local configs
with random weights), or counted by PyTorch's FlopCounterMode on a reference computation
written out here.

attnlib's own frontier layers (Gated DeltaNet and Kimi Delta Attention, DeepSeek Sparse
Attention, DeepSeek-V4's compressed attention, sinks) are being built beside this module;
once they exist, the tests marked "measured on Hugging Face's cache" and "hand count" below
can measure attnlib's caches instead, with attnlib's conventions (a window cache of ``w``
tokens, ``K_c - 1`` convolution inputs).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import attnlib
from attnlib.analysis.costs import (
    MAC_PARTS,
    decode_step_macs,
    decode_token_macs,
    layer_decode_macs,
    mla_decode_cost,
)
from attnlib.analysis.memory import (
    DEEPSEEK_V4_FLASH,
    DEEPSEEK_V4_PRO,
    DEEPSEEK_V32,
    FRONTIER,
    GPT_OSS_120B,
    KIMI_LINEAR_48B,
    LAYER_KINDS,
    LAYER_PARTS,
    PRESETS,
    QWEN3_NEXT_80B,
    STATE_PARTS,
    ModelSpec,
)

F64 = torch.float64
CONTEXTS = (4096, 32_768, 131_072, 1_048_576)


def _spec(**kw) -> ModelSpec:
    base = dict(name="toy", n_layers=1, d_model=16, n_heads=4, n_kv_heads=2, d_head=4,
                vocab_size=10)
    return ModelSpec(**{**base, **kw})


# --- the published configurations, typed again from each config.json --------------------


def test_gpt_oss_120b_config():
    s = GPT_OSS_120B
    assert (s.n_layers, s.d_model, s.n_heads, s.n_kv_heads, s.d_head) == (36, 2880, 64, 8, 64)
    assert (s.window, s.vocab_size) == (128, 201_088)
    assert s.layer_types == ("sliding", "full") * 18  # layer_types starts "sliding_attention"
    assert s.n_window_layers == 18


def test_qwen3_next_80b_config():
    s = QWEN3_NEXT_80B
    assert (s.n_layers, s.d_model, s.n_heads, s.n_kv_heads, s.d_head) == (48, 2048, 16, 2, 256)
    assert (s.n_linear_heads, s.n_linear_key_heads, s.d_linear_key, s.d_linear_value,
            s.conv_kernel) == (32, 16, 128, 128, 4)
    # full_attention_interval 4: layers 4, 8, ..., 48 (1-based) are full
    assert [i + 1 for i, k in enumerate(s.layer_types) if k == "full"] == list(range(4, 49, 4))


def test_kimi_linear_48b_config():
    s = KIMI_LINEAR_48B
    assert (s.n_layers, s.d_model, s.n_heads, s.d_latent, s.d_rope, s.d_v) == (
        27, 2304, 32, 512, 64, 128)
    assert [i + 1 for i, k in enumerate(s.layer_types) if k == "full"] == [
        4, 8, 12, 16, 20, 24, 27]
    assert s.layer_types.count("linear") == 20  # kda_layers lists 20 layers
    assert (s.n_linear_heads, s.d_linear_key, s.conv_kernel) == (32, 128, 4)


def test_deepseek_v32_config():
    s = DEEPSEEK_V32
    assert (s.n_layers, s.n_heads, s.d_latent, s.d_rope, s.d_latent_q) == (61, 128, 512, 64, 1536)
    assert (s.n_index_heads, s.d_index, s.index_topk) == (64, 128, 2048)
    assert s.layer_types == ("sparse",) * 61


def _compress_ratios(spec: ModelSpec) -> list[int]:
    return [{"sliding": 0, "csa": spec.csa_rate, "hca": spec.hca_rate}[k]
            for k in spec.layer_types]


def test_deepseek_v4_configs():
    flash = [0, 0] + [4, 128] * 20 + [4]  # config.json: 43 layers, then the MTP layer's 0
    pro = [128, 128] + [4, 128] * 29 + [4]  # 61 layers, then the MTP layer's 0
    assert _compress_ratios(DEEPSEEK_V4_FLASH) == flash and len(flash) == 43
    assert _compress_ratios(DEEPSEEK_V4_PRO) == pro and len(pro) == 61
    assert (pro.count(4), pro.count(128)) == (30, 31)
    f, p = DEEPSEEK_V4_FLASH, DEEPSEEK_V4_PRO
    assert (f.n_heads, f.n_kv_heads, f.d_head, f.shared_kv, f.window) == (64, 1, 512, True, 128)
    assert (f.n_index_heads, f.d_index, f.index_topk) == (64, 128, 512)
    assert (p.n_heads, p.d_model, p.index_topk) == (128, 7168, 1024)


@pytest.mark.slow
def test_presets_match_transformers_configs():
    """transformers' config classes default to these checkpoints' numbers (their docstrings
    name the checkpoint): an independent copy of the published values."""
    from transformers import (
        DeepseekV4Config,
        DeepseekV32Config,
        GptOssConfig,
        KimiLinearConfig,
        Qwen3NextConfig,
    )

    c = GptOssConfig()
    s = GPT_OSS_120B
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.sliding_window, c.hidden_size) == (s.n_layers, s.n_heads, s.n_kv_heads,
                                                  s.d_head, s.window, s.d_model)
    assert tuple({"sliding_attention": "sliding", "full_attention": "full"}[t]
                 for t in c.layer_types) == s.layer_types
    c = Qwen3NextConfig()
    s = QWEN3_NEXT_80B
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.linear_num_value_heads, c.linear_num_key_heads, c.linear_key_head_dim,
            c.linear_value_head_dim, c.linear_conv_kernel_dim) == (
        s.n_layers, s.n_heads, s.n_kv_heads, s.d_head, s.n_linear_heads,
        s.n_linear_key_heads, s.d_linear_key, s.d_linear_value, s.conv_kernel)
    assert tuple({"linear_attention": "linear", "full_attention": "full"}[t]
                 for t in c.layer_types) == s.layer_types
    c = KimiLinearConfig(linear_attn_config={
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "num_heads": 32,
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "short_conv_kernel_size": 4})
    s = KIMI_LINEAR_48B
    assert (c.num_hidden_layers, c.num_attention_heads, c.kv_lora_rank, c.qk_rope_head_dim,
            c.qk_nope_head_dim, c.v_head_dim, c.linear_num_heads, c.linear_head_dim) == (
        s.n_layers, s.n_heads, s.d_latent, s.d_rope, s.d_head, s.d_v, s.n_linear_heads,
        s.d_linear_key)
    assert tuple({"linear_attention": "linear", "full_attention": "full"}[t]
                 for t in c.layer_types) == s.layer_types
    c = DeepseekV32Config()
    s = DEEPSEEK_V32
    assert (c.num_hidden_layers, c.kv_lora_rank, c.qk_rope_head_dim, c.index_n_heads,
            c.index_head_dim, c.index_topk) == (s.n_layers, s.d_latent, s.d_rope,
                                               s.n_index_heads, s.d_index, s.index_topk)
    c = DeepseekV4Config(compress_ratios=_compress_ratios(DEEPSEEK_V4_FLASH))
    s = DEEPSEEK_V4_FLASH
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.sliding_window, c.index_n_heads, c.index_head_dim, c.index_topk) == (
        s.n_layers, s.n_heads, s.n_kv_heads, s.d_head, s.window, s.n_index_heads, s.d_index,
        s.index_topk)
    assert c.compress_rates == {"compressed_sparse_attention": s.csa_rate,
                                "heavily_compressed_attention": s.hca_rate}
    assert tuple({"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
                  "heavily_compressed_attention": "hca"}[t] for t in c.layer_types) == \
        s.layer_types


# --- what each kind of layer holds: closed forms and hand counts ------------------------


def test_layer_values_closed_forms():
    s = _spec(n_layers=6, window=3, n_window_layers=1,
              layer_types=("full", "sliding", "linear", "csa", "hca", "linear"),
              n_linear_heads=4, n_linear_key_heads=2, d_linear_key=3, d_linear_value=5,
              conv_kernel=4, n_index_heads=2, d_index=6, index_topk=2, csa_rate=4, hca_rate=8)
    row = 2 * 2 * 4  # G (d_head + d_v)
    zero = dict.fromkeys(LAYER_PARTS, 0)
    assert s.layer_values("full", 10) == {**zero, "kv": 10 * row}
    assert s.layer_values("sliding", 10) == {**zero, "kv": 3 * row}
    assert s.layer_values("sliding", 2) == {**zero, "kv": 2 * row}
    assert s.layer_values("linear", 10) == {**zero, "state": 4 * 3 * 5,
                                            "conv": 3 * (2 * 2 * 3 + 4 * 5)}
    assert s.layer_values("csa", 10) == {**zero, "kv": 3 * row, "compressed": 2 * row,
                                         "index": 2 * 6,
                                         "compressor": 2 * 8 * (2 * row) + 2 * 8 * (2 * 6)}
    assert s.layer_values("hca", 10) == {**zero, "kv": 3 * row, "compressed": 1 * row,
                                         "compressor": 2 * 8 * row}
    assert s.layer_values("hca", 7)["compressed"] == 0  # no window of 8 tokens closed yet
    by_hand = sum(s.layer_values(k, 10)[p] for k in s.schedule for p in LAYER_PARTS)
    assert s.sequence_bytes(10, bytes_per_elem=1) == by_hand
    states = sum(s.layer_values(k, 10)[p] for k in s.schedule for p in STATE_PARTS)
    assert s.sequence_bytes(10, bytes_per_elem=2, state_bytes_per_elem=4, batch=3) == \
        3 * (2 * by_hand + 2 * states)


def test_shared_kv_counts_one_vector_per_token():
    s = _spec(n_kv_heads=1, shared_kv=True)
    assert s.values_per_token_per_layer("gqa") == 4
    assert s.layer_values("full", 7)["kv"] == 7 * 4


def test_sparse_layer_adds_the_indexer_key_to_mla():
    s = _spec(d_latent=6, d_rope=2, layer_types=("sparse",), n_index_heads=2, d_index=3,
              index_topk=4)
    assert s.layer_values("sparse", 9)["kv"] == 9 * (6 + 2)
    assert s.layer_values("sparse", 9)["index"] == 9 * 3


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_models_without_a_schedule_are_windowed_cache_bytes(name):
    spec = PRESETS[name]
    for n in (1, 1000, 131_072):
        assert spec.sequence_bytes(n) == spec.windowed_cache_bytes(n)
        assert spec.sequence_bytes(n, bytes_per_elem=1, batch=2) == spec.windowed_cache_bytes(
            n, bytes_per_elem=1, batch=2)


def _gpt_oss_by_hand(n):
    per_token = 2 * 8 * 64  # K and V of 8 heads of width 64
    return 2 * (18 * n * per_token + 18 * min(n, 128) * per_token)


def _qwen3_next_by_hand(n):
    full = 12 * n * 2 * 2 * 256
    linear = 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128))
    return 2 * (full + linear)


def _kimi_by_hand(n):
    return 2 * (7 * n * (512 + 64) + 20 * (32 * 128 * 128 + 3 * 3 * 32 * 128))


def _v32_by_hand(n):
    return 2 * 61 * n * (512 + 64 + 128)


def _v4_by_hand(n, n_sliding, n_csa, n_hca, d=512, d_i=128, w=128):
    window = (n_sliding + n_csa + n_hca) * min(n, w) * d
    csa = n_csa * ((n // 4) * (d + d_i) + 2 * 8 * 2 * d + 2 * 8 * 2 * d_i)
    hca = n_hca * ((n // 128) * d + 2 * 128 * d)
    return 2 * (window + csa + hca)


@pytest.mark.parametrize("n", CONTEXTS)
def test_frontier_bytes_per_sequence_in_bf16(n):
    assert GPT_OSS_120B.sequence_bytes(n) == _gpt_oss_by_hand(n)
    assert QWEN3_NEXT_80B.sequence_bytes(n) == _qwen3_next_by_hand(n)
    assert KIMI_LINEAR_48B.sequence_bytes(n) == _kimi_by_hand(n)
    assert DEEPSEEK_V32.sequence_bytes(n) == _v32_by_hand(n)
    assert DEEPSEEK_V4_FLASH.sequence_bytes(n) == _v4_by_hand(n, 2, 21, 20)
    assert DEEPSEEK_V4_PRO.sequence_bytes(n) == _v4_by_hand(n, 0, 30, 31)


def test_deepseek_v32_at_one_million_tokens():
    # (512 + 64 + 128) numbers, 61 layers, 2 bytes, 2^20 tokens: 83.875 GiB
    assert DEEPSEEK_V32.sequence_bytes(2**20) / 2**30 == 83.875


def test_linear_layers_hold_the_same_bytes_at_every_length():
    for spec in (QWEN3_NEXT_80B, KIMI_LINEAR_48B):
        only_linear = spec.interleaved(0)
        assert set(only_linear.schedule) == {"linear"}
        assert only_linear.sequence_bytes(1) == only_linear.sequence_bytes(1_048_576)


# --- measured: attnlib's caches for full, sliding and MLA layers -------------------------


def _run(layer, n_tokens, d_in):
    cache = layer.new_cache()
    X = torch.randn(1, n_tokens, d_in, dtype=F64)
    with torch.no_grad():
        layer(X[:, :-2], causal=True, cache=cache)  # a prompt, then two decoded tokens
        for t in (n_tokens - 2, n_tokens - 1):
            layer(X[:, t:t + 1], causal=True, cache=cache)
    return cache.nbytes


@pytest.mark.parametrize("n_tokens", [3, 5, 9])
def test_gqa_schedule_matches_attnlibs_caches(n_tokens):
    """A gpt-oss-like schedule (sliding, full, sliding, full) of attnlib layers."""
    from attnlib.layers.sliding import SlidingWindowAttention

    d_in, H, G, d_head, w = 12, 4, 2, 3, 4
    schedule = ("sliding", "full", "sliding", "full")
    layers = [SlidingWindowAttention(d_in, H, G, d_head, window=w, dtype=F64) if k == "sliding"
              else attnlib.GroupedQueryAttention(d_in, H, G, d_head, dtype=F64)
              for k in schedule]
    measured = sum(_run(layer, n_tokens, d_in) for layer in layers)
    spec = _spec(n_layers=4, d_model=d_in, n_heads=H, n_kv_heads=G, d_head=d_head, window=w,
                 n_window_layers=2, layer_types=schedule)
    assert measured == spec.sequence_bytes(n_tokens, bytes_per_elem=8)


def test_mla_schedule_matches_attnlibs_latent_cache():
    d_in, H, d_head, d_L, d_R, n_tokens = 12, 3, 4, 5, 2, 7
    layer = attnlib.MultiHeadLatentAttention(d_in, H, d_head, d_L, d_rope=d_R, dtype=F64)
    spec = _spec(n_layers=1, d_model=d_in, n_heads=H, n_kv_heads=H, d_head=d_head,
                 d_latent=d_L, d_rope=d_R, layer_types=("full",))
    assert _run(layer, n_tokens, d_in) == spec.sequence_bytes(n_tokens, bytes_per_elem=8)


# --- measured on Hugging Face's caches ----------------------------------------------------


def _hf_decode(model, n_prompt, n_new, vocab):
    ids = torch.randint(0, vocab, (1, n_prompt), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        for _ in range(n_new):
            out = model(out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
    return cache


def _numel(*tensors):
    return sum(t.numel() for t in tensors if t is not None)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_qwen3_next_schedule_matches_hugging_faces_cache():
    """Gated DeltaNet's state and convolution and gated attention's K and V, in
    Qwen3NextForCausalLM's cache. Hugging Face keeps K_c convolution columns; the recurrence
    reads K_c - 1 of them, which is what attnlib counts."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3NextConfig(
        vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_conv_kernel_dim=4,
        linear_key_head_dim=8, linear_value_head_dim=6, linear_num_key_heads=2,
        linear_num_value_heads=4, moe_intermediate_size=16, shared_expert_intermediate_size=16,
        num_experts=4, num_experts_per_tok=2,
        layer_types=["linear_attention"] * 3 + ["full_attention"])
    n_prompt, n_new = 10, 3
    cache = _hf_decode(Qwen3NextForCausalLM(cfg).eval(), n_prompt, n_new, 50)
    spec = _spec(n_layers=4, d_model=32, n_heads=4, n_kv_heads=2, d_head=8,
                 layer_types=("linear",) * 3 + ("full",), n_linear_heads=4,
                 n_linear_key_heads=2, d_linear_key=8, d_linear_value=6, conv_kernel=4)
    channels = 2 * 2 * 8 + 4 * 6
    measured = 0
    for layer in cache.layers:
        if hasattr(layer, "recurrent_states"):
            conv, state = layer.conv_states[0], layer.recurrent_states[0]
            assert conv.shape == (1, channels, 4) and state.shape == (1, 4, 8, 6)
            measured += _numel(conv, state) - channels  # one column more than K_c - 1
        else:
            measured += _numel(layer.keys, layer.values)
    assert measured == sum(spec.sequence_values(n_prompt + n_new).values())


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_deepseek_v32_sparse_layers_match_hugging_faces_cache():
    """MLA's latent and RoPE key and the lightning indexer's key, per token, in
    DeepseekV32ForCausalLM's cache."""
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

    torch.manual_seed(0)
    cfg = DeepseekV32Config(
        vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=12,
        q_lora_rank=16, qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=8,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, index_topk=5,
        index_head_dim=8, index_n_heads=2, first_k_dense_replace=1)
    n_prompt, n_new = 9, 3
    cache = _hf_decode(DeepseekV32ForCausalLM(cfg).eval(), n_prompt, n_new, 64)
    measured = sum(_numel(layer.keys, layer.values, layer.indexer_keys) for layer in cache.layers)
    spec = _spec(n_layers=2, d_model=32, n_heads=4, n_kv_heads=4, d_head=8, d_latent=12,
                 d_rope=4, layer_types=("sparse",) * 2, n_index_heads=2, d_index=8,
                 index_topk=5)
    assert measured == sum(spec.sequence_values(n_prompt + n_new).values())


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_deepseek_v4_compressed_rows_match_hugging_faces_cache():
    """The rows that grow with N: CSA's compressed rows and indexer keys (one per 4 tokens),
    HCA's compressed rows (one per m' tokens), and the window. Hugging Face keeps the window's
    last w - 1 tokens (the new token's key is appended before attending) where attnlib
    counts w, and its compressor keeps the unfinished window's rows as they arrive where
    DeepSeek's inference code allocates fixed buffers (attnlib counts those): the buffers
    are compared with neither."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    torch.manual_seed(0)
    w, m, m2, d, d_i = 6, 4, 8, 16, 8
    cfg = DeepseekV4Config(
        vocab_size=64, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=1, head_dim=d, q_lora_rank=16,
        partial_rotary_factor=0.25, n_routed_experts=4, num_experts_per_tok=2,
        layer_types=["sliding_attention", "sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention"],
        compress_rates={"compressed_sparse_attention": m, "heavily_compressed_attention": m2},
        sliding_window=w, o_groups=2, o_lora_rank=8, index_n_heads=2, index_head_dim=d_i,
        index_topk=3, hc_mult=2, mlp_layer_types=["hash_moe", "moe", "moe", "moe"])
    n_prompt, n_new = 21, 4
    n = n_prompt + n_new
    cache = _hf_decode(DeepseekV4ForCausalLM(cfg).eval(), n_prompt, n_new, 64)
    spec = _spec(n_layers=4, d_model=32, n_heads=4, n_kv_heads=1, d_head=d, shared_kv=True,
                 window=w, n_window_layers=2, layer_types=("sliding", "sliding", "csa", "hca"),
                 n_index_heads=2, d_index=d_i, index_topk=3, csa_rate=m, hca_rate=m2)
    for layer, kind in zip(cache.layers, spec.schedule, strict=True):
        values = spec.layer_values(kind, n)
        assert torch.equal(layer.keys, layer.values)  # one vector is key and value
        assert layer.keys.numel() == values["kv"] - d  # w - 1 rows where attnlib counts w
        if kind in ("csa", "hca"):
            assert layer.compressed_kv["compressor"].numel() == values["compressed"]
        if kind == "csa":
            assert layer.compressed_kv["indexer"].numel() == values["index"]
    assert cache.layers[2].compressed_kv["compressor"].shape[1] == n // m == 6
    assert cache.layers[3].compressed_kv["compressor"].shape[1] == n // m2 == 3


# --- re-dealing a hybrid's layers ---------------------------------------------------------


def test_interleaved_gives_back_the_published_schedules():
    assert GPT_OSS_120B.interleaved(2).layer_types == GPT_OSS_120B.layer_types
    assert QWEN3_NEXT_80B.interleaved(4).layer_types == QWEN3_NEXT_80B.layer_types
    assert DEEPSEEK_V4_FLASH.interleaved(2).layer_types == DEEPSEEK_V4_FLASH.layer_types
    kimi = KIMI_LINEAR_48B.interleaved(4).schedule  # the same counts, last layer full
    assert (kimi.count("full"), kimi.count("linear"), kimi[-1]) == (7, 20, "full")
    assert DEEPSEEK_V32.interleaved(4) is DEEPSEEK_V32  # one kind of layer: nothing to deal


@pytest.mark.parametrize("every", [0, 1, 3, 8])
def test_interleaved_counts(every):
    for spec, cheap, rich in ((GPT_OSS_120B, "sliding", "full"),
                              (QWEN3_NEXT_80B, "linear", "full"),
                              (DEEPSEEK_V4_FLASH, "hca", "csa")):
        out = spec.interleaved(every).schedule
        eligible = sum(k in (cheap, rich) for k in spec.schedule)
        expected = 0 if every == 0 else math.ceil(eligible / every)
        assert out.count(rich) == expected
        assert out.count(rich) + out.count(cheap) == eligible
        if every:
            assert out[-1] == rich
    assert DEEPSEEK_V4_FLASH.interleaved(1).schedule[:2] == ("sliding", "sliding")


def test_interleaved_refuses_two_pairs():
    spec = _spec(n_layers=3, window=2, n_window_layers=1,
                 layer_types=("sliding", "linear", "full"), n_linear_heads=2, d_linear_key=2)
    with pytest.raises(ValueError, match="more than one way"):
        spec.interleaved(2)


# --- multiply-adds per decoded token -------------------------------------------------------


def test_full_gqa_layer_is_decode_step_macs():
    s = _spec(layer_types=("full",))
    for n in (1, 7, 100):
        step = decode_step_macs(1, n, n_layers=1, d_model=16, n_heads=4, n_kv_heads=2,
                                d_head=4, d_ff=8, vocab_size=10)
        assert decode_token_macs(s, n)["total"] == step["attention"]


def test_full_mla_layer_is_the_absorbed_decode_cost():
    for spec in (attnlib.analysis.memory.DEEPSEEK_V2, KIMI_LINEAR_48B):
        for n in (1, 4096):
            got = layer_decode_macs(spec, "full", n)
            assert got["scores"] + got["values"] == mla_decode_cost(
                spec, n, path="absorbed")["macs_attention"]


def _flops(fn):
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize(("kind", "n"), [("full", 9), ("sliding", 3), ("sliding", 9)])
def test_gqa_layers_count_the_products_run(kind, n):
    H, G, d, d_v, w = 4, 2, 3, 5, 4
    s = _spec(n_heads=H, n_kv_heads=G, d_head=d, d_v=d_v, window=w, n_window_layers=1,
              layer_types=("sliding",))
    read = n if kind == "full" else min(n, w)
    q = torch.randn(H, 1, d, dtype=F64)
    K, V = torch.randn(H, read, d, dtype=F64), torch.randn(H, read, d_v, dtype=F64)
    flops = _flops(lambda: torch.softmax(q @ K.mT, dim=-1) @ V)
    macs = layer_decode_macs(s, kind, n)
    assert flops == 2 * (macs["scores"] + macs["values"]) == 2 * H * read * (d + d_v)


def _indexer_then_mla(q_i, K_i, w_i, q_lat, q_rope, L, k_rope, k):
    """DeepSeek Sparse Attention for one query, written out: the lightning indexer scores
    every candidate, then absorbed MLA attends to the top k."""
    scores = torch.relu(q_i @ K_i.T)  # (H_I, N): q_h . k_s for every head and candidate
    index = w_i @ scores  # (N,): sum_h w_h ReLU(q_h . k_s)
    top = index.topk(min(k, index.shape[-1])).indices
    logits = q_lat @ L[top].T + q_rope @ k_rope[top].T  # (H, k)
    return torch.softmax(logits, dim=-1) @ L[top]  # (H, d_L)


@pytest.mark.parametrize("n", [3, 10])
def test_sparse_layer_counts_the_products_run(n):
    H, d_L, d_R, H_I, d_I, k = 4, 6, 2, 3, 5, 4
    s = _spec(n_heads=H, n_kv_heads=H, d_head=3, d_latent=d_L, d_rope=d_R,
              layer_types=("sparse",), n_index_heads=H_I, d_index=d_I, index_topk=k)
    args = (torch.randn(H_I, d_I, dtype=F64), torch.randn(n, d_I, dtype=F64),
            torch.randn(H_I, dtype=F64), torch.randn(H, d_L, dtype=F64),
            torch.randn(H, d_R, dtype=F64), torch.randn(n, d_L, dtype=F64),
            torch.randn(n, d_R, dtype=F64), k)
    macs = layer_decode_macs(s, "sparse", n)
    assert _flops(lambda: _indexer_then_mla(*args)) == 2 * (macs["indexer"] + macs["scores"]
                                                         + macs["values"])
    assert macs["indexer"] == n * H_I * (d_I + 1)
    assert macs["scores"] + macs["values"] == H * min(n, k) * (2 * d_L + d_R)


def _gated_delta_step(S, q, k, v, alpha, beta):
    """One token of the gated delta rule for every value head: S is (H, d_k, d_v)."""
    S = alpha[:, :, None] * S  # decay (per key channel: KDA; one value per head: GDN)
    retrieved = (k[:, None, :] @ S)[:, 0]  # (H, d_v)  k S
    delta = beta[:, None] * (v - retrieved)
    S = S + k[:, :, None] @ delta[:, None, :]  # rank-one write
    return S, (q[:, None, :] @ S)[:, 0]  # (H, d_v)  q S


def test_linear_layer_counts_the_products_run():
    H, d_k, d_v, K = 3, 4, 5, 4
    s = _spec(layer_types=("linear",), n_linear_heads=H, d_linear_key=d_k, d_linear_value=d_v,
              conv_kernel=K)
    S = torch.randn(H, d_k, d_v, dtype=F64)
    q, k = torch.randn(H, d_k, dtype=F64), torch.randn(H, d_k, dtype=F64)
    v, beta = torch.randn(H, d_v, dtype=F64), torch.rand(H, dtype=F64)
    alpha = torch.rand(H, 1, dtype=F64).expand(H, d_k)  # Gated DeltaNet: one decay per head
    macs = layer_decode_macs(s, "linear", 100)
    matmuls = _flops(lambda: _gated_delta_step(S, q, k, v, alpha, beta)) // 2
    decay = S.numel()  # the elementwise decay, which FlopCounterMode does not count
    assert matmuls + decay == macs["state"] == 4 * H * d_k * d_v
    # the step is the delta rule of attnlib.analysis.approx, from a zero state
    zero = torch.zeros_like(S)
    _, y = _gated_delta_step(zero, q, k, v, alpha, beta)
    expected = attnlib.analysis.approx.delta_rule(q[:, None], k[:, None], v[:, None],
                                                  beta[:, None], alpha=alpha[:, :1])
    torch.testing.assert_close(y, expected[:, 0])
    # the short convolution: K_c products per channel of q, k and v
    assert macs["conv"] == K * (H * d_k * 2 + H * d_v)


def test_compressed_layers_count_the_rows_read():
    """Rows a DeepSeek-V4 query reads, counted position by position: the window, then the
    compressed rows whose tokens have all arrived (top k of them for CSA, all for HCA)."""
    H, d, d_i, H_i, w, m, m2, k = 2, 8, 4, 3, 6, 4, 8, 3
    s = _spec(n_heads=H, n_kv_heads=1, d_head=d, shared_kv=True, window=w,
              layer_types=("csa",), n_index_heads=H_i, d_index=d_i, index_topk=k,
              csa_rate=m, hca_rate=m2)
    for n in (1, 5, 6, 7, 20, 33):
        window = sum(1 for j in range(n) if j > n - 1 - w)
        done = {r: sum(1 for j in range(n) if (j + 1) * r <= n) for r in (m, m2)}
        csa = layer_decode_macs(s, "csa", n)
        assert csa["scores"] == csa["values"] == H * (window + min(done[m], k)) * d
        assert csa["indexer"] == done[m] * H_i * (d_i + 1)
        hca = layer_decode_macs(s, "hca", n)
        assert hca["scores"] == H * (window + done[m2]) * d


def test_compressor_pooling_spread_over_its_window():
    """Over T tokens CSA closes T/m windows of 2m rows (width r, and d_I for the indexer),
    HCA T/m' windows of m' rows: per token, 2 r + 2 d_I and r."""
    s = DEEPSEEK_V4_FLASH
    r, d_i, T = 512, 128, 128 * 16
    csa_total = (T // 4) * (2 * 4 * r + 2 * 4 * d_i)
    hca_total = (T // 128) * (128 * r)
    assert layer_decode_macs(s, "csa", 1000)["compressor"] * T == csa_total
    assert layer_decode_macs(s, "hca", 1000)["compressor"] * T == hca_total


def _gpt_oss_macs(n):
    return 18 * 64 * (n + min(n, 128)) * (64 + 64)


def _qwen3_next_macs(n):
    return 12 * 16 * n * (256 + 256) + 36 * (4 * 32 * 128 * 128 + 4 * (2 * 16 * 128 + 32 * 128))


def _kimi_macs(n):
    return 7 * 32 * n * (2 * 512 + 64) + 20 * (4 * 32 * 128 * 128 + 4 * 3 * 32 * 128)


def _v32_macs(n):
    return 61 * (n * 64 * 129 + 128 * min(n, 2048) * (2 * 512 + 64))


def _v4_macs(n, H, k, n_sliding, n_csa, n_hca):
    win = min(n, 128)
    csa = (n // 4) * 64 * 129 + H * (win + min(n // 4, k)) * 1024 + 2 * 512 + 2 * 128
    hca = H * (win + n // 128) * 1024 + 512
    return n_sliding * H * win * 1024 + n_csa * csa + n_hca * hca


@pytest.mark.parametrize("n", CONTEXTS)
def test_frontier_macs_per_token(n):
    assert decode_token_macs(GPT_OSS_120B, n)["total"] == _gpt_oss_macs(n)
    assert decode_token_macs(QWEN3_NEXT_80B, n)["total"] == _qwen3_next_macs(n)
    assert decode_token_macs(KIMI_LINEAR_48B, n)["total"] == _kimi_macs(n)
    assert decode_token_macs(DEEPSEEK_V32, n)["total"] == _v32_macs(n)
    assert decode_token_macs(DEEPSEEK_V4_FLASH, n)["total"] == _v4_macs(n, 64, 512, 2, 21, 20)
    assert decode_token_macs(DEEPSEEK_V4_PRO, n)["total"] == _v4_macs(n, 128, 1024, 0, 30, 31)


def test_decode_token_macs_is_the_sum_of_its_layers():
    for spec in FRONTIER.values():
        got = decode_token_macs(spec, 5000)
        for part in MAC_PARTS:
            assert got[part] == sum(layer_decode_macs(spec, kind, 5000)[part]
                                    for kind in spec.schedule)
        assert got["total"] == sum(got[p] for p in MAC_PARTS)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: _spec(n_layers=2, layer_types=("full",)), ValueError,
         r"layer_types must list one kind per layer, n_layers=2; got 1"),
        (lambda: _spec(layer_types=("dense",)), ValueError,
         r"layer_types\[\.\.\.\] must be one of"),
        (lambda: _spec(layer_types=["full"]), TypeError, r"layer_types must be a tuple"),
        (lambda: _spec(layer_types=("linear",)), ValueError,
         r"n_linear_heads must be set for 'linear' layers"),
        (lambda: _spec(layer_types=("sliding",), window=4), ValueError,
         r"n_window_layers must count the 'sliding' layers of layer_types, 1; got 0"),
        (lambda: _spec(layer_types=("csa",), window=4, csa_rate=4), ValueError,
         r"n_index_heads must be set for 'csa' layers"),
        (lambda: _spec(n_linear_heads=3, n_linear_key_heads=2), ValueError,
         r"n_linear_heads must be divisible by n_linear_key_heads \(2\); got n_linear_heads=3"),
        (lambda: _spec(conv_kernel=-1), ValueError, r"conv_kernel .*got -1"),
        (lambda: _spec(shared_kv=1), TypeError, r"shared_kv must be a bool"),
        (lambda: GPT_OSS_120B.layer_values("linear", 4), ValueError,
         r"n_linear_heads must be set for 'linear' layers; 'gpt-oss-120b' has"),
        (lambda: GPT_OSS_120B.layer_values("windowed", 4), ValueError, r"kind must be one of"),
        (lambda: GPT_OSS_120B.sequence_bytes(-1), ValueError, r"n_tokens .*got -1"),
        (lambda: GPT_OSS_120B.sequence_bytes(4, state_bytes_per_elem=0), ValueError,
         r"state_bytes_per_elem .*got 0"),
        (lambda: GPT_OSS_120B.interleaved(-2), ValueError, r"every .*got -2"),
        (lambda: decode_token_macs(GPT_OSS_120B, 0), ValueError, r"n_ctx .*got 0"),
        (lambda: decode_token_macs("gpt-oss", 4), TypeError, r"spec must be an attnlib"),
        (lambda: layer_decode_macs(QWEN3_NEXT_80B, "sparse", 4), ValueError,
         r"d_latent must be set for 'sparse' layers"),
    ],
)
def test_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_every_kind_and_part_is_named():
    assert set(LAYER_KINDS) == {"full", "sliding", "sparse", "linear", "csa", "hca"}
    assert set(STATE_PARTS) < set(LAYER_PARTS)
    assert dataclasses.replace(GPT_OSS_120B, window=1024).sequence_bytes(4096) > \
        GPT_OSS_120B.sequence_bytes(4096)
