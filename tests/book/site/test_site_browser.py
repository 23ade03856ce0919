"""The built site in a real browser: Debian's chromium driven by Playwright.

This file visits the pages of the table of contents (and index.html, which leads to its
root); test_site_sources.py visits the rest of the site (the package's highlighted sources,
the index, the search page) with the same checks, in a process of its own.
test_site_figures.py checks the figures and their controls, test_site_reader.py the
navigation, colour modes and search.

Each page is visited once, in a fresh browser profile, and checked on that visit: it loads
without console errors and without a request to any host but the site's own; math is
typeset (at build time: no page loads a math script); plotly figures are drawn, each with a
text alternative; no page shows a widget that cannot respond (a live explorer needs a
kernel, so the site shows its code and the plotly twin instead); lesson pages carry Colab
launch links. A lesson's first visit (its first screen, before the reader scrolls)
transfers at most 2 MB, and at most 3.1 MB once read to its end with every figure drawn;
the home page's first visit at most 1.5 MB, any other page's at most 3.2 MB (the bodies of
every response, uncompressed, as the browser receives them); opening a second lesson after
reading the first adds at most 1.1 MB of new files; plotly.js loads only where a figure is,
and only once a figure comes near the window; nothing moves as the page settles
(cumulative layout shift below 0.1, at desktop width on every page and at a phone's on every
page of the table of contents); axe-core finds no violation of impact "serious" or
"critical" (on every page but the highlighted source pages of _modules/attnlib/, which share
one template and one set of colours: axe-core audits the largest of them); and at a phone's
width (390 px) the page does not scroll sideways. A page opened from file:// works too.
What each page weighed, its layout shift and what axe-core reported land in
_build/logs/site-browser.json (and site-sources.json). Screenshots of the first lesson, at
desktop and phone widths, land in _build/screenshots/ (and the desktop one in book/images/
for the README when that file is missing or UPDATE_SCREENSHOT=1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from browsing import (
    DESKTOP,
    PHONE,
    PLOTLY_BLOCK,
    REDRAWN,
    PageRecorder,
    figure_pages,
    first_screen,
    html_pages,
    lesson_pages,
    settle,
)
from playwright.sync_api import Browser, Page

COLAB_PREFIX = "https://colab.research.google.com/github/"
# Page-weight budgets, in bytes of response bodies (uncompressed): a lesson's first visit,
# the home page's (the root of the table of contents, where index.html leads), any other
# page's, and what a second lesson adds. A lesson's first screen is about 0.85 MB of styles,
# fonts and scripts plus its page (0.4-1.0 MB): 1.2-1.85 MB. plotly.js (1.18 MB, built with
# the three trace types the book draws) comes when the reader nears a figure, which brings
# a lesson read to its end to 2.4-3.0 MB. The heaviest, lesson 09, holds the most typeset
# math and, with its readers' questions, about 0.96 MB of page.
LESSON_BUDGET = 2_000_000
LESSON_READ_BUDGET = 3_100_000
HOME_BUDGET = 1_500_000
# Any other page: the API reference is the heaviest, 2.4 MB of page since it documents the
# lessons' experiments (attnlib.analysis.experiments, 0.32 MB of it).
PAGE_BUDGET = 3_200_000
NEXT_LESSON_BUDGET = 1_100_000
# The usual bound on cumulative layout shift (a page whose text jumps as it settles).
LAYOUT_SHIFT_BOUND = 0.1
# axe-core (npm, package-lock.json) impacts that fail the test; "moderate" and "minor"
# findings are reported in _build/logs/site-browser.json.
FAILING_IMPACTS = ("serious", "critical")
# The scripts that only some pages need, by the path the site serves them from.
PLOTLY_JS = "/_vendor/plotly/plotly-book.min.js"
MATH_SCRIPTS = ("/mathjax/tex-", "/mathjax/startup", "MathJax.js")
# The top of the page's first figure box, in px from the top of the window (null: none).
FIRST_FIGURE_TOP = """() => {
    const tops = Array.from(document.querySelectorAll('figure.plotly-output .plotly-figure'))
        .map(box => box.getBoundingClientRect().top);
    return tops.length ? Math.min(...tops) : null;
}"""
# Sums the layout shifts of a page (not those right after the reader's input), from the
# first paint on; read as window.bookLayoutShift.
LAYOUT_SHIFT = """(() => {
    window.bookLayoutShift = 0;
    new PerformanceObserver(list => {
        for (const entry of list.getEntries()) {
            if (!entry.hadRecentInput) { window.bookLayoutShift += entry.value; }
        }
    }).observe({type: 'layout-shift', buffered: true});
})()"""


def _check_math(page: Page) -> int:
    """The page's math, typeset at build time: no TeX left, no MathJax error; return how many
    formulas it shows."""
    leftover = page.locator(".math:not(:has(mjx-container))").count()
    assert leftover == 0, f"{leftover} formulas left as TeX"
    errors = page.locator("mjx-merror").count()
    assert errors == 0, f"{errors} formulas failed to typeset"
    return page.locator("mjx-container").count()


def _wait_for_plots(page: Page) -> int:
    """Wait for every plotly JSON block to be drawn; return how many figures were drawn."""
    settle(page)
    return page.locator(".js-plotly-plot").count()


# What a page shows when it holds a widget: drawn controls, or the data to draw them from.
# Without a kernel such a widget cannot respond, so none may appear.
DEAD_WIDGETS = ", ".join([
    ".jupyter-widgets",
    ".widget-area",
    ".widget-subarea",
    ".widget-slider",
    ".widget-inline-hbox",
    'script[type="application/vnd.jupyter.widget-view+json"]',
    'script[type="application/vnd.jupyter.widget-state+json"]',
])


def _dead_widgets(page: Page) -> list[str]:
    """Describe every widget element on the page (empty when there is none)."""
    return page.locator(DEAD_WIDGETS).evaluate_all(
        "els => els.map(e => e.tagName.toLowerCase() + '.' + "
        "(e.getAttribute('class') || e.getAttribute('type') || '').split(' ').join('.'))"
    )


AXE_RUN = "() => axe.run(document, {resultTypes: ['violations']})"


@dataclass
class Visit:
    """What one first visit to a page showed (a fresh browser profile, desktop width)."""

    page: str
    shown: str = ""  # the page on screen at the end (index.html redirects to the intro)
    problems: list[str] = field(default_factory=list)
    # What the first screen fetched (before the reader scrolls), and everything the page
    # fetched once every figure was drawn (the page read to its end).
    bytes_by_url: dict[str, int] = field(default_factory=dict)
    read_bytes_by_url: dict[str, int] = field(default_factory=dict)
    first_figure_top: float | None = None  # px from the top of the window, before scrolling
    audited: bool = False  # axe-core ran on it
    violations: list[dict] = field(default_factory=list)
    formulas: int = 0  # typeset formulas (mjx-container)
    untypeset: int = 0  # formulas left as TeX
    math_errors: int = 0  # formulas MathJax failed on
    plot_blocks: int = 0  # plotly JSON blocks in the page
    plots_drawn: int = 0  # figures plotly.js drew
    unlabelled_figures: list[str] = field(default_factory=list)  # see TEXT_ALTERNATIVES
    colab_links: list[str] = field(default_factory=list)
    phone_width: int = 0
    layout_shift: float = 0.0
    phone_layout_shift: float | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_url.values())

    def heaviest(self, n: int = 5) -> list[str]:
        ranked = sorted(self.bytes_by_url.items(), key=lambda item: -item[1])[:n]
        return [f"{size / 1e6:.2f} MB {urlsplit(url).path}" for url, size in ranked]

    def loaded(self, path_part: str, *, first_screen: bool = False) -> bool:
        """Whether the page fetched a file whose path holds ``path_part`` once read (on its
        first screen, with ``first_screen``)."""
        urls = self.bytes_by_url if first_screen else self.read_bytes_by_url or self.bytes_by_url
        return any(path_part in urlsplit(url).path for url in urls)


def _load(page: Page, site_url: str, html_dir: Path, relative: str, *, read: bool = True):
    """Open a page (following the redirect Jupyter Book writes at the site root) and wait
    until it has settled, every figure drawn (``read``) or only its first screen; return the
    response."""
    response = page.goto(f"{site_url}/{relative}")
    redirect = re.search(
        r'http-equiv="Refresh" content="0; url=([^"]+)"',
        (html_dir / relative).read_text(encoding="utf-8"),
        re.IGNORECASE,
    )
    if redirect:
        page.wait_for_url(f"**/{redirect.group(1)}")
        page.wait_for_load_state("load")
    if read:
        settle(page)
    else:
        first_screen(page)
    page.wait_for_timeout(300)  # a late shift would show by now
    return response


def _audited(html_dir: Path, pages: list[str]) -> set[str]:
    """The pages axe-core audits: every page but the source pages of the package, of which
    the largest stands for the rest (one template, the same highlighting classes)."""
    sources = [p for p in pages if p.startswith("_modules/attnlib/")]
    largest = max(sources, key=lambda p: (html_dir / p).stat().st_size, default=None)
    return {p for p in pages if p not in sources or p == largest}


def _visit(
    browser: Browser, site_url: str, html_dir: Path, relative: str, axe_js: Path | None
) -> Visit:
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.add_init_script(LAYOUT_SHIFT)
        page = context.new_page()
        recorder = PageRecorder(page)
        response = _load(page, site_url, html_dir, relative, read=False)
        visit = Visit(relative, bytes_by_url=recorder.bytes_by_url())
        visit.first_figure_top = page.evaluate(FIRST_FIGURE_TOP)
        settle(page)  # the reader scrolls on: every figure drawn
        visit.read_bytes_by_url = recorder.bytes_by_url()
        visit.layout_shift = round(page.evaluate("window.bookLayoutShift"), 4)
        visit.shown = urlsplit(page.url).path.removeprefix("/")
        if response is None or response.status != 200:
            visit.problems.append(f"HTTP {response and response.status}")
        visit.problems += [
            f"request to another host: {url}" for url in recorder.foreign_requests(site_url)
        ]
        visit.problems += [f"a widget that cannot respond: {w}" for w in _dead_widgets(page)]
        # What the page shows once it has settled: its math and its figures.
        visit.formulas = page.locator("mjx-container").count()
        visit.untypeset = page.locator(".math:not(:has(mjx-container))").count()
        visit.math_errors = page.locator("mjx-merror").count()
        visit.plot_blocks = page.locator('script[type="application/vnd.plotly.v1+json"]').count()
        visit.plots_drawn = page.locator(".js-plotly-plot").count()
        visit.unlabelled_figures = page.evaluate(TEXT_ALTERNATIVES)
        visit.colab_links = page.locator(f'a[href^="{COLAB_PREFIX}"]').evaluate_all(
            "els => els.map(e => e.getAttribute('href'))"
        )
        # axe-core goes in after the weighing, so it counts towards no page.
        if axe_js is not None:
            page.add_script_tag(path=str(axe_js))
            visit.audited = True
            visit.violations = [
                {
                    "id": v["id"],
                    "impact": v["impact"],
                    "help": v["help"],
                    "targets": [" ".join(map(str, node["target"])) for node in v["nodes"]],
                }
                for v in page.evaluate(AXE_RUN)["violations"]
            ]
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(100)  # let the page lay itself out at the new width
        visit.phone_width = page.evaluate("document.documentElement.scrollWidth")
        visit.problems += recorder.errors
        return visit
    finally:
        context.close()


def _phone_layout_shift(browser: Browser, site_url: str, html_dir: Path, relative: str) -> float:
    """The layout shift of a first visit at a phone's width."""
    context = browser.new_context(viewport=PHONE)
    try:
        context.add_init_script(LAYOUT_SHIFT)
        page = context.new_page()
        _load(page, site_url, html_dir, relative)
        return round(page.evaluate("window.bookLayoutShift"), 4)
    finally:
        context.close()


