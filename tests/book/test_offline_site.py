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
    assert renderer.js_files == {
        "plotly": "../_vendor/plotly/plotly.min.js",
        "plotly_render": "../_vendor/plotly/render-plotly.js",
    }


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
