"""The built site, read as files: a clean build log, every page, nothing loaded remotely.

The browser checks (test_site_browser.py) see what a reader sees; these read the HTML the
build wrote, so a failure names the exact tag at fault.
"""

from __future__ import annotations

import re
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


def test_no_page_shows_the_checkout_path(html_dir: Path, book_root: Path) -> None:
    """Nothing built names the folder the book was built in (a path differs per machine)."""
    root = str(book_root.resolve())
    found = [page.relative_to(html_dir).as_posix() for page in _pages(html_dir)
             if root in page.read_text(encoding="utf-8")]
    assert not found, f"pages that show the build machine's path {root}: {found}"


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
            # The drawer, which fetches plotly.js when a figure nears the window.
            assert "_vendor/plotly/render-plotly.js" in page, name
            assert re.search(r'data-bundle="plotly-book\.min\.js\?v=[0-9a-f]{12}"', page), name
            # Each figure goes with a caption that says what it shows and that, in print,
            # it is interactive on the site.
            assert page.count('<figcaption class="plotly-caption">') == figures, name
            assert page.count("Interactive on the site") == figures, name


def test_pages_load_only_the_scripts_they_use(html_dir: Path) -> None:
    """A page asks for plotly.js only when it holds a figure, for no math script (its math
    is typeset at build time), and not for the theme's Font Awesome script (its web fonts
    suffice)."""
    wrong = {}
    for page in _pages(html_dir):
        text = page.read_text(encoding="utf-8")
        collector = _ResourceCollector()
        collector.feed(text)
        scripts = " ".join(collector.urls)
        found = []
        if ("render-plotly.js" in scripts) != (f'<script type="{PLOTLY}">' in text):
            found.append("the figure drawer and figures disagree")
        if "plotly-book.min.js" in scripts:
            found.append("plotly.js loaded by the page (the drawer fetches it when needed)")
        if "mathjax" in scripts.lower():
            found.append("a math script (the math is typeset at build time)")
        if 'class="math notranslate' in text and "<mjx-container" not in text:
            found.append("math left as TeX")
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


class _BenchmarkTableReader(HTMLParser):
    """The cells of the page's ``<table class="benchmark-table ...">``, row by row, and its
    caption; each cell tagged th or td."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str]]] = []
        self.caption = ""
        self._depth = 0  # inside the benchmark table when > 0
        self._cell: tuple[str, list[str]] | None = None
        self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            classes = (dict(attrs).get("class") or "").split()
            if self._depth or "benchmark-table" in classes:
                self._depth += 1
        elif self._depth and tag == "tr":
            self.rows.append([])
        elif self._depth and tag in ("th", "td"):
            self._cell = (tag, [])
        elif self._depth and tag == "caption":
            self._in_caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._depth:
            self._depth -= 1
        elif self._depth and tag in ("th", "td") and self._cell is not None:
            kind, text = self._cell
            self.rows[-1].append((kind, " ".join("".join(text).split())))
            self._cell = None
        elif tag == "caption":
            self._in_caption = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[1].append(data)
        elif self._in_caption:
            self.caption += data


def test_performance_page_shows_the_saved_benchmarks(
    html_dir: Path, book_root: Path, load_script
) -> None:
    """book/performance.md's table is built from benchmarks/results/*.json (by
    book/_ext/benchmarks_table.py with benchmarks/report.py): run.py's columns, a GPU's only
    when its results exist, a row per measurement, and each file's machine and date line."""
    import html

    report = load_script(book_root / "benchmarks" / "report.py")
    folder = book_root / "benchmarks" / "results"
    runs = {path.stem: report.load(path) for path in sorted(folder.glob("*.json"))}
    assert "cpu" in runs, f"no {folder / 'cpu.json'}: run benchmarks/run.py --save"
    devices = ["cpu", *sorted(set(runs) - {"cpu"})]

    page = (html_dir / "book" / "performance.html").read_text(encoding="utf-8")
    reader = _BenchmarkTableReader()
    reader.feed(page)
    assert reader.rows, "the performance page has no benchmark table"
    assert "The benchmarks, measured on" in reader.caption
    header, *body = reader.rows
    expected = list(report.HEADER[:2])
    for device in devices:
        suffix = "" if len(devices) == 1 else f" ({device})"
        expected += [f"{name}{suffix}" for name in report.HEADER[2:]]
    assert header == [("th", name) for name in expected]
    cpu_rows = report.rows(runs["cpu"])
    assert len(body) >= len(cpu_rows)
    for row, cells in zip(body, cpu_rows, strict=False):
        assert [kind for kind, _ in row[:2]] == ["th", "th"]  # benchmark and case head a row
        assert [text for _, text in row[: len(report.HEADER)]] == list(cells)

    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    for results in runs.values():
        assert report.machine_line(results) in text
        assert report.targets_line(results) in text
    if devices == ["cpu"]:
        assert "these are CPU figures" in text
