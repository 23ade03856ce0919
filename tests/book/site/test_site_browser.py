"""The built site in a real browser: Debian's chromium driven by Playwright.

Every page loads without console errors and without a request to any host but the site's
own; math is typeset; plotly figures are drawn, each with a text alternative, and their
sliders work with no kernel, from the mouse and from the keyboard; no page shows a widget
that cannot respond (a live explorer needs a kernel, so the site shows its code and the
plotly twin instead); lesson pages carry Colab launch links; a page opened from file://
works too.

Each page is also weighed and checked once, in a fresh browser profile: its first visit
transfers at most 5 MB (the bodies of every response, uncompressed, as the browser receives
them), opening a second lesson after the first adds at most 1 MB of new files, plotly.js
loads only where a figure is and MathJax only where math is; axe-core finds no violation of
impact "serious" or "critical"; and at a phone's width (390 px) the page does not scroll
sideways (figures and tables scroll inside their own boxes). What each page weighed and
what axe-core reported land in _build/logs/site-browser.json. Screenshots of the first
lesson, at desktop and phone widths, land in _build/screenshots/ (and the desktop one in
book/images/ for the README when that file is missing or UPDATE_SCREENSHOT=1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

# Debian's chromium; Playwright's own browser download is not used. CHROMIUM overrides it
# (GitHub's Ubuntu runners ship Google Chrome instead).
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# Schemes that never leave the page: inline data and in-memory objects.
LOCAL_SCHEMES = {"data", "blob", "about"}
SCREENSHOT_SIZE = {"width": 1280, "height": 800}
# A phone in portrait (an iPhone 12 to 15's CSS viewport).
PHONE_SIZE = {"width": 390, "height": 844}
COLAB_PREFIX = "https://colab.research.google.com/github/"
# Page-weight budgets, in bytes of response bodies (uncompressed).
FIRST_VISIT_BUDGET = 5_000_000
NEXT_LESSON_BUDGET = 1_000_000
# axe-core (npm, package-lock.json) impacts that fail the test; "moderate" and "minor"
# findings are reported in _build/logs/site-browser.json.
FAILING_IMPACTS = ("serious", "critical")
# The scripts that only some pages need, by the path the site serves them from.
PLOTLY_JS = "/_vendor/plotly/plotly-cartesian.min.js"
MATHJAX_JS = "/_vendor/mathjax/"


class PageRecorder:
    """Collects what a page did: every request, failed loads and console errors."""

    def __init__(self, page: Page) -> None:
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.finished: list[Request] = []
        page.on("request", self._on_request)
        page.on("requestfinished", lambda request: self.finished.append(request))
        page.on("requestfailed", self._on_failed)
        page.on("response", self._on_response)
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def _on_request(self, request: Request) -> None:
        self.requests.append(request.url)

    def _on_failed(self, request: Request) -> None:
        self.errors.append(f"request failed: {request.url} ({request.failure})")

    def _on_response(self, response) -> None:
        if response.status >= 400:
            self.errors.append(f"HTTP {response.status}: {response.url}")

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console error: {message.text} at {message.location}")

    def bytes_by_url(self) -> dict[str, int]:
        """The body of every finished response, in bytes, by URL (read while the page is
        open; a page the browser navigated away from, such as a redirect, gives its size as
        the network reported it)."""
        sizes = {}
        for request in self.finished:
            try:
                response = request.response()
                sizes[request.url] = len(response.body()) if response else 0
            except Exception:  # a body the browser no longer holds
                sizes[request.url] = request.sizes()["responseBodySize"]
        return sizes

    def foreign_requests(self, allowed_origin: str) -> list[str]:
        """Requests to anything but `allowed_origin` (or file:// when it is 'file')."""
        foreign = []
        for url in self.requests:
            parts = urlsplit(url)
            if parts.scheme in LOCAL_SCHEMES:
                continue
            if allowed_origin == "file":
                if parts.scheme != "file":
                    foreign.append(url)
            elif f"{parts.scheme}://{parts.netloc}" != allowed_origin:
                foreign.append(url)
        return foreign


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no browser at {CHROMIUM}: install Debian's chromium (see .ci/run)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=SCREENSHOT_SIZE)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def _html_pages(html_dir: Path) -> list[str]:
    """Every HTML page of the site, as paths relative to its root."""
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        relative = path.relative_to(html_dir)
        if relative.parts[0] in {"_static", "_vendor", "_sources"}:
            continue
        pages.append(relative.as_posix())
    return pages


def _lesson_pages(toc_files: list[str]) -> list[str]:
    return [f"{name}.html" for name in toc_files if name.startswith("lessons/")]


def _wait_for_math(page: Page) -> int:
    """Wait for MathJax to finish; return how many formulas it typeset."""
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("() => MathJax.startup.promise")
    errors = page.locator("mjx-merror").count()
    assert errors == 0, f"{errors} formulas failed to typeset"
    return page.locator("mjx-container").count()


def _wait_for_plots(page: Page) -> int:
    """Wait for every plotly JSON block to be drawn; return how many figures were drawn."""
    expected = page.locator('script[type="application/vnd.plotly.v1+json"]').count()
    if expected:
        page.wait_for_function(
            "n => document.querySelectorAll('.js-plotly-plot .main-svg').length >= n",
            arg=expected,
        )
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


# Resolves once MathJax has typeset the page (where it loads) and plotly.js has drawn every
# figure (where there is one).
SETTLE = """async () => {
    if (window.MathJax) {
        while (!(MathJax.startup && MathJax.startup.promise)) {
            await new Promise(r => setTimeout(r, 50));
        }
        await MathJax.startup.promise;
    }
    const n = document.querySelectorAll('script[type="application/vnd.plotly.v1+json"]').length;
    while (document.querySelectorAll('.js-plotly-plot .main-svg').length < n) {
        await new Promise(r => setTimeout(r, 50));
    }
    await document.fonts.ready;  // the web fonts the typeset math asked for
}"""

AXE_RUN = "() => axe.run(document, {resultTypes: ['violations']})"


@dataclass
class Visit:
    """What one first visit to a page showed (a fresh browser profile, desktop width)."""

    page: str
    shown: str = ""  # the page on screen at the end (index.html redirects to the intro)
    problems: list[str] = field(default_factory=list)
    bytes_by_url: dict[str, int] = field(default_factory=dict)
    violations: list[dict] = field(default_factory=list)
    phone_width: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_url.values())

    def heaviest(self, n: int = 5) -> list[str]:
        ranked = sorted(self.bytes_by_url.items(), key=lambda item: -item[1])[:n]
        return [f"{size / 1e6:.2f} MB {urlsplit(url).path}" for url, size in ranked]

    def loaded(self, path_part: str) -> bool:
        return any(path_part in urlsplit(url).path for url in self.bytes_by_url)


