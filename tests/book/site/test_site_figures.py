"""The site's plotly figures in a browser: laid out for the width they are drawn at, one
control per parameter of a twin, and the page's colours.

Every figure of every page of the table of contents is measured at a phone's width (390 px),
at every step of a twin, and at desktop width (1280 px), at its default step (the narrow
width is where a step's longer title or labels run out of room first), each in the light
and the dark colour scheme (the site's figures restyle for dark): no text of the
drawing reaches past the figure's box, no two texts overlap, and no legend or boxed
annotation lies over the data (book/_ext/static/figure-layout.js lays the figures out).
What was measured lands in _build/logs/site-figures.json.

A twin (attnlib.viz.twin) with several parameters has one control per parameter: each moves
its own parameter and leaves the others alone where the twin holds that combination, and a
combination it does not hold is never shown (the nearest one is, and the page says what else
changed). The figure, its subplots and its caption follow the step; the range inputs answer
the keyboard. In dark mode the figures are drawn in dark colours.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browsing import (
    DESKTOP,
    MEASURE_FIGURE,
    PHONE,
    REDRAWN,
    figure_pages,
    set_control,
    settle,
    show_step,
    twin_state,
)
from playwright.sync_api import Browser, Locator, Page

WIDTHS = {"desktop": DESKTOP, "phone": PHONE}
SCHEMES = ("light", "dark")
# Every width in every colour scheme: {"phone dark": (PHONE, "dark"), ...}.
LAYOUTS = {f"{width} {scheme}": (size, scheme) for width, size in WIDTHS.items()
           for scheme in SCHEMES}
FIGURE = "figure.plotly-output"


def _problems(measured: dict) -> list[str]:
    return (
        [f"clipped: {text!r}" for text in measured["clipped"]]
        + [f"overlapping: {pair}" for pair in measured["overlaps"]]
        + [f"{what} covers data" for what in measured["covering"]]
    )


def _measure_steps(page: Page, figure: Locator, every_step: bool) -> list[tuple[str, dict]]:
    """(step, measurement) for the figure's default step and, for a twin with
    ``every_step``, every other step."""
    box = figure.locator(".plotly-figure")
    results = [("default", box.evaluate(MEASURE_FIGURE))]
    if not every_step or figure.locator("[data-twin-param]").count() == 0:
        return results
    state = twin_state(figure)
    for k, target in enumerate(state["steps"]):
        if k == state["active"]:
            continue
        reached = show_step(page, figure, target)
        assert reached["at"] == target, f"could not reach step {target}: stopped at {reached['at']}"
        label = ", ".join(
            f"{p['label']} = {p['text'][i]}" for p, i in zip(state["params"], target, strict=True)
        )
        results.append((label, box.evaluate(MEASURE_FIGURE)))
    show_step(page, figure, state["steps"][state["active"]])
    return results


@pytest.fixture(scope="module")
def measurements(
    browser: Browser, site_url: str, html_dir: Path, toc_files: list[str]
) -> dict[str, dict[str, list]]:
    """Every figure at each width and colour scheme, at every step at the phone's:
    {"width scheme": {"page #n step": measurement}}."""
    pages = figure_pages(html_dir, toc_files)
    assert pages, "no page of the table of contents holds a figure"
    found: dict[str, dict[str, list]] = {}
    for name, (size, scheme) in LAYOUTS.items():
        context = browser.new_context(viewport=size, color_scheme=scheme)
        try:
            page = context.new_page()
            found[name] = {}
            for relative in pages:
                page.goto(f"{site_url}/{relative}")
                settle(page)
                figures = page.locator(FIGURE)
                for n in range(figures.count()):
                    figure = figures.nth(n)
                    figure.scroll_into_view_if_needed()
                    for step, measured in _measure_steps(page, figure, size == PHONE):
                        found[name][f"{relative} figure {n + 1}, {step}"] = measured
        finally:
            context.close()
    report = html_dir.parent / "logs" / "site-figures.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(found, indent=1), encoding="utf-8")
    return found


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_figure_texts_fit_and_stay_clear(measurements: dict, layout: str) -> None:
    """No text cut by the figure's box, no two texts on top of each other, no legend or
    annotation box over the data: every figure, at every step of a twin at the phone's width,
    in both colour schemes."""
    found = measurements[layout]
    (size, scheme) = LAYOUTS[layout]
    bad = {where: _problems(m) for where, m in found.items() if _problems(m)}
    assert not bad, f"{len(bad)} of {len(found)} steps at {size['width']} px, {scheme}: {bad}"
    assert all(m["texts"] > 0 for m in found.values()), "a figure drew no text"


def test_figures_fit_the_column(measurements: dict) -> None:
    """At a phone's width every figure is as wide as the text column, not wider."""
    wide = {f"{layout}: {where}": m["width"] for layout, (size, _) in LAYOUTS.items()
            if size == PHONE for where, m in measurements[layout].items()
            if m["width"] > PHONE["width"]}
    assert not wide, wide


