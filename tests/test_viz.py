"""Tests for attnlib.viz: the explorer toolkit (twin and explorer, Colab branch included),
the shared style, and lesson 00's figures and tables, checked against numpy, regular
expressions and closed forms."""

from __future__ import annotations

import json
import math
import re
import sys
import types

import ipywidgets
import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from plotly.offline import get_plotlyjs

import attnlib.viz as viz
from attnlib.tokens import CORPUS, HELD_OUT, BPETokenizer, CharTokenizer, WordTokenizer
from attnlib.viz import explore
from attnlib.viz import tokens as vt


def _line(slope: float, *, n: int = 4, title: str = "line", ranged: bool = True) -> go.Figure:
    """A small figure function for the toolkit tests: one or two traces per setting."""
    xs = list(range(n))
    fig = go.Figure(go.Scatter(x=xs, y=[slope * x for x in xs], name=f"slope {slope}"))
    if slope < 0:  # a setting with a second trace, hidden in the legend
        fig.add_trace(go.Scatter(x=xs, y=xs, visible="legendonly", name="reference"))
    fig.add_annotation(text=f"slope = {slope}", x=0, y=0, showarrow=False)
    fig.add_hline(y=slope)
    if ranged:
        fig.update_yaxes(range=[min(0, slope * n), max(1, slope * n)])
    return viz.style(fig, f"{title}: slope {slope}")


# ---------------------------------------------------------------------------------------
# style


def test_palette_is_okabe_ito():
    # Okabe & Ito (2008), "Color Universal Design", the eight published colours
    published = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2",
                 "#D55E00", "#CC79A7"}
    assert set(viz.OKABE_ITO.values()) == published
    assert set(viz.COLORS.values()) <= published


def test_rounded_makes_plain_stable_numbers():
    x = {"a": torch.tensor([0.1 + 0.2, -1e-12]), "b": (np.float32(1.23456789), 3), "c": "s"}
    out = viz.rounded(x, 4)
    assert out == {"a": [0.3, 0.0], "b": [1.2346, 3], "c": "s"}
    assert math.copysign(1, out["a"][1]) == 1  # no "-0.0" in the JSON
    assert json.dumps(viz.rounded(np.arange(3))) == "[0, 1, 2]"


def test_style_sets_the_shared_look():
    fig = viz.style(go.Figure(), "title here", height=300)
    assert fig.layout.height == 300
    assert fig.layout.template.layout.paper_bgcolor == "white"  # plotly_white
    assert fig.layout.title.text == "title here"


# ---------------------------------------------------------------------------------------
# twin


def test_twin_step_k_shows_exactly_the_traces_of_figure_fn_at_value_k():
    slopes = [2.0, -1.0, 0.5]
    fig = viz.twin(_line, "slope", slopes, active=1, n=5)
    (slider,) = fig.layout.sliders
    assert [s.label for s in slider.steps] == ["2", "-1", "0.5"]
    assert slider.active == 1 and slider.currentvalue.prefix == "slope = "
    for k, slope in enumerate(slopes):
        ref = _line(slope, n=5)
        visible = slider.steps[k].args[0]["visible"]
        shown = [t for t, v in zip(fig.data, visible, strict=True) if v is not False]
        assert [(t.name, list(t.x), list(t.y)) for t in shown] == [
            (t.name, list(t.x), list(t.y)) for t in ref.data
        ]
        # a trace hidden in the legend stays "legendonly" in its own step
        assert [v for v in visible if v is not False] == [
            True if t.visible is None else t.visible for t in ref.data
        ]
        # the step carries the figure's whole layout, container by container
        layout = slider.steps[k].args[1]
        assert layout["title"]["text"] == ref.layout.title.text
        notes = [a.text for a in ref.layout.annotations]
        assert [a["text"] for a in layout["annotations"]] == notes
        assert layout["shapes"][0]["y0"] == slope
        assert layout["yaxis"]["range"] == list(ref.layout.yaxis.range)
        assert layout["margin"] == ref.layout.margin.to_plotly_json()
        assert "template" not in layout and "meta" not in layout
    # the figure opens on step `active`
    assert [t.visible for t in fig.data] == [False, True, "legendonly", False]
    assert fig.layout.title.text == _line(-1.0).layout.title.text


