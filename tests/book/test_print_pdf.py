"""book/_ext/print_pdf.py without a browser: where the chapters land once the empty pages
before some of them are closed up (the page numbers the table of contents is printed with)."""

from __future__ import annotations

import doctest
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "book" / "_ext" / "print_pdf.py"


@pytest.fixture(scope="module")
def print_pdf(load_script) -> ModuleType:
    return load_script(SCRIPT)


@pytest.mark.parametrize(("loose", "expected"), [
    ([], [1, 3, 8, 12]),  # nothing moves
    (["b"], [1, 2, 7, 11]),  # b starts a page earlier, and so does everything after it
    (["b", "d"], [1, 2, 7, 10]),  # two pages gained by the last chapter
    (["c"], [1, 3, 7, 11]),
])
def test_each_loose_chapter_moves_itself_and_the_rest_up_by_one(print_pdf, loose, expected):
    names = ["a", "b", "c", "d"]
    pages = dict(zip(names, [1, 3, 8, 12], strict=True))
    assert list(print_pdf.shifted_pages(pages, names, loose).values()) == expected


def test_a_chapter_without_a_page_is_left_out(print_pdf):
    assert print_pdf.shifted_pages({"a": 1, "c": 9}, ["a", "b", "c"], ["b"]) == {"a": 1, "c": 9}


@pytest.mark.parametrize("name", ["shifted_pages", "_written_as"])
def test_the_docstring_example_holds(print_pdf, name):
    finder = doctest.DocTestFinder()
    tests = finder.find(getattr(print_pdf, name), globs=vars(print_pdf))
    results = [doctest.DocTestRunner().run(t) for t in tests]
    assert results and all(r.failed == 0 and r.attempted > 0 for r in results)


def test_the_mathjax_fonts_load_from_the_copy_at_the_sites_root(print_pdf, tmp_path):
    """The printed copy sits one folder above the page it copies: the fonts' relative paths
    are written from there, and addresses, data: URIs and paths from the root stay."""
    style = ('src:url("../_vendor/mathjax/f.woff") url("data:font/woff;base64,AA") '
             'url("https://example.org/f.woff") url("/f.woff")')
    moved = print_pdf.moved_urls(style, tmp_path / "book", tmp_path)
    assert moved == ('src:url("_vendor/mathjax/f.woff") url("data:font/woff;base64,AA") '
                     'url("https://example.org/f.woff") url("/f.woff")')


@pytest.mark.parametrize(("title", "written"), [
    ("Top-k attention once k is large enough", True),  # as the heading reads
    ("Top- attention once  is large enough", True),  # the formulas left out
    # each piece twice
    ("Top-Top- attention once  attention once  is large enough is large enough", True),
    ("Top- attention once  is large is largeenough", True),  # a piece up to its line's end
    ("Top-kk attention once k is large enough", False),  # a formula twice
    ("Top- attention once", False),  # a piece missing
    ("Top-k attention once k is large enoughTop-k attention once k is large enough", False),
])
def test_a_bookmark_is_its_heading_written_as_chromium_writes_it(print_pdf, title, written):
    pieces = ["Top-", "k", " attention once ", "k", " is large enough"]
    assert print_pdf._written_as(title, pieces) is written


def test_a_bookmark_names_its_heading_as_the_text_layer_holds_it(print_pdf):
    """MathJax's glyphs are not text in the PDF: a bookmark leaves the formulas out."""
    assert print_pdf._plain(["Why divide by ", "dQK", "?"]) == "Why divide by ?"