def _visit(browser: Browser, site_url: str, html_dir: Path, relative: str, axe_js: Path) -> Visit:
    context = browser.new_context(viewport=SCREENSHOT_SIZE)
    try:
        page = context.new_page()
        recorder = PageRecorder(page)
        response = page.goto(f"{site_url}/{relative}")
        # The page Jupyter Book writes at the site root only redirects to the first page.
        redirect = re.search(
            r'http-equiv="Refresh" content="0; url=([^"]+)"',
            (html_dir / relative).read_text(encoding="utf-8"),
            re.IGNORECASE,
        )
        if redirect:
            page.wait_for_url(f"**/{redirect.group(1)}")
            page.wait_for_load_state("load")
        page.evaluate(SETTLE)
        visit = Visit(relative, bytes_by_url=recorder.bytes_by_url())
        visit.shown = urlsplit(page.url).path.removeprefix("/")
        if response is None or response.status != 200:
            visit.problems.append(f"HTTP {response and response.status}")
        visit.problems += [
            f"request to another host: {url}" for url in recorder.foreign_requests(site_url)
        ]
        visit.problems += [f"a widget that cannot respond: {w}" for w in _dead_widgets(page)]
        # axe-core goes in after the weighing, so it counts towards no page.
        page.add_script_tag(path=str(axe_js))
        visit.violations = [
            {
                "id": v["id"],
                "impact": v["impact"],
                "help": v["help"],
                "targets": [" ".join(map(str, node["target"])) for node in v["nodes"]],
            }
            for v in page.evaluate(AXE_RUN)["violations"]
        ]
        page.set_viewport_size(PHONE_SIZE)
        page.wait_for_timeout(100)  # let the page lay itself out at the new width
        visit.phone_width = page.evaluate("document.documentElement.scrollWidth")
        visit.problems += recorder.errors
        return visit
    finally:
        context.close()