def _twins(page: Page, site_url: str, pages: list[str]):
    """Yield (page, twin figure) for every twin with controls on the figure pages."""
    for relative in pages:
        page.goto(f"{site_url}/{relative}")
        settle(page)
        figures = page.locator(FIGURE).filter(has=page.locator("[data-twin-param]"))
        for n in range(figures.count()):
            yield relative, figures.nth(n)


def _fresh_twin(page: Page, site_url: str, relative: str, n: int) -> Locator:
    """Twin ``n`` of a page loaded afresh, at its default step, with no choice made yet."""
    page.goto(f"{site_url}/{relative}")
    settle(page)
    return _nth_twin(page, n)


def _nth_twin(page: Page, n: int) -> Locator:
    figure = page.locator(FIGURE).filter(has=page.locator("[data-twin-param]")).nth(n)
    figure.scroll_into_view_if_needed()
    return figure


def test_each_control_moves_its_own_parameter(
    page: Page, site_url: str, html_dir: Path, toc_files: list[str]
) -> None:
    """Every control of every twin, from the default step: moving it changes that parameter;
    the others stay where they are when the twin holds that combination, and the status
    line says so when it does not; the drawing, its subplots, its title and the caption
    show the step reached. Each control is moved on a page loaded afresh (the first on the
    load that counted the page's twins)."""
    moved = 0
    for relative in figure_pages(html_dir, toc_files):
        page.goto(f"{site_url}/{relative}")
        settle(page)
        untouched = True  # nothing on the page has moved since it loaded
        count = page.locator(FIGURE).filter(has=page.locator("[data-twin-param]")).count()
        for n in range(count):
            params = twin_state(_nth_twin(page, n))["params"]
            movable = [i for i, p in enumerate(params) if len(p["values"]) > 1]
            assert movable, f"a twin on {relative} offers no control"
            for param in movable:
                if untouched:
                    figure = _nth_twin(page, n)
                else:
                    figure = _fresh_twin(page, site_url, relative, n)
                untouched = False
                _check_one_move(page, figure, param, f"{relative}, twin {n + 1}")
                moved += 1
    assert moved, "no twin with controls on any page"


def _check_one_move(page: Page, figure: Locator, param: int, twin: str) -> None:
    """Move control ``param`` of a twin at its default step by one value and check what the
    twin shows."""
    before = twin_state(figure)
    value = (before["at"][param] + 1) % len(before["params"][param]["values"])
    set_control(page, figure, param, value)
    after = twin_state(figure)
    where = f"{twin}, control {before['params'][param]['label']}"
    assert after["at"] in after["steps"], f"{where}: shows a combination it lacks"
    wanted = [value if i == param else v for i, v in enumerate(before["at"])]
    if wanted in after["steps"]:
        assert after["at"] == wanted, f"{where}: moved other controls too"
        assert not after["status"].strip(), f"{where}: {after['status']!r}"
    else:
        assert after["at"][param] == value, f"{where}: did not reach value {value}"
        assert "no step for" in after["status"], f"{where}: moved others silently"
    assert after["traces"] != before["traces"] or after["title"] != before["title"], (
        f"{where}: the figure did not change"
    )
    title = after["title"].split("<")[0].strip()
    assert title and title in after["caption"], (
        f"{where}: the caption does not follow the figure ({after['caption'][:80]!r})"
    )
    assert after["drawnSubplots"] == after["subplots"], (
        f"{where}: {after['drawnSubplots']} subplots drawn for {after['subplots']} in use"
    )


