"""The local Sphinx extension book/_ext/offline_site.py, without a build."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import pytest
from myst_nb.core import render as nb_render

EXTENSION = Path(__file__).resolve().parents[2] / "book" / "_ext" / "offline_site.py"
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def offline_site(load_script) -> ModuleType:
    return load_script(EXTENSION)


class _RecordingRenderer:
    """Stands in for myst-nb's NbElementRenderer: records the scripts a page asks for."""

    def __init__(self) -> None:
        self.js_files: dict[str, str] = {}

    def add_js_file(self, key: str, uri: str, kwargs: dict) -> None:
        self.js_files[key] = uri


def _mime(mime_type: str, content: object) -> nb_render.MimeData:
    return nb_render.MimeData(mime_type, content, output_metadata={}, cell_metadata={})


def test_plotly_json_lands_in_the_page_intact(offline_site: ModuleType) -> None:
    # A title that would end a <script> element early if written out raw.
    figure = {
        "data": [{"type": "scatter", "x": [0, 1], "y": [0.5, 0.25]}],
        "layout": {"title": {"text": "a </script><b>b</b> <!-- c"}},
        "frames": [{"name": "1", "data": [{"y": [1, 2]}]}],
    }
    renderer = _RecordingRenderer()
    (node,) = offline_site.PlotlyMimeRenderer.handle_mime(renderer, _mime(PLOTLY, figure), False)
    html = node.astext()
    (payload,) = re.findall(rf'<script type="{re.escape(PLOTLY)}">(.*?)</script>', html)
    assert "<" not in payload
    assert json.loads(payload) == figure
    # The drawing scripts are added per page, by page content (offline_site.page_scripts).
    assert renderer.js_files == {}
    # A caption in words: the title's tags go, its text stays, and what is left is escaped.
    (caption,) = re.findall(r"<figcaption[^>]*>(.*?)</figcaption>", html)
    assert "Figure: a b &lt;!-- c." in caption
    assert "</script>" not in caption and "<b>" not in caption
    assert "Interactive on the site" in caption


def test_template_keeps_the_defaults_of_the_traces_the_bundle_draws(
    offline_site: ModuleType,
) -> None:
    import plotly.graph_objects as go

    figure = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]), layout={"template": "plotly_white"})
    content = json.loads(figure.to_json())
    before = json.dumps(content, sort_keys=True)
    (node,) = offline_site.PlotlyMimeRenderer.handle_mime(
        _RecordingRenderer(), _mime(PLOTLY, content), False)
    (payload,) = re.findall(rf'<script type="{re.escape(PLOTLY)}">(.*?)</script>', node.astext())
    page = json.loads(payload)
    kinds = set(content["layout"]["template"]["data"])
    assert {"carpet", "choropleth", "scatter", "bar", "heatmap"} <= kinds  # plotly's defaults
    kept, given = page["layout"]["template"]["data"], content["layout"]["template"]["data"]
    assert set(kept) == {"scatter", "bar", "heatmap"}
    for kind in kept:  # what is kept is kept whole
        assert kept[kind] == given[kind]
    assert page["layout"]["template"]["layout"] == content["layout"]["template"]["layout"]
    assert page["data"] == content["data"]
    assert json.dumps(content, sort_keys=True) == before  # the notebook's figure is untouched
    assert len(payload) < len(json.dumps(content, separators=(",", ":"))) - 3000


def test_other_mime_types_are_left_to_myst_nb(offline_site: ModuleType) -> None:
    renderer = _RecordingRenderer()
    for mime_type in ("text/html", "text/plain", "image/png"):
        data = _mime(mime_type, "x")
        assert offline_site.PlotlyMimeRenderer.handle_mime(renderer, data, False) is None
    assert renderer.js_files == {}


def test_registration_ranks_plotly_first_once(offline_site: ModuleType) -> None:
    offline_site._register_mime_renderer()
    offline_site._register_mime_renderer()
    plugins = nb_render.load_mime_renders()
    assert plugins.count(offline_site.PlotlyMimeRenderer) == 1
    priority = nb_render.get_mime_priority("html", [])
    assert priority.index(PLOTLY) < priority.index("text/html")
    assert priority.index(PLOTLY) < priority.index("application/vnd.jupyter.widget-view+json")


