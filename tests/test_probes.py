"""attnlib.models.probes: attention maps against each layer's own output, scores against loops."""

from __future__ import annotations

import math

import pytest
import torch

import attnlib
from attnlib.core.heads import merge_heads, repeat_kv, split_heads
from attnlib.models import probes, tasks


@pytest.mark.parametrize("rope_base", [10000.0, None])
def test_attention_maps_reproduce_each_attention_output(rope_base):
    model = attnlib.TinyDecoder(20, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2,
                                rope_base=rope_base, seed=0).double()
    ids = torch.randint(20, (3, 9))
    maps = probes.attention_maps(model, ids, dtype=None)
    h = model.E[ids]  # the residual stream, walked block by block (pre-norm blocks)
    for block, P in zip(model.blocks, maps, strict=True):
        attn = block.attn
        X = block.attn_norm(h)  # what the block hands its attention
        assert P.shape == (3, 4, 9, 9)
        torch.testing.assert_close(P.sum(-1), torch.ones(3, 4, 9, dtype=torch.float64))
        assert (P.triu(1) == 0).all()  # causal
        V = repeat_kv(split_heads(X @ attn.W_V, attn.n_kv_heads), attn.n_heads)
        torch.testing.assert_close(merge_heads(P @ V) @ attn.W_O, attn(X, causal=True))
        h = block(h, causal=True)
    torch.testing.assert_close(model.final_norm(h) @ model.output_weights(), model(ids))
    assert not any("_forward" in vars(b.attn) for b in model.blocks)  # the recorders are gone


def test_scores_match_explicit_loops():
    P = torch.softmax(torch.randn(2, 3, 6, 6), -1).tril()
    P = P / P.sum(-1, keepdim=True)
    ids = torch.tensor([[1, 2, 1, 3, 2, 1], [4, 4, 4, 5, 6, 5]])
    prev = torch.stack([P[:, h].diagonal(-1, -2, -1).mean() for h in range(3)])
    torch.testing.assert_close(probes.previous_token_score(P), prev)
    scores = []
    for h in range(3):
        w = []
        for b in range(2):
            for i in range(6):
                js = [j for j in range(i) if ids[b, j] == ids[b, i]]
                if js:
                    w.append(sum(P[b, h, i, j + 1] for j in js))
        scores.append(torch.stack(w).mean())
    torch.testing.assert_close(probes.induction_score(P, ids), torch.stack(scores))


def test_ablating_a_head_zeroes_its_contribution():
    model = attnlib.TinyDecoder(20, d_model=16, n_layers=1, n_heads=4, seed=0).double()
    ids = torch.randint(20, (2, 7))
    h = 2
    ablated = probes.ablate_heads(model, [(0, h)])
    X = model.blocks[0].attn_norm(model.E[ids])  # the attention input of layer 0
    attn = model.blocks[0].attn
    P = probes.attention_maps(model, ids, dtype=None)[0]
    heads = P @ split_heads(X @ attn.W_V, 4)  # (B, H, N, d_head)
    heads[:, h] = 0
    torch.testing.assert_close(ablated.blocks[0].attn(X, causal=True),
                               merge_heads(heads) @ attn.W_O)
    assert not torch.equal(model.blocks[0].attn.W_O, ablated.blocks[0].attn.W_O)
    losses = probes.head_ablation(model, ids, ids)
    assert losses.shape == (1, 4)
    assert losses[0, h].item() == attnlib.models.train.evaluate(ablated, ids, ids)["loss"]


def test_first_token_share_and_its_uniform_value():
    model = attnlib.TinyDecoder(20, d_model=16, n_layers=2, n_heads=2, seed=0)
    ids = torch.randint(20, (2, 8))
    maps = probes.attention_maps(model, ids)
    share = probes.first_token_share(model, ids)
    torch.testing.assert_close(share[1], maps[1][:, :, 1:, 0].mean(dim=(0, 2)))
    assert math.isclose(probes.uniform_first_token_share(4), (1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_probes_refuse_latent_attention():
    model = attnlib.TinyDecoder(20, d_model=16, n_layers=1, n_heads=2, attention="mla",
                                d_latent=4)
    with pytest.raises(TypeError, match="must be a GroupedQueryAttention"):
        probes.attention_maps(model, torch.zeros(1, 3, dtype=torch.int64))
    assert tasks.IGNORE == -100


def test_gate_openness_is_the_mean_gate():
    model = attnlib.TinyDecoder(20, d_model=16, n_layers=2, n_heads=4, attention="gated",
                                seed=0).double()
    ids = torch.randint(20, (2, 5))
    X = model.blocks[0].attn_norm(model.E[ids])  # layer 0's attention input
    gate = torch.sigmoid(X @ model.blocks[0].attn.W_theta)  # (B, N, H d_head)
    expected = torch.stack([gate[..., 4 * h:4 * h + 4].mean() for h in range(4)])
    torch.testing.assert_close(probes.gate_openness(model, ids)[0], expected)
    with pytest.raises(TypeError, match="gated attention in every block"):
        probes.gate_openness(attnlib.TinyDecoder(20, d_model=16, n_layers=1, n_heads=2), ids)


def test_probes_name_bad_arguments():
    model = attnlib.TinyDecoder(20, d_model=16, n_layers=2, n_heads=2, seed=0)
    ids = torch.randint(20, (2, 5))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab_size\) = \[0, 20\)"):
        probes.attention_maps(model, ids + 20)
    with pytest.raises(ValueError, match=r"ids must be integer token ids of shape \(B, N\)"):
        probes.first_token_share(model, ids[0])
    with pytest.raises(ValueError, match=r"layer must lie in \[0, n_layers\) = \[0, 2\)"):
        probes.ablate_heads(model, [(2, 0)])
    with pytest.raises(ValueError, match=r"head must lie in \[0, n_heads\) = \[0, 2\)"):
        probes.ablate_heads(model, [(0, 2)])
    with pytest.raises(ValueError, match=r"P must have shape \(B, H, N, N\)"):
        probes.previous_token_score(torch.ones(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"ids must have shape \(B, N\) = \(2, 4\)"):
        probes.induction_score(torch.ones(2, 3, 4, 4), ids)
    with pytest.raises(ValueError, match="ids and targets must both have shape"):
        probes.head_ablation(model, ids, ids[:, :3])
    with pytest.raises(ValueError, match="n_tokens must be at least 2"):
        probes.uniform_first_token_share(1)