def test_range_controls_answer_the_keyboard(
    page: Page, site_url: str, html_dir: Path, toc_files: list[str]
) -> None:
    """Tab reaches a range control; End, Home and the arrow keys move it and its figure."""
    for relative, figure in _twins(page, site_url, figure_pages(html_dir, toc_files)):
        ranges = figure.locator('input[type="range"][data-twin-param]')
        if ranges.count() == 0:
            continue
        control = ranges.first
        param = int(control.get_attribute("data-twin-param"))
        figure.locator(".plotly-figure").scroll_into_view_if_needed()
        control.focus()
        assert page.evaluate("document.activeElement.type") == "range"
        last = len(twin_state(figure)["params"][param]["values"]) - 1
        for key, expected in (("Home", 0), ("ArrowRight", 1), ("End", last)):
            before = twin_state(figure)
            page.keyboard.press(key)
            page.evaluate(REDRAWN)
            after = twin_state(figure)
            assert after["at"][param] == expected, f"{relative}: {key} did not reach {expected}"
            if before["at"] != after["at"]:
                assert after["title"] != before["title"] or after["traces"] != before["traces"]
            text = after["params"][param]["text"][expected]
            assert text in control.get_attribute("aria-valuetext"), "aria-valuetext lags"
        return
    pytest.fail("no twin with a range control on any page")


def test_tab_reaches_the_controls(page: Page, site_url: str, html_dir: Path,
                                  toc_files: list[str]) -> None:
    """Pressing Tab from the start of a page reaches a twin's first control."""
    for relative, figure in _twins(page, site_url, figure_pages(html_dir, toc_files)):
        first = figure.locator("[data-twin-param]").first
        first.evaluate("e => e.setAttribute('data-probe', '1')")
        page.evaluate("() => document.activeElement && document.activeElement.blur()")
        for _ in range(400):
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement?.dataset?.probe === '1'"):
                return
        pytest.fail(f"Tab never reached the controls of the first twin on {relative}")
    pytest.fail("no twin with controls on any page")


def _lightness(color: str) -> float:
    """Relative lightness (0..1) of a CSS colour 'rgb(...)', 'rgba(...)' or '#rrggbb'."""
    color = {"white": "#ffffff", "black": "#000000"}.get(color.strip().lower(), color.strip())
    if color.startswith("#"):
        digits = color[1:] if len(color) == 7 else "".join(c * 2 for c in color[1:4])
        r, g, b = (int(digits[i : i + 2], 16) for i in (0, 2, 4))
    else:
        r, g, b = (float(v) for v in color[color.index("(") + 1 : -1].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


FIGURE_COLOURS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => [
    gd._fullLayout.paper_bgcolor, gd._fullLayout.font.color])"""


def test_figures_follow_the_colour_mode(
    browser: Browser, site_url: str, html_dir: Path, toc_files: list[str]
) -> None:
    """With the system in dark mode the figures are drawn dark with light text; switched to
    light by the reader, they are drawn light again."""
    relative = figure_pages(html_dir, toc_files)[0]
    context = browser.new_context(viewport=DESKTOP, color_scheme="dark")
    try:
        page = context.new_page()
        page.goto(f"{site_url}/{relative}")
        settle(page)
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        for paper, ink in page.evaluate(FIGURE_COLOURS):
            assert _lightness(paper) < 0.3 and _lightness(ink) > 0.6, (paper, ink)
        page.evaluate("() => { document.documentElement.dataset.theme = 'light'; }")
        page.evaluate(REDRAWN)
        for paper, ink in page.evaluate(FIGURE_COLOURS):
            assert _lightness(paper) > 0.9 and _lightness(ink) < 0.5, (paper, ink)
    finally:
        context.close()
