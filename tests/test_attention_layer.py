"""The attention-layer contract: the steps in order, forward hooks that fire inside a model,
a replaced attend step or rotation that runs a trained model, and caches of one's own."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch

import attnlib
from attnlib import AttentionLayer, Cache, TinyDecoder
from attnlib.layers.gates import GatedAttention
from attnlib.layers.gqa import GroupedQueryAttention, grouped_query_attention
from attnlib.layers.mla import MultiHeadLatentAttention
from attnlib.layers.sliding import SlidingWindowAttention
from attnlib.models import pretrained

PACKAGE = Path(attnlib.__file__).parent


def _ids(model: TinyDecoder, n: int = 20, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, model.vocab_size, (2, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ["book", "book-gated", "book-nope"])
def test_a_hook_on_every_attention_layer_fires_in_forward_and_in_cached_generate(name):
    model = pretrained.load(name)
    calls: list[int] = []
    handles = [b.attn.register_forward_hook(lambda m, args, kw, out, i=i: calls.append(i),
                                            with_kwargs=True)
               for i, b in enumerate(model.blocks)]
    try:
        ids = _ids(model)
        with torch.no_grad():
            model(ids)
        assert calls == list(range(model.n_layers))
        calls.clear()
        model.generate(ids[:, :5], 6)  # prefill, then 5 cached steps
        assert calls == list(range(model.n_layers)) * 6
    finally:
        for h in handles:
            h.remove()


def test_every_attention_module_is_an_attention_layer_with_one_forward():
    for cls in (GroupedQueryAttention, GatedAttention, MultiHeadLatentAttention,
                SlidingWindowAttention, attnlib.MultiHeadAttention, attnlib.MultiQueryAttention):
        assert issubclass(cls, AttentionLayer)
        assert "forward" not in cls.__dict__, cls  # the base's steps, in order
    steps = {"project", "rotate", "heads", "mask", "combine"}
    assert steps & set(GatedAttention.__dict__) == {"combine"}
    assert steps & set(SlidingWindowAttention.__dict__) == {"mask"}
    assert steps & set(MultiHeadLatentAttention.__dict__) == {"project", "rotate", "heads",
                                                               "combine"}


@pytest.mark.parametrize("name", ["book", "book-gated", "induction"])
def test_attnlibs_own_attend_step_passed_in_gives_the_logits_bit_for_bit(name):
    model = pretrained.load(name)
    twin = model.with_attention(attend=grouped_query_attention)
    ids = _ids(model)
    with torch.no_grad():
        assert torch.equal(twin(ids), model(ids))
    assert torch.equal(twin.generate(ids[:, :6], 10), model.generate(ids[:, :6], 10))
    assert all(b.attn.attend_fn is None for b in model.blocks)  # the original is unchanged


def test_the_rotation_passed_in_gives_the_logits_bit_for_bit():
    model = pretrained.load("book")
    twin = model.with_attention(rope=attnlib.apply_rope)
    ids = _ids(model)
    with torch.no_grad():
        assert torch.equal(twin(ids), model(ids))
    assert torch.equal(twin.generate(ids[:, :6], 10), model.generate(ids[:, :6], 10))


def test_an_mla_models_attend_step_receives_per_head_keys():
    model = pretrained.to_mla(pretrained.load("book-nope"), 32)
    seen = []

    def attend(Q, K, V, *, mask=None, causal=False, scale=None):
        seen.append((Q.shape, K.shape, V.shape))
        return grouped_query_attention(Q, K, V, mask=mask, causal=causal, scale=scale)

    twin = model.with_attention(attend=attend)
    ids = _ids(model, 9)
    with torch.no_grad():
        assert torch.equal(twin(ids), model(ids))
    assert seen[0] == (torch.Size([2, 4, 9, 16]),) * 3


@pytest.mark.parametrize("absorbed", [False, True])
def test_every_path_of_mla_runs_the_attend_step_passed_in(absorbed):
    """``use(attend=f)`` reaches MLA's absorbed path too: ``f`` receives one key and value
    head (the latent) there, and cached decoding with it matches the layer's own."""
    gen = torch.Generator().manual_seed(0)
    mla = MultiHeadLatentAttention(32, 4, 8, 6, d_latent_q=5, d_rope=4, dtype=torch.float64)
    X = torch.randn(2, 7, 32, dtype=torch.float64, generator=gen)
    with torch.no_grad():
        expected = mla(X, causal=True, absorbed=absorbed)
    heads_seen = []

    def attend(Q, K, V, *, mask=None, causal=False, scale=None):
        heads_seen.append(K.shape[-3])
        return grouped_query_attention(Q, K, V, mask=mask, causal=causal, scale=scale)

    mla.use(attend=attend)
    cache = mla.new_cache()
    with torch.no_grad():
        Y = torch.cat([mla(X[:, :4], causal=True, cache=cache, absorbed=absorbed),
                       mla(X[:, 4:], causal=True, cache=cache, absorbed=absorbed)], dim=1)
    assert heads_seen == [1 if absorbed else 4] * 2  # the latent is the one KV head
    torch.testing.assert_close(Y, expected)

    def no_scale(Q, K, V, *, mask=None, causal=False, scale=None):  # a wrong step shows
        return grouped_query_attention(Q, K, V, mask=mask, causal=causal, scale=1.0)

    with torch.no_grad():
        assert (mla.use(attend=no_scale)(X, causal=True, absorbed=absorbed)
                - expected).abs().max() > 1e-3