@pytest.fixture(scope="module")
def visits(browser: Browser, site_url: str, html_dir: Path, book_root: Path) -> list[Visit]:
    """Every page of the site, visited once; the record goes to _build/logs/."""
    axe_js = book_root / "node_modules" / "axe-core" / "axe.min.js"
    if not axe_js.is_file():
        pytest.fail(f"{axe_js} is missing: run `npm ci` (the Makefile's targets do)")
    pages = _html_pages(html_dir)
    assert len(pages) >= 3, f"suspiciously few pages in {html_dir}: {pages}"
    result = [_visit(browser, site_url, html_dir, relative, axe_js) for relative in pages]
    report = html_dir.parent / "logs" / "site-browser.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        json.dumps(
            [asdict(visit) | {"total_bytes": visit.total_bytes} for visit in result], indent=1
        ),
        encoding="utf-8",
    )
    return result


def test_every_page_loads_offline(visits: list[Visit]) -> None:
    problems = {visit.page: visit.problems for visit in visits if visit.problems}
    assert not problems, problems


def test_first_visit_weight_budget(visits: list[Visit]) -> None:
    over = {
        visit.page: [f"{visit.total_bytes / 1e6:.2f} MB", *visit.heaviest()]
        for visit in visits
        if visit.total_bytes > FIRST_VISIT_BUDGET
    }
    assert not over, f"first visits over {FIRST_VISIT_BUDGET / 1e6:.0f} MB: {over}"


def test_second_lesson_weight_budget(visits: list[Visit], toc_files: list[str]) -> None:
    """After the first lesson, opening any other lesson fetches at most 1 MB of new files:
    the files of its first visit that the first lesson's did not fetch."""
    lessons = _lesson_pages(toc_files)
    if len(lessons) < 2:
        pytest.skip("the table of contents lists a single lesson")
    by_page = {visit.page: visit for visit in visits}
    first = by_page[lessons[0]].bytes_by_url
    over = {}
    for relative in lessons[1:]:
        new = {url: n for url, n in by_page[relative].bytes_by_url.items() if url not in first}
        visit = Visit(relative, bytes_by_url=new)
        if visit.total_bytes > NEXT_LESSON_BUDGET:
            over[relative] = [f"{visit.total_bytes / 1e6:.2f} MB new", *visit.heaviest()]
    assert not over, f"second lessons over {NEXT_LESSON_BUDGET / 1e6:.0f} MB: {over}"


def test_pages_load_only_the_scripts_they_use(visits: list[Visit], html_dir: Path) -> None:
    """plotly.js only where a figure is, MathJax only where math is."""
    wrong = []
    for visit in visits:
        text = (html_dir / visit.shown).read_text(encoding="utf-8")
        has_figure = 'type="application/vnd.plotly.v1+json"' in text
        has_math = 'class="math' in text
        if visit.loaded(PLOTLY_JS) != has_figure:
            wrong.append(f"{visit.page}: figure {has_figure}, plotly.js loaded {not has_figure}")
        if visit.loaded(MATHJAX_JS) != has_math:
            wrong.append(f"{visit.page}: math {has_math}, MathJax loaded {not has_math}")
    assert not wrong, wrong
    assert any(visit.loaded(PLOTLY_JS) for visit in visits), "no page drew a figure"
    assert any(visit.loaded(MATHJAX_JS) for visit in visits), "no page typeset math"


