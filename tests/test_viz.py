"""Tests for attnlib.viz and attnlib.widgets: the figures hold the right traces and the
right numbers (checked against closed forms and numpy), the static twin's slider really
switches between precomputed settings, nothing calls ``.show()``, and the live explorer's
callback redraws its Output."""

from __future__ import annotations

import math
import re

import ipywidgets
import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib
from attnlib import viz, widgets
from attnlib.tokens import CORPUS, HELD_OUT, CharTokenizer, WordTokenizer


@pytest.fixture(autouse=True)
def _no_show(monkeypatch):
    """A figure builder that calls ``.show()`` fails every test that builds it."""

    def refuse(*args, **kwargs):
        raise AssertionError("viz functions must return figures, never call .show()")

    monkeypatch.setattr(go.Figure, "show", refuse)
    monkeypatch.setattr("plotly.io.show", refuse)


def _layout_is_shared(fig: go.Figure, height: int = viz.HEIGHT) -> None:
    assert fig.layout.height == height
    assert fig.layout.template.layout.paper_bgcolor == "white"  # plotly_white
    assert fig.layout.title.text


# ---------------------------------------------------------------------------------------
# lookup_figure


def test_lookup_figure_shows_one_hot_E_and_the_selected_rows(gen):
    E = torch.randn(5, 3, generator=gen)
    ids = torch.tensor([4, 0, 4, 2])
    vocab = ["<pad>", "<unk>", "a", "b", "c"]
    fig = viz.lookup_figure(ids, E, vocab)
    assert [t.type for t in fig.data] == ["heatmap"] * 3
    one_hot, E_trace, X_trace = fig.data
    np.testing.assert_array_equal(np.array(one_hot.z), np.eye(5)[[4, 0, 4, 2]])
    np.testing.assert_allclose(np.array(E_trace.z), E.numpy(), atol=5e-4)
    np.testing.assert_allclose(np.array(X_trace.z), E.numpy()[[4, 0, 4, 2]], atol=5e-4)
    assert list(X_trace.y) == ["0: c", "1: <pad>", "2: c", "3: a"]
    _layout_is_shared(fig)


def test_lookup_figure_checks_its_inputs():
    with pytest.raises(ValueError, match="vocab must have N_T = 3 entries; got 2"):
        viz.lookup_figure(torch.tensor([0]), torch.zeros(3, 2), ["a", "b"])
    with pytest.raises(ValueError, match=re.escape("ids must have shape (N,)")):
        viz.lookup_figure(torch.zeros(2, 2, dtype=torch.long), torch.zeros(3, 2))


# ---------------------------------------------------------------------------------------
# tokenizer_tension_figure


def test_tension_figure_values_match_closed_forms():
    fig = viz.tokenizer_tension_figure(max_merges=200, step=20)
    assert len(fig.data) == 9  # 3 vocabulary curves + 3 tokenizers x 2 texts
    by_name = {(t.name, t.xaxis): t for t in fig.data}
    n_chars = len(set(CORPUS))
    words = {"corpus": len(re.findall(r"\w+", CORPUS)),
             "held-out text": len(re.findall(r"\w+", HELD_OUT))}

    bpe_vocab = by_name[("BPE", "x")]
    assert list(bpe_vocab.x) == list(range(0, 201, 20))
    assert list(bpe_vocab.y) == [2 + n_chars + k for k in bpe_vocab.x]  # specials + chars + k
    assert list(by_name[("characters", "x")].y) == [2 + n_chars] * 2
    pieces = re.findall(r"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]", CORPUS.lower())
    assert list(by_name[("words", "x")].y) == [2 + len(set(pieces))] * 2

    # a character tokenizer spends exactly one token per character
    for label in words:
        text = CORPUS if label == "corpus" else HELD_OUT
        char = by_name[(f"characters, {label}", "x2")]
        assert char.y[0] == pytest.approx(len(text) / words[label], abs=1e-4)
        bpe = by_name[(f"BPE, {label}", "x2")]
        assert bpe.y[0] == pytest.approx(char.y[0], abs=1e-4)  # 0 merges = characters
        assert list(bpe.y) == sorted(bpe.y, reverse=True)  # merges never lengthen a text
    word = by_name[("words, corpus", "x2")]
    assert word.y[0] == pytest.approx(len(pieces) / words["corpus"], abs=1e-4)
    _layout_is_shared(fig, viz.HEIGHT + 80)  # taller: the legend sits under the panels
    assert fig.layout.legend.orientation == "h"


