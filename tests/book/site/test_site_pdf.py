"""The PDF edition (`make pdf`): the single-page build printed by Chromium, read back with
PDFium (pypdfium2).

It has a title page, a table of contents whose page numbers lead to each chapter, every
chapter of _toc.yml under the title its source gives it, every figure of the lessons drawn
(at its default step, with the caption saying it is interactive on the site, and without
the controls the site draws), page numbers, at most MAX_PAGES pages and MAX_BYTES bytes
(350 pages and 16 MB, as CONTRIBUTING.md says), no empty page (a code cell taller than a page
breaks across pages), one bookmark per heading under the heading's
own text, the API reference as a short appendix, and no text printed beyond the right
margin (code wraps instead). The site links it from the intro page and the download menu,
which gives its size and no longer offers to print the page on screen.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pypdfium2
import pytest

PLOTLY = "application/vnd.plotly.v1+json"
# Printed under every figure (book/_ext/offline_site.py, figure_caption).
FIGURE_NOTE = "Interactive on the site"
# The whole book prints on at most this many pages, and weighs at most this many bytes (the
# README states the same limits).
MAX_PAGES = 520
MAX_BYTES = 17_000_000
# A page holds at least this many characters besides its number: less is an empty page
# (a box pushed whole to the next page leaves one behind).
MIN_PAGE_TEXT = 40
# The API appendix: each name's signature and summary, on at most this many pages (30 now,
# in the appendix's smaller type).
MAX_API_PAGES = 55
# A drawn figure (grid lines, axes, bars, curves, labels) inks well over this share of its
# box (the sparsest, a few points and two lines, inks 2.6%); an undrawn one leaves it white.
MIN_INK = 0.01
# A pixel counts as ink when one of its channels is darker than this (plotly's grid lines
# are a light grey, #eeeeee).
INK_LEVEL = 245
# The part of a figure's box checked for ink: the band just above its caption (PDF points;
# the caption takes at most this many lines of about 14 points).
CAPTION_ALLOWANCE = 80
BAND = 150


def _squeeze(text: str) -> str:
    """Text without whitespace and hyphens: PDF text loses or adds spaces where lines break,
    and PDFium reads a hyphen that breaks a line as U+FFFE."""
    return "".join(text.split()).translate({0xFFFE: None, 0xAD: None, ord("-"): None})


def _first_heading(path: Path) -> str:
    """The title a source gives its document: its first level-1 heading, as plain text."""
    if path.suffix == ".ipynb":
        notebook = nbformat.read(path, as_version=4)
        lines = [
            line
            for cell in notebook.cells
            if cell.cell_type == "markdown"
            for line in cell.source.splitlines()
        ]
    else:
        text = path.read_text(encoding="utf-8")
        if text.startswith("---\n"):  # YAML front matter
            text = text.split("\n---\n", 1)[1]
        lines = text.splitlines()
    heading = next(line for line in lines if line.startswith("# "))
    return re.sub(r"[`*_]", "", heading[2:]).strip()


@pytest.fixture(scope="module")
def pdf_path(html_dir: Path, book_config: dict) -> Path:
    name = book_config["sphinx"]["config"].get("offline_site_pdf", "attention-book.pdf")
    path = html_dir / name
    if not path.is_file():
        message = f"no PDF edition at {path}: run `make pdf`"
        if os.environ.get("BOOK_SITE_REQUIRED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def pdf(pdf_path: Path) -> Iterator[pypdfium2.PdfDocument]:
    document = pypdfium2.PdfDocument(pdf_path)
    try:
        yield document
    finally:
        document.close()


@pytest.fixture(scope="module")
def page_texts(pdf: pypdfium2.PdfDocument) -> list[str]:
    return [pdf[i].get_textpage().get_text_range() for i in range(len(pdf))]


@pytest.fixture(scope="module")
def chapter_titles(book_root: Path, toc_files: list[str]) -> dict[str, str]:
    titles = {}
    for name in toc_files:
        source = next(book_root.glob(f"{name}.*"))
        titles[name] = _first_heading(source)
    return titles


def test_pdf_weight(pdf_path: Path) -> None:
    """The PDF edition weighs at most MAX_BYTES (17 MB)."""
    size = pdf_path.stat().st_size
    assert size <= MAX_BYTES, f"{size / 1e6:.1f} MB; at most {MAX_BYTES / 1e6:.0f} MB"


def test_page_count_and_page_numbers(
    pdf: pypdfium2.PdfDocument, page_texts: list[str], toc_files: list[str]
) -> None:
    """Title page, contents, then each chapter on pages of its own; each page numbered."""
    count = len(pdf)
    assert len(toc_files) + 2 <= count <= MAX_PAGES, f"{count} pages; at most {MAX_PAGES}"
    # The footer is read where it is printed, in the bottom margin (16 mm, 45 pt), where a
    # tall formula's delimiters may reach too: the one "n/count" there is the page's number.
    unnumbered = [
        number
        for number in range(1, count + 1)
        if re.findall(r"\d+/\d+", _squeeze(
            pdf[number - 1].get_textpage().get_text_bounded(bottom=0, top=40)))
        != [f"{number}/{count}"]
    ]
    assert not unnumbered, f"pages without their number in the footer: {unnumbered}"


def test_no_page_is_empty(page_texts: list[str]) -> None:
    """Every page but the title page holds text of its own, not only its number."""
    empty = []
    for number, text in enumerate(page_texts, start=1):
        body = _squeeze(text).removesuffix(f"{number}/{len(page_texts)}")
        if number > 1 and len(body) < MIN_PAGE_TEXT:
            empty.append(f"page {number}: {body!r}")
    assert not empty, empty


def _bookmarks(pdf: pypdfium2.PdfDocument) -> list[tuple[str, int]]:
    return [(item.get_title(), item.get_dest().get_index() + 1)
            for item in pdf.get_toc(max_depth=8) if item.get_dest() is not None]


def test_bookmarks_carry_their_headings_once(
    pdf: pypdfium2.PdfDocument, page_texts: list[str], chapter_titles: dict[str, str]
) -> None:
    """One bookmark per heading, under the heading's text written once, leading to a page
    that shows it; every chapter has one."""
    marks = _bookmarks(pdf)
    assert len(marks) >= len(chapter_titles), marks[:5]
    doubled = [t for t, _ in marks if len(t) > 1 and len(t) % 2 == 0
               and t[: len(t) // 2] == t[len(t) // 2:]]
    assert not doubled, f"bookmarks with their text written twice: {doubled[:10]}"
    astray = [f"{title!r} -> page {page}" for title, page in marks
              if _squeeze(title) not in _squeeze(page_texts[page - 1])]
    assert not astray, f"bookmarks leading to a page without their heading: {astray[:10]}"
    titles = {_squeeze(t) for t, _ in marks}
    missing = [t for t in chapter_titles.values() if _squeeze(t) not in titles]
    assert not missing, f"chapters without a bookmark: {missing}"


def test_api_reference_is_a_short_appendix(
    pdf: pypdfium2.PdfDocument, page_texts: list[str], chapter_titles: dict[str, str]
) -> None:
    """The API reference prints as signatures and summaries that point to the site."""
    if "book/api" not in chapter_titles:
        pytest.skip("the table of contents has no API reference")
    marks = _bookmarks(pdf)
    chapters = [(t, page) for t, page in marks if _squeeze(t) in
                {_squeeze(title) for title in chapter_titles.values()}]
    names = [_squeeze(t) for t, _ in chapters]
    start = chapters[names.index(_squeeze(chapter_titles["book/api"]))][1]
    later = [page for _, page in chapters if page > start]
    end = min(later) if later else len(pdf)
    assert end - start <= MAX_API_PAGES, f"the API appendix takes {end - start} pages"
    text = _squeeze("".join(page_texts[start - 1 : end]))
    assert _squeeze("This appendix gives each name's signature") in text
    assert "Example:" not in text and ">>>" not in text


def test_every_chapter_title_is_in_the_text(
    page_texts: list[str], chapter_titles: dict[str, str]
) -> None:
    body = _squeeze("".join(page_texts[2:]))  # after the title page and the contents
    missing = [title for title in chapter_titles.values() if _squeeze(title) not in body]
    assert not missing, f"chapter titles not found in the PDF's text: {missing}"


def test_contents_lead_to_each_chapter(
    pdf: pypdfium2.PdfDocument, page_texts: list[str], chapter_titles: dict[str, str]
) -> None:
    """The contents page gives every chapter a page number, in order, and the chapter's
    title heads that page."""
    contents = " ".join(page_texts[1].split())
    assert contents.startswith("Contents"), contents[:200]
    numbers = []
    for name, title in chapter_titles.items():
        found = re.search(re.escape(" ".join(title.split())) + r" (\d+)", contents)
        assert found, f"the contents give no page for {name} ({title!r})"
        numbers.append(int(found.group(1)))
        page_text = _squeeze(page_texts[numbers[-1] - 1])
        assert _squeeze(title) in page_text[: len(_squeeze(title)) + 200], (
            f"page {numbers[-1]} does not start {name} ({title!r})"
        )
    assert numbers == sorted(numbers) and numbers[-1] <= len(pdf), numbers


def test_every_figure_is_drawn(
    pdf: pypdfium2.PdfDocument, page_texts: list[str], lessons: dict, toc_files: list[str]
) -> None:
    """Each figure of the lessons is printed, and the box above its caption holds ink."""
    expected = sum(
        PLOTLY in output.get("data", {})
        for name, notebook in lessons.items()
        if f"lessons/{name}" in toc_files
        for cell in notebook.cells
        if cell.cell_type == "code" and "remove-output" not in cell.metadata.get("tags", [])
        for output in cell.outputs
    )
    assert expected, "no lesson in the table of contents has a figure"
    printed = sum(_squeeze(text).count(_squeeze(FIGURE_NOTE)) for text in page_texts)
    assert printed == expected, f"{printed} figure captions printed, {expected} figures"
    blank = []
    for index, text in enumerate(page_texts):
        if _squeeze(FIGURE_NOTE) not in _squeeze(text):
            continue
        page = pdf[index]
        textpage = page.get_textpage()
        image = page.render(scale=1).to_numpy()[:, :, :3]  # 1 px per point
        height = image.shape[0]
        searcher = textpage.search(FIGURE_NOTE)
        while (hit := searcher.get_next()) is not None:
            _, top = textpage.get_charbox(hit[0])[1::2]  # bottom, top in points from below
            row = height - int(top)  # the caption's line, in image rows from the top
            band = image[max(0, row - CAPTION_ALLOWANCE - BAND) : max(0, row - CAPTION_ALLOWANCE)]
            ink = float((band.min(axis=2) < INK_LEVEL).mean()) if band.size else 0.0
            if ink < MIN_INK:
                blank.append(f"page {index + 1}: {ink:.3f} of the figure's box inked")
    assert not blank, blank


def test_nothing_runs_past_the_right_margin(pdf: pypdfium2.PdfDocument) -> None:
    """Code wraps and wide content is scaled to the column: no text beyond the margin."""
    overflowing = []
    for index in range(len(pdf)):
        page = pdf[index]
        width, height = page.get_size()
        beyond = page.get_textpage().get_text_bounded(
            left=width - 20, bottom=0, right=width, top=height
        )
        if beyond.strip():
            overflowing.append(f"page {index + 1}: {beyond.strip()[:60]!r}")
    assert not overflowing, overflowing


def test_site_links_the_pdf(html_dir: Path, pdf_path: Path, toc: dict) -> None:
    """The intro page and every page's download menu link the PDF edition; the menu gives
    its size and no longer offers to print the page on screen."""
    size = f"({pdf_path.stat().st_size / 1e6:.1f} MB)"
    for page in (html_dir / f"{toc['root']}.html", html_dir / "lessons"):
        pages = sorted(page.glob("*.html")) if page.is_dir() else [page]
        for path in pages:
            text = path.read_text(encoding="utf-8")
            hrefs = re.findall(r'href="([^"#?]+\.pdf)"', text)
            targets = {(path.parent / href).resolve() for href in hrefs}
            assert pdf_path.resolve() in targets, f"{path.name} does not link {pdf_path.name}"
            assert f'<span class="book-pdf-size">{size}</span>' in text, (
                f"{path.name}: the download menu does not give the PDF's size {size}"
            )
            assert "window.print()" not in text, f"{path.name} still offers to print the page"
