"""Grouped-query attention against SDPA (enable_gqa), nn.MultiheadAttention and per-head loops."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import tolerances
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import (
    GroupedQueryAttention,
    KVCache,
    MultiHeadAttention,
    MultiQueryAttention,
    causal_mask,
    grouped_query_attention,
    key_padding_mask,
)
from attnlib.analysis.memory import kv_cache_bytes
from attnlib.layers.gqa import gqa_from_mha


def _rotate_half(x):
    """Hugging Face Llama's helper: (x1, x2) -> (-x2, x1) on the two halves of the last axis."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _hf_rope(x, positions, base):
    """``x * cos + rotate_half(x) * sin`` with ``inv_freq = 1 / base^(2i/d)``, as in HF Llama."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (N, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (N, d): the same angle on both halves
    return x * emb.cos().to(x.dtype) + _rotate_half(x) * emb.sin().to(x.dtype)


def _per_head_loop(module, X, X_KV=None, allowed=None, positions=None):
    """Y = concat_h(softmax(Q_h K_g(h)^T / sqrt(d)) V_g(h)) W_O, one head at a time."""
    X_KV = X if X_KV is None else X_KV
    H, G, d = module.n_heads, module.n_kv_heads, module.d_head
    s = H // G
    outs = []
    for h in range(H):
        g = h // s
        Q_h = X @ module.W_Q[:, h * d : (h + 1) * d]
        K_g = X_KV @ module.W_K[:, g * d : (g + 1) * d]
        V_g = X_KV @ module.W_V[:, g * d : (g + 1) * d]
        if positions is not None:
            Q_h = _hf_rope(Q_h, positions, module.rope_base)
            K_g = _hf_rope(K_g, positions, module.rope_base)
        logits = Q_h @ K_g.transpose(-2, -1) / d**0.5
        if allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        outs.append(torch.softmax(logits, dim=-1) @ V_g)
    return torch.cat(outs, dim=-1) @ module.W_O


@pytest.mark.parametrize("H,G", [(4, 4), (4, 2), (4, 1), (6, 3)])
@pytest.mark.parametrize("impl", ["auto", "explicit"])
def test_functional_matches_sdpa_enable_gqa(device, H, G, impl, gen):
    Q = torch.randn(2, H, 5, 8, generator=gen).to(device)
    K = torch.randn(2, G, 7, 8, generator=gen).to(device)
    V = torch.randn(2, G, 7, 3, generator=gen).to(device)
    ref = F.scaled_dot_product_attention(Q, K, V, enable_gqa=True)
    torch.testing.assert_close(grouped_query_attention(Q, K, V, impl=impl), ref,
                               **tolerances(torch.float32))
    allowed = causal_mask(5, 7, device=device)
    ref_c = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, enable_gqa=True)
    out_c = grouped_query_attention(Q, K, V, causal=True, impl=impl)
    torch.testing.assert_close(out_c, ref_c, **tolerances(torch.float32))


@pytest.mark.parametrize("H,G", [(4, 2), (4, 1), (6, 3), (8, 8), (32, 1), (64, 2)])
@pytest.mark.parametrize("impl", ["auto", "explicit"])
@pytest.mark.parametrize("mask_kind", ["none", "shared", "per-head"])
def test_one_query_per_head_matches_sdpa_enable_gqa(device, H, G, impl, mask_kind, gen):
    """Decoding (N_Q = 1): the s query heads of a group are read as s rows against its K/V."""
    Q = torch.randn(2, H, 1, 8, generator=gen).to(device)
    K = torch.randn(2, G, 9, 8, generator=gen).to(device)
    V = torch.randn(2, G, 9, 3, generator=gen).to(device)
    mask = {
        "none": None,
        "shared": torch.rand(2, 1, 1, 9, generator=gen).to(device) > 0.3,
        "per-head": torch.rand(2, H, 1, 9, generator=gen).to(device) > 0.3,
    }[mask_kind]
    if mask is not None:
        mask[..., 0] = True  # every row keeps a key: SDPA's fully masked rows differ by version
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)
    out = grouped_query_attention(Q, K, V, mask=mask, causal=True, impl=impl)
    torch.testing.assert_close(out, ref, **tolerances(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("H,G", [(8, 8), (8, 4), (8, 1)])
def test_module_matches_per_head_loop(device, dtype, H, G):
    attn = GroupedQueryAttention(16, H, G, 4, d_out=12, device=device, dtype=dtype)
    X = torch.randn(3, 6, 16, device=device, dtype=dtype)
    allowed = causal_mask(6, device=device)
    torch.testing.assert_close(attn(X, causal=True), _per_head_loop(attn, X, allowed=allowed),
                               **tolerances(dtype))
    assert attn(X).shape == (3, 6, 12)


def test_limits_mha_and_mqa_are_gqa():
    mha = MultiHeadAttention(16, 4, 4, dtype=torch.float64)
    mqa = MultiQueryAttention(16, 4, 4, dtype=torch.float64)
    assert (mha.n_kv_heads, mqa.n_kv_heads) == (4, 1)
    assert mha.W_K.shape == (16, 16) and mqa.W_K.shape == (16, 4)
    X = torch.randn(2, 5, 16, dtype=torch.float64)
    for m in (mha, mqa):
        g = GroupedQueryAttention(16, 4, m.n_kv_heads, 4, dtype=torch.float64)
        g.load_state_dict(m.state_dict())
        torch.testing.assert_close(m(X, causal=True), g(X, causal=True))
        torch.testing.assert_close(m(X, causal=True), _per_head_loop(m, X, allowed=causal_mask(5)))


def test_gqa_with_tied_kv_weights_is_mha_with_repeated_heads():
    """GQA = MHA whose heads in a group share W_K, W_V: the same product, stored once."""
    gqa = GroupedQueryAttention(12, 6, 2, 4, dtype=torch.float64)
    mha = MultiHeadAttention(12, 6, 4, dtype=torch.float64)
    with torch.no_grad():
        mha.W_Q.copy_(gqa.W_Q)
        mha.W_O.copy_(gqa.W_O)
        for h in range(6):
            g = h // 3
            mha.W_K[:, 4 * h : 4 * h + 4] = gqa.W_K[:, 4 * g : 4 * g + 4]
            mha.W_V[:, 4 * h : 4 * h + 4] = gqa.W_V[:, 4 * g : 4 * g + 4]
    X = torch.randn(2, 7, 12, dtype=torch.float64)
    torch.testing.assert_close(gqa(X, causal=True), mha(X, causal=True))


@pytest.mark.parametrize("use_mask", ["none", "causal", "padding"])
def test_matches_torch_multihead_attention(device, use_mask):
    torch_mha = torch.nn.MultiheadAttention(24, 4, bias=False, batch_first=True, device=device)
    attn = MultiHeadAttention(24, 4, 6, device=device)
    W = torch_mha.in_proj_weight.detach()  # (3E, E): rows are q, k, v outputs
    with torch.no_grad():
        attn.W_Q.copy_(W[:24].T)  # nn.Linear stores the transpose of the paper's W
        attn.W_K.copy_(W[24:48].T)
        attn.W_V.copy_(W[48:].T)
        attn.W_O.copy_(torch_mha.out_proj.weight.T)
    X = torch.randn(2, 5, 24, device=device)
    if use_mask == "none":
        ref, _ = torch_mha(X, X, X, need_weights=False)
        out = attn(X)
    elif use_mask == "causal":
        ref, _ = torch_mha(X, X, X, attn_mask=~causal_mask(5, device=device), need_weights=False)
        out = attn(X, causal=True)
    else:
        pad = key_padding_mask(torch.tensor([5, 3], device=device), 5)
        ref, _ = torch_mha(X, X, X, key_padding_mask=~pad[:, 0], need_weights=False)
        out = attn(X, mask=pad)
        out, ref = out[:, :3], ref[:, :3]  # padded query rows are unspecified in torch
    torch.testing.assert_close(out, ref, **tolerances(torch.float32))


def test_cross_attention_uses_the_other_sequence():
    attn = GroupedQueryAttention(8, 4, 2, 2, dtype=torch.float64)
    X = torch.randn(2, 3, 8, dtype=torch.float64)
    M = torch.randn(2, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(attn(X, M), _per_head_loop(attn, X, M))
    assert attn(X, M).shape == (2, 3, 8)


@pytest.mark.parametrize("H,G", [(4, 2), (4, 4), (4, 1)])
@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9]])
def test_cache_in_pieces_equals_one_causal_call_with_rope(device, H, G, chunks):
    attn = GroupedQueryAttention(16, H, G, 4, rope_base=10000.0, device=device,
                                 dtype=torch.float64)
    X = torch.randn(2, 9, 16, device=device, dtype=torch.float64)
    full = attn(X, causal=True)
    ref = _per_head_loop(attn, X, allowed=causal_mask(9, device=device),
                         positions=torch.arange(9, device=device))
    torch.testing.assert_close(full, ref)
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        outs.append(attn(X[:, start : start + n], causal=True, cache=cache))
        start += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    assert cache.n_tokens == 9
    assert cache.K.shape == (2, G, 9, 4)
    closed_form = 2 * 2 * G * 9 * 4 * 8  # K and V * batch * G * N * d_head * 8 bytes
    assert cache.nbytes == closed_form
    assert cache.nbytes == kv_cache_bytes(1, G, 4, n_tokens=9, batch=2, bytes_per_elem=8)


def test_cache_bytes_shrink_with_groups():
    sizes = {}
    for G in (8, 4, 2, 1):
        attn = GroupedQueryAttention(32, 8, G, 4)
        cache = KVCache()
        attn(torch.randn(1, 10, 32), causal=True, cache=cache)
        sizes[G] = cache.nbytes
    assert sizes == {G: 2 * G * 10 * 4 * 4 for G in (8, 4, 2, 1)}
    assert sizes[8] // sizes[1] == 8


def test_explicit_positions_equal_default_positions():
    attn = GroupedQueryAttention(8, 2, 1, 4, rope_base=500000.0, dtype=torch.float64)
    X = torch.randn(1, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(attn(X, causal=True), attn(X, causal=True,
                                                          positions=torch.arange(5)))
    shifted = attn(X, causal=True, positions=torch.arange(100, 105))
    # RoPE sees only offsets: a shifted copy of the sequence gives the same outputs.
    torch.testing.assert_close(shifted, attn(X, causal=True))


@settings(max_examples=25, deadline=None)
@given(G=st.integers(1, 4), s=st.integers(1, 3), d=st.sampled_from([2, 4, 6]),
       n=st.integers(1, 7), causal=st.booleans(), seed=st.integers(0, 999))
def test_property_random_heads_and_groups(G, s, d, n, causal, seed):
    torch.manual_seed(seed)
    H = G * s
    attn = GroupedQueryAttention(5, H, G, d, dtype=torch.float64)
    X = torch.randn(2, n, 5, dtype=torch.float64)
    allowed = causal_mask(n) if causal else None
    torch.testing.assert_close(attn(X, causal=causal), _per_head_loop(attn, X, allowed=allowed))
    Q = torch.randn(2, H, n, d, dtype=torch.float64)
    K = torch.randn(2, G, n + 1, d, dtype=torch.float64)
    V = torch.randn(2, G, n + 1, d, dtype=torch.float64)
    ref = F.scaled_dot_product_attention(Q, K, V, enable_gqa=True)
    torch.testing.assert_close(grouped_query_attention(Q, K, V, impl="explicit"), ref)


# ---------------------------------------------------------------------------------------
# conversions: mean-pooling an MHA into GQA, loading Hugging Face's LlamaAttention
# ---------------------------------------------------------------------------------------


def _pooled_by_loop(W: torch.Tensor, G: int, d_head: int) -> torch.Tensor:
    """Block g of the result = the mean of source blocks g r .. (g + 1) r - 1, one at a time."""
    n_src = W.shape[1] // d_head
    r = n_src // G
    blocks = []
    for g in range(G):
        total = torch.zeros(W.shape[0], d_head, dtype=W.dtype, device=W.device)
        for c in range(g * r, (g + 1) * r):
            total = total + W[:, c * d_head : (c + 1) * d_head]
        blocks.append(total / r)
    return torch.cat(blocks, dim=1)


@pytest.mark.parametrize("H,G_src,G", [(8, 8, 4), (8, 8, 1), (6, 6, 3), (6, 6, 2),
                                       (8, 4, 2), (4, 4, 4)])
def test_gqa_from_mha_mean_pools_each_group(device, H, G_src, G):
    src = GroupedQueryAttention(12, H, G_src, 3, d_out=10, device=device, dtype=torch.float64)
    out = gqa_from_mha(src, G)
    assert isinstance(out, GroupedQueryAttention)
    assert (out.n_heads, out.n_kv_heads, out.d_head, out.d_out) == (H, G, 3, 10)
    assert out.W_K.device == src.W_K.device and out.W_K.dtype == torch.float64
    assert torch.equal(out.W_Q, src.W_Q) and torch.equal(out.W_O, src.W_O)
    for name in ("W_K", "W_V"):
        torch.testing.assert_close(getattr(out, name), _pooled_by_loop(getattr(src, name), G, 3))
    X = torch.randn(2, 5, 12, device=device, dtype=torch.float64)
    # the pooled layer is the per-head formula with the pooled blocks
    torch.testing.assert_close(out(X, causal=True),
                               _per_head_loop(out, X, allowed=causal_mask(5, device=device)))


def test_gqa_from_mha_is_exact_at_g_equals_h_and_on_tied_groups():
    mha = MultiHeadAttention(16, 8, 4, dtype=torch.float64)
    X = torch.randn(3, 7, 16, dtype=torch.float64)
    torch.testing.assert_close(gqa_from_mha(mha, 8)(X, causal=True), mha(X, causal=True))
    # an MHA whose groups are tied already is a GQA, and pooling gives that GQA back
    gqa = GroupedQueryAttention(16, 8, 2, 4, dtype=torch.float64)
    tied = MultiHeadAttention(16, 8, 4, dtype=torch.float64)
    with torch.no_grad():
        tied.W_Q.copy_(gqa.W_Q)
        tied.W_O.copy_(gqa.W_O)
        for name in ("W_K", "W_V"):
            W = getattr(gqa, name).reshape(16, 2, 4)
            getattr(tied, name).copy_(W.repeat_interleave(4, dim=1).reshape(16, 32))
    back = gqa_from_mha(tied, 2)
    torch.testing.assert_close(back.W_K, gqa.W_K)
    torch.testing.assert_close(back(X, causal=True), gqa(X, causal=True))


def test_gqa_from_mha_keeps_rope_and_leaves_the_source_alone():
    src = MultiHeadAttention(8, 4, 2, rope_base=500000.0, rope_interleaved=True)
    before = {k: v.clone() for k, v in src.state_dict().items()}
    out = gqa_from_mha(src, 1)
    assert (out.rope_base, out.rope_interleaved) == (500000.0, True)
    out.W_K.data.zero_()
    for k, v in src.state_dict().items():
        assert torch.equal(v, before[k])


def test_mean_is_the_closest_single_block():
    """sum_c ||W^c - W||^2 = sum_c ||W^c - mean||^2 + s ||mean - W||^2 (lesson 06, ex. 06.4)."""
    mha = MultiHeadAttention(6, 4, 3, dtype=torch.float64)
    blocks = mha.W_K.detach().reshape(6, 4, 3).transpose(0, 1)  # (s, d_in, d_head)
    mean = gqa_from_mha(mha, 1).W_K.detach()
    for _ in range(3):
        W = torch.randn(6, 3, dtype=torch.float64)
        lhs = ((blocks - W) ** 2).sum()
        rhs = ((blocks - mean) ** 2).sum() + 4 * ((mean - W) ** 2).sum()
        torch.testing.assert_close(lhs, rhs)


@pytest.mark.parametrize(
    ("thunk", "error", "fragments"),
    [
        (lambda: gqa_from_mha(torch.nn.Linear(4, 4), 1), TypeError,
         ["attn", "GroupedQueryAttention", "Linear"]),
        (lambda: gqa_from_mha(MultiHeadAttention(8, 6, 2), 4), ValueError,
         ["attn.n_kv_heads", "divisible", "4"]),
        (lambda: gqa_from_mha(MultiHeadAttention(8, 6, 2), 0), ValueError, ["n_kv_heads", "0"]),
        (lambda: gqa_from_mha(MultiHeadAttention(8, 6, 2), 2.0), TypeError, ["n_kv_heads"]),
    ],
    ids=["not-a-layer", "not-a-divisor", "zero", "float"],
)
def test_conversion_errors_name_the_argument(thunk, error, fragments):
    with pytest.raises(error) as info:
        thunk()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