def test_tension_figure_agrees_with_the_tokenizers():
    fig = viz.tokenizer_tension_figure(max_merges=60, step=30)
    held = next(t for t in fig.data if t.name == "words, held-out text")
    n_words = len(re.findall(r"\w+", HELD_OUT))
    expected = len(WordTokenizer.fit(CORPUS).encode(HELD_OUT)) / n_words
    assert held.y[0] == pytest.approx(expected, abs=1e-4)
    assert CharTokenizer.fit(CORPUS).vocab_size == fig.data[0].y[0]


# ---------------------------------------------------------------------------------------
# embedding_dimension_figure and its static twin


def _numpy_cosines(d: int, n: int, seed: int) -> np.ndarray:
    A = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    A = A.numpy()
    U = A / np.linalg.norm(A, axis=1, keepdims=True)
    i, j = np.triu_indices(n, k=1)
    return (U @ U.T)[i, j]


@pytest.mark.parametrize("d", [2, 16, 256])
def test_embedding_figure_histogram_matches_numpy(d):
    fig = viz.embedding_dimension_figure(d, vocab_size=128, seed=3, bins=50)
    bar, curve = fig.data
    assert (bar.type, curve.type) == ("bar", "scatter")
    cos = _numpy_cosines(d, 128, 3)
    counts, edges = np.histogram(cos, bins=50, range=(-1, 1))
    np.testing.assert_allclose(bar.x, (edges[:-1] + edges[1:]) / 2, atol=1e-9)
    np.testing.assert_allclose(bar.y, counts / (cos.size * 0.04), atol=1e-6)
    assert sum(bar.y) * 0.04 == pytest.approx(1.0, abs=1e-4)  # a density
    note = fig.layout.annotations[0].text
    assert f"std of cosines = {cos.std(ddof=1):.3f}" in note
    assert f"1/√d = {1 / math.sqrt(d):.3f}" in note
    assert f"N_T = 128, d = {d}" in fig.layout.title.text
    _layout_is_shared(fig)


@pytest.mark.parametrize("d", [4, 64, 1024])
def test_cosine_spread_is_one_over_sqrt_d(d):
    cos = _numpy_cosines(d, 512, 0)
    assert abs(cos.mean()) < 0.2 / math.sqrt(d)
    assert cos.std() == pytest.approx(1 / math.sqrt(d), rel=0.05)
    fig = viz.embedding_dimension_figure(d, vocab_size=512)
    x, y = np.array(fig.data[0].x), np.array(fig.data[0].y)
    hist_var = np.sum(x**2 * y) * (x[1] - x[0])  # second moment of the binned density
    assert hist_var == pytest.approx(1 / d, rel=0.1)


@pytest.mark.parametrize("d", [2, 3, 5, 16, 300])
def test_exact_density_curve_is_normalised_with_variance_one_over_d(d):
    t = np.array(viz.embedding_dimension_figure(d, vocab_size=8).data[1].x)
    f = np.array(viz.embedding_dimension_figure(d, vocab_size=8).data[1].y)
    if d == 2:  # arcsine law
        np.testing.assert_allclose(f, 1 / (np.pi * np.sqrt(1 - t**2)), atol=1e-6)
    elif d == 3:  # uniform on [-1, 1]
        np.testing.assert_allclose(f, 0.5, atol=1e-6)
    else:  # integrate numerically on the open grid (the density vanishes at +-1)
        h = t[1] - t[0]
        assert np.sum(f) * h == pytest.approx(1.0, abs=2e-3)
        assert np.sum(t**2 * f) * h == pytest.approx(1 / d, rel=1e-2)


