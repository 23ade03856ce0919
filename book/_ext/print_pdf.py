"""Print the book as one PDF: the single-page HTML build, printed by Chromium.

    python book/_ext/print_pdf.py SINGLEHTML_DIR OUT.pdf

SINGLEHTML_DIR is what ``jupyter-book build . --builder singlehtml`` wrote
(``_build/singlehtml``); ``make pdf`` runs both steps. No TeX: the same Chromium the browser
tests drive (Debian's ``chromium``, or the browser named by ``CHROMIUM``) loads the page from
disk, waits until MathJax has typeset every formula and plotly.js has drawn every figure (each
at its slider's default step; the caption says it is interactive on the site), opens every
dropdown (derivations and solutions), adds a title page and a table of contents, and prints
it with Playwright's ``page.pdf``: A4, page numbers in the footer, PDF bookmarks from the
headings, code that wraps (the print rules of ``static/site.css``).

The table of contents lists the parts and chapters of ``_toc.yml`` with the page each chapter
starts on: the book is printed once to find those pages, then again with the numbers in.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import sys
import time
from pathlib import Path

import pypdfium2
import yaml
from playwright.sync_api import Page, sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
# A4 with 16 mm side margins: the text column is 178 mm, 673 CSS px at 96 px per inch. The
# page is laid out (and the figures drawn) at that width, as it will be printed.
MARGIN = {"top": "16mm", "bottom": "16mm", "left": "16mm", "right": "16mm"}
COLUMN_PX = round((210 - 32) / 25.4 * 96)
PRINTED_PAGE = "print.html"

FOOTER = (
    '<div style="font-size: 8pt; width: 100%; text-align: center; color: #444;">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)

# Runs in the page once it has loaded: wait for the typesetting and the figures.
WAIT_FOR_SCRIPTS = """async () => {
    if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
    if (document.querySelector('script[type="application/vnd.plotly.v1+json"]')) {
        while (!window.bookFiguresDrawn) { await new Promise(r => setTimeout(r, 50)); }
        await window.bookFiguresDrawn;
    }
}"""

# Open what a reader would click open; redraw the figures at the printed column's width.
PREPARE = """async (front) => {
    document.documentElement.classList.add('book-pdf');
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
    document.querySelectorAll('button.toggle-button').forEach(b => b.remove());
    const article = document.querySelector('article.bd-article') || document.body;
    const holder = document.createElement('div');
    holder.className = 'print-front-matter';
    holder.innerHTML = front;
    article.prepend(holder);
    const figures = Array.from(document.querySelectorAll('.js-plotly-plot'));
    await Promise.all(figures.map(gd => window.Plotly.Plots.resize(gd)));
    // What is still wider than the column (a long equation, a wide table) is scaled down
    // to fit, rather than cut at the margin.
    const wide = 'mjx-container[display="true"], .cell_output table, .bd-article table';
    document.querySelectorAll(wide).forEach(e => {
        const column = e.parentElement.clientWidth;
        if (e.scrollWidth > column + 1) { e.style.zoom = (column / e.scrollWidth).toFixed(3); }
    });
}"""

SET_TOC_PAGES = """(pages) => {
    document.querySelectorAll('.print-toc [data-page-of]').forEach(e => {
        e.textContent = pages[e.getAttribute('data-page-of')] || '';
    });
}"""

# The title of each chapter, as the single-page build shows it (its first heading).
# Each chapter's title and the anchor the contents link to: the single-page build puts each
# document after <span id="document-NAME">; the root document has none, and its heading
# (the page's first) is linked by its section's id.
CHAPTER_TITLES = """(names) => Object.fromEntries(names.map((name, i) => {
    const anchor = document.getElementById('document-' + name);
    const section = anchor ? anchor.nextElementSibling : null;
    const heading = i === 0 ? document.querySelector('article.bd-article h1')
        : section ? section.querySelector('h1, h2, h3') : null;
    const title = heading ? heading.textContent.replace(/#$/, '').trim() : null;
    const target = i === 0 ? (heading && heading.closest('section')?.id) : 'document-' + name;
    return [name, [title, target || '']];
}))"""


def toc_entries(toc: dict) -> list[tuple[str, str]]:
    """The table of contents as ("part", caption) and ("chapter", file) rows, root first."""
    rows = [("chapter", toc["root"])]
    for part in toc.get("parts", []):
        if part.get("caption"):
            rows.append(("part", part["caption"]))
        rows += [("chapter", chapter["file"]) for chapter in part.get("chapters", [])]
    return rows


def front_matter(
    config: dict, rows: list[tuple[str, str]], titles: dict[str, str], anchors: dict[str, str]
) -> str:
    """The title page and the table of contents, as HTML (page numbers filled in later)."""
    items = []
    for kind, value in rows:
        if kind == "part":
            items.append(f'<li class="print-toc-part">{html.escape(value)}</li>')
            continue
        href = f"#{anchors[value]}"
        items.append(
            f'<li><a href="{html.escape(href)}">{html.escape(titles[value])}</a>'
            f'<span class="print-toc-page" data-page-of="{html.escape(value)}"></span></li>'
        )
    return (
        '<section class="print-title-page">'
        f'<p class="print-title">{html.escape(config.get("title", ""))}</p>'
        f'<p class="print-author">{html.escape(config.get("author", ""))}</p>'
        '<p class="print-note">This PDF is printed from the book\'s website. Its figures are '
        "interactive there; here each one stands at its slider's default step.</p>"
        "</section>"
        '<nav class="print-toc" aria-label="Table of contents"><p class="print-toc-title">'
        f"Contents</p><ol>{''.join(items)}</ol></nav>"
    )


def _squeeze(text: str) -> str:
    """Text without whitespace: PDF text loses or adds spaces where lines break."""
    return "".join(text.split())


def chapter_pages(pdf_path: Path, names: list[str], titles: dict[str, str]) -> dict[str, int]:
    """The page (1-based) each chapter starts on, from the PDF's bookmarks, which Chromium
    makes from the headings: the first bookmark with the chapter's title after the previous
    chapter's."""
    pdf = pypdfium2.PdfDocument(pdf_path)
    try:
        marks = [
            (_squeeze(item.get_title()), item.get_dest().get_index())
            for item in pdf.get_toc(max_depth=4)
            if item.get_dest() is not None
        ]
    finally:
        pdf.close()
    pages: dict[str, int] = {}
    position = 0
    for name in names:
        wanted = _squeeze(titles[name])
        for index in range(position, len(marks)):
            title, page = marks[index]
            if title == wanted or title == wanted * 2:
                pages[name] = page + 1
                position = index + 1
                break
    return pages


def _print(page: Page, out: Path) -> None:
    page.pdf(
        path=str(out),
        format="A4",
        margin=MARGIN,
        print_background=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=FOOTER,
        outline=True,
        tagged=True,
    )


def print_book(site: Path, out: Path, book_root: Path = REPO_ROOT) -> dict[str, object]:
    """Print ``site`` (a single-page build) to ``out``; return what the PDF holds."""
    start = time.perf_counter()
    config = yaml.safe_load((book_root / "_config.yml").read_text(encoding="utf-8"))
    toc = yaml.safe_load((book_root / "_toc.yml").read_text(encoding="utf-8"))
    rows = toc_entries(toc)
    names = [value for kind, value in rows if kind == "chapter"]
    source = site / f"{toc['root']}.html"
    if not source.is_file():
        raise FileNotFoundError(
            f"no single-page build at {source}: build it with --builder singlehtml"
        )
    # The single-page build writes the root document's path but links everything from the
    # site root; a copy there resolves those links.
    printed = site / PRINTED_PAGE
    shutil.copyfile(source, printed)
    if not Path(CHROMIUM).is_file():
        raise FileNotFoundError(f"no browser at {CHROMIUM}: install Debian's chromium (.ci/run)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": COLUMN_PX, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.emulate_media(media="print")
            page.goto(printed.as_uri(), wait_until="load")
            page.evaluate(WAIT_FOR_SCRIPTS)
            found = page.evaluate(CHAPTER_TITLES, names)
            missing = [name for name, (title, anchor) in found.items() if not (title and anchor)]
            if missing:
                raise RuntimeError(f"no heading found for {missing} in {source}")
            titles = {name: title for name, (title, _) in found.items()}
            anchors = {name: anchor for name, (_, anchor) in found.items()}
            page.evaluate(PREPARE, front_matter(config, rows, titles, anchors))
            if errors:
                raise RuntimeError(f"the page raised errors: {errors}")
            _print(page, out)
            pages = chapter_pages(out, names, titles)
            page.evaluate(SET_TOC_PAGES, {name: str(number) for name, number in pages.items()})
            _print(page, out)
        finally:
            browser.close()
    printed.unlink()
    pdf = pypdfium2.PdfDocument(out)
    try:
        count = len(pdf)
    finally:
        pdf.close()
    return {
        "path": out,
        "pages": count,
        "bytes": out.stat().st_size,
        "seconds": time.perf_counter() - start,
        "chapter_pages": pages,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the single-page build (_build/singlehtml)")
    parser.add_argument("out", type=Path, help="the PDF to write")
    parser.add_argument("--book-root", type=Path, default=REPO_ROOT, help="folder of _toc.yml")
    args = parser.parse_args(argv)
    result = print_book(args.site.resolve(), args.out.resolve(), args.book_root.resolve())
    print(
        f"{result['path']}: {result['pages']} pages, {result['bytes'] / 1e6:.1f} MB, "
        f"printed in {result['seconds']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