def test_twin_lets_an_unranged_step_autorange():
    fig = viz.twin(_line, ("slope", "ranged"), [(1, True), (3, False)])
    ranged, free = (s.args[1] for s in fig.layout.sliders[0].steps)
    assert ranged["yaxis"]["range"] == [0, 4] and "autorange" not in ranged["yaxis"]
    assert free["yaxis"]["autorange"] is True and "range" not in free["yaxis"]


def _panels(n: int) -> go.Figure:
    """A figure with ``n`` side-by-side subplots (axes x, x2, ...), one trace on each."""
    fig = go.Figure()
    for i in range(n):
        axis = "" if i == 0 else str(i + 1)
        fig.add_trace(go.Scatter(x=[0, 1], y=[i, i], xaxis=f"x{axis}", yaxis=f"y{axis}"))
        fig.update_layout({f"xaxis{axis}": {"domain": [i / n, (i + 1) / n - 0.05]},
                           f"yaxis{axis}": {"anchor": f"x{axis}"}})
    if n == 1:
        fig.add_annotation(text="alone", x=0, y=0, showarrow=False)
    return viz.style(fig, f"{n} panels")


def test_twin_steps_change_the_subplots():
    """A step with fewer subplots hides the axes it lacks and empties what it does not set,
    so the figure draws exactly its own panels."""
    fig = viz.twin(_panels, "n", [1, 3], active=1)
    one, three = (s.args[1] for s in fig.layout.sliders[0].steps)
    assert one["xaxis2"] == {"visible": False} and one["yaxis3"] == {"visible": False}
    assert three["xaxis3"]["domain"] == [round(2 / 3, 6), 0.95]
    assert three["annotations"] == [] and one["annotations"][0]["text"] == "alone"
    assert fig.layout.xaxis3.domain == (round(2 / 3, 6), 0.95)


def test_twin_describes_its_parameters_for_the_site():
    """layout.meta["twin"]: each parameter's values (numbers sorted) and labels as the prose
    writes them, each step's value indices, its traces and its own size."""
    combos = [(2, 3), (1, 3), (2, 6)]
    fig = viz.twin(_line, ("slope", "n"), combos, active=2, labels={"n": "points"})
    meta = fig.layout.meta["twin"]
    assert [(p["name"], p["label"], p["values"], p["text"]) for p in meta["params"]] == [
        ("slope", "slope", [1, 2], ["1", "2"]), ("n", "points", [3, 6], ["3", "6"])]
    assert meta["steps"] == [[1, 0], [0, 0], [1, 1]] and meta["active"] == 2
    assert meta["traces"] == [[0, 1], [1, 2], [2, 3]]
    for k, (slope, n) in enumerate(combos):
        start, stop = meta["traces"][k]
        (trace,) = fig.data[start:stop]
        assert list(trace.x) == list(range(n)) and list(trace.y) == [slope * i for i in range(n)]
        assert meta["size"][k] == {"height": viz.HEIGHT,
                                   "margin": _line(slope).layout.margin.to_plotly_json()}
    # the slider's room is added to plotly's own step, not to the site's size
    assert fig.layout.height == viz.HEIGHT + 60
    assert fig.layout.sliders[0].steps[0].args[1]["height"] == viz.HEIGHT + 60
    assert len(json.dumps(fig.layout.meta["twin"])) < 2_000


def test_twin_offers_combinations_of_several_parameters_on_one_slider():
    combos = [(1, 3), (2, 3), (2, 6)]
    fig = viz.twin(_line, ("slope", "n"), combos, labels={"n": "points"})
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["1, 3", "2, 3", "2, 6"]
    assert fig.layout.sliders[0].currentvalue.prefix == "slope, points = "
    for k, (slope, n) in enumerate(combos):
        (trace,) = [t for t, v in zip(fig.data, steps[k].args[0]["visible"], strict=True) if v]
        assert list(trace.x) == list(range(n)) and list(trace.y) == [slope * i for i in range(n)]


