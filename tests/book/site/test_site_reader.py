"""What a reader does on the site besides reading, in a browser: finding the way (the
sidebars at every width), choosing light or dark, and searching.

- Navigation: at a phone's width (390 px), a tablet's (900 px) and a desktop's (1280 px),
  the visible menu toggle opens the site navigation and a link in it leads to its page; where
  the page contents sit behind a toggle, it opens them and a link in them leads to its
  section, closing the drawer. No empty band tops the page.
- Colour mode: a first visit follows the system's light or dark setting; the reader's choice
  (the theme's switch) wins over it and is kept on the next page.
- Search: a lesson ranks first for its own topic, results show text from the page (not the
  page's toolbar) around the word searched for, with its math as a line of text, and the
  search field's icon never covers the text typed.
- Reading a lesson (reading.py measures it): at 1280 px no code block or output scrolls
  sideways; at 390 px no display equation is cut at the column's edge without a sign that
  it scrolls; at both no figure's toolbar lies over its title; tick labels are at least
  11 px; at 390 px every control of a figure is at least 44 px each way; the prose runs at
  most 80 characters a line at 1280 px. What each lesson showed lands in
  _build/logs/site-reading.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browsing import DESKTOP, PHONE, TABLET, lesson_pages, settle
from playwright.sync_api import Browser, Page
from reading import MAX_LINE_CHARACTERS, MIN_TICK_PX, MIN_TOUCH_PX, measure_page

WIDTHS = {"phone": PHONE, "tablet": TABLET, "desktop": DESKTOP}
# Below this width the theme opens the sidebars as drawers (modal dialogs).
DRAWER_WIDTH = 992
# A topic word and the lesson that must come first when a reader searches for it.
SEARCHES = {
    "rotary": "lessons/08_rope.html",
    "cache": "lessons/05_kv_cache.html",
    "latent": "lessons/07_mla.html",
}
# What the theme's article toolbar shows: a snippet made of it says nothing about the page.
TOOLBAR_WORDS = (".md", ".ipynb", "Colab", ".pdf")


def _lesson(toc_files: list[str], html_dir: Path) -> str:
    """A lesson whose page has a contents list and a next lesson in the navigation."""
    lessons = lesson_pages(toc_files)
    assert len(lessons) >= 2, "the navigation checks need two lessons"
    return lessons[-2]


@pytest.mark.parametrize("width", list(WIDTHS))
def test_menu_toggle_opens_the_navigation(
    browser: Browser, site_url: str, html_dir: Path, toc_files: list[str], width: str
) -> None:
    size = WIDTHS[width]
    relative = _lesson(toc_files, html_dir)
    target = lesson_pages(toc_files)[-1]
    context = browser.new_context(viewport=size)
    try:
        page = context.new_page()
        page.goto(f"{site_url}/{relative}")
        settle(page)
        toggle = page.locator(".primary-toggle:visible")
        assert toggle.count() == 1, f"{toggle.count()} visible menu toggles at {size['width']} px"
        sidebar = page.locator("#pst-primary-sidebar")
        if size["width"] < DRAWER_WIDTH:
            toggle.click()
            drawer = page.locator("#pst-primary-sidebar-modal")
            page.wait_for_function(
                "() => document.querySelector('#pst-primary-sidebar-modal').open")
            link = drawer.locator(f'a[href$="{Path(target).name}"]:visible').first
        else:
            assert sidebar.is_visible(), "the sidebar is hidden at desktop width"
            toggle.click()
            page.wait_for_function(
                "() => document.querySelector('#pst-primary-sidebar')"
                ".classList.contains('pst-sidebar-hidden')")
            toggle.click()
            page.wait_for_function(
                "() => !document.querySelector('#pst-primary-sidebar')"
                ".classList.contains('pst-sidebar-hidden')")
            link = sidebar.locator(f'a[href$="{Path(target).name}"]:visible').first
        link.click()
        page.wait_for_url(f"**/{target}")
    finally:
        context.close()


@pytest.mark.parametrize("width", ["phone", "tablet"])
def test_contents_toggle_opens_the_page_contents(
    browser: Browser, site_url: str, html_dir: Path, toc_files: list[str], width: str
) -> None:
    relative = _lesson(toc_files, html_dir)
    context = browser.new_context(viewport=WIDTHS[width])
    try:
        page = context.new_page()
        page.goto(f"{site_url}/{relative}")
        settle(page)
        toggle = page.locator(".secondary-toggle:visible")
        assert toggle.count() == 1, "no visible page-contents toggle"
        toggle.click()
        page.wait_for_function(
            "() => document.querySelector('#pst-secondary-sidebar-modal').open")
        link = page.locator("#pst-secondary-sidebar-modal a.nav-link:visible").nth(1)
        anchor = link.get_attribute("href")
        assert anchor and anchor.startswith("#"), anchor
        link.click()
        page.wait_for_function(
            "a => location.hash === a && !document.querySelector('#pst-secondary-sidebar-modal')"
            ".open", arg=anchor)
        heading = page.locator(anchor).bounding_box()
        assert heading is not None and 0 <= heading["y"] < WIDTHS[width]["height"]
    finally:
        context.close()


def test_no_empty_band_tops_the_page(page: Page, site_url: str, toc_files: list[str]) -> None:
    """At desktop width the page starts with the article's toolbar and the sidebar, not a
    bar of its own."""
    page.goto(f"{site_url}/{lesson_pages(toc_files)[0]}")
    settle(page)
    header = page.locator("#pst-header")
    assert header.count() == 0 or not header.is_visible()
    top = page.evaluate("() => document.elementFromPoint(640, 20).closest('.bd-header-article')")
    assert top is not None, "the article's toolbar is not at the top of the page"


def _colours(page: Page) -> tuple[str, str]:
    return page.evaluate(
        "() => [document.documentElement.dataset.theme, getComputedStyle(document.body)"
        ".backgroundColor]")


def test_colour_mode_follows_the_system_unless_the_reader_chooses(
    browser: Browser, site_url: str, toc_files: list[str]
) -> None:
    first, second = lesson_pages(toc_files)[:2]
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport=DESKTOP, color_scheme=scheme)
        try:
            page = context.new_page()
            page.goto(f"{site_url}/{first}")
            settle(page)
            theme, background = _colours(page)
            assert theme == scheme, f"system {scheme}: the page is {theme}"
            channels = [int(v) for v in background[background.index("(") + 1:-1].split(",")[:3]]
            assert (sum(channels) / 3 < 80) == (scheme == "dark"), background
            # The reader picks the other mode with the theme's switch; it sticks.
            other = "light" if scheme == "dark" else "dark"
            switch = page.locator(".theme-switch-button:visible").first
            for _ in range(3):
                if page.evaluate("document.documentElement.dataset.theme") == other:
                    break
                switch.click()
            assert page.evaluate("document.documentElement.dataset.theme") == other
            page.goto(f"{site_url}/{second}")
            settle(page)
            assert _colours(page)[0] == other, "the reader's choice was not kept"
        finally:
            context.close()


def test_search_ranks_lessons_and_shows_their_text(page: Page, site_url: str) -> None:
    for word, lesson in SEARCHES.items():
        page.goto(f"{site_url}/search.html?q={word}")
        page.wait_for_function(
            "() => document.querySelectorAll('#search-results li p.context').length > 0",
            timeout=20_000)
        first = page.locator("#search-results li").first
        href = first.locator("a").first.get_attribute("href")
        assert href.split("#")[0].endswith(lesson), f"{word!r}: first result {href}"
        snippet = first.locator("p.context").text_content() or ""
        assert word in snippet.lower(), f"{word!r}: snippet {snippet[:120]!r}"
        assert not any(t in snippet for t in TOOLBAR_WORDS), f"{word!r}: toolbar in {snippet!r}"


def test_search_icon_leaves_the_text_clear(page: Page, site_url: str, toc_files: list[str]) -> None:
    page.goto(f"{site_url}/{lesson_pages(toc_files)[0]}")
    settle(page)
    page.locator(".search-button-field:visible, .search-button:visible").first.click()
    field = page.locator("#pst-search-dialog input[type='search']")
    field.wait_for(state="visible")
    field.type("rotary")
    icon = page.locator("#pst-search-dialog .fa-magnifying-glass").bounding_box()
    text_starts = field.evaluate(
        "e => e.getBoundingClientRect().left + parseFloat(getComputedStyle(e).paddingLeft)")
    assert icon is not None and icon["x"] + icon["width"] <= text_starts, (icon, text_starts)


# Math read as its symbols one by one ("d h e a d"): four or more single letters in a row.
SPELLED_OUT = re.compile(r"\b(?:[a-z] ){3,}[a-z]\b")


def test_search_snippets_quote_the_match(page: Page, site_url: str) -> None:
    """Every result's snippet holds the word searched for (or a word starting with its
    stem), and no math in it is spelled out letter by letter."""
    for word in SEARCHES:
        page.goto(f"{site_url}/search.html?q={word}")
        page.wait_for_function(
            "() => document.querySelectorAll('#search-results li p.context').length > 0",
            timeout=20_000)
        page.wait_for_timeout(500)  # the remaining results' snippets
        snippets = page.locator("#search-results li p.context").all_text_contents()
        missing = [s[:80] for s in snippets if word[:5] not in s.lower()]
        assert not missing, f"{word!r}: {len(missing)} of {len(snippets)} miss it: {missing}"
        garbled = [s for s in snippets if SPELLED_OUT.search(s)]
        assert not garbled, f"{word!r}: math spelled out in {garbled[:2]}"


@pytest.fixture(scope="module")
def reading(browser: Browser, site_url: str, html_dir: Path, toc_files: list[str]) -> dict:
    """Each lesson, loaded once and measured at 1280 px and at 390 px (reading.py)."""
    measured = {}
    for relative in lesson_pages(toc_files):
        context = browser.new_context(viewport=DESKTOP)
        try:
            page = context.new_page()
            page.goto(f"{site_url}/{relative}")
            measured[relative] = measure_page(page)
        finally:
            context.close()
    path = html_dir.parent / "logs" / "site-reading.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measured, indent=1), encoding="utf-8")
    return measured


def test_code_fits_the_column_on_a_desktop(reading: dict) -> None:
    wide = {
        page: (f"{m['desktop']['code']['code_overflowing']} code blocks, "
               f"{m['desktop']['code']['output_overflowing']} outputs",
               m["desktop"]["code"]["examples"])
        for page, m in reading.items()
        if m["desktop"]["code"]["code_overflowing"] or m["desktop"]["code"]["output_overflowing"]
    }
    assert not wide, f"code that scrolls sideways at {DESKTOP['width']} px: {wide}"
    assert sum(m["desktop"]["code"]["code"] for m in reading.values()), "no code block measured"


def test_no_equation_is_cut_on_a_phone(reading: dict) -> None:
    cut = {page: m["phone"]["math"] for page, m in reading.items() if m["phone"]["math"]["cut"]}
    assert not cut, f"display equations cut at {PHONE['width']} px without a scroll cue: {cut}"
    assert any(m["phone"]["math"]["wide"] for m in reading.values()), (
        "no equation is wider than a phone: the check of the scroll cue did not run")


def test_no_toolbar_over_a_title(reading: dict) -> None:
    over = {
        page: m["desktop"]["toolbar_over_title"] + m["phone"]["toolbar_over_title"]
        for page, m in reading.items()
        if m["desktop"]["toolbar_over_title"] or m["phone"]["toolbar_over_title"]
    }
    assert not over, f"figure toolbars over titles: {over}"


def test_tick_labels_are_readable(reading: dict) -> None:
    small = {
        page: (m["desktop"]["ticks"]["small"] + m["phone"]["ticks"]["small"])[:5]
        for page, m in reading.items()
        if m["desktop"]["ticks"]["small"] or m["phone"]["ticks"]["small"]
    }
    assert not small, f"tick labels under {MIN_TICK_PX} px: {small}"
    assert sum(m["desktop"]["ticks"]["ticks"] for m in reading.values()), "no tick label measured"


def test_controls_are_large_enough_to_touch(reading: dict) -> None:
    small = {page: m["phone"]["touch"]["small"] for page, m in reading.items()
             if m["phone"]["touch"]["small"]}
    assert not small, f"controls under {MIN_TOUCH_PX} px at {PHONE['width']} px: {small}"
    assert sum(m["phone"]["touch"]["controls"] for m in reading.values()), "no control measured"


def test_prose_lines_are_not_too_long(reading: dict) -> None:
    long = {page: m["desktop"]["characters_per_line"] for page, m in reading.items()
            if m["desktop"]["characters_per_line"] > MAX_LINE_CHARACTERS}
    assert not long, f"prose over {MAX_LINE_CHARACTERS} characters a line: {long}"
