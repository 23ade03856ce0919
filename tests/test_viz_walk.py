"""Tests for attnlib.viz.walk, the page that follows one token through the trained book model:
every number it shows is the model's own (its logits, the probes' weights, each sublayer's
output), the cached steps equal the uncached model, and the figures and twins hold what
their titles say."""

from __future__ import annotations

import math

import pytest
import torch

import attnlib
from attnlib.viz import walk

PROMPT = walk.PROMPTS[0]


@pytest.fixture(scope="module")
def t():
    return walk.trace(PROMPT)


@torch.no_grad()
def test_logits_shown_are_the_models(t):
    # a fresh load, not the page's
    model = attnlib.models.pretrained.load("book", dtype=torch.float64)
    ids = torch.tensor([attnlib.models.tasks.book_tokenizer().encode(PROMPT)])
    torch.testing.assert_close(t.logits, model(ids)[0], rtol=0, atol=0)
    table = walk.next_chars(t.logits[-1])
    p = torch.softmax(model(ids)[0, -1], dim=-1)
    for _, row in table.iterrows():
        assert row["probability"] == round(float(p[row["id"]]), 4)
    assert table["probability"].is_monotonic_decreasing


def test_weights_shown_are_what_the_probes_return(t):
    model = attnlib.models.pretrained.load("book")
    maps = attnlib.models.probes.attention_maps(model, t.ids[None])  # float64, as the page
    for layer, P in zip(t.layers, maps, strict=True):
        torch.testing.assert_close(layer["P"], P[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(layer["P"], torch.softmax(layer["S"], dim=-1))


def test_each_step_is_the_sublayers_output(t):
    model = walk.load()
    x = t.E_rows  # the embedding rows feed block 0
    for block, L in zip(model.blocks, t.layers, strict=True):
        torch.testing.assert_close(L["x_in"], x, rtol=0, atol=0)
        torch.testing.assert_close(L["X"], block.attn_norm(x), rtol=0, atol=0)
        torch.testing.assert_close(L["x_mid"], x + L["attn"], rtol=0, atol=0)
        torch.testing.assert_close(L["x_out"], L["x_mid"] + L["ffn"], rtol=0, atol=0)
        H, N, d_head = L["Q"].shape
        assert L["K"].shape == L["V"].shape == (block.attn.n_kv_heads, N, d_head)
        # Y = Z^-1 A V per head, concat(Y) W_O is the sublayer's output
        torch.testing.assert_close(L["Y"], L["P"] @ L["V"])
        merged = L["Y"].transpose(0, 1).reshape(N, H * d_head)
        torch.testing.assert_close(merged @ block.attn.W_O, L["attn"])
        x = L["x_out"]
    torch.testing.assert_close(t.final @ model.E.mT, t.logits, rtol=0, atol=0)


def test_rope_angles_are_position_times_frequency(t):
    angles = t.layers[0]["angles"]  # (N, d_head / 2)
    theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    m = torch.arange(angles.shape[0], dtype=torch.float64)[:, None]
    wrapped = torch.remainder(m * theta + math.pi, 2 * math.pi) - math.pi
    torch.testing.assert_close(angles, wrapped)
    # rotation keeps lengths
    L = t.layers[0]
    torch.testing.assert_close(L["Q_rot"].norm(dim=-1), L["Q"].norm(dim=-1))


def test_logit_table_sums_to_the_logit(t):
    table = walk.logit_table(t)
    assert len(table) == 1 + 2 * 4
    assert abs(table.iloc[:, 0].sum() - float(t.logits[-1].max())) < 0.01


def test_cached_steps_equal_the_uncached_model():
    steps = walk.decode(PROMPT, 2)
    model = walk.load()
    text = PROMPT
    for s in steps:
        ids = torch.tensor([attnlib.models.tasks.book_tokenizer().encode(text)])
        torch.testing.assert_close(s["logits"], model(ids)[0, -1])
        n_held, numbers = s["held after"]
        assert n_held == len(text)
        assert numbers == n_held * 2 * 4 * 4 * 16  # 2 N_L H d_head per token
        tokenizer = attnlib.models.tasks.book_tokenizer()
        assert s["written"] == tokenizer.decode([int(s["logits"].argmax())])
        text += s["written"]
    assert steps[1]["read"] == steps[0]["written"]  # a cached step reads one character


def test_conversion_table_cache_sizes():
    table = walk.conversion_table()
    assert list(table["numbers per token"]) == [512, 256, 128, 512, 4 * 32]
    assert list(table["bytes per token (float32)"]) == [2048, 1024, 512, 2048, 512]
    assert table.loc["book", "distance to base"] == 0
    assert table.loc["book-nope", "distance to base"] == 0
    assert (table["probability"] <= 1).all()


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (3, 2)])
def test_attention_figure_holds_the_weights(t, layer, head):
    fig = walk.attention_figure(PROMPT, layer, head)
    z = fig.data[0].z
    P = t.layers[layer]["P"][head]
    assert len(z) == P.shape[0]
    assert z[-1][int(P[-1].argmax())] == round(float(P[-1].max()), 3)
    assert z[0][1] is None  # causal: query 0 sees key 0 only
    assert f"{float(P[-1].max()):.3f}" in fig.layout.title.text


def test_stream_figure_and_its_twin():
    fig = walk.stream_figure(PROMPT, 1)
    assert "Step 1" in fig.layout.title.text and "cache held 18" in fig.layout.title.text
    assert len(fig.data[0].y) == 1 + 2 * 4
    twin = attnlib.viz.twin(walk.stream_figure, ("prompt", "step"),
                            [(p, s) for p in walk.PROMPTS[:2] for s in walk.STEPS])
    assert len(twin.layout.sliders[0].steps) == 6


def test_unknown_choices_are_refused():
    with pytest.raises(ValueError, match="layer"):
        walk.attention_figure(PROMPT, 4, 0)
    with pytest.raises(ValueError, match="text"):
        walk.trace("")
