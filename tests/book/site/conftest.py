"""Fixtures for the browser checks: one browser for the whole session, and a fresh page at
desktop width for each test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browsing import CHROMIUM, CHROMIUM_ARGS, DESKTOP
from playwright.sync_api import Browser, Page, sync_playwright


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no browser at {CHROMIUM}: make doctor says what to install")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
