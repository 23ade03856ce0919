"""Tests for attnlib.viz.masks (lesson 04): masks against their set definitions written as
loops, weights against a numpy softmax, residual variances against the residual equations
written with PyTorch's own RMSNorm, and parameter counts against closed forms."""

from __future__ import annotations

import math
import re

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
import torch.nn.functional as F

import attnlib
import attnlib.viz as viz
from attnlib.analysis.experiments import masks as em
from attnlib.viz import masks as vm


def _visible(mask: str, n_q: int, n_kv: int, window: int, length: int, align: str) -> np.ndarray:
    """The mask by its set definition, one (query, key) pair at a time."""
    out = np.zeros((n_q, n_kv), dtype=bool)
    length = min(length, n_kv)
    for i in range(n_q):
        pos = i + n_kv - n_q if align == "bottom-right" else i  # the query's position
        for j in range(n_kv):
            ok = True
            if mask in ("causal", "causal + padding"):
                ok &= j <= pos
            if mask == "sliding window":
                ok &= pos - window < j <= pos
            if mask in ("padding", "causal + padding"):
                ok &= j < length
            out[i, j] = ok
    return out


def _weights(mask: str, n_q: int, n_kv: int, window: int, length: int, align: str,
             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The documented draw, masked softmax in numpy; rows with no key are zeros."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(em.N_MAX, em.D_QK, generator=gen, dtype=torch.float64).numpy()
    K = torch.randn(em.N_MAX, em.D_QK, generator=gen, dtype=torch.float64).numpy()
    start = max(n_kv - n_q, 0)
    S = Q[start:start + n_q] @ K[:n_kv].T / math.sqrt(em.D_QK)
    allowed = _visible(mask, n_q, n_kv, window, length, align)
    P = np.zeros_like(S)
    for i in range(n_q):
        if allowed[i].any():
            e = np.where(allowed[i], np.exp(S[i] - S[i][allowed[i]].max()), 0.0)
            P[i] = e / e.sum()
    return allowed, P


SETTINGS = [
    (mask, n_q, n_kv, window, length, align)
    for mask in em.MASKS for align in em.ALIGNMENTS
    for n_q, n_kv in ((1, 1), (3, 3), (2, 6), (6, 4), (8, 8))
    for window, length in ((1, 0), (3, 4), (8, 8))
]


# ---------------------------------------------------------------------------------------
# masks


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s)))
def test_mask_for_matches_the_set_definitions(setting):
    mask, n_q, n_kv, window, length, align = setting
    got = em.mask_for(mask, n_q, n_kv, window=window, length=length, align=align)
    assert got.dtype == torch.bool and got.shape == (n_q, n_kv)
    np.testing.assert_array_equal(got.numpy(), _visible(*setting))


def test_top_left_is_sdpa_is_causal():
    gen = torch.Generator().manual_seed(3)
    Q, K, V = (torch.randn(n, 4, generator=gen) for n in (2, 6, 6))
    mask = em.mask_for("causal", 2, 6, align="top-left")
    torch.testing.assert_close(
        F.scaled_dot_product_attention(Q, K, V, attn_mask=mask),
        F.scaled_dot_product_attention(Q, K, V, is_causal=True))


def test_length_defaults_to_no_padding_and_is_clipped():
    np.testing.assert_array_equal(em.mask_for("padding", 2, 3).numpy(), np.ones((2, 3), bool))
    np.testing.assert_array_equal(em.mask_for("padding", 2, 3, length=9).numpy(),
                                  np.ones((2, 3), bool))


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"mask": "diagonal"}, ValueError, "mask"),
        ({"align": "centre"}, ValueError, "align"),
        ({"n_q": 0}, ValueError, "n_q"),
        ({"window": 0}, ValueError, "window"),
        ({"length": -1}, ValueError, "length"),
    ],
)
def test_mask_for_rejects_bad_settings(kwargs, error, words):
    args = {"mask": "causal", "n_q": 2, "n_kv": 3, **kwargs}
    mask, n_q, n_kv = args.pop("mask"), args.pop("n_q"), args.pop("n_kv")
    with pytest.raises(error, match=words):
        em.mask_for(mask, n_q, n_kv, **args)


# ---------------------------------------------------------------------------------------
# the mask builder figure and table