def visit_pages(
    browser: Browser, site_url: str, html_dir: Path, book_root: Path, pages: list[str],
    *, phone_pages: set[str], report: str,
) -> list[Visit]:
    """Visit ``pages`` once each (and ``phone_pages`` again at a phone's width); the record
    goes to _build/logs/``report``."""
    axe_js = book_root / "node_modules" / "axe-core" / "axe.min.js"
    if not axe_js.is_file():
        pytest.fail(f"{axe_js} is missing: run `npm ci` (the Makefile's targets do)")
    audited = _audited(html_dir, pages)
    result = [
        _visit(browser, site_url, html_dir, relative, axe_js if relative in audited else None)
        for relative in pages
    ]
    for visit in result:
        if visit.page in phone_pages:
            visit.phone_layout_shift = _phone_layout_shift(browser, site_url, html_dir, visit.page)
    path = html_dir.parent / "logs" / report
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            [asdict(visit) | {"total_bytes": visit.total_bytes, "requests": len(visit.bytes_by_url)}
             for visit in result],
            indent=1,
        ),
        encoding="utf-8",
    )
    return result


def contents_pages(toc_files: list[str]) -> list[str]:
    """The pages of the table of contents, and index.html, which leads to its root."""
    return ["index.html", *(f"{name}.html" for name in toc_files)]


