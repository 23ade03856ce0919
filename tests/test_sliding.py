"""Sliding-window attention against SDPA with the window mask, cached decoding against the
uncached layer, the window cache's size, and Hugging Face's Mistral with ``sliding_window``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import hold_weights
from torch.testing import assert_close

from attnlib import TinyDecoder, sliding_window_mask
from attnlib.analysis.memory import GEMMA3_27B
from attnlib.layers.sliding import SlidingWindowAttention, WindowCache

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _reference(layer: SlidingWindowAttention, X: torch.Tensor) -> torch.Tensor:
    """The layer by hand: projections, RoPE, then SDPA per head with the window as its mask."""
    H, G, d = layer.n_heads, layer.n_kv_heads, layer.d_head
    N = X.shape[-2]
    Q = (X @ layer.W_Q).unflatten(-1, (H, d)).transpose(-3, -2)  # (B, H, N, d)
    K = (X @ layer.W_K).unflatten(-1, (G, d)).transpose(-3, -2)  # (B, G, N, d)
    V = (X @ layer.W_V).unflatten(-1, (G, d)).transpose(-3, -2)
    if layer.rope_base is not None:
        from attnlib import apply_rope

        Q, K = (apply_rope(T, torch.arange(N), base=layer.rope_base) for T in (Q, K))
    allowed = torch.zeros(N, N, dtype=torch.bool)
    for p in range(N):  # query p reads keys p - w < j <= p
        allowed[p, max(0, p - layer.window + 1) : p + 1] = True
    Y = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, enable_gqa=True)
    return Y.transpose(-3, -2).flatten(-2) @ layer.W_O


@pytest.mark.parametrize(("H", "G", "window"), [(4, 4, 3), (4, 2, 5), (4, 1, 1), (4, 2, 40)])
def test_sliding_window_equals_sdpa_with_the_window_mask(H, G, window, gen):
    torch.manual_seed(0)
    layer = SlidingWindowAttention(32, H, G, 8, window=window, rope_base=10000.0)
    X = torch.randn(2, 17, 32, generator=gen)
    with torch.no_grad():
        assert_close(layer(X), _reference(layer, X), **TOL)
        assert_close(layer(X, causal=True), layer(X), **TOL)  # the window is causal anyway


def test_the_window_mask_is_the_masks_module_one():
    m = sliding_window_mask(6, 6, window=3)
    assert m.sum(dim=-1).tolist() == [1, 2, 3, 3, 3, 3]


@pytest.mark.parametrize("pieces", [(1,) * 13, (5, 1, 1, 6), (13,), (4, 4, 4, 1)])
def test_cached_decoding_equals_the_uncached_layer(pieces, gen):
    torch.manual_seed(1)
    layer = SlidingWindowAttention(32, 4, 2, 8, window=4, rope_base=10000.0)
    X = torch.randn(2, 13, 32, generator=gen)
    cache, outs, start = layer.new_cache(), [], 0
    with torch.no_grad():
        for n in pieces:
            outs.append(layer(X[:, start : start + n], cache=cache))
            start += n
            assert cache.n_tokens == start and cache.n_held == min(start, 4)
        assert_close(torch.cat(outs, dim=1), layer(X), **TOL)
    assert cache.nbytes == 2 * (2 * 2 * 4 * 8) * 4  # K and V of 4 tokens, 2 KV heads, float32


def test_window_cache_keeps_the_last_window_tokens():
    cache = WindowCache(window=3)
    for t in range(7):
        K, _ = cache.append(torch.full((1, 1, 1, 2), float(t)), torch.zeros(1, 1, 1, 2))
    assert K[0, 0, :, 0].tolist() == [3.0, 4.0, 5.0, 6.0]  # the held three, then the new one
    assert cache.K[0, 0, :, 0].tolist() == [4.0, 5.0, 6.0] and cache.n_tokens == 7
    cache.reset()
    assert cache.n_tokens == 0 and cache.n_held == 0 and cache.K is None
    with pytest.raises(ValueError, match=r"window must be a positive int.*got 0"):
        WindowCache(0)


def test_a_sliding_decoder_generates_the_same_with_and_without_its_cache():
    model = TinyDecoder(40, 32, 2, 4, attention="sliding", window=4, n_kv_heads=2, seed=0)
    assert all(isinstance(b.attn, SlidingWindowAttention) for b in model.blocks)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    assert torch.equal(model.generate(ids, 12), model.generate(ids, 12, use_cache=False))
    caches = model.new_caches(max_tokens=100)
    assert all(type(c) is WindowCache and c.window == 4 for c in caches)


def test_a_padded_batch_with_a_window_reads_what_each_prompt_reads_alone():
    model = TinyDecoder(40, 32, 2, 4, attention="sliding", window=3, seed=2)
    a, b = torch.tensor([5, 6, 7, 8, 9, 10]), torch.tensor([11, 12])
    ids = torch.stack((a, torch.cat((torch.zeros(4, dtype=torch.long), b))))
    mask = torch.tensor([[1] * 6, [0] * 4 + [1] * 2])
    out = model.generate(ids, 6, attention_mask=mask)
    assert torch.equal(out[0], model.generate(a[None], 6)[0])
    assert torch.equal(out[1, 4:], model.generate(b[None], 6)[0])


def test_window_options_go_to_the_sliding_builder_only():
    with pytest.raises(ValueError, match=r"window applies to attention='sliding' only"):
        TinyDecoder(40, 32, 1, 4, window=4)
    with pytest.raises(TypeError, match="window"):
        TinyDecoder(40, 32, 1, 4, attention="sliding")  # required


def test_gemma3_window_cache_bytes_match_window_caches():
    """memory.windowed_cache_bytes counts min(N, w) tokens per local layer: what a
    WindowCache holds once N tokens have gone through it."""
    w, N = 8, 20
    layer = SlidingWindowAttention(16, 2, 1, 4, window=w)
    cache = layer.new_cache()
    with torch.no_grad():
        layer(torch.randn(1, N, 16), cache=cache)
    assert cache.nbytes == 2 * 1 * min(N, w) * 4 * 4
    assert GEMMA3_27B.window == 1024 and GEMMA3_27B.n_window_layers == 52


def test_mistral_sliding_window_matches_hugging_face():
    """A TinyDecoder with attention="sliding" holding the weights of a MistralForCausalLM
    with sliding_window=w: the same logits past the window, and the same greedy tokens."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    w = 4
    model = TinyDecoder(64, 32, 2, 4, attention="sliding", window=w, n_kv_heads=2, d_ff=48,
                        rope_base=10000.0, seed=3)
    config = transformers.MistralConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, intermediate_size=48, hidden_act="silu",
        rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=w, tie_word_embeddings=True,
        attn_implementation="eager", bos_token_id=None, eos_token_id=None, pad_token_id=0,
    )
    hf = transformers.MistralForCausalLM(config).eval()
    hold_weights(model, hf)
    with torch.no_grad():
        ids = torch.randint(1, 64, (2, 11))
        ours, theirs = model(ids), hf(input_ids=ids).logits
        assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
        full = TinyDecoder(64, 32, 2, 4, n_kv_heads=2, d_ff=48, seed=3)  # no window
        full.load_state_dict(model.state_dict())
        assert (full(ids)[:, w:] - theirs[:, w:]).abs().max() > 1e-3  # the window matters
        assert torch.equal(model.generate(ids[:, :3], 9),
                           hf.generate(ids[:, :3], max_new_tokens=9, do_sample=False))
