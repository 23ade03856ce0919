"""The reader's decoder of lesson 14 (attnlib.models.assemble): the hidden solutions run the
trained book model and its conversions, and Hugging Face's LlamaForCausalLM; each wrong piece
is located by first_divergence."""

from __future__ import annotations

import pytest
import torch
from test_exercises_14 import (
    Cache,
    attend,
    block,
    embed,
    feed_forward,
    forward,
    load_llama,
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

MINE = Pieces(load_llama=load_llama, embed=embed, rms_norm=rms_norm, rope=rope,
              repeat_kv=repeat_kv, attend=attend, feed_forward=feed_forward, cache=Cache,
              block=block, forward=forward, sample=sample)
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
    assert [r["piece"] for r in rows] == list(attnlib.models.assemble.PIECES)
    assert [r["piece"] for r in rows][:3] == ["load_llama", "embed", "rms_norm"]
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


def _block_with(**wrong):
    from attnlib.exercises.lesson_14 import _wrong_block
    return _wrong_block(**wrong)


def _forward_with(**wrong):
    from attnlib.exercises.lesson_14 import _wrong_forward
    return _wrong_forward(**wrong)


@pytest.mark.parametrize(("piece", "wrong", "where"), [
    ("block", _block_with(rope_v=True), (0, 0, "attention")),
    ("block", _block_with(attn_residual=False), (0, 0, "attention")),
    ("block", _block_with(ffn_residual=False), (0, 0, "feed_forward")),
    ("block", _block_with(post_norm=True), (0, 0, "attention")),
    ("block", _block_with(offset=False), (1, 0, "attention")),
    ("forward", _forward_with(offset=False), (1, 0, "attention")),
    ("forward", _forward_with(final_norm=False), (0, None, "logits")),
])
def test_first_divergence_locates_each_wrong_wiring(piece, wrong, where):
    """The reader's block and forward are located like the leaf pieces: the block's output
    less its input and its feed-forward output is the attention sublayer's."""
    found = first_divergence(load(), MINE.replace(**{piece: wrong}), IDS, steps=2)
    assert (found.step, found.layer, found.sublayer) == where
    assert found.max_diff > 1e-3


def test_a_tied_head_used_as_untied_is_found_at_the_logits():
    model = load()
    assert model.W_out is None  # the book model ties its head
    found = first_divergence(model, MINE.replace(forward=_forward_with(head="always E")), IDS)
    assert found is None  # E^T is the right head of a tied model
    untied = attnlib.models.assemble.weights_of(model)._replace(W_out=model.E.mT.clone() * 1.1)
    found = first_divergence(model, MINE, IDS, weights=untied)
    assert (found.step, found.layer, found.sublayer) == (0, None, "logits")


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
    loaded = ReaderDecoder.from_llama(hf.state_dict(), hf.config, MINE)  # the reader's loader
    assert float((loaded(ids) - theirs).abs().max()) < 1e-4
    assert torch.equal(loaded.generate(prompt, 16), want)
    assert first_divergence(model, MINE, ids, steps=3,
                            weights=load_llama(hf.state_dict(), hf.config)) is None

    def swapped(state_dict, config):  # gate_proj and up_proj exchanged: the same shapes
        w = load_llama(state_dict, config)
        return w._replace(layers=tuple(layer._replace(W_gate=layer.W_up, W_up=layer.W_gate)
                                       for layer in w.layers))

    found = first_divergence(model, MINE, ids, weights=swapped(hf.state_dict(), hf.config))
    assert (found.step, found.layer, found.sublayer) == (0, 0, "feed_forward")


@torch.no_grad()
def test_the_loader_refuses_a_state_dict_that_does_not_fit():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
                         pad_token_id=0)
    sd = LlamaForCausalLM(config).state_dict()
    weights = attnlib.models.assemble.load_llama(sd, config)
    assert weights.W_out is None and weights.layers[0].G == 2
    del sd["lm_head.weight"]  # a tied checkpoint may leave the head out
    assert attnlib.models.assemble.load_llama(sd, config).W_out is None
    bad = dict(sd, **{"model.layers.1.self_attn.k_proj.weight": torch.zeros(32, 32)})
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight must "
                                         r"have shape \(16, 32\)"):
        attnlib.models.assemble.load_llama(bad, config)
    gone = {k: v for k, v in sd.items() if k != "model.norm.weight"}
    with pytest.raises(KeyError, match=r"model\.norm\.weight"):
        attnlib.models.assemble.load_llama(gone, config)
    extra = dict(sd, **{"model.layers.0.self_attn.q_proj.bias": torch.zeros(32)})
    with pytest.raises(ValueError, match="not part of this Llama"):
        attnlib.models.assemble.load_llama(extra, config)


