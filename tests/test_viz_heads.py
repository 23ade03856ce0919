"""Tests for attnlib.viz.heads (lesson 03): the toy draw, every head's pattern against numpy,
the figures' traces and annotations, the parameter counts against the closed form
4 d_in H d_head, and the published head widths."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import attnlib
import attnlib.viz as viz
from attnlib.analysis.experiments import heads as eh
from attnlib.viz import heads as vh


def _draw(d_in: int, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """The module's documented draw: X, then W_Q, W_K, W_V (d_in, 128), then W_O (128, d_in)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d_in, generator=gen, dtype=torch.float64)
    Ws = [torch.randn(d_in, 128, generator=gen, dtype=torch.float64) / math.sqrt(d_in)
          for _ in range(3)]
    W_O = torch.randn(128, d_in, generator=gen, dtype=torch.float64) / math.sqrt(128)
    return X.numpy(), *(W.numpy() for W in Ws), W_O.numpy()


def _patterns(n_heads: int, d_head: int, d_in: int, n: int, seed: int) -> np.ndarray:
    """P_h with an explicit loop over heads: column block h of X W_Q and X W_K."""
    X, W_Q, W_K, _, _ = _draw(d_in, n, seed)
    out = []
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        S = (X @ W_Q[:, cols]) @ (X @ W_K[:, cols]).T / math.sqrt(d_head)
        P = np.exp(S - S.max(axis=1, keepdims=True))
        out.append(P / P.sum(axis=1, keepdims=True))
    return np.stack(out)


@pytest.mark.parametrize(("n_heads", "d_head"), [(1, 16), (2, 4), (4, 4), (8, 2)])
def test_head_patterns_match_a_loop_over_heads(n_heads, d_head):
    P = vh.head_patterns(n_heads, d_head, seed=1)
    assert P.shape == (n_heads, 6, 6)
    np.testing.assert_allclose(P.numpy(), _patterns(n_heads, d_head, 16, 6, 1), atol=1e-12)
    np.testing.assert_allclose(P.sum(dim=-1).numpy(), 1.0, atol=1e-12)


@pytest.mark.parametrize(("n_heads", "d_head"), [(1, 2), (4, 4), (8, 16)])
def test_heads_figure_draws_every_head_and_annotates_the_count(n_heads, d_head):
    fig = vh.heads_figure(n_heads=n_heads, d_head=d_head, seed=0)
    assert len(fig.data) == n_heads
    ref = _patterns(n_heads, d_head, 16, 6, 0)
    for h, trace in enumerate(fig.data):
        assert trace.name == f"head {h}"
        np.testing.assert_allclose(np.array(trace.z), np.round(ref[h], 3), atol=1e-12)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"head {h}" for h in range(n_heads)]
    count = 3 * 16 * n_heads * d_head + n_heads * d_head * 16  # W_Q, W_K, W_V, then W_O
    assert f"= {count:,};" in fig.layout.title.text
    assert f"H d_head = {n_heads * d_head}" in fig.layout.title.text
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1


