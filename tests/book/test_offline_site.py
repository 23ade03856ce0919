"""The local Sphinx extension book/_ext/offline_site.py, without a build."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest
from myst_nb.core import render as nb_render

EXTENSION = Path(__file__).resolve().parents[2] / "book" / "_ext" / "offline_site.py"
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def offline_site() -> ModuleType:
    spec = importlib.util.spec_from_file_location("offline_site", EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    assert caption["title"] == "One query; dotted: uniform."
    assert caption["shows"] == (
        "Horizontal axis key j; vertical axis weight. Legend: with scaling, without."
    )
    assert "3 steps" in caption["screen"]
    assert caption["print"].endswith("printed here at the default step, τ = 1.0.")


class _Script:
    """Stands in for Sphinx's _JavaScript: a path under _static/ and its attributes."""

    def __init__(self, filename: str, **attributes: str) -> None:
        self.filename = filename
        self.attributes = attributes


def test_pages_get_only_the_scripts_their_content_needs(offline_site: ModuleType) -> None:
    added = []

    class Builder:
        name = "html"

        def add_js_file(self, uri: str, **kwargs: str) -> None:
            added.append(uri)

    class App:
        builder = Builder()

        class config:  # noqa: N801 - mirrors app.config
            mathjax_path = "../_vendor/mathjax/tex-chtml.js"

    def scripts() -> list:
        return [
            _Script("_static/doctools.js"),
            _Script("", body="window.MathJax = {}"),
            _Script("_static/../_vendor/mathjax/tex-chtml.js", defer="defer"),
        ]

    plain = {"body": "<p>text</p>", "script_files": scripts()}
    offline_site.page_scripts(App, "p", "page.html", plain, None)
    assert [s.filename for s in plain["script_files"]] == ["_static/doctools.js"]
    assert added == []

    rich = {"body": f'<span class="math">x</span>{offline_site.PLOTLY_BLOCK}{{}}</script>',
            "script_files": scripts()}
    offline_site.page_scripts(App, "p", "page.html", rich, None)
    assert len(rich["script_files"]) == 3
    assert added == list(offline_site.PLOTLY_SCRIPTS)
