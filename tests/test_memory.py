"""Tests for attnlib.analysis.memory: cache byte counts against closed forms written out here.

Every expected number is typed as the literal arithmetic from the sources (for example
``2 * 80 * 8 * 128 * 2`` for Llama 3 70B), counted with explicit loops, or measured on
real PyTorch tensors; none is computed by attnlib.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib.analysis.memory import (
    CACHE_KINDS,
    DEEPSEEK_V2,
    DEEPSEEK_V3,
    GEMMA3_27B,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA3_70B,
    MISTRAL_7B,
    PRESETS,
    ModelSpec,
    kv_cache_bytes,
    mla_cache_bytes,
)

GB = 10**9


@pytest.fixture
def toy_spec() -> ModelSpec:
    """A small GQA model: 3 layers, 8 query heads in 2 groups of 4, d_head 4."""
    return ModelSpec("toy", n_layers=3, d_model=32, n_heads=8, n_kv_heads=2, d_head=4,
                     vocab_size=50)


# --- Llama 3 70B: the worked example -------------------------------------------------


def test_llama3_70b_bytes_per_token_in_16_bit():
    expected = 2 * 80 * 8 * 128 * 2
    assert expected == 327_680
    assert kv_cache_bytes(80, 8, 128) == expected
    assert kv_cache_bytes(80, 8, 128, bytes_per_elem=2) == expected
    assert LLAMA3_70B.kv_bytes_per_token() == expected
    assert LLAMA3_70B.kv_bytes_per_token(bytes_per_elem=2) == expected
    assert LLAMA3_70B.cache_bytes_per_token("gqa") == expected


def test_llama3_70b_128k_context_is_about_43_gb_and_mha_would_be_8x():
    n_tokens = 131_072
    gqa = LLAMA3_70B.kv_cache_bytes(n_tokens)
    assert gqa == 327_680 * 131_072 == 42_949_672_960
    assert gqa == pytest.approx(42.9e9, rel=0.01)
    assert round(gqa / GB) == 43

    mha = LLAMA3_70B.cache_bytes_per_token("mha") * n_tokens
    assert mha == 2 * 80 * 64 * 128 * 2 * 131_072
    assert mha == pytest.approx(343e9, rel=0.01)
    assert mha == 8 * gqa
    assert kv_cache_bytes(80, 64, 128, n_tokens=n_tokens) == mha


# --- the FP8 batch exercise -----------------------------------------------------------


def test_fp8_batch_example():
    per_token = kv_cache_bytes(32, 8, 128, bytes_per_elem=1)
    assert per_token == 2 * 32 * 8 * 128 * 1 == 65_536
    total = kv_cache_bytes(32, 8, 128, n_tokens=32_768, batch=16, bytes_per_elem=1)
    assert 16 * 32_768 == 524_288
    assert total == 65_536 * 524_288 == 34_359_738_368
    assert total == pytest.approx(3.4e10, rel=0.02)
    # the same numbers through a ModelSpec with that shape (Llama 3 8B has it)
    assert LLAMA3_8B.kv_cache_bytes(32_768, batch=16, bytes_per_elem=1) == 34_359_738_368


# --- DeepSeek-V2: MLA against the MHA it replaces ------------------------------------


def test_deepseek_v2_mha_vs_latent_is_64x():
    mha = DEEPSEEK_V2.values_per_token_per_layer("mha")
    assert mha == 2 * 128 * 128 == 32_768
    latent = DEEPSEEK_V2.values_per_token_per_layer("mla", rope=False)
    assert latent == 512
    assert mha / latent == 64


def test_deepseek_v2_with_decoupled_rope_key_is_576_and_ratio_56_9():
    with_rope = DEEPSEEK_V2.values_per_token_per_layer("mla")
    assert with_rope == 512 + 64 == 576
    assert with_rope == 4.5 * 128  # the paper's (d_c + d_h^R) = 9/2 d_h
    assert 32_768 / with_rope == pytest.approx(56.9, abs=0.05)
    assert DEEPSEEK_V2.values_per_token_per_layer("mha") / with_rope == pytest.approx(
        32_768 / 576
    )


def test_deepseek_v2_bytes_per_token_all_layers():
    assert DEEPSEEK_V2.kv_bytes_per_token() == 60 * 576 * 2 == 69_120
    assert DEEPSEEK_V2.cache_bytes_per_token("mha") == 2 * 60 * 128 * 128 * 2
    assert mla_cache_bytes(60, 512, d_rope=64) == 69_120


# --- GQA savings, MQA and MHA as limits ----------------------------------------------


@pytest.mark.parametrize(
    ("spec", "n_heads", "n_kv_heads", "saving"),
    [(GEMMA3_27B, 32, 16, 2), (LLAMA3_70B, 64, 8, 8), (MISTRAL_7B, 32, 8, 4)],
    ids=["gemma3_27b", "llama3_70b", "mistral_7b"],
)
def test_gqa_saving_is_heads_over_kv_heads(spec, n_heads, n_kv_heads, saving):
    assert (spec.n_heads, spec.n_kv_heads) == (n_heads, n_kv_heads)
    mha = spec.cache_bytes_per_token("mha")
    gqa = spec.cache_bytes_per_token("gqa")
    assert mha == saving * gqa
    assert spec.group_size == saving
    assert gqa == 2 * spec.n_layers * n_kv_heads * spec.d_head * 2


def test_mha_and_mqa_are_the_limits_of_gqa():
    n_layers, n_heads, d_head = 4, 6, 16
    mha_spec = ModelSpec("mha", n_layers, 96, n_heads, n_heads, d_head, 10)
    mqa_spec = ModelSpec("mqa", n_layers, 96, n_heads, 1, d_head, 10)
    assert mha_spec.attention_kind == "mha"
    assert mqa_spec.attention_kind == "mqa"
    assert mha_spec.cache_bytes_per_token("gqa") == mha_spec.cache_bytes_per_token("mha")
    assert mqa_spec.cache_bytes_per_token("gqa") == mqa_spec.cache_bytes_per_token("mqa")
    assert mha_spec.values_per_token_per_layer("mha") == 2 * 6 * 16
    assert mqa_spec.values_per_token_per_layer("mqa") == 2 * 16
    assert kv_cache_bytes(n_layers, n_heads, d_head) == 2 * 4 * 6 * 16 * 2
    assert kv_cache_bytes(n_layers, 1, d_head) == 2 * 4 * 1 * 16 * 2
    assert LLAMA2_7B.attention_kind == "mha"
    assert LLAMA3_70B.attention_kind == "gqa"
    assert DEEPSEEK_V2.attention_kind == "mla"


def test_values_per_token_per_layer_closed_forms(toy_spec):
    assert toy_spec.values_per_token_per_layer("mha") == 2 * 8 * 4
    assert toy_spec.values_per_token_per_layer("gqa") == 2 * 2 * 4
    assert toy_spec.values_per_token_per_layer("mqa") == 2 * 4
    assert toy_spec.cache_table() == {"mha": 3 * 64 * 2, "gqa": 3 * 16 * 2, "mqa": 3 * 8 * 2}
    assert toy_spec.cache_table(bytes_per_elem=4) == {"mha": 768, "gqa": 192, "mqa": 96}


def test_separate_value_width_counts_keys_and_values_apart():
    spec = ModelSpec("kv", n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, d_head=8,
                     vocab_size=10, d_v=4)
    assert spec.values_per_token_per_layer("gqa") == 2 * (8 + 4)
    assert spec.values_per_token_per_layer("mha") == 4 * (8 + 4)
    assert spec.kv_bytes_per_token() == 2 * 2 * (8 + 4) * 2


def test_cache_table_lists_mla_only_for_latent_models():
    assert list(LLAMA3_70B.cache_table()) == ["mha", "gqa", "mqa"]
    table = DEEPSEEK_V2.cache_table()
    assert list(table) == list(CACHE_KINDS)
    assert table == {
        "mha": 60 * 2 * 128 * 128 * 2,
        "gqa": 60 * 2 * 128 * 128 * 2,  # n_kv_heads = n_heads: the MHA baseline
        "mqa": 60 * 2 * 128 * 2,
        "mla": 60 * (512 + 64) * 2,
    }


# --- MLA formula ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_layers", "d_latent", "d_rope", "n_tokens", "batch", "b"),
    [(60, 512, 64, 1, 1, 2), (61, 512, 64, 1000, 3, 1), (2, 7, 0, 5, 2, 4), (1, 1, 1, 1, 1, 1)],
)
def test_mla_cache_bytes_formula(n_layers, d_latent, d_rope, n_tokens, batch, b):
    expected = n_layers * (d_latent + d_rope) * n_tokens * batch * b
    got = mla_cache_bytes(n_layers, d_latent, d_rope=d_rope, n_tokens=n_tokens, batch=batch,
                          bytes_per_elem=b)
    assert got == expected


def test_deepseek_v3_latent_cache():
    assert DEEPSEEK_V3.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert DEEPSEEK_V3.kv_cache_bytes(4096, batch=2) == 70_272 * 4096 * 2


# --- independent references: explicit loops and real tensors -------------------------


def test_kv_cache_bytes_matches_an_explicit_count():
    n_layers, n_kv_heads, d_head, n_tokens, batch, b = 3, 2, 5, 7, 2, 2
    count = 0
    for _layer in range(n_layers):
        for _tensor in ("K", "V"):
            for _seq in range(batch):
                for _g in range(n_kv_heads):
                    for _t in range(n_tokens):
                        count += d_head * b
    assert kv_cache_bytes(n_layers, n_kv_heads, d_head, n_tokens=n_tokens, batch=batch,
                          bytes_per_elem=b) == count


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn]
)
def test_kv_cache_bytes_matches_real_tensors(dtype):
    n_layers, B, G, N, d_head = 3, 2, 4, 5, 8
    cache = [
        (torch.zeros(B, G, N, d_head).to(dtype), torch.zeros(B, G, N, d_head).to(dtype))
        for _ in range(n_layers)
    ]
    nbytes = sum(K.numel() * K.element_size() + V.numel() * V.element_size() for K, V in cache)
    b = torch.tensor([], dtype=dtype).element_size()
    assert kv_cache_bytes(n_layers, G, d_head, n_tokens=N, batch=B, bytes_per_elem=b) == nbytes


def test_mla_cache_bytes_matches_real_tensors():
    n_layers, B, N, d_L, d_R = 4, 3, 6, 16, 4
    cache = [
        (torch.zeros(B, N, d_L, dtype=torch.bfloat16), torch.zeros(B, N, d_R, dtype=torch.bfloat16))
        for _ in range(n_layers)
    ]
    nbytes = sum(L.numel() * L.element_size() + k_R.numel() * k_R.element_size()
                 for L, k_R in cache)
    assert mla_cache_bytes(n_layers, d_L, d_rope=d_R, n_tokens=N, batch=B) == nbytes


# --- presets carry the published numbers ---------------------------------------------

PUBLISHED = {
    # name: (n_layers, d_model, n_heads, n_kv_heads, d_head, vocab_size,
    #        d_latent, d_rope, d_latent_q)
    "Llama 3 70B": (80, 8192, 64, 8, 128, 128_256, None, 0, None),
    "Llama 3 8B": (32, 4096, 32, 8, 128, 128_256, None, 0, None),
    "Llama 2 7B": (32, 4096, 32, 32, 128, 32_000, None, 0, None),
    "Mistral 7B": (32, 4096, 32, 8, 128, 32_000, None, 0, None),
    "Gemma 3 27B": (62, 5376, 32, 16, 128, 262_144, None, 0, None),
    "DeepSeek-V2": (60, 5120, 128, 128, 128, 102_400, 512, 64, 1536),
    "DeepSeek-V3": (61, 7168, 128, 128, 128, 129_280, 512, 64, 1536),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_numbers(name):
    spec = PRESETS[name]
    got = (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_head,
           spec.vocab_size, spec.d_latent, spec.d_rope, spec.d_latent_q)
    assert got == PUBLISHED[name]
    assert "arXiv:" in spec.source
    assert "config" in spec.source
    assert spec.name == name


def test_presets_dict_holds_every_preset_constant():
    constants = {LLAMA3_70B, LLAMA3_8B, LLAMA2_7B, MISTRAL_7B, GEMMA3_27B, DEEPSEEK_V2,
                 DEEPSEEK_V3}
    assert set(PRESETS.values()) == constants
    assert set(PRESETS) == set(PUBLISHED)


def test_gemma3_notes_name_the_vocabulary_choice_and_sliding_window():
    assert "262,144" in GEMMA3_27B.notes
    assert "262,208" in GEMMA3_27B.notes
    assert "1024" in GEMMA3_27B.notes
    assert "arXiv:2503.19786" in GEMMA3_27B.source


def test_embedding_params_and_qk_width():
    assert LLAMA3_70B.embedding_params == 128_256 * 8192 == 1_050_673_152
    assert GEMMA3_27B.embedding_params == 262_144 * 5376
    assert LLAMA3_70B.qk_width == 64 * 128 == 8192 == LLAMA3_70B.d_model
    assert GEMMA3_27B.qk_width == 32 * 128 == 4096
    assert GEMMA3_27B.qk_width < GEMMA3_27B.d_model


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LLAMA3_70B.n_layers = 1  # type: ignore[misc]


# --- bad input -----------------------------------------------------------------------


def _spec(**overrides):
    kwargs = dict(name="bad", n_layers=2, d_model=64, n_heads=8, n_kv_heads=2, d_head=8,
                  vocab_size=100)
    kwargs.update(overrides)
    return ModelSpec(**kwargs)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        pytest.param(lambda: kv_cache_bytes(0, 8, 128), ValueError, r"n_layers .*>= 1.*got 0",
                     id="n_layers-zero"),
        pytest.param(lambda: kv_cache_bytes(80, -8, 128), ValueError, r"n_kv_heads .*got -8",
                     id="n_kv_heads-negative"),
        pytest.param(lambda: kv_cache_bytes(80, 8, 12.5), TypeError, r"d_head .*int.*12\.5",
                     id="d_head-float"),
        pytest.param(lambda: kv_cache_bytes(80, 8, 128, n_tokens=-1), ValueError,
                     r"n_tokens .*>= 0.*got -1", id="n_tokens-negative"),
        pytest.param(lambda: kv_cache_bytes(80, 8, 128, batch=0), ValueError,
                     r"batch .*got 0", id="batch-zero"),
        pytest.param(lambda: kv_cache_bytes(80, 8, 128, bytes_per_elem=True), TypeError,
                     r"bytes_per_elem .*True", id="bytes_per_elem-bool"),
        pytest.param(lambda: mla_cache_bytes(60, 0), ValueError, r"d_latent .*got 0",
                     id="d_latent-zero"),
        pytest.param(lambda: mla_cache_bytes(60, 512, d_rope=-64), ValueError,
                     r"d_rope .*>= 0.*got -64", id="d_rope-negative"),
        pytest.param(lambda: _spec(n_heads=64, n_kv_heads=7), ValueError,
                     r"n_heads must be divisible by n_kv_heads \(7\); got n_heads=64",
                     id="heads-not-divisible"),
        pytest.param(lambda: _spec(n_heads=8, n_kv_heads=16), ValueError,
                     r"n_heads must be divisible by n_kv_heads \(16\)",
                     id="more-kv-heads-than-heads"),
        pytest.param(lambda: _spec(d_rope=64), ValueError, r"d_rope .*d_latent.*got d_rope=64",
                     id="rope-without-latent"),
        pytest.param(lambda: _spec(d_latent=0), ValueError, r"d_latent .*got 0",
                     id="spec-d_latent-zero"),
        pytest.param(lambda: _spec(vocab_size="128k"), TypeError, r"vocab_size .*'128k'",
                     id="vocab_size-str"),
        pytest.param(lambda: _spec(name=""), TypeError, r"name must be a non-empty str",
                     id="name-empty"),
        pytest.param(lambda: LLAMA3_70B.cache_bytes_per_token("flash"), ValueError,
                     r"kind must be one of .*'flash'", id="kind-unknown"),
        pytest.param(lambda: LLAMA3_70B.cache_bytes_per_token("mla"), ValueError,
                     r"kind='mla' .*d_latent=None", id="mla-without-latent"),
        pytest.param(lambda: LLAMA3_70B.kv_bytes_per_token(0), ValueError,
                     r"bytes_per_elem .*got 0", id="spec-bytes_per_elem-zero"),
        pytest.param(lambda: LLAMA3_70B.kv_cache_bytes(-5), ValueError, r"n_tokens .*got -5",
                     id="spec-n_tokens-negative"),
    ],
)
def test_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# --- property: linear in every argument ----------------------------------------------

_sizes = st.integers(min_value=1, max_value=256)


@settings(max_examples=200, deadline=None)
@given(
    args=st.tuples(_sizes, _sizes, _sizes, _sizes, _sizes, st.integers(1, 8)),
    which=st.integers(min_value=0, max_value=5),
    k=st.integers(min_value=2, max_value=9),
)
def test_kv_cache_bytes_is_linear_in_each_argument(args, which, k):
    def f(a):
        n_layers, n_kv_heads, d_head, n_tokens, batch, b = a
        return kv_cache_bytes(n_layers, n_kv_heads, d_head, n_tokens=n_tokens, batch=batch,
                              bytes_per_elem=b)

    scaled = list(args)
    scaled[which] *= k
    assert f(tuple(scaled)) == k * f(args)
    n_layers, n_kv_heads, d_head, n_tokens, batch, b = args
    assert f(args) == 2 * n_layers * n_kv_heads * d_head * n_tokens * batch * b


@settings(max_examples=100, deadline=None)
@given(n_layers=_sizes, d_latent=_sizes, d_rope=st.integers(0, 128), n_tokens=_sizes,
       batch=st.integers(1, 16), k=st.integers(2, 9))
def test_mla_cache_bytes_is_linear_and_additive(n_layers, d_latent, d_rope, n_tokens, batch, k):
    def f(**kw):
        base = dict(n_layers=n_layers, d_latent=d_latent, d_rope=d_rope, n_tokens=n_tokens,
                    batch=batch)
        base.update(kw)
        return mla_cache_bytes(base.pop("n_layers"), base.pop("d_latent"), **base)

    assert f(n_layers=k * n_layers) == k * f()
    assert f(n_tokens=k * n_tokens) == k * f()
    assert f(batch=k * batch) == k * f()
    # the latent and the RoPE key add: caching them apart costs the same bytes
    assert f() == f(d_latent=d_latent + d_rope, d_rope=0)


# --- weights: n_params against the architecture, written out ---------------------------


def _dense_params(n_layers, d, n_heads, n_kv_heads, d_head, d_ff, vocab, *, tied, extra_norms=0,
                  qk_norm=False):
    """Weights of a Llama-style decoder: attention, SwiGLU FFN, RMSNorm gains, embeddings."""
    attention = d * n_heads * d_head + 2 * d * n_kv_heads * d_head + n_heads * d_head * d
    ffn = 3 * d * d_ff
    norms = (2 + extra_norms) * d + (2 * d_head if qk_norm else 0)
    embeddings = vocab * d * (1 if tied else 2)
    return n_layers * (attention + ffn + norms) + embeddings + d  # + the final norm


@pytest.mark.parametrize(
    ("spec", "d_ff", "vocab", "kw"),
    [
        (LLAMA2_7B, 11_008, 32_000, {"tied": False}),
        (MISTRAL_7B, 14_336, 32_000, {"tied": False}),
        (LLAMA3_8B, 14_336, 128_256, {"tied": False}),
        (LLAMA3_70B, 28_672, 128_256, {"tied": False}),
        # Gemma 3: four norms per layer, per-head query and key norms, tied embeddings of
        # the config's 262,208 rows
        (GEMMA3_27B, 21_504, 262_208, {"tied": True, "extra_norms": 2, "qk_norm": True}),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_dense_n_params_are_the_architecture(spec, d_ff, vocab, kw):
    expected = _dense_params(spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads,
                             spec.d_head, d_ff, vocab, **kw)
    assert spec.n_params == expected


def test_published_totals_and_weight_bytes():
    assert LLAMA3_70B.n_params == 70_553_706_496  # 70.6B
    assert DEEPSEEK_V2.n_params == 236 * 10**9 and DEEPSEEK_V3.n_params == 671 * 10**9
    assert LLAMA3_70B.weight_bytes() == 2 * 70_553_706_496
    assert LLAMA3_70B.weight_bytes(1) == 70_553_706_496
    assert all(spec.n_params is not None for spec in PRESETS.values())


def test_weight_bytes_needs_n_params(toy_spec):
    with pytest.raises(ValueError, match=r"n_params must be set .*'toy' has n_params=None"):
        toy_spec.weight_bytes()
    with pytest.raises(ValueError, match=r"n_params .*got 0"):
        _spec(n_params=0)


# --- sliding windows: a local layer holds at most w tokens ------------------------------


def _gemma3_layer_is_local(i: int) -> bool:
    """Gemma 3's layer pattern (config.json ``sliding_window_pattern = 6``): five local
    layers, then one global, so layer i is global when (i + 1) is a multiple of 6."""
    return (i + 1) % 6 != 0


@pytest.mark.parametrize("n_tokens", [1, 1000, 1024, 1025, 131_072])
def test_gemma3_windowed_cache_counts_layer_by_layer(n_tokens):
    local = [i for i in range(62) if _gemma3_layer_is_local(i)]
    assert len(local) == GEMMA3_27B.n_window_layers == 52
    per_layer = 2 * 16 * 128 * 2  # K and V, G = 16, d_head = 128, bf16
    held = sum(min(n_tokens, 1024) if i in local else n_tokens for i in range(62))
    assert GEMMA3_27B.windowed_cache_bytes(n_tokens) == per_layer * held
    assert GEMMA3_27B.windowed_cache_bytes(n_tokens, batch=3, bytes_per_elem=1) == (
        per_layer // 2 * held * 3)


def test_gemma3_at_128k_is_about_11_gb_not_67():
    assert round(GEMMA3_27B.windowed_cache_bytes(131_072) / GB, 1) == 11.2
    assert round(GEMMA3_27B.kv_cache_bytes(131_072) / GB, 1) == 66.6


def test_mistral_cache_stops_growing_at_its_window():
    per_token = 2 * 32 * 8 * 128 * 2
    assert MISTRAL_7B.windowed_cache_bytes(4096) == per_token * 4096
    assert MISTRAL_7B.windowed_cache_bytes(131_072) == per_token * 4096
    assert MISTRAL_7B.windowed_cache_bytes(100) == per_token * 100


def test_models_without_a_window_hold_every_token():
    for spec in (LLAMA3_70B, LLAMA3_8B, LLAMA2_7B, DEEPSEEK_V2, DEEPSEEK_V3):
        assert spec.window is None and spec.n_window_layers == 0
        assert spec.windowed_cache_bytes(5000, batch=2) == spec.kv_cache_bytes(5000, batch=2)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"window": 16}, "window and n_window_layers go together"),
        ({"n_window_layers": 2}, "window and n_window_layers go together"),
        ({"window": 16, "n_window_layers": 4}, "n_window_layers must be at most n_layers=3"),
        ({"window": 0, "n_window_layers": 1}, "window"),
    ],
)
def test_window_arguments_are_checked(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelSpec("toy", n_layers=3, d_model=32, n_heads=8, n_kv_heads=2, d_head=4,
                  vocab_size=50, **kwargs)