def test_caption_names_the_slider_and_its_default_step(offline_site: ModuleType) -> None:
    figure = {
        "data": [{"type": "bar", "name": "with scaling"}, {"type": "bar", "name": "without"}],
        "layout": {
            "title": {"text": "One query<br><sup>dotted: uniform</sup>"},
            "xaxis": {"title": {"text": "key j"}},
            "yaxis": {"title": {"text": "weight"}},
            "sliders": [{
                "active": 1,
                "currentvalue": {"prefix": "τ = "},
                "steps": [{"label": "0.1"}, {"label": "1.0"}, {"label": "10"}],
            }],
        },
    }
    caption = offline_site.figure_caption(figure)
    # The caption gives the headline; the subtitle is drawn in the figure and read in its label.
    assert caption["title"] == "One query."
    assert caption["shows"] == (
        "Horizontal axis key j; vertical axis weight. Legend: with scaling, without."
    )
    assert "3 steps" in caption["screen"]
    assert caption["print"].endswith("printed here at the default step, τ = 1.0.")


def _twin_figure() -> dict:
    """A twin as attnlib.viz.twin writes it: two parameters, three of the four combinations."""
    import plotly.graph_objects as go

    import attnlib.viz as viz

    def figure(h: int, mode: str) -> go.Figure:
        bars = go.Figure(go.Bar(x=["a", "b"], y=[h, 1], name=mode))
        return viz.style.style(bars, f"H = {h}, {mode}")

    return viz.twin(figure, ("h", "mode"), [(1, "fast"), (2, "fast"), (2, "slow")], active=1,
                    labels={"h": "H"}).to_plotly_json()


def test_a_twin_gets_one_control_per_parameter(offline_site: ModuleType) -> None:
    """A numeric parameter gets a range input, another one a group of buttons, each set at
    the default step and labelled as the prose writes the values; the caption names them."""
    figure = _twin_figure()
    html = offline_site.figure_html(json.loads(json.dumps(figure)))
    (ranges,) = re.findall(r'<input type="range"[^>]*>', html)
    assert 'min="0" max="1"' in ranges and 'value="1"' in ranges
    assert 'aria-valuetext="H = 2"' in ranges and 'data-twin-param="0"' in ranges
    buttons = re.findall(r'<button type="button" data-twin-param="1"[^>]*>([^<]*)</button>', html)
    assert buttons == ["fast", "slow"]
    assert 'aria-pressed="true" disabled>fast' in html
    assert html.index('class="twin-controls"') < html.index('class="plotly-figure"')
    caption = offline_site.figure_caption(figure)
    assert caption["title"] == "H = 2, fast."
    assert caption["print"] == ("Interactive on the site, with a control for each of H, mode; "
                                "printed here at the default step, H = 2, mode = fast.")
    assert "the controls above" in caption["screen"]
    # The box is sized before anything is drawn, at the default step's own height.
    assert 'style="height: 420px"' in html and "BookFigures.reserve" in html


class _Script:
    """Stands in for Sphinx's _JavaScript: a path under _static/ and its attributes."""

    def __init__(self, filename: str, **attributes: str) -> None:
        self.filename = filename
        self.attributes = attributes