def test_heads_figure_count_is_constant_at_fixed_width():
    counts = set()
    for n_heads in (1, 2, 4, 8):
        title = vh.heads_figure(n_heads=n_heads, d_head=16 // n_heads).layout.title.text
        counts.add(re.search(r"= ([\d,]+);", title).group(1))
    assert counts == {"1,024"}


def test_heads_twin_is_small_and_has_every_combination():
    settings = [(h, d) for d in vh.HEAD_WIDTHS for h in vh.HEAD_COUNTS]
    fig = viz.twin(vh.heads_figure, ("n_heads", "d_head"), settings)
    assert len(fig.layout.sliders[0].steps) == len(settings)
    assert len(fig.data) == sum(h for h, _ in settings)
    assert len(fig.to_json()) < 1_000_000


def test_heads_figure_rejects_bad_settings():
    with pytest.raises(ValueError, match="n_heads must be at most 8"):
        vh.heads_figure(n_heads=16, d_head=2)
    with pytest.raises(ValueError, match="n_heads \\* d_head must be at most WIDE"):
        vh.heads_figure(n_heads=8, d_head=32)
    with pytest.raises(TypeError, match="d_head must be a positive int"):
        vh.heads_figure(n_heads=2, d_head=2.5)


def test_reads_figure_is_full_against_block_diagonal():
    fig = vh.reads_figure(n_heads=4, d_head=3, d_in=8)
    full, sliced = (np.array(t.z, dtype=object) for t in fig.data)
    assert full.shape == sliced.shape == (8, 12)
    for r in range(8):
        for c in range(12):
            assert full[r, c] == c // 3  # every head reads every input feature
            assert sliced[r, c] == (c // 3 if r // 2 == c // 3 else None)
    with pytest.raises(ValueError, match="n_heads must divide d_in"):
        vh.reads_figure(n_heads=3, d_in=8)


def test_parameter_table_matches_the_closed_form_and_torch():
    settings = [(1, 64), (4, 16), (8, 8), (4, 32)]
    table = eh.parameter_table(64, settings)
    for n_heads, d_head in settings:
        row = table.loc[(n_heads, d_head)]
        assert row["total"] == 4 * 64 * n_heads * d_head
        assert row["W_Q"] == row["W_K"] == row["W_V"] == row["W_O"] == 64 * n_heads * d_head
    # torch's own layer, at H d_head = d_in and without biases, has the same count
    torch_mha = torch.nn.MultiheadAttention(64, 8, bias=False)
    assert sum(p.numel() for p in torch_mha.parameters()) == table.loc[(8, 8), "total"]


def test_model_widths_table_gives_the_published_widths():
    table = eh.model_widths_table([attnlib.LLAMA3_70B, attnlib.GEMMA3_27B])
    assert table.loc["Llama 3 70B"].tolist() == [8192, 64, 128, 8192, 1.0, 8]
    assert table.loc["Gemma 3 27B", "G"] == 16
    assert table.loc["Gemma 3 27B", "H d_head"] == 32 * 128 == 4096
    assert table.loc["Gemma 3 27B", "H d_head / d"] == round(4096 / 5376, 4)
    with pytest.raises(TypeError, match="ModelSpec"):
        eh.model_widths_table(["Llama 3 70B"])


def test_layer_heads_figure_draws_every_head_of_every_layer_rounded():
    gen = torch.Generator().manual_seed(0)
    maps = [torch.softmax(torch.randn(3, 5, 5, generator=gen, dtype=torch.float64), dim=-1)
            for _ in range(2)]
    labels = [[f"score {layer}.{h}" for h in range(3)] for layer in range(2)]
    fig = vh.layer_heads_figure(maps, labels=labels, title="t")
    assert len(fig.data) == 6
    for k, trace in enumerate(fig.data):
        layer, h = divmod(k, 3)
        assert trace.name == f"layer {layer}, head {h}"
        np.testing.assert_allclose(np.array(trace.z), maps[layer][h].numpy(), atol=5e-4)
        assert np.array_equal(np.array(trace.z), np.round(np.array(trace.z), 3))
    texts = [a.text for a in fig.layout.annotations]
    assert "layer 1, head 2<br><sup>score 1.2</sup>" in texts
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1


def test_layer_heads_figure_rejects_bad_maps_and_labels():
    P = torch.full((2, 4, 4), 0.25)
    with pytest.raises(TypeError, match="maps"):
        vh.layer_heads_figure([])
    with pytest.raises(ValueError, match=r"\(H, N, N\)"):
        vh.layer_heads_figure([torch.ones(2, 4, 3)])
    with pytest.raises(ValueError, match="one shape"):
        vh.layer_heads_figure([P, torch.full((3, 4, 4), 0.25)])
    with pytest.raises(ValueError, match="labels"):
        vh.layer_heads_figure([P], labels=[["a"]])