@pytest.fixture(scope="module")
def visits(
    browser: Browser, site_url: str, html_dir: Path, book_root: Path, toc_files: list[str]
) -> list[Visit]:
    """Every page of the table of contents, visited once (test_site_sources.py visits the
    rest of the site)."""
    pages = contents_pages(toc_files)
    assert set(pages) <= set(html_pages(html_dir)), "a page of the contents was not built"
    return visit_pages(browser, site_url, html_dir, book_root, pages,
                       phone_pages=set(pages[1:]), report="site-browser.json")


# The checks every visited page must pass; this file and test_site_sources.py assert them.


def load_problems(visits: list[Visit]) -> dict[str, list[str]]:
    return {visit.page: visit.problems for visit in visits if visit.problems}


def _budget(visit: Visit, toc_files: list[str]) -> int:
    if visit.shown == f"{toc_files[0]}.html" or visit.page == f"{toc_files[0]}.html":
        return HOME_BUDGET
    return LESSON_BUDGET if visit.page.startswith("lessons/") else PAGE_BUDGET


def over_budget(visits: list[Visit], toc_files: list[str]) -> dict[str, list[str]]:
    """A lesson's first visit at most 2 MB (3.1 MB read to its end), the home page's at
    most 1.5 MB, any other's 3.2 MB."""
    over = {
        visit.page: [f"{visit.total_bytes / 1e6:.2f} MB of {_budget(visit, toc_files) / 1e6} MB",
                     *visit.heaviest()]
        for visit in visits
        if visit.total_bytes > _budget(visit, toc_files)
    }
    for visit in visits:
        read = sum(visit.read_bytes_by_url.values())
        if _budget(visit, toc_files) == LESSON_BUDGET and read > LESSON_READ_BUDGET:
            over.setdefault(visit.page, []).append(
                f"read to its end {read / 1e6:.2f} MB of {LESSON_READ_BUDGET / 1e6} MB")
    return over


