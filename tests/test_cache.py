"""KVCache and LatentCache bookkeeping: contents, token counts and bytes held."""

from __future__ import annotations

import pytest
import torch

from attnlib import KVCache, LatentCache


def test_kv_cache_appends_along_tokens(device):
    cache = KVCache()
    assert cache.n_tokens == 0 and cache.nbytes == 0
    K1, V1 = torch.randn(2, 3, 4, 8, device=device), torch.randn(2, 3, 4, 5, device=device)
    K2, V2 = torch.randn(2, 3, 1, 8, device=device), torch.randn(2, 3, 1, 5, device=device)
    cache.update(K1, V1)
    K, V = cache.update(K2, V2)
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
    cache.update(torch.zeros(1, 2, 3, 4, dtype=dtype), torch.zeros(1, 2, 3, 4, dtype=dtype))
    assert cache.nbytes == 2 * 2 * 3 * 4 * size


def test_latent_cache_with_and_without_rope_key():
    c = LatentCache()
    L, kR = c.update(torch.zeros(2, 3, 16), torch.zeros(2, 3, 4))
    assert c.n_tokens == 3 and L.shape == (2, 3, 16) and kR.shape == (2, 3, 4)
    c.update(torch.ones(2, 2, 16), torch.ones(2, 2, 4))
    assert c.n_tokens == 5 and c.nbytes == 2 * 5 * (16 + 4) * 4
    assert (c.L[:, 3:] == 1).all()
    c2 = LatentCache()
    _, kR2 = c2.update(torch.zeros(1, 4, 8))
    assert kR2 is None and c2.nbytes == 4 * 8 * 4


def test_repr_is_informative():
    cache = KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    assert repr(cache) == "KVCache(n_tokens=3, K_shape=(1, 2, 3, 4), nbytes=192)"
