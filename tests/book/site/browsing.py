"""What the browser checks share: the browser, the pages of the build, and the scripts that
wait for a page to settle and read what its figures show.

The site is read in Debian's chromium (else the first chromium, chromium-browser or
google-chrome on PATH, as the Makefile and .ci/prerequisites find it; ``CHROMIUM`` names
another), driven by
Playwright; Playwright's own browser download is not used.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import ConsoleMessage, Locator, Page, Request

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str:
    """CHROMIUM if set, else Debian's /usr/bin/chromium, else the first browser on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    found = (shutil.which(name) for name in BROWSER_NAMES)
    return next((path for path in found if path), "/usr/bin/chromium")


CHROMIUM = find_browser()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
# A tablet in portrait, where the theme hides both sidebars behind toggles.
TABLET = {"width": 900, "height": 1100}
# A phone in portrait (an iPhone 12 to 15's CSS viewport).
PHONE = {"width": 390, "height": 844}
# Schemes that never leave the page: inline data and in-memory objects.
LOCAL_SCHEMES = {"data", "blob", "about"}
PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_BLOCK = f'<script type="{PLOTLY_MIME}">'


class PageRecorder:
    """Collects what a page did: every request, failed loads and console errors."""

    def __init__(self, page: Page) -> None:
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.finished: list[Request] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("requestfinished", lambda request: self.finished.append(request))
        page.on("requestfailed", self._on_failed)
        page.on("response", self._on_response)
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

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


def html_pages(html_dir: Path) -> list[str]:
    """Every HTML page of the site, as paths relative to its root."""
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        relative = path.relative_to(html_dir)
        if relative.parts[0] in {"_static", "_vendor", "_sources"}:
            continue
        pages.append(relative.as_posix())
    return pages


def lesson_pages(toc_files: list[str]) -> list[str]:
    return [f"{name}.html" for name in toc_files if name.startswith("lessons/")]


def figure_pages(html_dir: Path, toc_files: list[str]) -> list[str]:
    """The pages of the table of contents that hold a plotly figure, in its order."""
    return [
        f"{name}.html"
        for name in toc_files
        if PLOTLY_BLOCK in (html_dir / f"{name}.html").read_text(encoding="utf-8")
    ]


# Resolves once the page has shown its first screen as a reader sees it, without scrolling:
# its web fonts loaded and the figures near the window (the only ones render-plotly.js
# draws unasked, fetching plotly.js for them) drawn.
FIRST_SCREEN = """async () => {
    await document.fonts.ready;
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    await new Promise(r => setTimeout(r, 100));
    if (window.bookFiguresIdle) { await window.bookFiguresIdle(); }
}"""

# Asks for every figure of the page; resolves once each is drawn and the web fonts the
# page asked for have loaded.
SETTLE = """async () => {
    const n = document.querySelectorAll('script[type="application/vnd.plotly.v1+json"]').length;
    if (n) {
        while (!window.bookDrawFigures) { await new Promise(r => setTimeout(r, 50)); }
        await window.bookDrawFigures();
        while (document.querySelectorAll('.js-plotly-plot .main-svg').length < n) {
            await new Promise(r => setTimeout(r, 50));
        }
    }
    await document.fonts.ready;
}"""

# Resolves once every figure has finished its latest drawing (after a control moved or the
# width changed).
REDRAWN = """async () => {
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    if (window.bookFiguresDrawn) { await window.bookFiguresDrawn; }
    if (window.bookFiguresIdle) { await window.bookFiguresIdle(); }
}"""


def settle(page: Page) -> None:
    page.evaluate(SETTLE)


def first_screen(page: Page) -> None:
    page.evaluate(FIRST_SCREEN)