def moved(visits: list[Visit]) -> dict[str, tuple]:
    """Pages whose cumulative layout shift reaches 0.1, at either width measured."""
    return {
        visit.page: (visit.layout_shift, visit.phone_layout_shift)
        for visit in visits
        if visit.layout_shift >= LAYOUT_SHIFT_BOUND
        or (visit.phone_layout_shift or 0) >= LAYOUT_SHIFT_BOUND
    }


def wrong_scripts(visits: list[Visit], html_dir: Path) -> list[str]:
    """plotly.js only where a figure is; no math script anywhere (the math is typeset at
    build time); the search index only on the search page."""
    wrong = []
    for visit in visits:
        text = (html_dir / visit.shown).read_text(encoding="utf-8")
        has_figure = PLOTLY_BLOCK in text
        if visit.loaded(PLOTLY_JS) != has_figure:
            wrong.append(f"{visit.page}: figure {has_figure}, plotly.js loaded {not has_figure}")
        if any(visit.loaded(script) for script in MATH_SCRIPTS):
            wrong.append(f"{visit.page}: loads a math script")
        loads_index = visit.loaded("/searchindex.js")
        if loads_index != (visit.shown == "search.html"):
            wrong.append(f"{visit.page}: loads the search index: {loads_index}")
    return wrong