def test_pages_get_only_the_scripts_their_content_needs(offline_site: ModuleType) -> None:
    """The figure scripts only where a figure is, the drawer naming the plotly.js bundle it
    fetches (with the digest of the bundle the build copied); no math script anywhere (the
    math is typeset at build time)."""
    added, attributes = [], []

    class Builder:
        name = "html"

        def add_js_file(self, uri: str, **kwargs: str) -> None:
            added.append(uri)
            attributes.append(kwargs)

    class App:
        builder = Builder()
        outdir = "/site"

    def scripts() -> list:
        return [_Script("_static/doctools.js"),
                _Script("_static/../_vendor/plotly/render-plotly.js", defer="defer")]

    plain = {"body": '<p>text <span class="math">x</span></p>', "script_files": scripts()}
    offline_site.page_scripts(App, "p", "page.html", plain, None)
    assert [s.filename for s in plain["script_files"]] == ["_static/doctools.js"]
    assert added == []

    rich = {"body": f"{offline_site.PLOTLY_BLOCK}{{}}</script>", "script_files": scripts()}
    offline_site.page_scripts(App, "p", "page.html", rich, None)
    assert [s.filename for s in rich["script_files"]] == ["_static/doctools.js"]
    assert added == [offline_site.FIGURE_LAYOUT_SCRIPT, *offline_site.PLOTLY_SCRIPTS]
    assert attributes[1] == {"defer": "defer", "data-bundle": "plotly-book.min.js"}
    added.clear()
    attributes.clear()
    offline_site._BUNDLE_DIGESTS["/site"] = "0123456789ab"
    try:
        offline_site.page_scripts(App, "p", "page.html", {**rich, "script_files": scripts()}, None)
    finally:
        del offline_site._BUNDLE_DIGESTS["/site"]
    assert attributes[1]["data-bundle"] == "plotly-book.min.js?v=0123456789ab"


def test_math_is_typeset_at_build_time(offline_site: ModuleType, tmp_path: Path) -> None:
    """typeset_math.js turns Sphinx's TeX markup into MathJax's CommonHTML with MathML beside
    it, adds the page's math CSS with fonts found relative to the page, and fails on TeX it
    cannot read."""
    import shutil
    import subprocess

    node = shutil.which("node")
    modules = EXTENSION.parents[2] / "node_modules"
    if node is None or not (modules / "mathjax").is_dir():
        pytest.fail("node and node_modules/mathjax are needed: run `npm ci`")
    page = tmp_path / "lessons" / "a.html"
    page.parent.mkdir()
    page.write_text(
        '<html><head></head><body><p>Inline <span class="math notranslate nohighlight">'
        "\\(x^2 &lt; y\\)</span>.</p><div class=\"math notranslate nohighlight\">"
        "\\[\\begin{aligned} a &amp;= b \\\\ c &amp;= d \\end{aligned}\\]</div></body></html>",
        encoding="utf-8",
    )
    fonts = tmp_path / "_vendor" / "mathjax" / offline_site.MATHJAX_FONTS
    run = [node, str(offline_site.TYPESET_MATH), str(modules), str(fonts), str(page)]
    subprocess.run(run, check=True, capture_output=True)
    html = page.read_text(encoding="utf-8")
    assert html.count("<mjx-container") == 2 and "<mjx-merror" not in html
    assert "\\(" not in html and "\\begin" not in html  # no TeX left
    assert "<mjx-assistive-mml" in html and "<mo>&lt;</mo>" in html
    assert '<style id="mathjax-chtml">' in html
    assert 'url("../_vendor/mathjax/output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff")' in html
    again = html
    subprocess.run(run, check=True, capture_output=True)  # a typeset page is left alone
    assert page.read_text(encoding="utf-8") == again

    page.write_text('<html><head></head><body><span class="math notranslate nohighlight">'
                    "\\(\\frac{1}\\)</span></body></html>", encoding="utf-8")
    failed = subprocess.run(run, capture_output=True, text=True)
    assert failed.returncode == 1 and "could not typeset" in failed.stderr


def test_code_lines_hang_and_copy_unchanged(offline_site: ModuleType) -> None:
    """Each line of a code block gets its own span with its indentation; a span of Pygments'
    that runs over a line break is closed and opened again; the text is the code unchanged."""
    code = (
        '<span></span><span class="k">def</span> <span class="nf">f</span>():\n'
        '    <span class="sd">&quot;&quot;&quot;One\n'
        '    two.&quot;&quot;&quot;</span>\n'
        "\n"
        '    <span class="k">return</span> 1  <span class="c1"># a comment</span>\n'
    )
    page = f'<div class="highlight"><pre>{code}</pre></div>'
    hung = offline_site.hang_code_lines(page)
    assert hung.startswith('<div class="highlight"><pre class="hang">')
    assert offline_site.hang_code_lines(hung) == hung  # a block is split once
    (body,) = re.findall(r"<pre[^>]*>(.*)</pre>", hung, re.DOTALL)
    text = re.sub(r"<[^>]+>", "", body)
    assert text == re.sub(r"<[^>]+>", "", code)
    lines = re.findall(r'<span class="line"(?: style="--indent:(\d+)")?>', body)
    assert lines == ["", "4", "4", "", "4"]
    # Every line's spans are balanced: the docstring's span is closed on its first line.
    for line in re.findall(r'<span class="line"[^>]*>(.*?)</span>\n', body):
        assert line.count("<span") <= line.count("</span>") + 1


