"""Bad input raises ValueError/TypeError naming the argument, the rule and the value given."""

from __future__ import annotations

import pytest
import torch

import attnlib
from attnlib import (
    GroupedQueryAttention,
    KVCache,
    LatentCache,
    MultiHeadAttention,
    apply_rope,
    attention,
    attention_weights,
    causal_mask,
    grouped_query_attention,
    key_padding_mask,
    repeat_kv,
    sliding_window_mask,
    split_heads,
    tiled_attention,
)
from attnlib.core.heads import kv_head_index

q = torch.randn(2, 5, 8)
k = torch.randn(2, 7, 8)
v = torch.randn(2, 7, 3)
X = torch.randn(2, 5, 16)
attn = GroupedQueryAttention(16, 4, 2, 4)
rope_attn = GroupedQueryAttention(16, 4, 2, 4, rope_base=10000.0)

# (id, thunk, exception, fragments the message must contain: argument, rule, value)
CASES = [
    ("Q-rank", lambda: attention(torch.randn(8), k, v), ValueError,
     ["Q", "at least 2 dimensions", "(8,)"]),
    ("Q-not-tensor", lambda: attention([[1.0]], k, v), TypeError, ["Q", "torch.Tensor", "list"]),
    ("Q-int-dtype", lambda: attention(q.long(), k, v), TypeError, ["Q", "floating", "int64"]),
    ("QK-width", lambda: attention(torch.randn(2, 5, 6), k, v), ValueError,
     ["Q and K", "last dimension d_QK", "(2, 5, 6)", "(2, 7, 8)"]),
    ("KV-rows", lambda: attention(q, k, torch.randn(2, 6, 3)), ValueError,
     ["K and V", "N_KV", "(2, 6, 3)"]),
    ("dtype-mix", lambda: attention(q, k.double(), v), TypeError, ["one dtype", "float64"]),
    ("batch-broadcast", lambda: attention(torch.randn(3, 5, 8), k, v), ValueError,
     ["batch dimensions", "broadcast", "(3, 5, 8)"]),
    ("kernel-name", lambda: attention(q, k, v, kernel="gaussian"), ValueError,
     ["kernel", "softmax", "'gaussian'"]),
    ("kernel-type", lambda: attention(q, k, v, kernel=3), TypeError,
     ["kernel", "callable", "int"]),
    ("kernel-negative", lambda: attention(q, k, v, kernel=lambda s: s), ValueError,
     ["kernel", "non-negative", "minimum"]),
    ("kernel-shape", lambda: attention(q, k, v, kernel=lambda s: s.sum(-1)), ValueError,
     ["kernel", "same shape", "(2, 5)"]),
    ("impl", lambda: attention(q, k, v, impl="flash"), ValueError, ["impl", "explicit", "'flash'"]),
    ("scale-negative", lambda: attention(q, k, v, scale=-1.0), ValueError,
     ["scale", "> 0", "-1.0"]),
    ("scale-type", lambda: attention(q, k, v, scale="big"), TypeError,
     ["scale", "number", "'big'"]),
    ("mask-dtype", lambda: attention(q, k, v, mask=torch.ones(5, 7)), TypeError,
     ["mask", "torch.bool", "float32"]),
    ("mask-shape", lambda: attention(q, k, v, mask=torch.ones(5, 6, dtype=torch.bool)), ValueError,
     ["mask", "broadcast", "(5, 6)", "(2, 5, 7)"]),
    ("causal-type", lambda: attention_weights(q, k, causal="yes"), TypeError, ["causal", "bool"]),
    ("causal_mask-n_q", lambda: causal_mask(0), ValueError, ["n_q", ">= 1", "0"]),
    ("causal_mask-type", lambda: causal_mask(2.5), TypeError, ["n_q", "int", "2.5"]),
    ("window", lambda: sliding_window_mask(4, window=0), ValueError, ["window", ">= 1", "0"]),
    ("lengths-range", lambda: key_padding_mask([3, 9], 5), ValueError,
     ["lengths", "[0, n_kv=5]", "[3, 9]"]),
    ("lengths-float", lambda: key_padding_mask(torch.tensor([1.5]), 5), TypeError,
     ["lengths", "integers", "float32"]),
    ("split-divisible", lambda: split_heads(torch.randn(2, 3, 10), 4), ValueError,
     ["X.shape[-1]", "divisible", "n_heads", "10"]),
    ("group-divisible", lambda: kv_head_index(6, 4), ValueError,
     ["n_heads", "divisible by n_kv_heads", "6"]),
    ("repeat-divisible", lambda: repeat_kv(torch.randn(1, 3, 2, 2), 4), ValueError,
     ["n_heads", "divisible", "3", "4"]),
    ("gqa-heads-divisible", lambda: GroupedQueryAttention(16, 6, 4, 4), ValueError,
     ["n_heads", "divisible by n_kv_heads", "(4)", "n_heads=6"]),
    ("gqa-zero-heads", lambda: GroupedQueryAttention(16, 0, 1, 4), ValueError,
     ["n_heads", ">= 1", "0"]),
    ("gqa-negative-d_head", lambda: MultiHeadAttention(16, 4, -2), ValueError,
     ["d_head", ">= 1", "-2"]),
    ("gqa-float-d_in", lambda: GroupedQueryAttention(16.0, 4, 2, 4), TypeError,
     ["d_in", "int", "16.0"]),
    ("gqa-rope-odd", lambda: GroupedQueryAttention(16, 4, 2, 3, rope_base=10000.0), ValueError,
     ["d_head", "even", "3"]),
    ("gqa-rope-base", lambda: GroupedQueryAttention(16, 4, 2, 4, rope_base=0.0), ValueError,
     ["rope_base", "> 0", "0.0"]),
    ("gqa-X-width", lambda: attn(torch.randn(2, 5, 12)), ValueError,
     ["X", "last dimension 16", "d_in", "(2, 5, 12)"]),
    ("gqa-X-dtype", lambda: attn(X.double()), TypeError, ["X", "dtype", "float64"]),
    ("gqa-XKV-width", lambda: attn(X, torch.randn(2, 3, 8)), ValueError,
     ["X_KV", "last dimension 16", "(2, 3, 8)"]),
    ("gqa-cache-type", lambda: attn(X, cache=LatentCache()), TypeError,
     ["cache", "KVCache", "LatentCache"]),
    ("gqa-cross-cache", lambda: attn(X, X, cache=KVCache()), ValueError, ["cache", "X_KV"]),
    ("gqa-positions", lambda: rope_attn(X, positions=torch.arange(4)), ValueError,
     ["positions", "N = 5", "(4,)"]),
    ("functional-gqa-groups", lambda: grouped_query_attention(
        torch.randn(1, 4, 3, 2), torch.randn(1, 3, 3, 2), torch.randn(1, 3, 3, 2)), ValueError,
     ["query heads", "divisible", "KV heads", "4"]),
    ("rope-odd-width", lambda: apply_rope(torch.randn(3, 5), torch.arange(3)), ValueError,
     ["X.shape[-1]", "even", "5"]),
    ("rope-positions-shape", lambda: apply_rope(torch.randn(3, 4), torch.arange(5)), ValueError,
     ["positions", "broadcast", "(3,)", "(5,)"]),
    ("rope-base", lambda: apply_rope(torch.randn(3, 4), torch.arange(3), base=-2.0), ValueError,
     ["base", "> 0", "-2.0"]),
    ("rope-interleaved-type", lambda: apply_rope(torch.randn(3, 4), torch.arange(3),
                                                 interleaved="yes"), TypeError,
     ["interleaved", "bool", "'yes'"]),
    ("cache-shape", lambda: _grow(KVCache(), (1, 2, 3, 4), (1, 3, 1, 4)), ValueError,
     ["K", "cached shape", "(1, 2, 3, 4)", "(1, 3, 1, 4)"]),
    ("latent-cache-rope-toggle", lambda: _grow_latent(), ValueError, ["k_R", "every call"]),
    ("tiled-block", lambda: tiled_attention(q, k, v, block_size=0), ValueError,
     ["block_size", ">= 1", "0"]),
]


def _grow(cache, first, second):
    cache.append(torch.zeros(first), torch.zeros(first))
    cache.append(torch.zeros(second), torch.zeros(second))


def _grow_latent():
    c = LatentCache()
    c.append(torch.zeros(1, 2, 4), torch.zeros(1, 2, 2))
    c.append(torch.zeros(1, 1, 4))


@pytest.mark.parametrize("thunk,exc,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_message(thunk, exc, fragments):
    with pytest.raises(exc) as info:
        thunk()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


def test_default_device_override(monkeypatch):
    monkeypatch.setenv("ATTNLIB_DEVICE", "cpu")
    assert attnlib.default_device() == torch.device("cpu")
    monkeypatch.setenv("ATTNLIB_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="ATTNLIB_DEVICE"):
        attnlib.default_device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("ATTNLIB_DEVICE", "cuda")
        with pytest.raises(ValueError, match="no CUDA device"):
            attnlib.default_device()


def test_default_device_order(monkeypatch):
    monkeypatch.delenv("ATTNLIB_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else (
        "mps" if torch.backends.mps.is_available() else "cpu")
    assert attnlib.default_device().type == expected