def serious_violations(visits: list[Visit]) -> dict[str, list[str]]:
    failing = {
        visit.page: [
            f"{v['impact']}: {v['id']} ({v['help']}) at {v['targets'][:3]}"
            for v in visit.violations
            if v["impact"] in FAILING_IMPACTS
        ]
        for visit in visits
    }
    return {page: found for page, found in failing.items() if found}


def too_wide(visits: list[Visit]) -> dict[str, int]:
    return {v.page: v.phone_width for v in visits if v.phone_width > PHONE["width"] + 1}


def test_every_page_loads_offline(visits: list[Visit]) -> None:
    problems = load_problems(visits)
    assert not problems, problems


def test_first_visit_weight_budget(visits: list[Visit], toc_files: list[str]) -> None:
    """A lesson's first visit at most 2 MB (3.1 MB read to its end), the home page's at most
    1.5 MB, any other's 3.2 MB."""
    over = over_budget(visits, toc_files)
    assert not over, f"first visits over budget: {over}"
    homes = [v for v in visits if _budget(v, toc_files) == HOME_BUDGET]
    assert homes, "the home page was not visited"


def test_second_lesson_weight_budget(visits: list[Visit], toc_files: list[str]) -> None:
    """After the first lesson, opening any other lesson fetches at most 1.1 MB of new files:
    the files of its first visit that the first lesson's did not fetch."""
    lessons = lesson_pages(toc_files)
    if len(lessons) < 2:
        pytest.skip("the table of contents lists a single lesson")
    by_page = {visit.page: visit for visit in visits}
    first = by_page[lessons[0]].read_bytes_by_url  # the first lesson, read to its end
    over = {}
    for relative in lessons[1:]:
        new = {url: n for url, n in by_page[relative].bytes_by_url.items() if url not in first}
        visit = Visit(relative, bytes_by_url=new)
        if visit.total_bytes > NEXT_LESSON_BUDGET:
            over[relative] = [f"{visit.total_bytes / 1e6:.2f} MB new", *visit.heaviest()]
    assert not over, f"second lessons over {NEXT_LESSON_BUDGET / 1e6:.0f} MB: {over}"


def test_nothing_moves_as_pages_settle(visits: list[Visit]) -> None:
    """Cumulative layout shift below 0.1: figures reserve their height before they are
    drawn, and the math is typeset before the page is served."""
    shifted = moved(visits)
    assert not shifted, f"pages whose layout shifts by {LAYOUT_SHIFT_BOUND} or more: {shifted}"
    assert any(v.phone_layout_shift is not None for v in visits), "no page measured at 390 px"


def test_pages_load_only_the_scripts_they_use(visits: list[Visit], html_dir: Path) -> None:
    """plotly.js only where a figure is; no math script anywhere; no search index here."""
    wrong = wrong_scripts(visits, html_dir)
    assert not wrong, wrong
    assert any(visit.loaded(PLOTLY_JS) for visit in visits), "no page drew a figure"


