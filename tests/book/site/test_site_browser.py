"""The built site in a real browser: Debian's chromium driven by Playwright.

Every page loads without console errors and without a request to any host but the site's
own; math is typeset; plotly figures are drawn and their sliders work with no kernel; no page
shows a widget that cannot respond (a live explorer needs a kernel, so the site shows its
code and the plotly twin instead); lesson pages carry Colab launch links; a page opened from
file:// works too. A screenshot of the first lesson lands in _build/screenshots/
(and in book/images/ for the README when that file is missing or UPDATE_SCREENSHOT=1).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
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
COLAB_PREFIX = "https://colab.research.google.com/github/"


class PageRecorder:
    """Collects what a page did: every request, failed loads and console errors."""

    def __init__(self, page: Page) -> None:
        self.requests: list[str] = []
        self.errors: list[str] = []
        page.on("request", self._on_request)
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


def test_every_page_loads_offline(browser: Browser, site_url: str, html_dir: Path) -> None:
    pages = _html_pages(html_dir)
    assert len(pages) >= 3, f"suspiciously few pages in {html_dir}: {pages}"
    problems = {}
    context = browser.new_context(viewport=SCREENSHOT_SIZE)
    try:
        for relative in pages:
            page = context.new_page()
            recorder = PageRecorder(page)
            response = page.goto(f"{site_url}/{relative}", wait_until="networkidle")
            issues = list(recorder.errors)
            if response is None or response.status != 200:
                issues.append(f"HTTP {response and response.status}")
            issues += [
                f"request to another host: {url}"
                for url in recorder.foreign_requests(site_url)
            ]
            issues += [f"a widget that cannot respond: {w}" for w in _dead_widgets(page)]
            if issues:
                problems[relative] = issues
            page.close()
    finally:
        context.close()
    assert not problems, problems


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
        notebook = relative.removesuffix(".html") + ".ipynb"
        colab = page.locator(f'a[href="{COLAB_PREFIX}{repo}/blob/{branch}/{notebook}"]')
        assert colab.count() >= 1, f"no Colab launch link on {relative}"
    screenshot_first_lesson(page, site_url, lessons[0], html_dir, book_root)


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