def test_one_token_reaches_pytorchs_attention_within_three_frames(monkeypatch):
    """From ``TinyDecoder.forward``, a cached decode step calls SDPA three attnlib frames
    down: the block, the attention layer, and the attend step of the dispatch."""
    model = pretrained.load("book")
    caches = model.new_caches(16)
    ids = _ids(model, 6)[:1]
    stacks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def probe(*args, **kw):
        stacks.append([f.name for f in traceback.extract_stack()[:-1]
                       if Path(f.filename).is_relative_to(PACKAGE)])
        return sdpa(*args, **kw)

    with torch.no_grad():
        model(ids, caches=caches)  # prefill
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", probe)
        model(ids[:, -1:], caches=caches)  # one new token
    assert len(stacks) == model.n_layers
    assert stacks[0] == ["forward", "forward", "forward", "sdpa_attention"]


def test_a_wrong_attend_step_changes_what_the_model_computes():
    model = pretrained.load("book")

    def no_scale(Q, K, V, *, mask=None, causal=False):  # the 1/sqrt(d) forgotten
        return grouped_query_attention(Q, K, V, mask=mask, causal=causal, scale=1.0)

    ids = _ids(model)
    with torch.no_grad():
        assert (model.with_attention(attend=no_scale)(ids) - model(ids)).abs().max() > 0.1
    with pytest.raises(TypeError, match="attend must be a callable"):
        model.with_attention(attend="softmax")


class ListCache(Cache):
    """A cache of one's own: it keeps lists of pieces and concatenates them when asked."""

    def __init__(self, max_tokens=None):
        super().__init__()
        self.pieces: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def n_tokens(self) -> int:
        return sum(K.shape[-2] for K, _ in self.pieces)

    def append(self, K, V):
        self.pieces.append((K, V))
        return (torch.cat([k for k, _ in self.pieces], dim=-2),
                torch.cat([v for _, v in self.pieces], dim=-2))


def test_a_cache_of_ones_own_decodes_like_attnlibs():
    model = pretrained.load("book")
    ids = _ids(model)[:, :7]
    caches = [ListCache() for _ in model.blocks]
    assert torch.equal(model.generate(ids, 12, caches=caches), model.generate(ids, 12))
    assert all(c.n_tokens == 7 + 11 for c in caches)
    with pytest.raises(TypeError, match=r"caches\[0\] must be an attnlib.KVCache"):
        model.generate(ids, 2, caches=[attnlib.LatentCache() for _ in model.blocks])
    with pytest.raises(ValueError, match="caches must be None with use_cache=False"):
        model.generate(ids, 2, use_cache=False, caches=caches)


def test_probes_read_weights_without_patching_the_layers():
    model = pretrained.load("book")
    before = [dict(b.attn.__dict__) for b in model.blocks]
    maps = attnlib.models.probes.attention_maps(model, _ids(model, 10), dtype=None)  # this model
    assert len(maps) == model.n_layers and maps[0].shape == (2, 4, 10, 10)
    for b, d in zip(model.blocks, before, strict=True):
        assert b.attn.__dict__.keys() == d.keys()
        assert not b.attn._forward_pre_hooks and not b.attn._forward_hooks