def test_plotly_js_waits_for_a_figure_near_the_window(visits: list[Visit]) -> None:
    """A first screen fetches plotly.js exactly when a figure's box starts within two
    screens of the top (the window and one screen below it, where render-plotly.js draws
    figures unasked); a page whose figures lie further down fetches it only as the reader
    comes near them, and a page without figures never does."""
    reach = 2 * DESKTOP["height"]
    wrong, waited = [], []
    for visit in visits:
        top = visit.first_figure_top
        fetched = visit.loaded(PLOTLY_JS, first_screen=True)
        if top is None:
            if fetched:
                wrong.append(f"{visit.page}: no figure, plotly.js fetched")
            continue
        if abs(top - reach) < 40:  # at the edge of the reach: either answer is right
            continue
        if fetched != (top < reach):
            wrong.append(f"{visit.page}: first figure {top:.0f} px down, plotly.js "
                         f"{'fetched' if fetched else 'not fetched'}")
        if not fetched:
            waited.append(visit.page)
    assert not wrong, wrong
    assert waited, f"every page with a figure has one within {reach} px of its top"


def test_a_figure_is_drawn_when_the_reader_reaches_it(
    browser: Browser, site_url: str, html_dir: Path, toc_files: list[str]
) -> None:
    """On a lesson whose figures lie below its first screens, nothing fetches plotly.js until
    the reader scrolls to the first figure; then that figure is drawn, unasked, and the
    figures far below it wait."""
    reach = 2 * DESKTOP["height"]
    context = browser.new_context(viewport=DESKTOP)
    try:
        for relative in (p for p in figure_pages(html_dir, toc_files) if p.startswith("lessons/")):
            page = context.new_page()
            recorder = PageRecorder(page)
            _load(page, site_url, html_dir, relative, read=False)
            if page.evaluate(FIRST_FIGURE_TOP) <= reach:
                page.close()
                continue
            fetched = Visit(relative, bytes_by_url=recorder.bytes_by_url())
            assert not fetched.loaded(PLOTLY_JS), f"{relative}: plotly.js before any figure"
            assert page.locator(".js-plotly-plot").count() == 0, relative
            page.locator("figure.plotly-output .plotly-figure").first.scroll_into_view_if_needed()
            page.wait_for_function(
                "() => document.querySelector('figure.plotly-output .plotly-figure .main-svg')",
                timeout=30_000,
            )
            page.evaluate("async () => { await window.bookFiguresIdle(); }")
            assert Visit(relative, bytes_by_url=recorder.bytes_by_url()).loaded(PLOTLY_JS)
            tops = page.evaluate("""() => Array.from(document.querySelectorAll(
                'figure.plotly-output .plotly-figure')).map(b => [
                b.getBoundingClientRect().top, !!b.querySelector('.main-svg')])""")
            far = [drawn for top, drawn in tops if top > reach + DESKTOP["height"]]
            assert not any(far), f"{relative}: figures far below drawn {far}"
            return
        pytest.fail("no lesson has its figures below its first two screens")
    finally:
        context.close()


def test_axe_finds_no_serious_violation(visits: list[Visit]) -> None:
    unaudited = [v.page for v in visits if not v.audited]
    assert not unaudited, f"axe-core did not audit {unaudited}"
    failing = serious_violations(visits)
    assert not failing, failing


def test_phone_width_does_not_scroll_sideways(visits: list[Visit]) -> None:
    wide = too_wide(visits)
    assert not wide, f"pages wider than {PHONE['width']} px on a phone: {wide}"


def test_math_is_typeset(visits: list[Visit], html_dir: Path, toc_files: list[str]) -> None:
    """Every page of the table of contents that has math shows it typeset (no TeX left, no
    MathJax error), drawn with MathJax's fonts from the site."""
    by_page = {visit.page: visit for visit in visits}
    pages_with_math = [
        f"{name}.html"
        for name in toc_files
        if 'class="math' in (html_dir / f"{name}.html").read_text(encoding="utf-8")
    ]
    assert pages_with_math, "no page of the table of contents has math"
    wrong = {
        relative: (v.formulas, v.untypeset, v.math_errors)
        for relative in pages_with_math
        if (v := by_page[relative]).formulas == 0 or v.untypeset or v.math_errors
    }
    assert not wrong, f"(typeset, left as TeX, failed) formulas: {wrong}"
    fonts = [url for v in visits for url in v.bytes_by_url
             if "/_vendor/mathjax/" in url and url.endswith(".woff")]
    assert fonts, "no page loaded MathJax's fonts"


