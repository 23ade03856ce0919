"""Tests for attnlib.viz.designs (lesson 15): the explorer's curves and markers against the
byte and multiply-add counts written out, what its controls change, and its two forms
(rounded data, trace types the site draws, a twin under 300 KB)."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

import attnlib.viz as viz
from attnlib.viz import designs as vd


def _gpt_oss_gb(n, window=128, n_full=18, n_sliding=18):
    return 2 * 2 * 8 * 64 * (n_full * n + n_sliding * min(n, window)) / 1e9


def _qwen3_next_gmacs(n, n_full=12, n_linear=36):
    per_linear = 4 * 32 * 128 * 128 + 4 * (2 * 16 * 128 + 32 * 128)
    return (n_full * 16 * n * 512 + n_linear * per_linear) / 1e9


def _curve(fig, model, col):
    """The line of ``model`` in panel ``col`` (1: bytes, 2: multiply-adds)."""
    axis = "y" if col == 1 else "y2"
    (trace,) = [t for t in fig.data if t.mode == "lines" and t.name == model
                and t.yaxis == axis]
    return trace


def _markers(fig, col):
    axis = "y" if col == 1 else "y2"
    (trace,) = [t for t in fig.data if t.mode == "markers" and t.yaxis == axis]
    return dict(zip(trace.text, trace.y, strict=True)), trace


def test_curves_are_the_counts_written_out():
    fig = vd.design_cost_figure()
    gpt = _curve(fig, "gpt-oss-120b", 1)
    assert list(gpt.x) == list(vd.CURVE_CONTEXTS)
    for n, y in zip(gpt.x, gpt.y, strict=True):
        assert y == pytest.approx(_gpt_oss_gb(n), rel=5e-4)  # 4 significant digits
    qwen = _curve(fig, "Qwen3-Next-80B-A3B", 2)
    for n, y in zip(qwen.x, qwen.y, strict=True):
        assert y == pytest.approx(_qwen3_next_gmacs(n), rel=5e-4)
    v32 = _curve(fig, "DeepSeek-V3.2", 1)
    assert v32.y[-1] == pytest.approx(2 * 61 * 2**20 * (512 + 64 + 128) / 1e9, rel=5e-4)


def test_markers_sit_at_the_context():
    for context in (1024, 131_072):
        fig = vd.design_cost_figure(context=context)
        for col in (1, 2):
            _, trace = _markers(fig, col)
            assert list(trace.text) == list(vd.MODELS)
            assert set(trace.x) == {context}
        bytes_here, _ = _markers(fig, 1)
        assert bytes_here["gpt-oss-120b"] == pytest.approx(_gpt_oss_gb(context), rel=5e-4)
        assert f"N = {context:,} tokens" in fig.layout.title.text


def test_schedule_moves_the_hybrids_and_leaves_deepseek_v32():
    published = vd.design_cost_figure(schedule="published")
    quarter = vd.design_cost_figure(schedule="1 in 4")
    gpt = _curve(quarter, "gpt-oss-120b", 1)
    for n, y in zip(gpt.x, gpt.y, strict=True):  # 9 full layers, 27 sliding
        assert y == pytest.approx(_gpt_oss_gb(n, n_full=9, n_sliding=27), rel=5e-4)
    assert _curve(quarter, "Qwen3-Next-80B-A3B", 2).y == \
        _curve(published, "Qwen3-Next-80B-A3B", 2).y  # its published schedule is 1 in 4
    assert _curve(quarter, "DeepSeek-V3.2", 1).y == _curve(published, "DeepSeek-V3.2", 1).y
    assert "DeepSeek-V3.2 as published" in quarter.layout.title.text
    assert "as published" not in published.layout.title.text
    none = vd.design_cost_figure(schedule="none")
    qwen = _curve(none, "Qwen3-Next-80B-A3B", 1).y  # only linear layers: a constant state
    assert len(set(qwen)) == 1
    assert _curve(none, "gpt-oss-120b", 1).y[-1] == pytest.approx(
        _gpt_oss_gb(2**20, n_full=0, n_sliding=36), rel=5e-4)
    everything = vd.design_cost_figure(schedule="all")
    assert _curve(everything, "Qwen3-Next-80B-A3B", 2).y[-1] == pytest.approx(
        _qwen3_next_gmacs(2**20, n_full=48, n_linear=0), rel=5e-4)


def test_window_widens_gpt_oss_and_deepseek_v4_only():
    narrow, wide = vd.design_cost_figure(window=128), vd.design_cost_figure(window=4096)
    gpt = _curve(wide, "gpt-oss-120b", 1)
    for n, y in zip(gpt.x, gpt.y, strict=True):
        assert y == pytest.approx(_gpt_oss_gb(n, window=4096), rel=5e-4)
    assert _curve(wide, "DeepSeek-V4-Flash", 1).y[-1] > _curve(narrow, "DeepSeek-V4-Flash",
                                                                1).y[-1]
    for model in ("Qwen3-Next-80B-A3B", "Kimi Linear 48B-A3B", "DeepSeek-V3.2"):
        assert _curve(wide, model, 2).y == _curve(narrow, model, 2).y


def test_design_spec_applies_the_controls():
    spec = vd.design_spec("DeepSeek-V4-Flash", "1 in 4", 512)
    assert spec.window == 512 and spec.schedule.count("csa") == 11  # 41 layers: 11 in 4
    assert vd.design_spec("Qwen3-Next-80B-A3B", window=512).window is None


def test_figure_is_rounded_and_draws_only_scatter():
    fig = vd.design_cost_figure(context=4096)
    assert {type(t) for t in fig.data} == {go.Scatter}
    for trace in fig.data:
        assert all(float(f"{y:.4g}") == y for y in trace.y)
    assert len(fig.data) == 2 * len(vd.MODELS) + 2
    assert vd.design_cost_figure().to_json() == vd.design_cost_figure().to_json()


@pytest.mark.slow
def test_twin_is_small_and_has_every_setting():
    fig = viz.twin(vd.design_cost_figure, ("context", "schedule", "window"),
                   list(vd.TWIN_SETTINGS))
    assert {t.type for t in fig.data} == {"scatter"}
    assert len(json.dumps(fig.to_plotly_json())) < 300_000
    assert len(fig.layout.sliders[0].steps) == len(vd.TWIN_SETTINGS)
    params = fig.layout.meta["twin"]["params"]
    assert [p["name"] for p in params] == ["context", "schedule", "window"]
    assert all(len(text) <= 20 for p in params for text in p["text"])


def test_explorer_has_the_three_controls():
    box = viz.explorer(vd.design_cost_figure, context=list(vd.CONTEXTS),
                       schedule=list(vd.SCHEDULES), window=list(vd.WINDOWS),
                       start={"context": 131_072})
    controls = box.children[0].children
    assert [c.description for c in controls] == ["context", "schedule", "window"]
    assert controls[0].value == 131_072


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: vd.design_cost_figure(context=0), ValueError, r"context .*got 0"),
        (lambda: vd.design_cost_figure(schedule="1 in 3"), ValueError,
         r"schedule must be one of"),
        (lambda: vd.design_cost_figure(window=-1), ValueError, r"window .*got -1"),
        (lambda: vd.design_cost_figure(models=[]), ValueError,
         r"models must name 1 to 5 designs; got 0"),
        (lambda: vd.design_cost_figure(models=["GPT-5"]), ValueError, r"model must be one of"),
    ],
)
def test_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
