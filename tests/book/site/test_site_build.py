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
            assert "_vendor/plotly/plotly-cartesian.min.js" in page, name
            # Each figure goes with a caption that says what it shows and that, in print,
            # it is interactive on the site.
            assert page.count('<figcaption class="plotly-caption">') == figures, name
            assert page.count("Interactive on the site") == figures, name


def test_pages_load_only_the_scripts_they_use(html_dir: Path) -> None:
    """A page asks for plotly.js only when it holds a figure and for MathJax only when it
    holds math; no page asks for the theme's Font Awesome script (its web fonts suffice)."""
    wrong = {}
    for page in _pages(html_dir):
        text = page.read_text(encoding="utf-8")
        collector = _ResourceCollector()
        collector.feed(text)
        scripts = " ".join(collector.urls)
        found = []
        if ("plotly-cartesian.min.js" in scripts) != (f'<script type="{PLOTLY}">' in text):
            found.append("plotly.js and figures disagree")
        if ("_vendor/mathjax/" in scripts) != ('class="math' in text):
            found.append("MathJax and math disagree")
        if "fontawesome.js" in scripts:
            found.append("the Font Awesome script")
        if found:
            wrong[page.relative_to(html_dir).as_posix()] = found
    assert not wrong, wrong


def test_no_page_carries_a_widget(html_dir: Path) -> None:
    found = {}
    for page in _pages(html_dir):
        text = page.read_text(encoding="utf-8")
        hits = [marker for marker in WIDGET_MARKERS if marker in text]
        if hits:
            found[page.relative_to(html_dir).as_posix()] = hits
    assert not found, f"widget views, state or embedder scripts on the site: {found}"


def test_exercises_are_numbered_by_lesson(html_dir: Path, lessons: dict) -> None:
    """Lesson NN's exercises read "Exercise NN.1", "NN.2", ... on its page, in order, and every
    ``attnlib.exercises.check("NN.k", ...)`` in the notebook names one of them
    (book/_ext/exercise_numbers.py renumbers sphinx-exercise's book-wide count)."""
    import re

    for name, nb in lessons.items():
        lesson = name[:2]
        page = (html_dir / "lessons" / f"{Path(name).stem}.html").read_text(encoding="utf-8")
        shown = re.findall(r'<span class="caption-number">Exercise (\S+) </span>', page)
        expected = [f"{lesson}.{k}" for k in range(1, len(shown) + 1)]
        assert shown == expected, f"{name}: exercises numbered {shown}, expected {expected}"
        checked = {
            label
            for cell in nb.cells
            if cell.cell_type == "code"
            for label in re.findall(r'exercises\.check\(\s*"(\d\d\.\d+)"', cell.source)
        }
        assert checked, f"{name}: no exercise is checked with attnlib.exercises.check"
        unknown = sorted(checked - set(shown))
        assert not unknown, f"{name}: checks {unknown} name no exercise on the page"
