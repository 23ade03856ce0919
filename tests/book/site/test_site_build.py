"""The built site, read as files: a clean build log, every page, nothing loaded remotely.

The browser checks (test_site_browser.py) see what a reader sees; these read the HTML the
build wrote, so a failure names the exact tag at fault.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

# Tag attributes that make the browser fetch something when the page loads. Links (<a href>)
# are followed only on a click, so a link to Colab or GitHub is fine.
FETCHING_ATTRIBUTES = {
    "script": ("src",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "embed": ("src",),
    "object": ("data",),
    "link": ("href",),
}
PLOTLY = "application/vnd.plotly.v1+json"
# What a page would need to show a widget: views, saved state, an embedder or require.js.
WIDGET_MARKERS = (
    "application/vnd.jupyter.widget-view+json",
    "application/vnd.jupyter.widget-state+json",
    "embed-amd.js",
    "html-manager",
    "jupyter-widgets/embed.js",
    "require.min.js",
)
# <link rel=...> values that only describe the page and fetch nothing.
NON_FETCHING_RELS = {"index", "search", "next", "prev", "canonical", "author", "license"}


class _ResourceCollector(HTMLParser):
    """Collects every URL a page fetches on load."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "link" and set((attributes.get("rel") or "").split()) <= NON_FETCHING_RELS:
            return
        for name in FETCHING_ATTRIBUTES.get(tag, ()):
            value = attributes.get(name)
            if value:
                self.urls += [part.split()[0] for part in value.split(",") if part.strip()]


def _pages(html_dir: Path) -> list[Path]:
    return [
        path
        for path in sorted(html_dir.rglob("*.html"))
        if path.relative_to(html_dir).parts[0] not in {"_static", "_vendor", "_sources"}
    ]


def test_build_log_has_no_warnings(html_dir: Path) -> None:
    log = html_dir.parent / "logs" / "book-build.log"
    assert log.is_file(), f"no build log at {log}: build with `make book`"
    text = log.read_text(encoding="utf-8", errors="replace")
    warnings = [line for line in text.splitlines() if "WARNING" in line or "ERROR" in line]
    assert not warnings, "\n".join(warnings)
    assert "build succeeded" in text, "the log does not end with a successful build"


def test_every_toc_page_is_built(html_dir: Path, toc_files: list[str]) -> None:
    missing = [name for name in toc_files if not (html_dir / f"{name}.html").is_file()]
    assert not missing, missing


def test_pages_fetch_nothing_from_other_hosts(html_dir: Path) -> None:
    remote = {}
    for page in _pages(html_dir):
        collector = _ResourceCollector()
        collector.feed(page.read_text(encoding="utf-8"))
        found = [url for url in collector.urls if urlsplit(url).scheme or url.startswith("//")]
        found = [url for url in found if urlsplit(url).scheme != "data"]
        if found:
            remote[page.relative_to(html_dir).as_posix()] = found
    assert not remote, remote


def test_local_resources_exist(html_dir: Path) -> None:
    """Every script, stylesheet and image a page loads is in the site."""
    missing = {}
    for page in _pages(html_dir):
        collector = _ResourceCollector()
        collector.feed(page.read_text(encoding="utf-8"))
        for url in collector.urls:
            parts = urlsplit(url)
            if parts.scheme or url.startswith("//"):
                continue
            target = (page.parent / parts.path).resolve()
            if not target.is_file():
                missing.setdefault(page.relative_to(html_dir).as_posix(), []).append(url)
    assert not missing, missing


def test_lesson_pages_carry_figures_and_no_widgets(html_dir: Path, lessons: dict) -> None:
    """Each plotly output of a lesson reaches its page; no widget and no embedder do.

    A live explorer's cell keeps its code on the site (tag remove-output hides the output),
    so no page holds a widget view, widget state or a script that would draw them.
    """
    for name, notebook in lessons.items():
        page = (html_dir / "lessons" / f"{name}.html").read_text(encoding="utf-8")
        outputs = [
            output
            for cell in notebook.cells
            if cell.cell_type == "code" and "remove-output" not in cell.metadata.get("tags", [])
            for output in cell.outputs
        ]
        figures = sum(PLOTLY in output.get("data", {}) for output in outputs)
        assert page.count(f'<script type="{PLOTLY}">') == figures, name
        if figures:
            assert "_vendor/plotly/plotly.min.js" in page, name


def test_no_page_carries_a_widget(html_dir: Path) -> None:
    found = {}
    for page in _pages(html_dir):
        text = page.read_text(encoding="utf-8")
        hits = [marker for marker in WIDGET_MARKERS if marker in text]
        if hits:
            found[page.relative_to(html_dir).as_posix()] = hits
    assert not found, f"widget views, state or embedder scripts on the site: {found}"