# Measures one drawn figure (its box, the .plotly-figure element): every text of the drawing
# that reaches past the box, every two texts that overlap, any legend or boxed annotation
# that lies over the data (markers, bars, heatmap cells, or points of a line), and any
# other annotation over the data (but for one with an arrow, which points at it).
MEASURE_FIGURE = r"""gd => {
    const box = gd.getBoundingClientRect();
    const shown = el => {
        for (let e = el; e && e !== gd; e = e.parentElement) {
            const s = getComputedStyle(e);
            if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) === 0) {
                return false;
            }
        }
        return true;
    };
    const texts = Array.from(gd.querySelectorAll('svg.main-svg text'))
        .filter(t => t.textContent.trim() && !t.closest('.hoverlayer') && shown(t))
        .map(t => ({text: t.textContent.trim(), r: t.getBoundingClientRect()}))
        .filter(x => x.r.width > 0 && x.r.height > 0);
    const clipped = texts
        .filter(x => x.r.left < box.left - 1 || x.r.right > box.right + 1
                  || x.r.top < box.top - 1 || x.r.bottom > box.bottom + 1)
        .map(x => x.text);
    // Two texts overlap when their boxes share more than 1 px across and 2 px down (a text's
    // box holds its line's ascent and descent, more than the glyphs).
    const overlaps = [];
    for (let i = 0; i < texts.length; i++) {
        for (let j = i + 1; j < texts.length; j++) {
            const a = texts[i].r, b = texts[j].r;
            const across = Math.min(a.right, b.right) - Math.max(a.left, b.left);
            const down = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
            if (across > 1 && down > 2) { overlaps.push(`${texts[i].text} / ${texts[j].text}`); }
        }
    }
    // Data marks as screen boxes: markers, bars and heatmap cells (areas), and points along
    // every line; each cut to its subplot's plotting area (plotly clips it there).
    const areas = [], points = [];
    const cut = (r, area) => {
        const c = {left: Math.max(r.left, area.left), right: Math.min(r.right, area.right),
                   top: Math.max(r.top, area.top), bottom: Math.min(r.bottom, area.bottom)};
        return c.left <= c.right && c.top <= c.bottom ? c : null;
    };
    gd.querySelectorAll('.cartesianlayer .subplot').forEach(subplot => {
        const id = Array.from(subplot.classList).find(c => /^x\d*y\d*$/.test(c));
        const drag = gd.querySelector(`.draglayer .${id} rect.nsewdrag`)
            || gd.querySelector(`rect.nsewdrag[data-subplot="${id}"]`);
        if (!drag) { return; }
        const area = drag.getBoundingClientRect();
        subplot.querySelectorAll('.trace path.point, .trace g.point > path, .trace image')
            .forEach(e => {
                const r = cut(e.getBoundingClientRect(), area);
                const isArea = e.tagName === 'image' || e.parentElement.matches('g.point');
                if (r) { (isArea ? areas : points).push(r); }
            });
        subplot.querySelectorAll('.trace path.js-line').forEach(path => {
            const m = path.getScreenCTM();
            if (!m) { return; }
            const length = path.getTotalLength();
            for (let s = 0; s <= length; s += 3) {
                const q = path.getPointAtLength(s);
                const x = m.a * q.x + m.c * q.y + m.e, y = m.b * q.x + m.d * q.y + m.f;
                const r = cut({left: x, right: x, top: y, bottom: y}, area);
                if (r) { points.push(r); }
            }
        });
    });
    const hits = (r, marks) => marks.some(k => k.right > r.left + 1 && k.left < r.right - 1
                                             && k.bottom > r.top + 1 && k.top < r.bottom - 1);
    const covers = r => hits(r, areas) || hits(r, points);
    const covering = [];
    gd.querySelectorAll('g.legend').forEach(legend => {
        const bg = legend.querySelector('rect.bg');
        if (bg && covers(bg.getBoundingClientRect())) { covering.push('the legend'); }
    });
    gd.querySelectorAll('g.annotation').forEach(note => {
        const bg = note.querySelector('rect.bg');
        if (!bg) { return; }
        const style = getComputedStyle(bg);
        const clear = (c, opacity) => !c || c === 'none' || parseFloat(opacity) === 0
            || /rgba\([^)]*,\s*0\)$/.test(c);
        const filled = !clear(style.fill, style.fillOpacity);
        const outlined = parseFloat(style.strokeWidth) > 0
            && !clear(style.stroke, style.strokeOpacity);
        const text = JSON.stringify(note.textContent.trim().slice(0, 40));
        const r = bg.getBoundingClientRect();
        const words = note.querySelector('text');
        const arrow = note.querySelector('.annotation-arrow-g path');
        const inner = words ? words.getBoundingClientRect() : r;
        if ((filled || outlined) && covers(r)) {
            covering.push('the annotation box ' + text);
        } else if (hits(r, areas)) {
            covering.push('the annotation ' + text + ' (over bars or cells)');
        } else if (!arrow && inner.width && hits(inner, points)) {
            covering.push('the annotation ' + text + ' (over markers or lines)');
        }
    });
    return {texts: texts.length, clipped, overlaps, covering,
            width: Math.round(box.width), height: Math.round(box.height)};
}"""