def test_axe_finds_no_serious_violation(visits: list[Visit]) -> None:
    failing = {
        visit.page: [
            f"{v['impact']}: {v['id']} ({v['help']}) at {v['targets'][:3]}"
            for v in visit.violations
            if v["impact"] in FAILING_IMPACTS
        ]
        for visit in visits
    }
    failing = {page: found for page, found in failing.items() if found}
    assert not failing, failing


def test_phone_width_does_not_scroll_sideways(visits: list[Visit]) -> None:
    wide = {v.page: v.phone_width for v in visits if v.phone_width > PHONE_SIZE["width"] + 1}
    assert not wide, f"pages wider than {PHONE_SIZE['width']} px on a phone: {wide}"


def test_math_is_typeset(page: Page, site_url: str, html_dir: Path, toc_files: list[str]) -> None:
    pages_with_math = [
        f"{name}.html"
        for name in toc_files
        if 'class="math' in (html_dir / f"{name}.html").read_text(encoding="utf-8")
    ]
    assert pages_with_math, "no page of the table of contents has math"
    for relative in pages_with_math:
        page.goto(f"{site_url}/{relative}")
        assert _wait_for_math(page) > 0, f"MathJax typeset nothing on {relative}"


def test_lessons_draw_figures_and_link_to_colab(
    page: Page,
    site_url: str,
    toc_files: list[str],
    book_config: dict,
    html_dir: Path,
    book_root: Path,
) -> None:
    lessons = _lesson_pages(toc_files)
    assert lessons, "the table of contents lists no lesson"
    repo = urlsplit(book_config["repository"]["url"]).path.strip("/")
    branch = book_config["repository"].get("branch", "main")
    for relative in lessons:
        page.goto(f"{site_url}/{relative}")
        json_blocks = page.locator('script[type="application/vnd.plotly.v1+json"]').count()
        assert _wait_for_plots(page) == json_blocks
        missing = page.evaluate(TEXT_ALTERNATIVES)
        assert not missing, f"figures without a text alternative on {relative}: {missing}"
        notebook = relative.removesuffix(".html") + ".ipynb"
        colab = page.locator(f'a[href="{COLAB_PREFIX}{repo}/blob/{branch}/{notebook}"]')
        assert colab.count() >= 1, f"no Colab launch link on {relative}"
    screenshot_first_lesson(page, site_url, lessons[0], html_dir, book_root)


