"""The reader's decoder of lesson 14 (attnlib.models.assemble): the hidden solutions run the
trained book model and its conversions, and Hugging Face's LlamaForCausalLM; each wrong piece
is located by first_divergence."""

from __future__ import annotations

import pytest
import torch
from test_exercises_14 import (
    Cache,
    attend,
    embed,
    feed_forward,
    repeat_kv,
    rms_norm,
    rope,
    sample,
)

import attnlib
from attnlib.models.assemble import (
    Divergence,
    Pieces,
    ReaderDecoder,
    first_divergence,
    from_hf_llama,
    piece_table,
)

MINE = Pieces(embed=embed, rms_norm=rms_norm, rope=rope, repeat_kv=repeat_kv, attend=attend,
              feed_forward=feed_forward, cache=Cache, sample=sample)
IDS = torch.randint(0, 101, (2, 24), generator=torch.Generator().manual_seed(0))


def load(name="book", dtype=torch.float64, **kw):
    return attnlib.models.pretrained.load(name, dtype=dtype, **kw)


@pytest.mark.parametrize(("name", "variant"), [
    ("book", {}), ("book", {"n_kv_heads": 2}), ("book", {"n_kv_heads": 1}),
    ("book-nope", {"d_latent": 32})])
@torch.no_grad()
def test_the_readers_pieces_reproduce_attnlibs_logits_and_tokens(name, variant):
    model = load(name, **variant)
    reader = ReaderDecoder(model, MINE)
    diff = float((reader(IDS) - model(IDS)).abs().max())
    assert diff < 1e-12  # float64; measured about 2e-14
    assert first_divergence(model, MINE, IDS, steps=4) is None
    assert torch.equal(reader.generate(IDS[:1, :8], 12), model.generate(IDS[:1, :8], 12))
    m32 = load(name, dtype=torch.float32, **variant)
    assert float((ReaderDecoder(m32, MINE)(IDS) - m32(IDS)).abs().max()) < 1e-4


def test_piece_table_says_whose_code_ran():
    rows = piece_table(Pieces(attend=attend))
    assert [r["piece"] for r in rows][:2] == ["embed", "rms_norm"]
    assert {r["piece"]: r["ran"] for r in rows}["attend"] == "yours"
    assert {r["ran"] for r in piece_table(MINE)} == {"yours"}
    assert {r["ran"] for r in piece_table(Pieces())} == {"attnlib"}


def no_scale(Q, K, V):
    return attend(Q * Q.shape[-1] ** 0.5, K, V)


def mask_off_by_one(Q, K, V):  # every query also sees the next key
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    n_q, n_kv = S.shape[-2:]
    hide = torch.ones(n_q, n_kv, dtype=torch.bool).triu(2 + n_kv - n_q)
    return torch.softmax(S.masked_fill(hide, float("-inf")), dim=-1) @ V


def rope_interleaved(X, positions, base):
    d = X.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=X.dtype) / d)
    a = positions.to(X.dtype)[:, None] * theta
    x, y = X[..., 0::2], X[..., 1::2]
    return torch.stack((x * a.cos() - y * a.sin(), x * a.sin() + y * a.cos()), -1).flatten(-2)


def repeat_tiled(K, H):
    return K.repeat(1, H // K.shape[-3], 1, 1)


def cache_forgets(cls=Cache):
    class Forgets(cls):
        def append(self, K, V):
            if self.K is not None:  # keeps only the prompt: drops every new token
                return self.K, self.V
            return super().append(K, V)
    return Forgets


@pytest.mark.parametrize(("piece", "wrong", "variant", "where"), [
    ("attend", no_scale, {}, (0, 0, "attention")),
    ("attend", mask_off_by_one, {}, (0, 0, "attention")),
    ("rope", rope_interleaved, {}, (0, 0, "attention")),
    ("repeat_kv", repeat_tiled, {"n_kv_heads": 2}, (0, 0, "attention")),
    ("cache", cache_forgets(), {}, (1, 0, "attention")),
])
def test_first_divergence_locates_each_wrong_piece(piece, wrong, variant, where):
    model = load(**variant)
    found = first_divergence(model, MINE.replace(**{piece: wrong}), IDS, steps=2)
    assert isinstance(found, Divergence)
    assert (found.step, found.layer, found.sublayer) == where
    assert found.max_diff > 1e-3


def test_a_wrong_grouping_is_invisible_without_groups():
    """repeat instead of repeat_interleave only shows in a model with G < H."""
    assert first_divergence(load(), MINE.replace(repeat_kv=repeat_tiled), IDS) is None


def test_a_piece_wrong_in_a_late_layer_is_found_there():
    model = load()
    calls = {"n": 0}

    def late(x, W_gate, W_up, W_down):  # wrong in the third block only
        calls["n"] += 1
        y = feed_forward(x, W_gate, W_up, W_down)
        return y * 1.01 if calls["n"] % model.n_layers == 3 else y

    found = first_divergence(model, MINE.replace(feed_forward=late), IDS)
    assert (found.step, found.layer, found.sublayer) == (0, 2, "feed_forward")


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="attend must be a callable"):
        Pieces(attend=3)
    with pytest.raises(ValueError, match="pieces must be among"):
        Pieces().replace(atend=attend)
    with pytest.raises(ValueError, match="steps must be an int >= 0"):
        first_divergence(load(), MINE, IDS, steps=-1)


transformers = pytest.importorskip("transformers")


@torch.no_grad()
def test_hf_llama_into_the_readers_decoder():
    """LlamaForCausalLM from a small local config: the same logits, the same cached greedy
    tokens (Hugging Face's own generate and cache)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                         attn_implementation="eager", bos_token_id=None, eos_token_id=None,
                         pad_token_id=0)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(config).eval()
    for layer in hf.model.layers:  # gains away from 1, so that a missing gain shows
        layer.input_layernorm.weight.uniform_(0.5, 1.5)
        layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    model = from_hf_llama(hf)
    reader = ReaderDecoder(model, MINE)
    ids = IDS[:, :16]
    theirs = hf(input_ids=ids).logits
    assert float((reader(ids) - theirs).abs().max()) < 1e-4
    prompt = ids[:1, :6]
    want = hf.generate(prompt, max_new_tokens=16, do_sample=False)
    assert torch.equal(reader.generate(prompt, 16), want)
    wrong = ReaderDecoder(model, MINE.replace(rope=rope_interleaved))
    assert float((wrong(ids) - theirs).abs().max()) > 1e-3  # the pairing matters (logits ~0.2)
