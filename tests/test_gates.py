"""attnlib.layers.gates.output_gate against an explicit loop over heads, rows and coordinates."""

from __future__ import annotations

import math

import pytest
import torch

import attnlib.layers.gates
from attnlib.core.heads import merge_heads
from attnlib.layers.gates import output_gate


def test_module_is_reachable_as_attribute():
    assert attnlib.layers.gates.output_gate is output_gate


def test_heads_by_a_loop(gen):
    H, N, d_head, d_in = 3, 4, 2, 5
    Y = torch.randn(H, N, d_head, generator=gen, dtype=torch.float64)
    X = torch.randn(N, d_in, generator=gen, dtype=torch.float64)
    W = torch.randn(d_in, H * d_head, generator=gen, dtype=torch.float64)
    out = output_gate(Y, X, W)
    for h in range(H):
        for n in range(N):
            for c in range(d_head):
                logit = sum(float(X[n, a] * W[a, h * d_head + c]) for a in range(d_in))
                gate = 1 / (1 + math.exp(-logit))
                assert math.isclose(float(out[h, n, c]), float(Y[h, n, c]) * gate, rel_tol=1e-12)
    # gating before or after the merge is the same map
    torch.testing.assert_close(merge_heads(out), merge_heads(Y) * torch.sigmoid(X @ W))


def test_single_head_batched(device, gen):
    Y = torch.randn(2, 4, 3, generator=gen).to(device)
    X = torch.randn(2, 4, 6, generator=gen).to(device)
    W = torch.randn(6, 3, generator=gen).to(device)
    torch.testing.assert_close(output_gate(Y, X, W), Y / (1 + torch.exp(-(X @ W))))


def test_gate_only_shrinks(gen):
    Y = torch.randn(2, 5, 4, generator=gen)
    out = output_gate(Y, torch.randn(5, 3, generator=gen), torch.randn(3, 8, generator=gen) * 5)
    assert (out.abs() <= Y.abs()).all() and (out.abs() < Y.abs()).any()


@pytest.mark.parametrize(
    ("thunk", "exc", "words"),
    [
        (
            lambda: output_gate(torch.randn(4, 3), torch.randn(4, 5), torch.randn(5, 2)),
            ValueError,
            ["W_theta", "(5, 3)", "(5, 2)"],
        ),
        (
            lambda: output_gate(torch.randn(4, 3), torch.randn(4, 5), torch.randn(6, 3)),
            ValueError,
            ["W_theta", "5 rows"],
        ),
        (
            lambda: output_gate(torch.randn(4, 3), torch.randn(4, 5).double(), torch.randn(5, 3)),
            TypeError,
            ["dtype", "float64"],
        ),
        (
            lambda: output_gate(torch.randn(2, 4, 3), torch.randn(3, 5), torch.randn(5, 6)),
            ValueError,
            ["N = 3", "(2, 4, 3)"],
        ),
    ],
)
def test_bad_input_is_named(thunk, exc, words):
    with pytest.raises(exc) as info:
        thunk()
    for w in words:
        assert w in str(info.value), str(info.value)


def test_gated_attention_gates_each_head_before_w_o(gen):
    """GatedAttention against GQA's own heads, gated by an explicit loop, then W_O."""
    from attnlib import GroupedQueryAttention
    from attnlib.layers.gates import GatedAttention

    gated = GatedAttention(6, 4, 2, 2, rope_base=100.0, dtype=torch.float64)
    plain = GroupedQueryAttention(6, 4, 2, 2, 8, rope_base=100.0, dtype=torch.float64)
    with torch.no_grad():
        for name in ("W_Q", "W_K", "W_V"):
            getattr(plain, name).copy_(getattr(gated, name))
    X = torch.randn(2, 5, 6, generator=gen, dtype=torch.float64)
    heads = []  # each head's Z^-1 A V: plain attention with W_O set to pick head h out
    for h in range(4):
        pick = torch.zeros(8, 8, dtype=torch.float64)
        pick[2 * h:2 * h + 2, 2 * h:2 * h + 2] = torch.eye(2, dtype=torch.float64)
        with torch.no_grad():
            plain.W_O.copy_(pick)
        heads.append(plain(X, causal=True)[..., 2 * h:2 * h + 2])
    gate = [[[1 / (1 + math.exp(-float(X[b, i] @ gated.W_theta[:, c].detach()))) for c in range(8)]
             for i in range(5)] for b in range(2)]
    Y = torch.cat(heads, dim=-1) * torch.tensor(gate, dtype=torch.float64)
    torch.testing.assert_close(gated(X, causal=True), Y @ gated.W_O)


def test_gated_decoder_decodes_with_a_cache():
    import attnlib

    model = attnlib.TinyDecoder(20, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2,
                                attention="gated", seed=0, dtype=torch.float64)
    assert isinstance(model.blocks[0].attn, attnlib.layers.gates.GatedAttention)
    assert all(isinstance(c, attnlib.KVCache) for c in model.new_caches())
    ids = torch.randint(20, (2, 6))
    caches = model.new_caches()
    pieces = torch.cat([model(ids[:, :4], caches=caches), model(ids[:, 4:], caches=caches)], 1)
    torch.testing.assert_close(pieces, model(ids))
    assert torch.equal(model.generate(ids, 5), model.generate(ids, 5, use_cache=False))


def test_gated_attention_is_a_registered_variant():
    import attnlib
    from attnlib.layers.gates import GatedAttention
    from attnlib.layers.variants import ATTENTION
    from attnlib.serving.cache import StaticKVCache

    assert "gated" in ATTENTION
    block = attnlib.TransformerBlock(16, 4, n_kv_heads=2, attention="gated", rope_base=100.0)
    assert isinstance(block.attn, GatedAttention) and block.attn.n_kv_heads == 2
    assert block.attn.rope_base == 100.0
    assert isinstance(block.attn.new_cache(), attnlib.KVCache)
    assert isinstance(block.attn.new_cache(8), StaticKVCache)
    with pytest.raises(ValueError, match=r"d_latent applies to attention='mla' only"):
        attnlib.TransformerBlock(16, 4, attention="gated", d_latent=4)