def test_slider_twin_has_one_step_per_d_and_switches_data():
    dims = (4, 32, 256)
    fig = viz.embedding_dimension_slider_figure(dims, vocab_size=64, active=1)
    assert len(fig.data) == 2 * len(dims)
    (slider,) = fig.layout.sliders
    assert slider.active == 1
    assert [s.label for s in slider.steps] == ["4", "32", "256"]
    for k, step in enumerate(slider.steps):
        assert step.method == "update"
        visible, layout = step.args
        assert visible["visible"] == [j // 2 == k for j in range(6)]
        assert f"d = {dims[k]})" in layout["title.text"]
    assert [t.visible for t in fig.data] == [False, False, True, True, False, False]
    ys = [tuple(t.y) for t in fig.data[::2]]
    assert len(set(ys)) == len(dims)  # every step shows different data
    _layout_is_shared(fig, viz.HEIGHT + 60)


def test_slider_twin_steps_equal_the_live_figure():
    dims = (8, 128)
    twin = viz.embedding_dimension_slider_figure(dims, vocab_size=32, seed=5)
    for k, d in enumerate(dims):
        live = viz.embedding_dimension_figure(d, vocab_size=32, seed=5)
        for twin_trace, live_trace in zip(twin.data[2 * k : 2 * k + 2], live.data, strict=True):
            assert twin_trace.y == live_trace.y and twin_trace.x == live_trace.x
        layout = twin.layout.sliders[0].steps[k].args[1]
        assert layout["title.text"] == live.layout.title.text
        assert layout["annotations"][0]["text"] == live.layout.annotations[0].text
        assert tuple(layout["yaxis.range"]) == tuple(live.layout.yaxis.range)


def test_default_twin_covers_2_to_1024():
    fig = viz.embedding_dimension_slider_figure(vocab_size=16)
    assert [s.label for s in fig.layout.sliders[0].steps] == [str(2**k) for k in range(1, 11)]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: viz.embedding_dimension_figure(1), "d must be >= 2"),
        (lambda: viz.embedding_dimension_figure(8, vocab_size=1), "vocab_size must be >= 2"),
        (lambda: viz.embedding_dimension_figure(8, bins=0), "bins must be a positive int"),
        (lambda: viz.embedding_dimension_slider_figure(()), "dims must name at least one"),
        (lambda: viz.embedding_dimension_slider_figure((2, 4), active=2), "active must be"),
    ],
)
def test_embedding_figures_reject_bad_settings(call, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        call()


def test_viz_loads_lazily_from_the_package():
    assert attnlib.viz is viz and attnlib.widgets is widgets
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnlib.nope  # noqa: B018


# ---------------------------------------------------------------------------------------
# widgets


def test_embedding_explorer_builds_and_redraws_on_slider_change(monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = widgets.embedding_explorer(dims=(4, 64), vocab_sizes=(32, 64), d=4, vocab_size=32)
    assert isinstance(box, ipywidgets.VBox)
    controls, out = box.children
    d_slider, n_slider = controls.children
    assert isinstance(d_slider, ipywidgets.SelectionSlider) and d_slider.options == (4, 64)
    assert isinstance(out, ipywidgets.Output)
    assert len(shown) == 1 and "d = 4)" in shown[0].layout.title.text

    d_slider.value = 64
    n_slider.value = 64
    assert len(shown) == 3
    latest = shown[-1]
    assert "N_T = 64, d = 64)" in latest.layout.title.text
    reference = viz.embedding_dimension_figure(64, vocab_size=64)
    assert latest.data[0].y == reference.data[0].y


def test_embedding_explorer_rejects_a_start_value_off_the_slider():
    with pytest.raises(ValueError, match=re.escape("d must be one of the slider's options")):
        widgets.embedding_explorer(dims=(4, 8), d=16)


def test_embedding_explorer_output_receives_the_figure_in_a_kernel(tmp_path, monkeypatch):
    """Run the explorer in a real kernel: its Output widget must hold the plotly figure."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # nbclient's stand-in Output widget echoes captured outputs to the kernel on the shell
    # channel while the execute reply is awaited there, which can stall until the cell
    # timeout (jupyter/nbclient#312); the recorded widget state does not need the echo.
    monkeypatch.setattr("nbclient.output_widget.OutputWidget.sync_state", lambda self: None)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import attnlib\n"
            "box = attnlib.widgets.embedding_explorer(dims=(4, 8), vocab_sizes=(16,), d=4,"
            " vocab_size=16)\nbox"
        ),
        nbformat.v4.new_code_cell("box.children[0].children[0].value = 8"),
    ]
    client = nbclient.NotebookClient(
        nb, timeout=60, kernel_name="python3", store_widget_state=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outputs = [
        m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"
    ]
    assert len(outputs) == 1 and len(outputs[0]) == 1
    figure = outputs[0][0]["data"]["application/vnd.plotly.v1+json"]
    assert "d = 8)" in figure["layout"]["title"]["text"]
