"""Tests for attnlib.viz.softmax (lesson 02): every figure and table against numpy
(softmax, histograms, eigenvalues), finite differences and hand-computed exponentials."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import attnlib.viz as viz
from attnlib.analysis.experiments import softmax as es
from attnlib.viz import softmax as vs


def _draw(n_q: int, n_kv: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The module's documented draw: queries then keys, float64, one seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(n_q, d, generator=gen, dtype=torch.float64).numpy()
    K = torch.randn(n_kv, d, generator=gen, dtype=torch.float64).numpy()
    return Q, K


def _softmax(S: np.ndarray) -> np.ndarray:
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


# ---------------------------------------------------------------------------------------
# the Jacobian


def test_softmax_jacobian_matches_finite_differences(gen):
    s = torch.randn(5, generator=gen, dtype=torch.float64).numpy()
    h = 1e-6
    fd = np.stack([(_softmax(s + h * e) - _softmax(s - h * e)) / (2 * h) for e in np.eye(5)],
                  axis=1)  # column l: d p / d s_l
    J = es.softmax_jacobian(torch.from_numpy(_softmax(s))).numpy()
    np.testing.assert_allclose(J, fd, atol=1e-8)
    np.testing.assert_allclose(J @ np.ones(5), 0, atol=1e-12)  # J 1 = 0
    assert np.linalg.eigvalsh(J).min() > -1e-12  # positive semi-definite


def test_softmax_jacobian_batches():
    P = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    np.testing.assert_allclose(es.softmax_jacobian(P).numpy(),
                               [[[0.25, -0.25], [-0.25, 0.25]], [[0, 0], [0, 0]]])


# ---------------------------------------------------------------------------------------
# the spread of the logits


@pytest.mark.parametrize("d", [2, 16, 128])
def test_logit_histogram_matches_numpy(d):
    n, bins = 3000, 40
    fig = vs.logit_histogram_figure(d, n_pairs=n, seed=2, bins=bins)
    q, k = _draw(n, n, d, 2)
    dots = (q * k).sum(axis=1)
    bar_raw, curve_raw, bar_scaled, curve_scaled = fig.data
    panels = ((bar_raw, dots, 4.5 * math.sqrt(d)), (bar_scaled, dots / math.sqrt(d), 4.5))
    for bar, x, half in panels:
        counts, edges = np.histogram(x, bins=bins, range=(-half, half))
        np.testing.assert_allclose(bar.x, (edges[:-1] + edges[1:]) / 2, atol=1e-6)
        np.testing.assert_allclose(bar.y, counts / (n * 2 * half / bins), atol=1e-5)
    # the reference curves are the normal densities N(0, d) and N(0, 1)
    t = np.array(curve_raw.x)
    np.testing.assert_allclose(curve_raw.y, np.exp(-t**2 / (2 * d)) / np.sqrt(2 * np.pi * d),
                               atol=1e-6)
    t = np.array(curve_scaled.x)
    np.testing.assert_allclose(curve_scaled.y, np.exp(-t**2 / 2) / np.sqrt(2 * np.pi), atol=1e-6)
    notes = [a.text for a in fig.layout.annotations if a.text.startswith("std")]
    assert notes == [f"std = {dots.std(ddof=1):.2f}<br>√d_QK = {math.sqrt(d):.2f}",
                     f"std = {dots.std(ddof=1) / math.sqrt(d):.2f}<br>theory: 1"]
    assert tuple(fig.layout.xaxis.range) == pytest.approx((-4.5 * math.sqrt(d), 4.5 * math.sqrt(d)))
    assert tuple(fig.layout.xaxis2.range) == pytest.approx((-4.5, 4.5))


def test_variance_table_matches_numpy_and_the_closed_form():
    table = es.variance_table((4, 64), n_pairs=4000, seed=1)
    for d in (4, 64):
        q, k = _draw(4000, 4000, d, 1)
        dots = (q * k).sum(axis=1)
        assert table.loc[d, "var <q, k>"] == round(dots.var(ddof=1), 1)
        assert table.loc[d, "std <q, k>"] == round(dots.std(ddof=1), 3)
        assert table.loc[d, "sqrt(d_QK)"] == round(math.sqrt(d), 3)
        assert table.loc[d, "var <q, k>"] == pytest.approx(d, rel=0.1)  # Var <q, k> = d


def test_logit_histogram_rejects_bad_settings():
    with pytest.raises(ValueError, match=re.escape("n_pairs must be >= 2")):
        vs.logit_histogram_figure(8, n_pairs=1)
    with pytest.raises(TypeError, match="d_qk must be a positive int"):
        vs.logit_histogram_figure(8.0)


# ---------------------------------------------------------------------------------------
# saturation


def _numpy_saturation(d: int, n_kv: int, n_q: int, seed: int) -> dict:
    Q, K = _draw(n_q, n_kv, d, seed)
    out = {}
    for label, scale in (("with 1/√d_QK", 1 / math.sqrt(d)), ("without 1/√d_QK", 1.0)):
        P = _softmax(scale * Q @ K.T)
        gains = [np.linalg.eigvalsh(np.diag(p) - np.outer(p, p))[-1] for p in P]
        out[label] = (P.max(axis=1).mean(), np.median(gains))
    return out


def test_saturation_table_matches_numpy():
    dims = (4, 256)
    table = es.saturation_table(dims, n_kv=8, n_queries=201, seed=3)
    for d in dims:
        for label, (largest, gain) in _numpy_saturation(d, 8, 201, 3).items():
            assert table.loc[d, (label, "mean largest weight")] == round(largest, 3)
            assert float(table.loc[d, (label, "median gain ||J||")]) == pytest.approx(gain,
                                                                                  rel=2e-3)
    # without the scaling, wider vectors saturate: the largest weight grows, the gain collapses
    assert table.loc[256, ("without 1/√d_QK", "mean largest weight")] > 0.9
    assert float(table.loc[256, ("without 1/√d_QK", "median gain ||J||")]) < 0.01


def test_saturation_figure_plots_the_table():
    dims = (2, 64, 1024)
    fig = vs.saturation_figure(dims, n_kv=8, n_queries=101, seed=0)
    assert len(fig.data) == 4
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis2.type == "log"
    ref = {d: _numpy_saturation(d, 8, 101, 0) for d in dims}
    by_name = {t.name: t for t in fig.data}
    for label in ("with 1/√d_QK", "without 1/√d_QK"):
        assert list(by_name[f"mean largest weight, {label}"].x) == list(dims)
        # 3 significant digits: a gain of 1e-7 stays on the log axis instead of becoming 0
        np.testing.assert_allclose(by_name[f"mean largest weight, {label}"].y,
                                   [ref[d][label][0] for d in dims], rtol=5e-3)
        np.testing.assert_allclose(by_name[f"median gain ||J||, {label}"].y,
                                   [ref[d][label][1] for d in dims], rtol=5e-3)
    assert min(by_name["median gain ||J||, without 1/√d_QK"].y) > 0
    uniform = [s for s in fig.layout.shapes if s.y0 == s.y1]
    assert [s.y0 for s in uniform] == [pytest.approx(1 / 8)]
    # colour, dash and marker symbol all differ between the two scalings
    a = by_name["mean largest weight, with 1/√d_QK"]
    b = by_name["mean largest weight, without 1/√d_QK"]
    assert a.line.color != b.line.color and a.line.dash != b.line.dash
    assert a.marker.symbol != b.marker.symbol


# ---------------------------------------------------------------------------------------
# temperature: the worked example


def test_temperature_table_is_the_worked_example_by_hand():
    q = torch.tensor([[1.0, 0.0]])
    K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    V = torch.tensor([[10.0], [20.0], [30.0]])
    table = es.temperature_table(q, K, V, [0.05, 1.0, 100.0])
    for tau in (1.0, 100.0):
        s = 1 / (tau * math.sqrt(2))
        e = [math.exp(s), 1.0, math.exp(-s)]
        p = [x / sum(e) for x in e]
        row = table.loc[tau]
        assert row["scale"] == round(s, 4)
        assert [row["p_0"], row["p_1"], row["p_2"]] == [round(x, 4) for x in p]
        assert row["y"] == pytest.approx(10 * p[0] + 20 * p[1] + 30 * p[2], abs=1e-4)
        assert row["entropy (nats)"] == round(-sum(x * math.log(x) for x in p), 4)
    assert [table.loc[1.0, c] for c in ("p_0", "p_1", "p_2")] == [0.576, 0.284, 0.14]
    assert table.loc[0.05, "y"] == 10.0  # a cold softmax is a hard lookup


def test_temperature_table_rejects_bad_input():
    q, K, V = torch.ones(1, 2), torch.ones(3, 2), torch.ones(3, 1)
    with pytest.raises(ValueError, match=re.escape("Q must hold one query")):
        es.temperature_table(torch.ones(2, 2), K, V, [1.0])
    with pytest.raises(ValueError, match=re.escape("V must hold scalar values")):
        es.temperature_table(q, K, torch.ones(3, 2), [1.0])
    with pytest.raises(ValueError, match="taus"):
        es.temperature_table(q, K, V, [0.0])


# ---------------------------------------------------------------------------------------
# the explorer


@pytest.mark.parametrize(("tau", "d"), [(1.0, 128), (0.1, 2), (10.0, 512), (3.0, 1024)])
def test_weight_row_figure_matches_numpy(tau, d):
    fig = vs.weight_row_figure(tau=tau, d_qk=d, n_kv=7, seed=5)
    q_full, K_full = _draw(1, 7, vs.D_MAX, 5)
    q, K = q_full[:, :d], K_full[:, :d]  # the same vectors, first d coordinates
    scaled = _softmax(q @ K.T / (tau * math.sqrt(d)))[0]
    unscaled = _softmax(q @ K.T / tau)[0]
    left, right = fig.data
    assert list(left.x) == list(range(7))
    np.testing.assert_allclose(left.y, np.round(scaled, 4), atol=1e-12)
    np.testing.assert_allclose(right.y, np.round(unscaled, 4), atol=1e-12)
    titles = [a.text for a in fig.layout.annotations if "scale =" in a.text]
    assert titles[0].startswith(f"with 1/√d_QK: scale = {1 / (tau * math.sqrt(d)):.4f}<br>")
    assert titles[1].startswith(f"without 1/√d_QK: scale = {1 / tau:.4f}<br>")
    for title, p in zip(titles, (scaled, unscaled), strict=True):
        assert f"largest weight = {p.max():.3f} (dashed)" in title
        assert f"entropy H = {_entropy(p):.3f} nats" in title
    assert f"every weight 1/7, entropy ln 7 = {math.log(7):.3f} nats" in fig.layout.title.text
    largest = sorted(s.y0 for s in fig.layout.shapes if s.line.dash == "dash")
    assert largest == pytest.approx(sorted([round(scaled.max(), 4), round(unscaled.max(), 4)]))
    assert f"τ = {tau:g}, d_QK = {d}" in fig.layout.title.text


def test_weight_row_extremes_are_uniform_and_one_hot():
    hot = vs.weight_row_figure(tau=0.001, d_qk=64, n_kv=5)
    assert sorted(hot.data[0].y) == [0, 0, 0, 0, 1]
    cold = vs.weight_row_figure(tau=1e4, d_qk=64, n_kv=5)
    np.testing.assert_allclose(cold.data[0].y, 0.2, atol=1e-4)


def test_weight_row_twin_offers_every_combination_under_one_megabyte():
    combos = [(t, d) for t in vs.TEMPERATURES for d in vs.WIDTHS]
    fig = viz.twin(vs.weight_row_figure, ("tau", "d_qk"), combos,
                   active=combos.index((1.0, 128)), labels={"tau": "τ", "d_qk": "d_QK"})
    assert len(fig.layout.sliders[0].steps) == len(combos) == 25
    assert len(fig.data) == 2 * len(combos)
    assert len(fig.to_json().encode()) < 1_000_000


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"tau": 0}, ValueError, "tau must be a finite positive number"),
        ({"d_qk": vs.D_MAX + 1}, ValueError, f"d_qk must be at most D_MAX = {vs.D_MAX}"),
        ({"n_kv": 0}, ValueError, "n_kv must be a positive int"),
        ({"tau": "hot"}, TypeError, "tau must be a positive number"),
    ],
)
def test_weight_row_figure_rejects_bad_settings(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        vs.weight_row_figure(**kwargs)


def test_softmax_module_is_reachable_from_attnlib_viz():
    import attnlib

    assert attnlib.viz.softmax is vs


def test_weight_row_table_matches_numpy():
    settings = [(1.0, 2), (1.0, 512), (0.3, 128)]
    table = es.weight_row_table(settings, n_kv=6, seed=4)
    q_full, K_full = _draw(1, 6, vs.D_MAX, 4)
    for tau, d in settings:
        S = q_full[:, :d] @ K_full[:, :d].T
        for label, p in (("with 1/√d_QK", _softmax(S / (tau * math.sqrt(d)))[0]),
                         ("without 1/√d_QK", _softmax(S / tau)[0])):
            assert table.loc[(tau, d), (label, "largest weight")] == round(p.max(), 3)
            assert table.loc[(tau, d), (label, "entropy (nats)")] == round(_entropy(p), 3)
    assert list(table.index.names) == ["tau", "d_QK"]
