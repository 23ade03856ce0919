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
import io
import logging
import os
import re
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
# The printable height of an A4 page with 16 mm margins, in CSS px at 96 px per inch: a code
# cell taller than this breaks across pages.
PAGE_PX = round((297 - 32) / 25.4 * 96) - 40
# The API reference, printed as a short appendix (API_APPENDIX).
API_PAGE = "book/api"
# Where the download menu shows the PDF's size (offline_site.pdf_download_button).
SIZE_SLOT = re.compile(r'<span class="book-pdf-size">[^<]*</span>')
# The entry itself, hidden until the PDF exists.
HIDDEN_ENTRY = re.compile(r'<li hidden>(<a href="[^"]*" target="_blank"\s+class="btn btn-sm '
                          r'btn-download-book-pdf-button)')

# A relative url("...") in a style: not a data: URI, an address or a path from the root.
RELATIVE_URL = re.compile(r'url\("(?![a-z][a-z0-9+.-]*:|/|#)([^"]+)"\)')

FOOTER = (
    '<div style="font-size: 8pt; width: 100%; text-align: center; color: #444;">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)

# Runs in the page once it has loaded: wait for the typesetting and the figures.
WAIT_FOR_SCRIPTS = """async () => {
    if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
    if (document.querySelector('script[type="application/vnd.plotly.v1+json"]')) {
        while (!window.bookDrawFigures) { await new Promise(r => setTimeout(r, 50)); }
        await window.bookDrawFigures();
    }
}"""

# Open what a reader would click open; redraw the figures at the printed column's width.
PREPARE = """async ([front, page_height]) => {
    document.documentElement.classList.add('book-pdf');
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
    document.querySelectorAll('button.toggle-button').forEach(b => b.remove());
    const article = document.querySelector('article.bd-article') || document.body;
    const holder = document.createElement('div');
    holder.className = 'print-front-matter';
    holder.innerHTML = front;
    article.prepend(holder);
    // The figures, laid out again for the printed column, at their default steps.
    if (window.bookRedrawFigures) { await window.bookRedrawFigures(); }
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    if (window.bookFiguresIdle) { await window.bookFiguresIdle(); }
    window.bookFiguresFrozen = true;
    // A code cell that fits on a page moves whole to the next one; a taller one breaks
    // across pages rather than leave an empty page behind.
    document.querySelectorAll('div.cell_input, div[class*="highlight-"]').forEach(e => {
        if (e.getBoundingClientRect().height > page_height) { e.style.breakInside = 'auto'; }
    });
    // The PDF is tagged: its structure holds one element per element of the page that
    // assistive technology sees, and a book's highlighted code (a span per token) and
    // MathJax's MathML (an element per symbol) made 100,000 of them, most of a 23 MB file.
    // In print, each code block is plain text (the colours go), and each formula one
    // element, labelled with its text as search reads it.
    // (An inline block is an element of its own there, so the lines are plain text too:
    // print wraps them without the hanging indent.) A figure is one element, its drawing's
    // label; plotly's other layers are hidden from that structure.
    document.querySelectorAll('div.highlight pre').forEach(pre => {
        pre.textContent = pre.textContent;
        pre.classList.remove('hang');
    });
    document.querySelectorAll('.plotly-figure svg.main-svg:not([role="img"]), .modebar-container')
        .forEach(e => e.setAttribute('aria-hidden', 'true'));
    const linear = el => {
        const kids = Array.from(el.children);
        const tag = el.tagName.toLowerCase();
        const sub = k => { const t = linear(k).trim(); return /^[\\w.]+$/.test(t) ? t : `(${t})`; };
        if (['mi', 'mn', 'mtext'].includes(tag)) { return el.textContent.trim(); }
        if (tag === 'mo') {
            const op = el.textContent.trim();
            if (/^[\u2061-\u2064]?$/.test(op)) { return ' '; }
            return /^[=<>+\u2212\u00d7\u2264\u2265\u2248,]$/.test(op) ? ` ${op} ` : op;
        }
        if (tag === 'msub' || tag === 'munder') { return linear(kids[0]) + '_' + sub(kids[1]); }
        if (tag === 'msup' || tag === 'mover') { return linear(kids[0]) + '^' + sub(kids[1]); }
        if (tag === 'msubsup' || tag === 'munderover') {
            return linear(kids[0]) + '_' + sub(kids[1]) + '^' + sub(kids[2]);
        }
        if (tag === 'mfrac') { return sub(kids[0]) + ' / ' + sub(kids[1]); }
        return kids.map(linear).join(tag === 'mtr' ? ' ' : '') + (tag === 'mtr' ? '; ' : '');
    };
    document.querySelectorAll('mjx-container').forEach(math => {
        const mml = math.querySelector('mjx-assistive-mml');
        // A heading's math stays: Chromium makes its bookmark from the heading's MathML.
        if (!mml || math.closest('h1, h2, h3, h4, h5, h6')) { return; }
        const text = linear(mml.querySelector('math') || mml).replace(/\\s+/g, ' ').trim();
        mml.remove();
        math.setAttribute('role', 'math');
        math.setAttribute('aria-label', text);
    });
    // What is still wider than the column (a long equation, a wide table) is scaled down
    // to fit, rather than cut at the margin.
    const wide = 'mjx-container[display="true"], .cell_output table, .bd-article table';
    document.querySelectorAll(wide).forEach(e => {
        const column = e.parentElement.clientWidth;
        if (e.scrollWidth > column + 1) { e.style.zoom = (column / e.scrollWidth).toFixed(3); }
    });
}"""

# The API reference becomes a short appendix: each name's signature and the first paragraph
# of its docstring (its one-line summary), under a note that the site gives the rest.
API_APPENDIX = """([name, note]) => {
    const anchor = document.getElementById('document-' + name);
    const section = anchor ? anchor.nextElementSibling : null;
    if (!section) { return 0; }
    section.querySelectorAll('.viewcode-link, a.headerlink').forEach(e => e.remove());
    let kept = 0;
    section.querySelectorAll('dl.py > dd').forEach(dd => {
        Array.from(dd.children).forEach((child, i) => {
            const summary = i === 0 && child.tagName === 'P';
            if (!summary && !(child.tagName === 'DL' && child.classList.contains('py'))) {
                child.remove();
            }
        });
        kept += 1;
    });
    // A module's own docstring keeps its first paragraph too; lists, examples and notes go.
    section.querySelectorAll('section section').forEach(module => {
        let first = true;
        Array.from(module.children).forEach(child => {
            const api = child.tagName === 'DL' && child.classList.contains('py');
            const keep = /^H[1-6]$/.test(child.tagName) || child.tagName === 'SECTION'
                || child.tagName === 'SPAN' || api || (child.tagName === 'P' && first);
            if (child.tagName === 'P') { first = false; }
            if (!keep) { child.remove(); }
        });
    });
    // A constant's value (a whole corpus, say) is on the site; its name and type stay.
    section.querySelectorAll('dl.py:is(.data, .attribute) > dt em.property').forEach(e => {
        if (e.textContent.trim().startsWith('=')) { e.remove(); }
    });
    const first = section.querySelector('h1, h2');
    const p = document.createElement('p');
    p.className = 'print-api-note';
    p.textContent = note;
    first.after(p);
    return kept;
}"""

# Each heading the printed book shows, in order: the titles its bookmarks should carry, as
# [its text, [the pieces of its text between formulas, the formulas' text, alternating]]. A
# piece of text marks with RUN where an element inside it (a link, code) starts or ends:
# Chromium writes each such run twice when it moves the heading to the next page.
RUN = "\x1f"
HEADINGS = """() => Array.from(
        document.querySelectorAll('article.bd-article :is(h1, h2, h3, h4, h5, h6)'))
    .filter(h => h.getClientRects().length > 0)
    .map(h => {
        const copy = h.cloneNode(true);
        copy.querySelectorAll('.headerlink').forEach(a => a.remove());
        const squash = t => t.replace(/\\s+/g, ' ');
        const pieces = [''];
        const walk = node => node.childNodes.forEach(kid => {
            if (kid.nodeType === Node.TEXT_NODE) { pieces[pieces.length - 1] += kid.data; }
            else if (kid.matches && kid.matches('mjx-container')) {
                pieces.push(kid.textContent, '');
            } else {
                pieces[pieces.length - 1] += '\x1f';
                walk(kid);
                pieces[pieces.length - 1] += '\x1f';
            }
        });
        walk(copy);
        return [squash(copy.textContent).trim(), pieces.map(squash)];
    })"""

# The chapters (by name) that start on the page where they fall, with no forced break.
NO_BREAK_BEFORE = """(names) => names.forEach(name => {
    const anchor = document.getElementById('document-' + name);
    const section = anchor ? anchor.nextElementSibling : null;
    if (section) { section.style.breakBefore = 'auto'; }
})"""

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


def moved_urls(text: str, old_dir: Path, new_dir: Path) -> str:
    """``text`` (a page in ``old_dir``) with the relative ``url("...")`` of its styles
    written from ``new_dir``. The formulas' styles load MathJax's fonts by a path relative
    to the page (book/_ext/typeset_math.js); from the copy at the site's root, that path
    leads nowhere, and the formulas would print in a fallback font, as shapes without text.

    Example:
        >>> moved_urls('src:url("../_vendor/m.woff")', Path("/s/book"), Path("/s"))
        'src:url("_vendor/m.woff")'
    """
    def moved(match: re.Match) -> str:
        target = os.path.normpath(old_dir / match.group(1))
        return f'url("{Path(os.path.relpath(target, new_dir)).as_posix()}")'

    return RELATIVE_URL.sub(moved, text)


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


def shifted_pages(pages: dict[str, int], names: list[str], loose: list[str]) -> dict[str, int]:
    """Where the chapters start once each of ``loose`` starts one page earlier, on the empty
    page before it: every chapter moves up by the number of loose chapters up to itself.

    Example:
        >>> shifted_pages({"a": 1, "b": 5, "c": 9}, ["a", "b", "c"], ["b"])
        {'a': 1, 'b': 4, 'c': 8}
    """
    moved, shifted = 0, {}
    for name in names:
        if name in pages:
            moved += name in loose
            shifted[name] = pages[name] - moved
    return shifted


def empty_pages(pdf_path: Path) -> set[int]:
    """The pages (1-based) that hold nothing but their page number."""
    pdf = pypdfium2.PdfDocument(pdf_path)
    try:
        empty = set()
        for index in range(len(pdf)):
            text = _squeeze(pdf[index].get_textpage().get_text_range())
            if text == f"{index + 1}/{len(pdf)}":
                empty.add(index + 1)
        return empty
    finally:
        pdf.close()


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
    printed.write_text(moved_urls(source.read_text(encoding="utf-8"), source.parent, site),
                       encoding="utf-8")
    if not Path(CHROMIUM).is_file():
        raise FileNotFoundError(f"no browser at {CHROMIUM}: install Debian's chromium (.ci/run)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": COLUMN_PX, "height": 1000})
            # The whole book is one page: on a slow or busy machine it takes as long as it
            # takes to load, so no step gives up after a time.
            page.set_default_timeout(0)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.emulate_media(media="print")
            page.goto(printed.as_uri(), wait_until="load", timeout=0)
            page.evaluate(WAIT_FOR_SCRIPTS)
            found = page.evaluate(CHAPTER_TITLES, names)
            missing = [name for name, (title, anchor) in found.items() if not (title and anchor)]
            if missing:
                raise RuntimeError(f"no heading found for {missing} in {source}")
            titles = {name: title for name, (title, _) in found.items()}
            anchors = {name: anchor for name, (_, anchor) in found.items()}
            site_url = (config.get("html") or {}).get("baseurl") or ""
            note = (
                "This appendix gives each name's signature and one-line summary. The API "
                "reference on the book's website"
                + (f" ({site_url.rstrip('/')}/{API_PAGE}.html)" if site_url else "")
                + " gives every argument, shape and example."
            )
            if API_PAGE in names:
                page.evaluate(API_APPENDIX, [API_PAGE, note])
            page.evaluate(PREPARE, [front_matter(config, rows, titles, anchors), PAGE_PX])
            if errors:
                raise RuntimeError(f"the page raised errors: {errors}")
            _print(page, out)
            # A chapter's forced page break can leave an empty page before it (where the
            # previous chapter's last box spills over); that chapter then starts on the
            # empty page instead, which moves it and every later chapter one page earlier.
            # The book is printed again with those numbers in its table of contents, and a
            # third time only if a chapter did not land where the numbers say.
            pages = chapter_pages(out, names, titles)
            empty = empty_pages(out)
            loose = [name for name, first in pages.items() if first - 1 in empty]
            if loose:
                page.evaluate(NO_BREAK_BEFORE, loose)
                pages = shifted_pages(pages, names, loose)
            for _ in range(2):
                page.evaluate(SET_TOC_PAGES, {name: str(n) for name, n in pages.items()})
                _print(page, out)
                landed = chapter_pages(out, names, titles)
                if landed == pages:
                    break
                print(f"the chapters start on {landed}, not {pages}: printing again",
                      file=sys.stderr)
                pages = landed
            else:
                raise RuntimeError(f"the table of contents says {pages}; the chapters start "
                                   f"on {chapter_pages(out, names, titles)}")
            pairs = page.evaluate(HEADINGS)
            headings = [full for full, _ in pairs]
            pieces = [parts for _, parts in pairs]
        finally:
            browser.close()
    printed.unlink()
    fixed = fix_bookmarks(out, headings, pieces)
    pdf = pypdfium2.PdfDocument(out)
    try:
        count = len(pdf)
    finally:
        pdf.close()
    size = out.stat().st_size
    labelled = label_download_menus(out.parent, out.name, size)
    return {
        "path": out,
        "pages": count,
        "bytes": size,
        "seconds": time.perf_counter() - start,
        "chapter_pages": pages,
        "bookmarks fixed": fixed,
        "pages labelled": labelled,
    }


