"""The rest of the built site in a real browser: every page that is not in the table of
contents (the package's highlighted source pages under _modules/, the general index, the
module index, the search page), with the checks of test_site_browser.py, in a process of
its own so that the two halves of the site are visited side by side.

Each page is visited once, in a fresh browser profile: it loads without console errors or
requests to other hosts and shows no dead widget; its first visit stays within 3 MB; nothing
moves as it settles (at desktop width); it loads only the scripts it uses (the search index
only on the search page); axe-core finds no violation of impact "serious" or "critical" on
the largest source page, which stands for the others (one template, one set of colours), and
on every other page; at a phone's width it does not scroll sideways. The record lands in
_build/logs/site-sources.json.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browsing import PHONE, html_pages
from playwright.sync_api import Browser
from test_site_browser import (
    Visit,
    contents_pages,
    load_problems,
    moved,
    over_budget,
    serious_violations,
    too_wide,
    visit_pages,
    wrong_scripts,
)


@pytest.fixture(scope="module")
def source_visits(
    browser: Browser, site_url: str, html_dir: Path, book_root: Path, toc_files: list[str]
) -> list[Visit]:
    """Every page of the site outside the table of contents, visited once."""
    contents = set(contents_pages(toc_files))
    pages = [page for page in html_pages(html_dir) if page not in contents]
    assert any(page.startswith("_modules/attnlib/") for page in pages), (
        f"no source page of the package in {html_dir}"
    )
    return visit_pages(browser, site_url, html_dir, book_root, pages, phone_pages=set(),
                       report="site-sources.json")


def test_every_page_loads_offline(source_visits: list[Visit]) -> None:
    problems = load_problems(source_visits)
    assert not problems, problems


def test_first_visit_weight_budget(source_visits: list[Visit], toc_files: list[str]) -> None:
    over = over_budget(source_visits, toc_files)
    assert not over, f"first visits over budget: {over}"


def test_nothing_moves_as_pages_settle(source_visits: list[Visit]) -> None:
    shifted = moved(source_visits)
    assert not shifted, f"pages whose layout shifts by 0.1 or more: {shifted}"


def test_pages_load_only_the_scripts_they_use(source_visits: list[Visit], html_dir: Path) -> None:
    wrong = wrong_scripts(source_visits, html_dir)
    assert not wrong, wrong
    assert any(v.shown == "search.html" for v in source_visits), "the search page was not visited"


def test_axe_finds_no_serious_violation(source_visits: list[Visit]) -> None:
    sources = [v for v in source_visits if v.page.startswith("_modules/attnlib/")]
    assert sum(v.audited for v in sources) == 1, "axe-core must audit one source page"
    unaudited = [v.page for v in source_visits if v not in sources and not v.audited]
    assert not unaudited, f"axe-core did not audit {unaudited}"
    failing = serious_violations(source_visits)
    assert not failing, failing


def test_phone_width_does_not_scroll_sideways(source_visits: list[Visit]) -> None:
    wide = too_wide(source_visits)
    assert not wide, f"pages wider than {PHONE['width']} px on a phone: {wide}"
