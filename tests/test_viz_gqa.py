"""Tests for attnlib.viz.gqa (lesson 06): the documented layers against their definition,
conversion errors against mean pooling written with numpy, cache and weight counts against
closed forms, and the figures' annotated numbers against the same references."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib.viz as viz
from attnlib.analysis.experiments import gqa as eg
from attnlib.analysis.memory import GEMMA3_27B, LLAMA3_8B, LLAMA3_70B
from attnlib.viz import gqa as vg


def _numpy_layer(W_Q, W_K, W_V, W_O, H, G, d_head, X):
    """Causal GQA in numpy, head by head: Y_h = softmax(Q_h K_g(h)^T / sqrt(d)) V_g(h)."""
    n = X.shape[0]
    out = []
    for h in range(H):
        g = h // (H // G)
        Q = X @ W_Q[:, h * d_head:(h + 1) * d_head]
        K = X @ W_K[:, g * d_head:(g + 1) * d_head]
        V = X @ W_V[:, g * d_head:(g + 1) * d_head]
        S = Q @ K.T / math.sqrt(d_head)
        S = np.where(np.tril(np.ones((n, n), dtype=bool)), S, -np.inf)
        P = np.exp(S - S.max(axis=1, keepdims=True))
        out.append(P / P.sum(axis=1, keepdims=True) @ V)
    return np.concatenate(out, axis=1) @ W_O


def _numpy_error(H, G, kind, seed=0):
    mha = eg.draw_mha(H, kind, seed=seed)
    W = {n: getattr(mha, n).detach().numpy() for n in ("W_Q", "W_K", "W_V", "W_O")}
    d_in, s = eg.D_IN, H // G
    pooled = {}
    for n in ("W_K", "W_V"):  # the mean of each group's blocks
        blocks = W[n].reshape(d_in, G, s, vg.D_HEAD)
        pooled[n] = blocks.mean(axis=2).reshape(d_in, G * vg.D_HEAD)
    X = eg.draw_tokens().numpy()
    Y = _numpy_layer(W["W_Q"], W["W_K"], W["W_V"], W["W_O"], H, H, vg.D_HEAD, X)
    Y_G = _numpy_layer(W["W_Q"], pooled["W_K"], pooled["W_V"], W["W_O"], H, G, vg.D_HEAD, X)
    return np.linalg.norm(Y_G - Y) / np.linalg.norm(Y)


# ---------------------------------------------------------------------------------------
# the documented layers and the conversion errors


def test_draw_mha_follows_its_documented_draw():
    for kind in vg.KINDS:
        mha = eg.draw_mha(4, kind, seed=3)
        gen = torch.Generator().manual_seed(3)
        scale = math.sqrt(eg.D_IN)
        W_Q = torch.randn(eg.D_IN, 16, generator=gen, dtype=torch.float64) / scale
        W_O = torch.randn(16, eg.D_IN, generator=gen, dtype=torch.float64) / scale
        torch.testing.assert_close(mha.W_Q.detach(), W_Q)
        torch.testing.assert_close(mha.W_O.detach(), W_O)
        for name in ("W_K", "W_V"):
            if kind == "independent":
                ref = torch.randn(eg.D_IN, 16, generator=gen, dtype=torch.float64) / scale
            else:
                base = torch.randn(eg.D_IN, 1, 4, generator=gen, dtype=torch.float64) / scale
                own = torch.randn(eg.D_IN, 4, 4, generator=gen, dtype=torch.float64) / scale
                ref = (base + eg.NOISE * own).reshape(eg.D_IN, 16)
            torch.testing.assert_close(getattr(mha, name).detach(), ref)


def test_draw_mha_returns_fresh_copies():
    a = eg.draw_mha(8, "correlated")
    with torch.no_grad():
        a.W_K.zero_()
    assert eg.draw_mha(8, "correlated").W_K.abs().sum() > 0


@pytest.mark.parametrize("H,G", [(8, 4), (8, 1), (6, 3), (12, 2), (4, 4)])
@pytest.mark.parametrize("kind", vg.KINDS)
def test_conversion_error_matches_numpy(H, G, kind):
    assert vg.conversion_error(H, G, kind) == pytest.approx(_numpy_error(H, G, kind), abs=1e-10)


def test_conversion_table_and_the_heuristic():
    table = eg.conversion_table(8)
    assert list(table.index) == [8, 4, 2, 1]
    assert list(table["s"]) == [1, 2, 4, 8]
    for G in table.index:
        for kind in vg.KINDS:
            assert table.loc[G, f"error, {kind}"] == round(_numpy_error(8, G, kind), 4)
        assert table.loc[G, "√(1 − G/H)"] == round(math.sqrt(1 - G / 8), 4)
    assert (table["error, correlated"] < 0.1).all()  # near copies pool well
    assert (table.loc[[4, 2, 1], "error, independent"] > 0.7).all()  # unrelated heads do not
    assert table.loc[8, "error, correlated"] == table.loc[8, "error, independent"] == 0.0


def _numpy_weight_error(H, G, kind, seed=0):
    mha = eg.draw_mha(H, kind, seed=seed)
    own, read = [], []
    for n in ("W_K", "W_V"):
        W = getattr(mha, n).detach().numpy().reshape(eg.D_IN, G, H // G, vg.D_HEAD)
        own.append(W)
        read.append(np.broadcast_to(W.mean(axis=2, keepdims=True), W.shape))  # group mean
    own, read = np.stack(own), np.stack(read)
    return np.linalg.norm(read - own) / np.linalg.norm(own)


@pytest.mark.parametrize(("H", "G", "kind"), [(8, 2, "independent"), (4, 1, "correlated"),
                                              (12, 3, "independent"), (6, 6, "correlated")])
def test_weight_error_matches_numpy(H, G, kind):
    assert eg.weight_error(H, G, kind, seed=3) == pytest.approx(
        _numpy_weight_error(H, G, kind, seed=3), rel=1e-12, abs=1e-15)


def test_seed_table_averages_and_the_expectation():
    seeds = (0, 1, 2, 3)
    table = eg.seed_table(4, seeds=seeds)
    assert list(table.index) == [2, 1]
    own = 0.1 / math.sqrt(1.01)
    for G in (2, 1):
        for kind, share in (("independent", 1.0), ("correlated", own)):
            assert table.loc[G, f"predicted, {kind}"] == round(share * math.sqrt(1 - G / 4), 4)
            weights = np.mean([_numpy_weight_error(4, G, kind, k) for k in seeds])
            outputs = np.mean([_numpy_error(4, G, kind, k) for k in seeds])
            assert table.loc[G, f"weights, {kind}"] == pytest.approx(weights, abs=6e-5)
            assert table.loc[G, f"outputs, {kind}"] == pytest.approx(outputs, abs=6e-5)
    # 64 draws: the mean weight error is within 0.01 of its expectation. Seeded, so it
    # cannot flake; the standard error of these means is at most 0.0014, so 0.01 is over
    # seven of them (a false failure for a fresh draw has probability below 1e-11).
    wide = eg.seed_table(8, seeds=tuple(range(64)))
    for kind in vg.KINDS:
        assert (wide[f"weights, {kind}"] - wide[f"predicted, {kind}"]).abs().max() < 0.01
    with pytest.raises(ValueError, match="seeds must hold at least one seed"):
        eg.seed_table(4, seeds=())


def test_savings_table_against_closed_forms():
    table = eg.savings_table([LLAMA3_70B, GEMMA3_27B, LLAMA3_8B])
    for spec in (LLAMA3_70B, GEMMA3_27B, LLAMA3_8B):
        row = table.loc[spec.name]
        H, G, d, dh, n_l = (spec.n_heads, spec.n_kv_heads, spec.d_model, spec.d_head,
                            spec.n_layers)
        assert (row["H"], row["G"], row["s = H/G"]) == (H, G, H // G)
        assert row["W_K + W_V per layer, MHA"] == 2 * d * H * dh
        assert row["W_K + W_V per layer, GQA"] == 2 * d * G * dh
        assert row["cache bytes per token, MHA"] == 2 * n_l * H * dh * 2
        assert row["cache bytes per token, GQA"] == 2 * n_l * G * dh * 2
        assert row["saved"] == f"{H // G}x"
    assert table.loc["Llama 3 70B", "cache bytes per token, GQA"] == 327_680
    with pytest.raises(TypeError, match="ModelSpec"):
        eg.savings_table(["Llama"])


def test_explorer_settings_are_exactly_the_divisors():
    expected = [(h, g) for h in vg.HEAD_COUNTS for g in range(1, h + 1)
                if h % g == 0 and g in vg.KV_HEAD_COUNTS]
    assert list(eg.EXPLORER_SETTINGS) == expected
    assert (12, 8) not in eg.EXPLORER_SETTINGS and (8, 8) in eg.EXPLORER_SETTINGS


def test_explorer_table():
    table = eg.explorer_table()
    assert len(table) == len(eg.EXPLORER_SETTINGS)
    for H, G in eg.EXPLORER_SETTINGS:
        row = table.loc[(H, G)]
        assert row["s"] == H // G
        assert row["cache per token and layer"] == 2 * G * vg.D_HEAD
        assert row["of MHA's"] == f"1/{H // G}"
        readers = [h for h in range(H) if h // (H // G) == 0]
        assert row["query heads on KV head 0"] == (
            "0" if len(readers) == 1 else f"{readers[0]}-{readers[-1]}")
        for kind in vg.KINDS:
            assert row[f"error, {kind}"] == round(vg.conversion_error(H, G, kind), 4)


# ---------------------------------------------------------------------------------------
# figures


def test_group_map_figure_labels_the_map():
    fig = vg.group_map_figure(8, (8, 4, 2, 1))
    assert isinstance(fig, go.Figure) and len(fig.data) == 1
    heat = fig.data[0]
    assert isinstance(heat, go.Heatmap)
    for row, G in zip(heat.text, (8, 4, 2, 1), strict=True):
        assert [int(t) for t in row] == [h // (8 // G) for h in range(8)]
    assert list(heat.y) == ["MHA, G = 8, s = 1", "GQA, G = 4, s = 2", "GQA, G = 2, s = 4",
                            "MQA, G = 1, s = 8"]
    with pytest.raises(ValueError, match="divisible"):
        vg.group_map_figure(8, (3,))


@pytest.mark.parametrize("H,G", eg.EXPLORER_SETTINGS)
def test_groups_figure_shows_map_cache_and_errors(H, G):
    fig = vg.groups_figure(n_heads=H, n_kv_heads=G)
    heat, cache, errors = fig.data
    assert isinstance(heat, go.Heatmap) and isinstance(cache, go.Bar)
    z = np.array(heat.z)
    assert z.shape == (G, H)
    for h in range(H):
        assert list(np.flatnonzero(z[:, h])) == [h // (H // G)]  # one KV head per query head
    assert list(cache.y) == [2 * H * vg.D_HEAD, 2 * G * vg.D_HEAD, 2 * vg.D_HEAD]
    expected = [round(_numpy_error(H, G, kind), 4) for kind in vg.KINDS]
    assert list(errors.y) == pytest.approx(expected, abs=1e-4)
    title = fig.layout.title.text
    assert f"s = {H // G}" in title and f"{2 * G * vg.D_HEAD} numbers" in title
    for e in expected:
        assert f"{e:.4f}" in title


def test_groups_figure_explains_an_invalid_pair():
    fig = vg.groups_figure(n_heads=8, n_kv_heads=3)
    assert "does not divide" in fig.layout.annotations[0].text
    assert "1, 2, 4, 8" in fig.layout.annotations[0].text


def test_twin_offers_every_valid_pair():
    settings = list(eg.EXPLORER_SETTINGS)
    fig = viz.twin(vg.groups_figure, ("n_heads", "n_kv_heads"), settings,
                   active=settings.index((8, 2)))
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [f"{h}, {g}" for h, g in settings]
    assert len(fig.data) == 3 * len(settings)


def test_figures_use_only_the_site_trace_types():
    for fig in (vg.group_map_figure(), vg.groups_figure(), vg.groups_figure(n_kv_heads=3)):
        assert {type(t).__name__ for t in fig.data} <= {"Bar", "Scatter", "Heatmap"}


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: eg.draw_mha(4, "random"), ValueError, "kind"),
        (lambda: vg.conversion_error(8, 3), ValueError, "divisible"),
        (lambda: vg.conversion_error(0, 1), ValueError, "n_heads"),
        (lambda: vg.groups_figure(n_heads=8, n_kv_heads=0), ValueError, "n_kv_heads"),
    ],
)
def test_bad_settings_raise(call, error, words):
    with pytest.raises(error, match=words):
        call()