def _bookmarks(outlines: object) -> list:
    """The outline items of a PDF, depth first (pypdf objects)."""
    items = []
    node = outlines.get("/First") if outlines is not None else None
    while node is not None:
        item = node.get_object()
        items.append(item)
        items += _bookmarks(item)
        node = item.get("/Next")
    return items


def _squeezed_twice(title: str, heading: str) -> bool:
    """Whether ``title`` is ``heading`` with a piece of it written twice, as Chromium writes
    a heading it moved to the next page ("ExercisesExercises")."""
    t, h = _squeeze(title), _squeeze(heading)
    if len(t) <= len(h) or not h:
        return False
    edge = min(6, len(h))
    return t.startswith(h[:edge]) and t.endswith(h[-edge:]) and set(t) <= set(h)


def _plain(pieces: list[str]) -> str:
    """A heading's text without its formulas (``pieces``: its text between its formulas,
    then the formulas' text, alternating), as its page's text layer holds it: MathJax's
    glyphs print in Type 3 fonts that PDF readers do not read back as text."""
    return " ".join("".join(pieces[::2]).replace(RUN, "").split())


def _written_as(title: str, pieces: list[str]) -> bool:
    """Whether ``title`` is a heading written the ways Chromium writes its bookmark: its
    text (``pieces``: between its formulas, then the formulas' text, alternating) with each
    formula once or left out, and with a piece (up to where a line of it ends) written
    again where the heading moved to the next page ("ExercisesExercises", or "top top  keys
    keys" for "top $k$ keys"), or a run of it between its elements (``RUN``) written
    again ("Figures of lessons 06lessons 06 and  and 0707"). Whitespace does not count.

    Example:
        >>> parts = ["Sparse attention: its top ", "k", " keys"]
        >>> [_written_as(t, parts) for t in ("Sparse attention: its top k keys",
        ...     "Sparse attention: its top Sparse attention: its top  keys keys",
        ...     "Sparse attention: its top keys", "Sparse attention: its top",
        ...     "Sparse attention: its top keys keys keys k")]
        [True, True, True, False, False]
        >>> linked = [f"dials of {RUN}lessons 06{RUN} and {RUN}07{RUN}"]
        >>> [_written_as(t, linked) for t in ("dials of lessons 06 and 07",
        ...     "dials of dials of lessons 06lessons 06 and  and 0707", "dials of 06 and 07")]
        [True, True, False]
    """
    t = _squeeze(title)
    # The heading's characters; each with the start of its run (a piece of text or a
    # formula) and whether it is a formula's.
    chars: list[tuple[str, int, bool]] = []
    for index, piece in enumerate(pieces):
        for run in piece.split(RUN) if index % 2 == 0 else [piece]:
            start = len(chars)
            chars += [(c, start, index % 2 == 1) for c in _squeeze(run)]
    h = "".join(c for c, _, _ in chars)
    if not h:
        return False
    # Positions (in the heading, in the title) reachable by reading both from the start.
    seen, todo = set(), [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(h) and j == len(t):
            return True
        if i < len(h) and chars[i][2] and chars[i][1] == i:  # a formula starts: skip it
            end = i
            while end < len(h) and chars[end][1] == i:
                end += 1
            todo.append((end, j))
        if i < len(h) and j < len(t) and h[i] == t[j]:
            todo.append((i + 1, j + 1))
        if 0 < i and not chars[i - 1][2]:  # this piece so far, written again
            if t.startswith(h[chars[i - 1][1] : i], j):
                todo.append((i, j + i - chars[i - 1][1]))
    return False


def fix_bookmarks(path: Path, headings: list[str], pieces: list[list[str]] | None = None) -> int:
    """Give each bookmark its heading's text, written once; return how many changed.

    Chromium makes a bookmark of every heading, and writes the text of a heading it moved to
    the next page twice ("ExercisesExercises"), one piece of text at a time when the
    heading holds math. Bookmarks and headings are walked in order: a bookmark that is its
    heading written that way (``pieces``: the heading's text between its formulas and the
    formulas', see ``_written_as``), or with a piece written twice, takes the heading's
    text; one that matches no heading near it keeps its own.
    """
    from pypdf import PdfWriter
    from pypdf.generic import NameObject, TextStringObject

    # Chromium's PDFs count one object fewer in their trailer than they hold; pypdf says so
    # on every read, and reads them right.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    # An incremental update: the file as Chromium wrote it (its objects packed in compressed
    # object streams), with the retitled bookmarks appended; rewriting it whole would unpack
    # them and add half as much again to its size.
    writer = PdfWriter(io.BytesIO(path.read_bytes()), incremental=True)
    outlines = writer.root_object.get("/Outlines")
    items = _bookmarks(outlines.get_object() if outlines is not None else None)
    changed = 0
    next_heading = 0
    for item in items:
        title = str(item.get("/Title", ""))
        for j in range(next_heading, min(next_heading + 4, len(headings))):
            parts = pieces[j] if pieces else [headings[j]]
            plain = _plain(parts)
            if _squeeze(title) == _squeeze(plain):
                next_heading = j + 1
                break
            if _written_as(title, parts) or _squeezed_twice(title, headings[j]):
                item[NameObject("/Title")] = TextStringObject(plain)
                changed += 1
                next_heading = j + 1
                break
    if changed:
        with path.open("wb") as handle:
            writer.write(handle)
    return changed


def label_download_menus(html_dir: Path, pdf_name: str, size: int) -> int:
    """Write the PDF edition's size into the download menu of every page of the site beside
    it (offline_site.pdf_download_button leaves a place for it), and show the entry, hidden
    while there was no PDF; return how many pages."""
    label = f'<span class="book-pdf-size">({size / 1e6:.1f} MB)</span>'
    labelled = 0
    for page in html_dir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new = HIDDEN_ENTRY.sub(r"<li>\1", SIZE_SLOT.sub(label, text))
        if new != text:
            page.write_text(new, encoding="utf-8")
            labelled += 1
    return labelled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the single-page build (_build/singlehtml)")
    parser.add_argument("out", type=Path, help="the PDF to write")
    parser.add_argument("--book-root", type=Path, default=REPO_ROOT, help="folder of _toc.yml")
    args = parser.parse_args(argv)
    result = print_book(args.site.resolve(), args.out.resolve(), args.book_root.resolve())
    print(
        f"{result['path']}: {result['pages']} pages, {result['bytes'] / 1e6:.1f} MB, "
        f"printed in {result['seconds']:.1f} s; {result['bookmarks fixed']} bookmarks "
        f"retitled, the size written into {result['pages labelled']} pages' download menus"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