# The state of a twin (by the figure element): its parameters and values, its steps, the
# step shown, and what the drawing shows.
TWIN_STATE = """figure => {
    const block = figure.querySelector('script[type="application/vnd.plotly.v1+json"]');
    const twin = JSON.parse(block.textContent).layout.meta.twin;
    const gd = figure.querySelector('.js-plotly-plot');
    const controls = Array.from(figure.querySelectorAll('[data-twin-param]'));
    const at = twin.params.map((p, i) => {
        const range = controls.find(c => c.tagName === 'INPUT' && +c.dataset.twinParam === i);
        if (range) { return +range.value; }
        const pressed = controls.find(c => +c.dataset.twinParam === i
                                           && c.getAttribute('aria-pressed') === 'true');
        return pressed ? +pressed.dataset.twinValue : 0;
    });
    const title = gd.layout.title && (gd.layout.title.text || gd.layout.title);
    return JSON.stringify({
        params: twin.params, steps: twin.steps, active: twin.active, at,
        title: String(title || ''),
        traces: gd.data.map(t => [t.name || '', t.type,
                                  JSON.stringify(t.z || t.y || []).length]),
        subplots: new Set(gd.data.filter(t => t.visible !== false)
                                  .map(t => (t.xaxis || 'x') + (t.yaxis || 'y'))).size,
        drawnSubplots: gd.querySelectorAll('.cartesianlayer > g.subplot').length,
        caption: figure.querySelector('.plotly-caption-text').textContent,
        status: (figure.querySelector('.twin-status') || {}).textContent || '',
    });
}"""


def twin_state(figure: Locator) -> dict:
    return json.loads(figure.evaluate(TWIN_STATE))


def set_control(page: Page, figure: Locator, param: int, value: int) -> None:
    """Move control ``param`` of a twin to value index ``value``, as a reader would: a range
    input is dragged there (its value set, with the input event a drag sends), a button
    is clicked."""
    control = figure.locator(f'[data-twin-param="{param}"]')
    if control.first.evaluate("e => e.tagName") == "INPUT":
        control.first.evaluate(
            "(e, v) => { e.value = String(v); e.dispatchEvent(new Event('input', "
            "{bubbles: true})); }",
            value,
        )
    else:
        figure.locator(f'[data-twin-param="{param}"][data-twin-value="{value}"]').click()
    page.evaluate(REDRAWN)


def show_step(page: Page, figure: Locator, target: list[int]) -> dict:
    """Bring a twin to the step with parameter values ``target``, moving one control at a
    time (a move that needs another parameter to change can take a second round)."""
    state = twin_state(figure)
    for _ in range(len(target) + 1):
        for param, value in enumerate(target):
            if len(state["params"][param]["values"]) > 1 and state["at"][param] != value:
                set_control(page, figure, param, value)
                state = twin_state(figure)
        if state["at"] == target:
            break
    return state