@pytest.mark.parametrize("setting", [
    *em.MASK_SETTINGS,
    ("none", 3, 5, 2, 5, "bottom-right"), ("sliding window", 4, 4, 1, 4, "top-left"),
    ("causal + padding", 5, 7, 3, 0, "bottom-right"),
], ids=lambda s: "-".join(map(str, s)))
def test_mask_builder_figure_matches_numpy(setting):
    mask, n_q, n_kv, window, length, align = setting
    fig = vm.mask_builder_figure(mask, n_q, n_kv, window, length, align)
    allowed, P = _weights(*setting)
    mask_trace, weight_trace = fig.data
    assert isinstance(mask_trace, go.Heatmap) and isinstance(weight_trace, go.Heatmap)
    np.testing.assert_array_equal(np.array(mask_trace.z), allowed.astype(int))
    z = np.array([[np.nan if v is None else v for v in row] for row in weight_trace.z])
    assert z.shape == (n_q, n_kv)
    np.testing.assert_array_equal(np.isnan(z), ~allowed)  # masked cells are blank
    np.testing.assert_allclose(np.nan_to_num(z), P, atol=5e-5)
    for row in weight_trace.z:  # rounded to 4 decimals
        assert all(v is None or round(v, 4) == v for v in row)
    # the annotated quantities: keys per query, row sums, last query's keys, empty rows
    counts = [int(c) for c in allowed.sum(axis=1)]
    assert list(fig.layout.yaxis.ticktext) == [
        f"q{i}: {c} key{'s' * (c != 1)}" for i, c in enumerate(counts)]
    sums = [t for t in fig.layout.yaxis2.ticktext]
    for i, text in enumerate(sums):
        assert text == ("Σ = 0: zero output" if counts[i] == 0 else f"Σ = {P[i].sum():.2f}")
    keys = np.flatnonzero(allowed[-1])
    seen = "none" if keys.size == 0 else (
        str(keys[0]) if keys.size == 1 else f"{keys[0]}-{keys[-1]}")
    title = fig.layout.title.text
    assert f"last query sees keys {seen};" in title
    assert f"rows with no key: {counts.count(0)}" in title


def test_mask_builder_rejects_sizes_beyond_the_draw():
    with pytest.raises(ValueError, match="n_kv must be at most N_MAX"):
        vm.mask_builder_figure(n_kv=em.N_MAX + 1)


def test_mask_table_matches_the_definitions():
    table = em.mask_table()
    assert len(table) == len(em.MASK_SETTINGS)
    for (mask, n_q, n_kv, window, length, align), (_, row) in zip(
            em.MASK_SETTINGS, table.iterrows(), strict=True):
        allowed, P = _weights(mask, n_q, n_kv, window, length, align)
        assert row["allowed pairs"] == allowed.sum()
        assert row["keys per query"] == ", ".join(str(c) for c in allowed.sum(axis=1))
        assert row["rows with no key"] == int((allowed.sum(axis=1) == 0).sum())
        assert row["its largest weight"] == pytest.approx(P[-1].max(), abs=5e-4)
    # the lesson's first question: decoding two tokens against six keys
    decode = table.loc[("causal", 2, 6, "-", "-", "bottom-right")]
    assert decode["allowed pairs"] == 5 + 6 and decode["last query sees"] == "0-5"
    assert table.loc[("causal", 2, 6, "-", "-", "top-left"), "allowed pairs"] == 1 + 2


def test_mask_builder_twin_offers_every_setting_under_one_megabyte():
    names = ("mask", "n_q", "n_kv", "window", "length", "align")
    fig = viz.twin(vm.mask_builder_figure, names, list(em.MASK_SETTINGS))
    assert len(fig.layout.sliders[0].steps) == len(em.MASK_SETTINGS)
    assert len(fig.data) == 2 * len(em.MASK_SETTINGS)
    assert len(fig.to_json()) < 1_000_000


def test_masks_module_is_reachable_from_attnlib_viz():
    assert attnlib.viz.masks is vm and "masks" in viz.__all__


# ---------------------------------------------------------------------------------------
# norm placement