def test_twin_shows_values_by_the_short_names_given():
    """texts: the slider's labels and the site's controls show a long value by its short
    name; the values themselves, and the other parameters' labels, are unchanged."""
    def title(prompt: str, n: int = 3) -> go.Figure:
        return go.Figure(go.Scatter(x=list(range(n)), y=[len(prompt)] * n))

    combos = [("The attention weig", 3), ("Each query reads the ke", 3), ("The attention weig", 6)]
    names = {"The attention weig": "attention", "Each query reads the ke": "query"}
    fig = viz.twin(title, ("prompt", "n"), combos, texts={"prompt": names})
    assert [s.label for s in fig.layout.sliders[0].steps] == [
        "attention, 3", "query, 3", "attention, 6"]
    prompt, n = fig.layout.meta["twin"]["params"]
    assert prompt["values"] == ["The attention weig", "Each query reads the ke"]
    assert prompt["text"] == ["attention", "query"] and n["text"] == ["3", "6"]
    # a value without a short name is written as the prose writes it
    fig = viz.twin(title, ("prompt", "n"), [*combos, ("softmax", 3)], texts={"prompt": names})
    assert fig.layout.meta["twin"]["params"][0]["text"] == ["attention", "query", "softmax"]
    with pytest.raises(ValueError, match=re.escape("texts names ['m'], which param does not")):
        viz.twin(title, ("prompt", "n"), combos, texts={"m": {}})


def test_walk_prompts_have_whole_word_names():
    from attnlib.viz import walk
    assert set(walk.PROMPT_NAMES) == set(walk.PROMPTS)
    for prompt, name in walk.PROMPT_NAMES.items():
        assert re.fullmatch(r"[a-z]+", name) and re.search(rf"\b{name}\b", prompt, re.I)


@pytest.mark.parametrize(
    ("value", "text"),
    [(131072, "131,072"), (10000.0, "10,000"), (500_000.0, "500,000"), (4096, "4096"),
     (0.3, "0.3"), (3.0, "3"), (-1.0, "-1"), (1e-9, "1e-09"), ("bf16", "bf16"), (True, "True")],
)
def test_format_value_writes_numbers_as_the_prose_does(value, text):
    assert explore.format_value(value) == text


def test_twin_json_is_stable_and_rounded():
    def noisy(scale: float) -> go.Figure:
        return go.Figure(go.Scatter(x=[0, 1], y=[scale / 3, scale * math.pi]))

    first = viz.twin(noisy, "scale", [1.0, 7.0]).to_json()
    assert first == viz.twin(noisy, "scale", [1.0, 7.0]).to_json()
    ys = [t["y"] for t in json.loads(first)["data"]]
    assert ys == [[0.333333, 3.141593], [2.333333, 21.991149]]