def test_figures_are_numbered_per_document(offline_site: ModuleType) -> None:
    figure = offline_site.figure_html({"data": [], "layout": {"title": {"text": "A title"}}})
    page = offline_site.number_figures(f"<p>x</p>{figure}<p>y</p>{figure}")
    assert re.findall(r'<figure class="plotly-output" id="(figure-\d+)"', page) == [
        "figure-1", "figure-2"]
    assert re.findall(r"Figure (\d+)\. A title", page) == ["1", "2"]
    # The single-page build numbers each document's figures from 1.
    book = offline_site.number_figures(
        f'<span id="document-a"></span>{figure}<span id="document-b"></span>{figure}{figure}'
    )
    assert re.findall(r"Figure (\d+)\. A title", book) == ["1", "1", "2"]
    assert len(set(re.findall(r'id="(figure-[\d-]+)"', book))) == 3


def test_pdf_entry_shows_only_with_the_pdf(offline_site: ModuleType) -> None:
    entry = (
        '<li><a href="../attention-book.pdf" target="_blank"\n'
        '   class="btn btn-sm btn-download-book-pdf-button dropdown-item">'
        'Book PDF <span class="book-pdf-size"></span></a></li>'
    )
    hidden = offline_site.show_pdf_entry(entry, None)
    assert hidden.startswith("<li hidden><a ")
    shown = offline_site.show_pdf_entry(hidden, 11_960_000)
    assert shown.startswith("<li><a ")
    assert '<span class="book-pdf-size">(12.0 MB)</span>' in shown
    assert "make" not in shown


def test_a_trace_type_outside_the_bundle_stops_the_build(offline_site: ModuleType) -> None:
    figure = {"data": [{"type": "scatter3d", "x": [0], "y": [0], "z": [0]}], "layout": {}}
    with pytest.raises(Exception, match="scatter3d"):
        offline_site.PlotlyMimeRenderer.handle_mime(
            _RecordingRenderer(), _mime(PLOTLY, figure), False)


def test_a_slider_runs_the_way_its_axis_does(offline_site: ModuleType) -> None:
    """A parameter an axis draws from its largest value down gets a slider that runs right
    to left, with its ends swapped; another keeps the usual direction."""
    twin = {
        "params": [{"name": "n_kv_heads", "label": "G", "values": [1, 2, 4],
                    "text": ["1", "2", "4"]}],
        "steps": [[0], [1], [2]], "traces": [[0, 1], [1, 2], [2, 3]], "active": 1,
        "size": [{"height": 400}] * 3,
    }

    def figure(x: list[str]) -> dict:
        return {
            "data": [{"type": "scatter", "x": x, "y": [1, 2, 3]}] * 3,
            "layout": {"xaxis": {"type": "category", "title": {"text": "G"}},
                       "meta": {"twin": twin},
                       "sliders": [{"steps": [{"args": [{}, {}]}] * 3}]},
        }

    backwards = figure(["4", "2", "1"])
    assert offline_site.reversed_params(backwards, twin) == {0}
    html = offline_site.figure_html(backwards)
    assert 'dir="rtl"' in html
    assert '<span class="twin-ends" aria-hidden="true"><span>4</span><span>1</span>' in html
    assert offline_site.reversed_params(figure(["1", "2", "4"]), twin) == set()
    assert 'dir="rtl"' not in offline_site.figure_html(figure(["1", "2", "4"]))