def _blocks(norm: str, n_layers: int, d: int, heads: int, seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [attnlib.TransformerBlock(d, heads, norm=norm, dtype=torch.float64)
                for _ in range(n_layers)]


def _by_equations(norm: str, n_layers: int = 3, d: int = 16, heads: int = 2, n: int = 5,
                  batch: int = 2, scale: float = 1.0, seed: int = 4) -> list[float]:
    """The residual equations of each placement, with F.rms_norm, on the documented draw."""
    blocks = _blocks(norm, n_layers, d, heads, seed)

    def rms(t, g):
        return F.rms_norm(t, (d,), g, eps=1e-6)

    x = torch.randn(batch, n, d, generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64)
    out = [x.var().item()]
    with torch.no_grad():
        for b in blocks:
            for name, W in b.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("W_"):
                    W.mul_(scale)

            def attn(t, b=b):
                return b.attn(t, causal=True)

            if norm == "pre":
                x = x + attn(rms(x, b.attn_norm.g))
                x = x + b.ffn(rms(x, b.ffn_norm.g))
            elif norm == "post":
                x = rms(x + attn(x), b.attn_norm.g)
                x = rms(x + b.ffn(x), b.ffn_norm.g)
            else:
                x = x + rms(attn(rms(x, b.attn_norm.g)), b.attn_out_norm.g)
                x = x + rms(b.ffn(rms(x, b.ffn_norm.g)), b.ffn_out_norm.g)
            out.append(x.var().item())
    return out


@pytest.mark.parametrize("norm", em.PLACEMENTS)
@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_residual_variances_follow_the_residual_equations(norm, scale):
    got = vm.residual_variances(norm, n_layers=3, d_model=16, n_heads=2, n_tokens=5, batch=2,
                                weight_scale=scale, seed=4)
    np.testing.assert_allclose(got, _by_equations(norm, scale=scale), rtol=1e-4)


def test_residual_variances_leave_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    vm.residual_variances("pre", n_layers=2, d_model=8, n_heads=2, seed=11)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_post_ln_ends_each_block_at_unit_scale_and_peri_ln_adds_unit_rows():
    post = vm.residual_variances("post", n_layers=4, d_model=32, n_heads=2, n_tokens=8)
    # each block ends in RMSNorm with gain 1: every row has mean square 1, so var <= 1
    assert all(0.9 < v <= 1.0 + 1e-3 for v in post[1:])
    peri = vm.residual_variances("peri", n_layers=12, d_model=32, n_heads=2, n_tokens=8)
    # two sublayers per block, each adding a row of mean square 1: about 1 + 2 L
    assert abs(peri[-1] - (peri[0] + 2 * 12)) < 0.15 * (peri[0] + 2 * 12)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"norm": "sandwich"}, "norm"), ({"weight_scale": 0.0}, "weight_scale"),
    ({"weight_scale": True}, "weight_scale"), ({"n_layers": 0}, "n_layers"),
])
def test_residual_variances_reject_bad_settings(kwargs, words):
    args = {"norm": "pre", "n_layers": 2, **kwargs}
    norm = args.pop("norm")
    with pytest.raises(ValueError, match=words):
        vm.residual_variances(norm, **args)


def test_norm_variance_tables_and_figure_agree_with_residual_variances():
    table = em.norm_variance_table((0, 6, 12), n_layers=12)
    scales = em.weight_scale_table((1.0, 2.0), n_layers=12)
    fig = vm.norm_variance_figure(n_layers=12, scales=(1.0, 2.0))
    assert len(fig.data) == 6
    for k, norm in enumerate(em.PLACEMENTS):
        v = vm.residual_variances(norm, n_layers=12)
        assert list(table[f"{norm}-LN"]) == [float(f"{v[d]:.3g}") for d in (0, 6, 12)]
        depth_trace, scale_trace = fig.data[2 * k], fig.data[2 * k + 1]
        assert list(depth_trace.x) == list(range(13))
        assert list(depth_trace.y) == [float(f"{x:.3g}") for x in v]  # 3 significant digits
        finals = [vm.residual_variances(norm, n_layers=12, weight_scale=c)[-1] for c in (1, 2)]
        assert list(scale_trace.y) == [float(f"{f:.3g}") for f in finals]
        assert list(scales[f"{norm}-LN"]) == [float(f"{f:.3g}") for f in finals]
        assert any(a.text == f"{norm}-LN: {v[-1]:.3g}" for a in fig.layout.annotations)
    assert re.search(r"12 decoder blocks", fig.layout.title.text)
    with pytest.raises(ValueError, match="depths"):
        em.norm_variance_table((13,), n_layers=12)


# ---------------------------------------------------------------------------------------
# feed-forward parameter counts


@pytest.mark.parametrize("d", [6, 64, 96])
def test_feed_forward_table_matches_the_closed_forms(d):
    table = em.feed_forward_table(d)
    matched = round(8 * d / 3)
    assert table["d_ff"].tolist() == [4 * d, 4 * d, 4 * d, matched]
    assert table["matrices"].tolist() == [2, 2, 3, 3]
    assert table["parameters"].tolist() == [8 * d * d, 8 * d * d, 12 * d * d, 3 * d * matched]
    assert table["parameters / d²"].tolist() == [8.0, 8.0, 12.0, round(3 * matched / d, 3)]
