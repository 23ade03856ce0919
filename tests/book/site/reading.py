"""What a reader meets on a page, measured in the browser: code blocks that scroll sideways,
display equations cut at the column's edge, figure toolbars over titles, tick labels too
small to read, controls too small to touch, the length of the prose's lines and what a
first visit weighs.

test_site_reader.py asserts these; run as a script it prints them for every lesson, so
that a change to the layout can be measured before and after::

    .venv/bin/python tests/book/site/reading.py _build/html > counts.json
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import sys
import threading
from pathlib import Path

from browsing import CHROMIUM, CHROMIUM_ARGS, DESKTOP, PHONE, PageRecorder, first_screen, settle
from playwright.sync_api import Page, sync_playwright

# Tick labels at least this tall (px), touch targets at least this tall and wide (px; WCAG
# 2.5.5 asks 44), and the prose's lines at most this many characters on average.
MIN_TICK_PX = 11
MIN_TOUCH_PX = 44
MAX_LINE_CHARACTERS = 80

# Code blocks of the article (code cells, their text outputs, code in the prose), by kind,
# and those wider than their box (they would scroll sideways).
CODE_BLOCKS = """() => {
    const blocks = Array.from(document.querySelectorAll('article.bd-article div.highlight pre'))
        .filter(pre => pre.getClientRects().length);
    const kind = pre => pre.closest('.cell_output') ? 'output' : 'code';
    const wide = pre => pre.scrollWidth > pre.clientWidth + 1;
    const out = {code: 0, output: 0, code_overflowing: 0, output_overflowing: 0, examples: []};
    blocks.forEach(pre => {
        out[kind(pre)] += 1;
        if (wide(pre)) {
            out[kind(pre) + '_overflowing'] += 1;
            if (kind(pre) === 'code' && out.examples.length < 3) {
                const lines = pre.textContent.split('\\n');
                out.examples.push(lines.sort((a, b) => b.length - a.length)[0]);
            }
        }
    });
    return out;
}"""

# Display equations: those wider than the column, and of those the ones that give no sign
# that there is more (the scroller carries no scroll cue: site.css's shadow, drawn as the
# background of an element that scrolls sideways).
DISPLAY_MATH = """() => {
    const all = Array.from(document.querySelectorAll('article.bd-article div.math'))
        .filter(d => d.getClientRects().length);
    let wide = 0, cut = 0;
    all.forEach(d => {
        const math = d.querySelector('mjx-container') || d;
        const inner = math.querySelector('mjx-math') || math;
        const overflow = Math.max(
            d.scrollWidth - d.clientWidth, math.scrollWidth - math.clientWidth,
            inner.getBoundingClientRect().right - d.getBoundingClientRect().right);
        if (overflow <= 1) { return; }
        wide += 1;
        const scrollers = [d, math].filter(
            e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
                 && e.scrollWidth > e.clientWidth + 1);
        const cued = scrollers.some(e => e.classList.contains('scrolls')
                                         && /gradient/.test(getComputedStyle(e).backgroundImage));
        if (!cued) { cut += 1; }
    });
    return {display: all.length, wide, cut};
}"""

# Each figure's toolbar (plotly's modebar) against its title and the titles of its
# subplots: the toolbar's box may not meet a title's.
TOOLBAR_OVER_TITLE = """() => {
    const meet = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0
                           && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0;
    const found = [];
    document.querySelectorAll('.js-plotly-plot').forEach((gd, i) => {
        const bar = gd.querySelector('.modebar');
        if (!bar) { return; }
        const r = bar.getBoundingClientRect();
        if (!r.width || !r.height) { return; }
        gd.querySelectorAll('.g-gtitle text, .annotation-text-g text').forEach(t => {
            if (t.textContent.trim() && meet(r, t.getBoundingClientRect())) {
                found.push(`figure ${i + 1}: ${t.textContent.trim().slice(0, 50)}`);
            }
        });
    });
    return found;
}"""

# The tick labels of every figure: how many, and those smaller than MIN_TICK_PX.
TICK_LABELS = """min => {
    const out = {ticks: 0, small: []};
    document.querySelectorAll('.js-plotly-plot').forEach((gd, i) => {
        const ticks = 'g.xtick > text, g.ytick > text, g[class$="tick"] > text';
        gd.querySelectorAll(ticks).forEach(t => {
            if (!t.textContent.trim()) { return; }
            out.ticks += 1;
            const size = parseFloat(t.style.fontSize || getComputedStyle(t).fontSize);
            if (size < min) {
                out.small.push(`figure ${i + 1}: "${t.textContent.trim()}" ${size} px`);
            }
        });
    });
    return out;
}"""

# The controls of the figures' twins, and of those the ones smaller than MIN_TOUCH_PX.
TOUCH_TARGETS = """min => {
    const controls = Array.from(document.querySelectorAll(
        '.twin-controls input, .twin-controls button')).filter(e => e.getClientRects().length);
    const small = controls.map(e => ({e, r: e.getBoundingClientRect()}))
        .filter(x => x.r.height < min - 0.5 || x.r.width < min - 0.5)
        .map(x => `${x.e.tagName.toLowerCase()} `
                  + `${Math.round(x.r.width)}x${Math.round(x.r.height)}`);
    return {controls: controls.length, small};
}"""

# Characters a line of the article's prose holds: the width of a paragraph over the mean
# width of its own characters in its own font (the median over paragraphs of 200 or more
# characters).
LINE_LENGTH = """() => {
    const canvas = document.createElement('canvas').getContext('2d');
    const per = [];
    document.querySelectorAll('article.bd-article section > p').forEach(p => {
        const text = p.textContent.replace(/\\s+/g, ' ').trim();
        if (text.length < 200 || !p.clientWidth) { return; }
        const style = getComputedStyle(p);
        canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
        per.push(p.clientWidth / (canvas.measureText(text).width / text.length));
    });
    per.sort((a, b) => a - b);
    return per.length ? Math.round(per[Math.floor(per.length / 2)]) : 0;
}"""


def measure_page(page: Page) -> dict:
    """Everything above, for the page as loaded, at desktop width and at a phone's."""
    page.set_viewport_size(DESKTOP)
    settle(page)
    page.wait_for_timeout(150)
    desktop = {
        "code": page.evaluate(CODE_BLOCKS),
        "math": page.evaluate(DISPLAY_MATH),
        "toolbar_over_title": page.evaluate(TOOLBAR_OVER_TITLE),
        "ticks": page.evaluate(TICK_LABELS, MIN_TICK_PX),
        "characters_per_line": page.evaluate(LINE_LENGTH),
    }
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(300)
    page.evaluate("async () => { if (window.bookFiguresIdle) { await window.bookFiguresIdle(); } }")
    phone = {
        "code": page.evaluate(CODE_BLOCKS),
        "math": page.evaluate(DISPLAY_MATH),
        "toolbar_over_title": page.evaluate(TOOLBAR_OVER_TITLE),
        "ticks": page.evaluate(TICK_LABELS, MIN_TICK_PX),
        "touch": page.evaluate(TOUCH_TARGETS, MIN_TOUCH_PX),
    }
    return {"desktop": desktop, "phone": phone}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _lessons(html_dir: Path) -> list[str]:
    return sorted(p.relative_to(html_dir).as_posix() for p in (html_dir / "lessons").glob("*.html"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site (_build/html)")
    parser.add_argument("pages", nargs="*", help="pages to measure (default: every lesson)")
    args = parser.parse_args(argv)
    site = args.site.resolve()
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    result = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for relative in args.pages or _lessons(site):
            context = browser.new_context(viewport=DESKTOP)
            page = context.new_page()
            recorder = PageRecorder(page)
            page.goto(f"{url}/{relative}", wait_until="load")
            first_screen(page)
            weight = sum(recorder.bytes_by_url().values())
            settle(page)
            counts = measure_page(page)
            counts["first_visit_bytes"] = weight
            counts["read_bytes"] = sum(recorder.bytes_by_url().values())
            result[relative] = counts
            context.close()
            short = {
                "code over (1280)": f"{counts['desktop']['code']['code_overflowing']}/"
                                    f"{counts['desktop']['code']['code']}",
                "outputs over (1280)": f"{counts['desktop']['code']['output_overflowing']}/"
                                       f"{counts['desktop']['code']['output']}",
                "math cut (390)": f"{counts['phone']['math']['cut']}/"
                                  f"{counts['phone']['math']['display']}",
                "toolbar/title": (len(counts["desktop"]["toolbar_over_title"]),
                                  len(counts["phone"]["toolbar_over_title"])),
                "ticks < 11 px": len(counts["desktop"]["ticks"]["small"]),
                "small touch": len(counts["phone"]["touch"]["small"]),
                "chars/line": counts["desktop"]["characters_per_line"],
                "bytes": weight,
                "read": counts["read_bytes"],
            }
            print(relative, short, file=sys.stderr)
        browser.close()
    server.shutdown()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