def _notebook_solutions() -> dict:
    """The hidden solution cells of lesson 14, run as a reader who solved every exercise."""
    import json
    from pathlib import Path

    from attnlib.core.heads import merge_heads, split_heads
    from attnlib.models.assemble import Layer, Weights

    nb = json.loads((Path(__file__).parents[1] / "lessons" / "14_your_model.ipynb").read_text())
    namespace = {"torch": torch, "attnlib": attnlib, "split_heads": split_heads,
                 "merge_heads": merge_heads, "Layer": Layer, "Weights": Weights}
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith("#@title Solution to exercise 14."):
            exec(source.split("\n\n\nattnlib.exercises.check")[0], namespace)
    return namespace


@torch.no_grad()
def test_a_reader_who_solved_every_exercise_runs_the_whole_model():
    """Every part of the decoder and the loader from the lesson's own solution cells: the
    same logits and greedy tokens as attnlib on book, its GQA and MLA conversions, and as
    Hugging Face's Llama read by the reader's loader."""
    ns = _notebook_solutions()
    names = {"load_llama": "load_llama", "embed": "embed", "rms_norm": "rms_norm",
             "rope": "rope", "repeat_kv": "repeat_kv", "attend": "attend",
             "feed_forward": "feed_forward", "cache": "Cache", "block": "block",
             "forward": "forward", "sample": "sample"}
    pieces = Pieces(**{piece: ns[name] for piece, name in names.items()})
    assert {r["ran"] for r in piece_table(pieces)} == {"yours"}
    for name, variant in (("book", {}), ("book", {"n_kv_heads": 2}),
                          ("book-nope", {"d_latent": 32})):
        model = load(name, **variant)
        assert float((ReaderDecoder(model, pieces)(IDS) - model(IDS)).abs().max()) < 1e-12
        assert torch.equal(ReaderDecoder(model, pieces).generate(IDS[:1, :8], 8),
                           model.generate(IDS[:1, :8], 8))
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=False, attn_implementation="eager",
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(config).eval()
    reader = ReaderDecoder.from_llama(hf.state_dict(), hf.config, pieces)
    ids = IDS[:, :16]
    assert float((reader(ids) - hf(input_ids=ids).logits).abs().max()) < 1e-4
    prompt = ids[:1, :6]
    assert torch.equal(reader.generate(prompt, 12),
                       hf.generate(prompt, max_new_tokens=12, do_sample=False))


def test_lesson_13s_kernel_runs_as_the_readers_attend():
    """The bridge of lesson 14: the FlashAttention kernels of lesson 13 (Triton's interpreter
    on a CPU) as the attend piece of the book model, the same greedy tokens."""
    pytest.importorskip("triton")
    from attnlib.exercises.lesson_13 import reader_flash_attention

    flash = reader_flash_attention()
    book32 = load(dtype=torch.float32)
    on_flash = ReaderDecoder(book32, MINE.replace(
        attend=lambda Q, K, V: flash(Q, K, V, causal=True)))
    with torch.no_grad():
        assert float((on_flash(IDS[:1, :20]) - book32(IDS[:1, :20])).abs().max()) < 1e-4
    assert torch.equal(on_flash.generate(IDS[:1, :6], 6), book32.generate(IDS[:1, :6], 6))
