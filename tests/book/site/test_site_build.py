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


def test_build_log_has_no_warnings(book_root: Path) -> None:
    log = book_root / "_build" / "logs" / "book-build.log"
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


def test_lesson_pages_carry_figures_and_widget_state(
    html_dir: Path, toc_files: list[str], lessons: dict
) -> None:
    """Each plotly output and each widget of a lesson reaches its page."""
    for name, notebook in lessons.items():
        page = (html_dir / "lessons" / f"{name}.html").read_text(encoding="utf-8")
        outputs = [
            output
            for cell in notebook.cells
            if cell.cell_type == "code"
            for output in cell.outputs
        ]
        figures = sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs)
        assert page.count('<script type="application/vnd.plotly.v1+json">') == figures, name
        if figures:
            assert "_vendor/plotly/plotly.min.js" in page, name
        widgets = sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                      for o in outputs)
        assert page.count('<script type="application/vnd.jupyter.widget-view+json">') == widgets
        if widgets:
            assert '<script type="application/vnd.jupyter.widget-state+json">' in page, name
            assert "_vendor/jupyter-widgets/embed.js" in page, name
