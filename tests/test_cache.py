"""KVCache, StaticKVCache and LatentCache bookkeeping: contents, token counts and bytes held;
StaticKVCache against KVCache and a full causal call."""

from __future__ import annotations

import pytest
import torch

import attnlib
from attnlib import KVCache, LatentCache
from attnlib.serving.cache import StaticKVCache


def test_kv_cache_appends_along_tokens(device):
    cache = KVCache()
    assert cache.n_tokens == 0 and cache.nbytes == 0
    K1, V1 = torch.randn(2, 3, 4, 8, device=device), torch.randn(2, 3, 4, 5, device=device)
    K2, V2 = torch.randn(2, 3, 1, 8, device=device), torch.randn(2, 3, 1, 5, device=device)
    cache.append(K1, V1)
    K, V = cache.append(K2, V2)
    torch.testing.assert_close(K, torch.cat([K1, K2], dim=2))
    torch.testing.assert_close(V, torch.cat([V1, V2], dim=2))
    assert cache.n_tokens == 5
    assert cache.nbytes == (2 * 3 * 5 * 8 + 2 * 3 * 5 * 5) * 4
    cache.reset()
    assert cache.n_tokens == 0 and cache.K is None


@pytest.mark.parametrize(
    "dtype,size", [(torch.float32, 4), (torch.bfloat16, 2), (torch.float64, 8)]
)
def test_nbytes_counts_element_size(dtype, size):
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4, dtype=dtype), torch.zeros(1, 2, 3, 4, dtype=dtype))
    assert cache.nbytes == 2 * 2 * 3 * 4 * size


def test_latent_cache_with_and_without_rope_key():
    c = LatentCache()
    L, kR = c.append(torch.zeros(2, 3, 16), torch.zeros(2, 3, 4))
    assert c.n_tokens == 3 and L.shape == (2, 3, 16) and kR.shape == (2, 3, 4)
    c.append(torch.ones(2, 2, 16), torch.ones(2, 2, 4))
    assert c.n_tokens == 5 and c.nbytes == 2 * 5 * (16 + 4) * 4
    assert (c.L[:, 3:] == 1).all()
    c2 = LatentCache()
    _, kR2 = c2.append(torch.zeros(1, 4, 8))
    assert kR2 is None and c2.nbytes == 4 * 8 * 4


def test_repr_is_informative():
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    assert repr(cache) == "KVCache(n_tokens=3, K_shape=(1, 2, 3, 4), nbytes=192)"


# --- StaticKVCache: the same outputs, written in place ----------------------------------


def test_static_cache_holds_what_kv_cache_holds_and_never_moves():
    gen = torch.Generator().manual_seed(0)
    grown, static = KVCache(), StaticKVCache(max_tokens=10)
    where = None
    for n_new in (3, 1, 4, 2):
        K, V = (
            torch.randn(2, 3, n_new, 8, generator=gen),
            torch.randn(2, 3, n_new, 5, generator=gen),
        )
        K_g, V_g = grown.append(K, V)
        K_s, V_s = static.append(K, V)
        assert torch.equal(K_s, K_g) and torch.equal(V_s, V_g)
        assert static.n_tokens == grown.n_tokens and static.nbytes == grown.nbytes
        assert where is None or static.K.data_ptr() == where  # written in place
        where = static.K.data_ptr()
    assert static.allocated_nbytes == (2 * 3 * 10 * 8 + 2 * 3 * 10 * 5) * 4
    static.reset()
    assert static.n_tokens == 0 and static.K.shape[-2] == 0


def test_static_cache_in_a_layer_matches_a_full_causal_call():
    gen = torch.Generator().manual_seed(1)
    layer = attnlib.GroupedQueryAttention(16, n_heads=4, n_kv_heads=2, d_head=4, rope_base=10000.0)
    X = torch.randn(2, 9, 16, generator=gen)
    static, start, outs = StaticKVCache(max_tokens=12), 0, []
    with torch.no_grad():
        for size in (4, 1, 1, 3):
            outs.append(layer(X[:, start : start + size], causal=True, cache=static))
            start += size
        full = layer(X, causal=True)
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_static_caches_in_tiny_decoder_generate_the_same_tokens():
    model = attnlib.TinyDecoder(vocab_size=40, d_model=16, n_layers=2, n_heads=2, seed=0)
    ids = torch.tensor([[1, 5, 7]])
    caches = [StaticKVCache(max_tokens=20) for _ in range(2)]
    out, step = ids, ids
    with torch.no_grad():
        for _ in range(8):
            next_id = model(step, caches=caches)[:, -1].argmax(-1, keepdim=True)
            out, step = torch.cat((out, next_id), dim=-1), next_id
    assert torch.equal(out, model.generate(ids, 8, use_cache=False))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: StaticKVCache(0), ValueError, r"max_tokens .*got 0"),
        (
            lambda: StaticKVCache(2).append(torch.zeros(1, 3, 4), torch.zeros(1, 3, 4)),
            ValueError,
            r"max_tokens=2: the cache holds 0 tokens and got 3 more",
        ),
        (
            lambda: StaticKVCache(4).append(torch.zeros(1, 3, 4), torch.zeros(1, 2, 4)),
            ValueError,
            r"K and V must have the same leading shape",
        ),
    ],
)
def test_static_cache_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_static_cache_rejects_a_new_shape():
    c = StaticKVCache(8)
    c.append(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"K must match the cached shape"):
        c.append(torch.zeros(3, 1, 4), torch.zeros(3, 1, 4))