def test_lesson_twin_stays_under_one_megabyte():
    combos = [(d, n) for n in (64, 1024) for d in (4, 16, 64, 256, 1024)]
    fig = viz.twin(vt.embedding_dimension_figure, ("d", "vocab_size"), combos)
    assert len(fig.to_json().encode()) < 1_000_000
    assert len(fig.layout.sliders[0].steps) == len(combos)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"param": "slope", "values": []}, ValueError, "values must list at least one"),
        ({"param": "nope", "values": [1]}, ValueError, "_line has no parameter 'nope'"),
        ({"param": "slope", "values": [1], "bogus": 2}, ValueError, "no parameter 'bogus'"),
        ({"param": ("slope", "n"), "values": [(1, 2), (3,)]}, ValueError, "values[1] must be"),
        ({"param": "slope", "values": [1], "active": 1}, ValueError, "active must be an index"),
        ({"param": "n", "values": [1], "n": 2}, ValueError, "both in param and as fixed"),
        ({"param": ("n", "n"), "values": [(1, 1)]}, ValueError, "must not repeat"),
    ],
)
def test_twin_rejects_bad_settings(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        viz.twin(_line, **kwargs)


def test_twin_requires_a_figure():
    with pytest.raises(TypeError, match=re.escape("must return a plotly go.Figure; got dict")):
        viz.twin(lambda a: {}, "a", [1])


# ---------------------------------------------------------------------------------------
# explorer


def test_explorer_has_one_control_per_varying_parameter_and_redraws(monkeypatch):
    shown = []
    monkeypatch.setattr(explore, "display", shown.append)
    box = viz.explorer(_line, slope=[1, 2, 3], title=["a", "b"], n=6,
                       start={"slope": 2}, labels={"slope": "k"})
    assert isinstance(box, ipywidgets.VBox)
    controls, out = box.children
    slope, title = controls.children
    assert isinstance(slope, ipywidgets.SelectionSlider) and slope.options == (1, 2, 3)
    assert isinstance(title, ipywidgets.Dropdown) and title.options == ("a", "b")
    assert (slope.value, slope.description, title.value) == (2, "k", "a")
    assert isinstance(out, ipywidgets.Output)
    assert len(shown) == 1 and shown[0].layout.title.text == "a: slope 2"
    assert list(shown[0].data[0].x) == list(range(6))  # the fixed n reached the figure

    slope.value = 3
    title.value = "b"
    assert len(shown) == 3
    assert shown[-1].layout.title.text == "b: slope 3"
    assert shown[-1].data[0].y == _line(3, n=6, title="b").data[0].y


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"n": 3}, "at least one parameter a list, tuple or range"),
        ({"slope": [1], "nope": [1, 2]}, "_line has no parameter 'nope'"),
        ({"slope": []}, "['slope'] got an empty list"),
        ({"slope": [1, 2], "start": {"slope": 5}}, "start['slope'] must be one of [1, 2]"),
        ({"slope": [1, 2], "start": {"n": 5}}, "start names ['n'], which are not controls"),
    ],
)
def test_explorer_rejects_bad_controls(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        viz.explorer(_line, **kwargs)


def test_explorer_under_colab_loads_plotly_where_the_box_is_shown(monkeypatch):
    """googlecolab/colabtools#5889: a figure inside an Output needs plotly.js in the cell
    that shows the box, which may be a later cell than the one that built it."""
    google = types.ModuleType("google")
    colab = types.ModuleType("google.colab")
    google.colab = colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    shown = []
    monkeypatch.setattr(explore, "display", lambda obj, **kw: shown.append(obj))

    box = viz.explorer(_line, slope=[1, 2])
    bundle = get_plotlyjs()
    loader = f'<script type="text/javascript">{bundle}</script>'  # inline, no CDN
    assert [s.data for s in shown if s.data == loader] == []  # nothing loaded before display
    box._ipython_display_()  # the box shown in some cell: plotly.js goes into that one
    box.children[0].children[0].value = 2
    box._ipython_display_()  # shown again in a later cell: loaded there too
    html = [s.data for s in shown if isinstance(s, explore.HTML)]
    assert all(isinstance(s, (explore.HTML, dict)) for s in shown) and len(html) == 4
    first, loaded, second, loaded_again = html
    assert loaded == loaded_again == loader
    widget_views = [s for s in shown if isinstance(s, dict)]
    assert len(widget_views) == 2  # the box itself follows each loader
    assert all("application/vnd.jupyter.widget-view+json" in v for v in widget_views)
    for update, slope in ((first, 1), (second, 2)):
        assert bundle[:2000] not in update  # include_plotlyjs=False
        assert "<script src" not in update and "cdn.plot.ly" not in update
        assert "Plotly.newPlot" in update and f"line: slope {slope}" in update


def test_explorer_outside_colab_displays_the_figure_itself(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", None)  # import fails: not Colab
    shown = []
    monkeypatch.setattr(explore, "display", shown.append)
    viz.explorer(_line, slope=[1, 2])
    assert len(shown) == 1 and isinstance(shown[0], go.Figure)


@pytest.mark.slow
def test_explorer_output_receives_the_figure_in_a_kernel(tmp_path, monkeypatch):
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
            "import attnlib.viz as viz\n"
            "fn = viz.tokens.embedding_dimension_figure\n"
            "box = viz.explorer(fn, d=[4, 8], vocab_size=16)\nbox"
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
    assert "N_T = 16, d = 8)" in figure["layout"]["title"]["text"]


# ---------------------------------------------------------------------------------------
# lesson 00: lookup_figure


def test_lookup_figure_shows_one_hot_E_and_the_selected_rows(gen):
    E = torch.randn(5, 3, generator=gen)
    ids = torch.tensor([4, 0, 4, 2])
    vocab = ["<pad>", "<unk>", "a", "b", "c"]
    fig = vt.lookup_figure(ids, E, vocab)
    assert [t.type for t in fig.data] == ["heatmap"] * 3
    one_hot, E_trace, X_trace = fig.data
    np.testing.assert_array_equal(np.array(one_hot.z), np.eye(5)[[4, 0, 4, 2]])
    np.testing.assert_allclose(np.array(E_trace.z), E.numpy(), atol=5e-4)
    np.testing.assert_allclose(np.array(X_trace.z), E.numpy()[[4, 0, 4, 2]], atol=5e-4)
    assert list(X_trace.y) == ["0: c", "1: <pad>", "2: c", "3: a"]


def test_lookup_figure_checks_its_inputs():
    with pytest.raises(ValueError, match="vocab must have N_T = 3 entries; got 2"):
        vt.lookup_figure(torch.tensor([0]), torch.zeros(3, 2), ["a", "b"])
    with pytest.raises(ValueError, match=re.escape("ids must have shape (N,)")):
        vt.lookup_figure(torch.zeros(2, 2, dtype=torch.long), torch.zeros(3, 2))


# ---------------------------------------------------------------------------------------
# lesson 00: tokenizer tension


def _words(text: str) -> int:
    return len(re.findall(r"[A-Za-z0-9_]+", text))  # the shipped texts are ASCII


def test_tension_figure_plots_tokens_per_word_against_vocabulary_size():
    fig = vt.tokenizer_tension_figure(max_merges=200, step=20)
    by_name = {t.name: t for t in fig.data}
    assert len(fig.data) == 6
    n_chars = len(set(CORPUS))
    for label, text in (("corpus", CORPUS), ("held-out text", HELD_OUT)):
        bpe = by_name[f"BPE, {label}"]
        assert list(bpe.x) == [2 + n_chars + k for k in range(0, 201, 20)]  # N_T = N_T(0) + k
        assert bpe.y[0] == pytest.approx(len(text) / _words(text), abs=1e-4)  # 0 merges
        assert list(bpe.y) == sorted(bpe.y, reverse=True)  # merges never lengthen a text
        char = by_name[f"characters, {label}"]
        assert (list(char.x), char.y[0]) == ([2 + n_chars], pytest.approx(bpe.y[0], abs=1e-4))
        pieces = re.findall(r"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]", text.lower())
        words = by_name[f"words, {label}"]
        vocab = set(re.findall(r"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]", CORPUS.lower()))
        assert list(words.x) == [2 + len(vocab)]
        assert words.y[0] == pytest.approx(len(pieces) / _words(text), abs=1e-4)
        # colour is never the only signal: held-out traces are dotted with open markers
        held = label != "corpus"
        assert (bpe.line.dash == "dot") is held and char.marker.symbol.endswith("-open") is held
    unseen = {w for w in re.findall(r"\w+", HELD_OUT.lower())} - set(
        re.findall(r"\w+", CORPUS.lower()))
    n_unk = sum(w in unseen for w in re.findall(r"\w+", HELD_OUT.lower()))
    assert f"{n_unk} tokens are &lt;unk&gt;" in fig.layout.annotations[0].text


def test_tokenizer_table_matches_the_tokenizers():
    bpe = BPETokenizer.train(CORPUS, 50)
    table = vt.tokenizer_table({"chars": CharTokenizer.fit(CORPUS), "bpe": bpe,
                                "words": WordTokenizer.fit(CORPUS)})
    assert list(table.index) == ["chars", "bpe", "words"]
    assert table.loc["chars", "tokens per word, corpus"] == round(len(CORPUS) / _words(CORPUS), 2)
    assert table.loc["bpe", "N_T"] == 2 + len(set(CORPUS)) + 50
    assert table.loc["chars", "<unk> in held out"] == sum(c not in CORPUS for c in HELD_OUT)
    assert table.loc["bpe", "tokens per word, held out"] == round(
        len(bpe.encode(HELD_OUT)) / _words(HELD_OUT), 2)


def test_merge_table_counts_each_new_token_at_its_merge():
    table = vt.merge_table(BPETokenizer.train("aaabdaaabac", 3), "aaabdaaabac", [1, 2, 3])
    # en.wikipedia.org/wiki/Byte_pair_encoding: aa (twice) -> Z, ab (twice), then ZY (twice)
    assert list(table["new token"]) == ["aa", "ab", "aaab"]
    assert list(table["count in text"]) == [2, 2, 2]
    table = vt.merge_table(BPETokenizer.train("ab ab ab cd", 3), "ab ab ab cd", [1, 2, 3])
    assert list(table["new token"]) == ["ab", "␣ab", "␣c"]  # tie: smaller ids first
    assert list(table["count in text"]) == [3, 2, 1]


# ---------------------------------------------------------------------------------------
# lesson 00: embedding dimension


def _numpy_cosines(d: int, n: int, seed: int) -> np.ndarray:
    A = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    A = A.numpy()
    U = A / np.linalg.norm(A, axis=1, keepdims=True)
    i, j = np.triu_indices(n, k=1)
    return (U @ U.T)[i, j]


@pytest.mark.parametrize("d", [2, 16, 256, 1024])
def test_embedding_figure_histogram_range_and_max_match_numpy(d):
    fig = vt.embedding_dimension_figure(d, 128, seed=3, bins=50)
    bar, _ = fig.data
    half = min(1.0, 6 / math.sqrt(d))
    assert tuple(fig.layout.xaxis.range) == pytest.approx((-half, half))
    cos = _numpy_cosines(d, 128, 3)
    counts, edges = np.histogram(cos, bins=50, range=(-half, half))
    np.testing.assert_allclose(bar.x, (edges[:-1] + edges[1:]) / 2, atol=1e-6)
    np.testing.assert_allclose(bar.y, counts / (cos.size * 2 * half / 50), atol=1e-5)
    assert counts.sum() == cos.size  # the range holds every cosine
    largest = np.abs(cos).max()
    assert sorted(s.x0 for s in fig.layout.shapes) == pytest.approx([-largest, largest], abs=1e-6)
    note = fig.layout.annotations[0].text
    assert f"std of cosines = {cos.std(ddof=1):.3f}" in note
    assert f"1/√d = {1 / math.sqrt(d):.3f}" in note
    assert f"max |cos| = {largest:.3f}" in note
    assert f"pairs: {128 * 127 // 2:,}" in note
    assert f"N_T = 128, d = {d})" in fig.layout.title.text


@pytest.mark.parametrize("d", [2, 3, 5, 16, 300])
def test_exact_density_curve_is_the_closed_form(d):
    curve = vt.embedding_dimension_figure(d, 8).data[1]
    t, f = np.array(curve.x), np.array(curve.y)
    if d == 2:  # arcsine law
        np.testing.assert_allclose(f, 1 / (np.pi * np.sqrt(1 - t**2)), rtol=1e-5)
    elif d == 3:  # uniform on [-1, 1]
        np.testing.assert_allclose(f, 0.5, atol=1e-6)
    else:  # integrates to 1 over the plotted range, with variance 1/d
        h = t[1] - t[0]
        assert np.sum(f) * h == pytest.approx(1.0, abs=3e-3)
        assert np.sum(t**2 * f) * h == pytest.approx(1 / d, rel=2e-2)


def test_cosine_table_matches_numpy():
    table = vt.cosine_table((8, 64), 40, seed=2)
    for d in (8, 64):
        cos = _numpy_cosines(d, 40, 2)
        assert table.loc[d, "pairs"] == 780
        assert table.loc[d, "std of cos"] == round(cos.std(ddof=1), 3)
        assert table.loc[d, "max |cos|"] == round(np.abs(cos).max(), 3)
        assert table.loc[d, "1/sqrt(d)"] == round(d**-0.5, 3)


def test_embedding_table_counts_E_and_the_head():
    from attnlib.analysis.memory import GEMMA3_27B, LLAMA3_70B

    table = vt.embedding_table([LLAMA3_70B, GEMMA3_27B], {"Llama 3 70B": 70e9, "Gemma 3 27B": 27e9},
                               {"Llama 3 70B": False, "Gemma 3 27B": True})
    llama, gemma = table.loc["Llama 3 70B"], table.loc["Gemma 3 27B"]
    assert llama["entries of E"] == 128_256 * 8_192  # published shapes
    assert llama["E (GB)"] == round(2 * 128_256 * 8_192 / 1e9, 2)  # decimal units
    assert llama["share, E only (%)"] == round(100 * 128_256 * 8_192 / 70e9, 1)
    assert llama["share, E and head (%)"] == round(200 * 128_256 * 8_192 / 70e9, 1)
    assert gemma["share, E and head (%)"] == gemma["share, E only (%)"]  # tied: one matrix
    assert gemma["one row (bytes)"] == 5_376 * 2


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: vt.embedding_dimension_figure(1), "d must be >= 2"),
        (lambda: vt.embedding_dimension_figure(8, 1), "vocab_size must be >= 2"),
        (lambda: vt.embedding_dimension_figure(8, bins=0), "bins must be a positive int"),
    ],
)
def test_embedding_figure_rejects_bad_settings(call, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        call()


def test_viz_loads_lazily_from_the_package():
    import attnlib

    assert attnlib.viz.twin is viz.twin and attnlib.viz.tokens is vt
    with pytest.raises(AttributeError):
        attnlib.widgets  # noqa: B018  (the live explorers moved to attnlib.viz.explorer)