def test_lessons_draw_figures_and_link_to_colab(
    visits: list[Visit],
    page: Page,
    site_url: str,
    toc_files: list[str],
    book_config: dict,
    html_dir: Path,
    book_root: Path,
) -> None:
    """Every lesson draws each of its figures, each with a text alternative, and links to
    its notebook on Colab."""
    lessons = lesson_pages(toc_files)
    assert lessons, "the table of contents lists no lesson"
    by_page = {visit.page: visit for visit in visits}
    repo = urlsplit(book_config["repository"]["url"]).path.strip("/")
    branch = book_config["repository"].get("branch", "main")
    for relative in lessons:
        visit = by_page[relative]
        assert visit.plots_drawn == visit.plot_blocks, (
            f"{relative}: {visit.plots_drawn} of {visit.plot_blocks} figures drawn"
        )
        assert not visit.unlabelled_figures, (
            f"figures without a text alternative on {relative}: {visit.unlabelled_figures}"
        )
        notebook = relative.removesuffix(".html") + ".ipynb"
        wanted = f"{COLAB_PREFIX}{repo}/blob/{branch}/{notebook}"
        assert wanted in visit.colab_links, f"no Colab launch link on {relative}"
    screenshot_first_lesson(page, site_url, lessons[0], html_dir, book_root)


# Every drawn figure: a drawing with role="img" and a label that starts with its title, and
# a caption that says what it shows. Returns the figures that lack either.
TEXT_ALTERNATIVES = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(
    (gd, i) => {
        const drawing = gd.querySelector('svg.main-svg[role="img"]');
        const label = drawing ? drawing.getAttribute('aria-label') || '' : '';
        const caption = gd.closest('figure')?.querySelector('figcaption .plotly-caption-text');
        const problems = [];
        if (!/^Figure( \\d+\\.|:) /.test(label) || label.length < 20) {  // "Figure 3. ..."
            problems.push(`figure ${i + 1}: label ${JSON.stringify(label)}`);
        }
        if (!caption || caption.textContent.trim().length < 20) {
            problems.push(`figure ${i + 1}: no caption`);
        }
        return problems;
    })"""


def screenshot_first_lesson(
    page: Page, site_url: str, relative: str, html_dir: Path, book_root: Path
) -> None:
    page.goto(f"{site_url}/{relative}")
    if _wait_for_plots(page):
        # Show a twin when there is one: the site's kernel-free explorer.
        twins = page.locator("figure.plotly-output:has(.twin-controls)")
        figure = twins.first if twins.count() else page.locator(".js-plotly-plot").first
        figure.evaluate("e => e.scrollIntoView({block: 'center'})")
    target = html_dir.parent / "screenshots" / "lesson.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target))
    # The same place at a phone's width.
    page.set_viewport_size(PHONE)
    page.evaluate(REDRAWN)
    twins = page.locator("figure.plotly-output:has(.twin-controls)")
    if twins.count():
        twins.first.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(target.with_name("lesson-phone.png")))
    page.set_viewport_size(DESKTOP)
    readme_image = book_root / "book" / "images" / "lesson-screenshot.png"
    if not readme_image.exists() or os.environ.get("UPDATE_SCREENSHOT") == "1":
        readme_image.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, readme_image)


def test_page_works_from_file_url(page: Page, html_dir: Path, toc_files: list[str]) -> None:
    """Open a lesson straight from disk: math and plotly figures still work."""
    lessons = lesson_pages(toc_files)
    assert lessons, "the table of contents lists no lesson"
    recorder = PageRecorder(page)
    page.goto((html_dir / lessons[0]).as_uri())
    assert _check_math(page) > 0
    assert _wait_for_plots(page) > 0
    assert not _dead_widgets(page), _dead_widgets(page)
    assert not recorder.foreign_requests("file"), recorder.foreign_requests("file")
    assert not recorder.errors, recorder.errors