# Every drawn figure: a drawing with role="img" and a label that starts with its title, and
# a caption that says what it shows. Returns the figures that lack either.
TEXT_ALTERNATIVES = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(
    (gd, i) => {
        const drawing = gd.querySelector('svg.main-svg[role="img"]');
        const label = drawing ? drawing.getAttribute('aria-label') || '' : '';
        const caption = gd.closest('figure')?.querySelector('figcaption .plotly-caption-text');
        const problems = [];
        if (!label.startsWith('Figure: ') || label.length < 20) {
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
    _wait_for_math(page)
    if _wait_for_plots(page):
        # Show a figure with a slider when there is one: the site's kernel-free explorer.
        with_slider = page.locator(".js-plotly-plot:has(.slider-container)")
        figure = with_slider.first if with_slider.count() else page.locator(".js-plotly-plot").first
        figure.evaluate("gd => gd.scrollIntoView({block: 'center'})")
    target = html_dir.parent / "screenshots" / "lesson.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target))
    # The same place at a phone's width.
    page.set_viewport_size(PHONE_SIZE)
    page.wait_for_timeout(300)
    figures = page.locator(".js-plotly-plot:has(.slider-container)")
    if figures.count():
        figures.first.evaluate("gd => gd.scrollIntoView({block: 'center'})")
    page.screenshot(path=str(target.with_name("lesson-phone.png")))
    page.set_viewport_size(SCREENSHOT_SIZE)
    readme_image = book_root / "book" / "images" / "lesson-screenshot.png"
    if not readme_image.exists() or os.environ.get("UPDATE_SCREENSHOT") == "1":
        readme_image.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, readme_image)


# Reads what a plotly slider controls: the active step and every trace's visibility and data.
FIGURE_STATE = """gd => JSON.stringify({
    active: gd.layout.sliders[0].active,
    traces: gd._fullData.map(t => ({visible: t.visible, x: Array.from(t.x || []),
                                    y: Array.from(t.y || [])}))})"""


def test_static_slider_changes_its_figure(page: Page, site_url: str, toc_files: list[str]) -> None:
    """Click the last step of a static plotly slider: the figure must change."""
    for relative in _lesson_pages(toc_files):
        page.goto(f"{site_url}/{relative}")
        _wait_for_plots(page)
        sliders = page.locator(".js-plotly-plot:has(.slider-container)")
        if sliders.count() == 0:
            continue
        figure = sliders.first
        figure.scroll_into_view_if_needed()
        before = figure.evaluate(FIGURE_STATE)
        ticks = figure.locator(".slider-tick-rect")
        rail = figure.locator(".slider-rail-touch-rect").bounding_box()
        last_tick = ticks.nth(ticks.count() - 1).bounding_box()
        assert rail is not None and last_tick is not None
        page.mouse.click(
            last_tick["x"] + last_tick["width"] / 2, rail["y"] + rail["height"] / 2
        )
        for _ in range(50):  # plotly redraws asynchronously; give it up to 5 s
            if figure.evaluate(FIGURE_STATE) != before:
                break
            page.wait_for_timeout(100)
        after = figure.evaluate(FIGURE_STATE)
        assert after != before, f"the slider on {relative} did not change its figure"
        assert json.loads(after)["active"] == ticks.count() - 1, "the click missed the last step"
        return
    pytest.fail("no lesson page has a plotly figure with a slider")


SLIDER = ".js-plotly-plot g.slider-container[role='slider']"


def test_slider_works_from_the_keyboard(page: Page, site_url: str, toc_files: list[str]) -> None:
    """Tab reaches a twin's slider; the arrow keys, Home and End move it and its figure."""
    for relative in _lesson_pages(toc_files):
        page.goto(f"{site_url}/{relative}")
        _wait_for_plots(page)
        if page.locator(SLIDER).count() == 0:
            continue
        figure = page.locator(".js-plotly-plot:has(g.slider-container)").first
        slider = figure.locator("g.slider-container[role='slider']")
        assert slider.get_attribute("tabindex") == "0", "the slider is not in the tab order"
        steps = int(slider.get_attribute("aria-valuemax"))
        slider.focus()
        for key, expected in (("Home", 0), ("ArrowRight", 1), ("End", steps - 1),
                              ("ArrowLeft", steps - 2)):
            before = figure.evaluate(FIGURE_STATE)
            page.keyboard.press(key)
            for _ in range(50):  # plotly redraws asynchronously; give it up to 5 s
                state = json.loads(figure.evaluate(FIGURE_STATE))
                if state["active"] == expected:
                    break
                page.wait_for_timeout(100)
            after = figure.evaluate(FIGURE_STATE)
            assert json.loads(after)["active"] == expected, f"{key} did not reach step {expected}"
            if expected != json.loads(before)["active"]:
                assert after != before, f"{key} moved the slider but not the figure"
            assert slider.get_attribute("aria-valuenow") == str(expected + 1)
            assert page.evaluate("document.activeElement.getAttribute('role')") == "slider", (
                f"the slider lost the keyboard focus after {key}"
            )
        return
    pytest.fail("no lesson page has a plotly figure with a keyboard slider")


def test_page_works_from_file_url(page: Page, html_dir: Path, toc_files: list[str]) -> None:
    """Open a lesson straight from disk: math and plotly figures still work."""
    lessons = _lesson_pages(toc_files)
    assert lessons, "the table of contents lists no lesson"
    recorder = PageRecorder(page)
    page.goto((html_dir / lessons[0]).as_uri())
    assert _wait_for_math(page) > 0
    assert _wait_for_plots(page) > 0
    assert not _dead_widgets(page), _dead_widgets(page)
    assert not recorder.foreign_requests("file"), recorder.foreign_requests("file")
    assert not recorder.errors, recorder.errors
