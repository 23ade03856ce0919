"""Tests for attnlib.viz.rope (lesson 08): wavelengths against 2 pi b^(2i/d) written out,
scores against rotations built from explicit 2 x 2 blocks, and the figures' annotated
numbers against those references."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib
import attnlib.viz as viz
from attnlib.analysis.experiments import rope as er
from attnlib.viz import rope as vr


def _draw(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The documented draw: the query, then the key as the query plus noise."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(vr.D_EXPLORE, generator=gen, dtype=torch.float64)
    k = q + er.KEY_NOISE * torch.randn(vr.D_EXPLORE, generator=gen, dtype=torch.float64)
    return q.numpy(), k.numpy()


def _scores(base: float, seed: int = 0) -> np.ndarray:
    """s(D) = <q R_D, k> with half-split pairs (i, i + d/2) turned one at a time."""
    q, k = _draw(seed)
    d = vr.D_EXPLORE
    out = []
    for offset in range(vr.OFFSET_MAX + 1):
        rotated = q.copy()
        for i in range(d // 2):
            a = offset * base ** (-2 * i / d)
            x, y = q[i], q[i + d // 2]
            rotated[i], rotated[i + d // 2] = x * math.cos(a) - y * math.sin(a), \
                x * math.sin(a) + y * math.cos(a)
        out.append(float(rotated @ k))
    return np.array(out)


@pytest.mark.parametrize("base", [100.0, 10_000.0, 500_000.0, 7.5])
@pytest.mark.parametrize("d", [2, 8, 128])
def test_wavelengths_are_two_pi_b_to_the_2i_over_d(d, base):
    expected = [2 * math.pi * base ** (2 * i / d) for i in range(d // 2)]
    np.testing.assert_allclose(vr.wavelengths(d, base).numpy(), expected, rtol=1e-12)


def test_wavelength_table_counts_slow_pairs():
    table = er.wavelength_table(128, (10_000.0, 500_000.0), context=131_072)
    column = "pairs with wavelength > 131,072"
    for base in (10_000.0, 500_000.0):
        lam = [2 * math.pi * base ** (2 * i / 128) for i in range(64)]
        row = table.loc[f"{base:,.0f}"]
        assert row[column] == sum(1 for v in lam if v > 131_072)
        assert row["shortest wavelength"] == pytest.approx(2 * math.pi, abs=0.005)
        assert row["longest wavelength"] == pytest.approx(lam[-1], abs=0.005)
        assert row["θ_63"] == f"{base ** (-126 / 128):.3e}"
    assert list(table[column]) == [0, 15]


def test_wavelength_figure_annotates_the_longest_wavelength():
    fig = vr.wavelength_figure(16, (10_000.0, 500_000.0, 100.0), context=4096)
    assert fig.layout.yaxis.type == "log"
    curves = [t for t in fig.data if t.name.startswith("b = ")]
    assert [t.name for t in curves] == ["b = 10,000", "b = 500,000", "b = 100"]
    for trace, base in zip(curves, (10_000.0, 500_000.0, 100.0), strict=True):
        expected = [2 * math.pi * base ** (2 * i / 16) for i in range(8)]
        np.testing.assert_allclose(trace.y, expected, rtol=1e-6)
        assert any(a.text == f"{expected[-1]:,.0f}" for a in fig.layout.annotations)
    assert fig.data[-1].name == "context of 4,096 positions"
    with pytest.raises(ValueError, match="bases"):
        vr.wavelength_figure(16, ())


@pytest.mark.parametrize("base", vr.BASES)
def test_offset_scores_match_explicit_rotations(base):
    np.testing.assert_allclose(vr.offset_scores(base).numpy(), _scores(base), atol=1e-10)


def test_offset_scores_are_scores_at_any_pair_of_positions():
    q, k = (torch.from_numpy(v)[None] for v in _draw())
    scores = vr.offset_scores(10_000.0)
    for m, n in [(70, 64), (1000, 1000), (5000, 4936)]:
        s = attnlib.apply_rope(q, torch.tensor([m])) @ attnlib.apply_rope(k, torch.tensor([n])).T
        torch.testing.assert_close(s[0, 0], scores[m - n])


@pytest.mark.parametrize("setting", [*er.ROTATION_SETTINGS, (13, 100.0), (0, 500_000.0)])
def test_rotation_figure_matches_the_references(setting):
    offset, base = setting
    fig = vr.rotation_figure(offset, base)
    assert all(isinstance(t, go.Scatter) for t in fig.data)
    rim, hands, tips, labels, curve, level, current = fig.data
    np.testing.assert_allclose(np.hypot(rim.x, rim.y), 1.0, atol=1e-5)  # the unit circle
    angles = [offset * base ** (-2 * i / vr.D_EXPLORE) for i in range(vr.D_EXPLORE // 2)]
    radii = [1 - 0.1 * i for i in range(vr.D_EXPLORE // 2)]
    tips_x = [r * math.cos(a) for r, a in zip(radii, angles, strict=True)]
    tips_y = [r * math.sin(a) for r, a in zip(radii, angles, strict=True)]
    np.testing.assert_allclose(tips.x, tips_x, atol=1e-6)
    np.testing.assert_allclose(tips.y, tips_y, atol=1e-6)
    assert list(tips.text) == [str(i) for i in range(vr.D_EXPLORE // 2)]
    # every hand is named once, outside the rim; labels stand apart from each other
    named = []
    for text in labels.text:
        for part in text.split(", "):
            lo, _, hi = part.partition("-")
            named += list(range(int(lo), int(hi or lo) + 1))
    assert sorted(named) == list(range(vr.D_EXPLORE // 2))
    np.testing.assert_allclose(np.hypot(labels.x, labels.y), vr._LABEL_RADIUS, atol=1e-5)
    spots = sorted(math.atan2(y, x) % (2 * math.pi) for x, y in zip(labels.x, labels.y,
                                                                   strict=True))
    gaps = np.diff([*spots, spots[0] + 2 * math.pi]) if len(spots) > 1 else [math.inf]
    assert min(gaps) >= vr._LABEL_GAP - 1e-9
    assert len(hands.x) == 3 * len(angles)
    s = _scores(base)
    np.testing.assert_allclose(curve.y, s, atol=1e-6)
    assert list(current.x) == [offset] and current.y[0] == pytest.approx(s[offset], abs=1e-6)
    assert list(level.y) == pytest.approx([s[0], s[0]], abs=1e-6)
    title = fig.layout.title.text
    assert f"offset Δ = {offset}, base b = {base:,.0f}: score {s[offset]:.3f}" in title
    assert f"pair 0 has turned {angles[0] / (2 * math.pi):.3f} turns" in title
    assert f"pair 7 {angles[-1]:.4f} rad" in title


def test_rotation_table_matches_the_references():
    table = er.rotation_table()
    assert len(table) == len(er.ROTATION_SETTINGS)
    for (offset, base), (_, row) in zip(er.ROTATION_SETTINGS, table.iterrows(), strict=True):
        s = _scores(base)
        assert row["pair 0, turns"] == pytest.approx(offset / (2 * math.pi), abs=5e-4)
        assert row["pair 7, radians"] == pytest.approx(offset * base ** (-7 / 8), rel=1e-3)
        assert row["score s(Δ)"] == pytest.approx(s[offset], abs=5e-4)
        assert row["s(Δ) − s(0)"] == pytest.approx(s[offset] - s[0], abs=5e-4)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"offset": vr.OFFSET_MAX + 1}, ValueError, "OFFSET_MAX"),
    ({"offset": -1}, ValueError, "offset"),
    ({"offset": 2.5}, TypeError, "offset"),
    ({"base": 0.0}, ValueError, "base"),
    ({"base": "big"}, TypeError, "base"),
])
def test_rotation_figure_rejects_bad_settings(kwargs, error, words):
    with pytest.raises(error, match=words):
        vr.rotation_figure(**kwargs)


def test_rotation_twin_offers_every_setting_under_one_megabyte():
    fig = viz.twin(vr.rotation_figure, ("offset", "base"), list(er.ROTATION_SETTINGS))
    assert len(fig.layout.sliders[0].steps) == len(er.ROTATION_SETTINGS)
    assert len(fig.data) == 7 * len(er.ROTATION_SETTINGS)
    assert len(fig.to_json()) < 1_000_000


def test_rope_module_is_reachable_from_attnlib_viz():
    assert attnlib.viz.rope is vr and "rope" in viz.__all__


def test_wavelength_table_with_llama3_scaling_stretches_the_slow_pairs():
    from attnlib.core.rope import Llama3Scaling

    table = er.wavelength_table(128, (500_000.0, (500_000.0, Llama3Scaling())), context=131_072)
    assert list(table.index) == ["500,000", "500,000, llama3 ×8"]
    assert table["pairs with wavelength > 131,072"].tolist() == [15, 25]
    slowest = 2 * math.pi * 500_000 ** (126 / 128)  # closed form, pair 63
    assert table["longest wavelength"].tolist() == pytest.approx([slowest, 8 * slowest], abs=0.01)
    fig = vr.wavelength_figure(128, (500_000.0, (500_000.0, Llama3Scaling())))
    assert [t.name for t in fig.data] == ["b = 500,000", "b = 500,000, llama3 ×8"]


def test_a_curve_takes_only_the_library_scalings():
    with pytest.raises(TypeError, match="scaling"):
        er.wavelength_table(16, ((10_000.0, "llama3"),))


def test_twin_settings_leave_the_answers_to_be_found():
    offsets = {o for o, b in vr.TWIN_SETTINGS if b == 10_000.0}
    assert set(range(13)) <= offsets  # every offset near pair 0's return at 2 pi
    assert {b for _, b in vr.TWIN_SETTINGS} == set(vr.BASES)
    assert len(vr.TWIN_SETTINGS) == len(set(vr.TWIN_SETTINGS))  # no setting twice
    assert set(er.ROTATION_SETTINGS) <= set(vr.TWIN_SETTINGS)  # the answers are reachable
