"""Keep the built book self-contained and light: every script it loads is served by the site
itself, and a page loads only the scripts it uses.

Jobs, all for the HTML builders (``html``, ``dirhtml``, ``singlehtml``; the PDF edition is
printed from ``singlehtml``):

1. Plotly figures. Notebooks keep plotly's default renderer, which in a Jupyter kernel emits
   the ``application/vnd.plotly.v1+json`` mime type (the figure as JSON, no HTML). myst-nb has
   no renderer for it and would drop the figure with a warning. ``PlotlyMimeRenderer`` writes
   the JSON into the page inside a ``<script type="application/vnd.plotly.v1+json">`` block,
   in a ``<figure>`` whose caption says what the figure shows (its title and axes) and how to
   use it: on screen, the slider also answers the arrow keys; in print, the figure stands at
   its slider's default step and the caption says that it is interactive on the site.
   ``static/render-plotly.js`` draws it with a bundle of plotly.js that holds only the
   trace types the book draws (``PLOTLY_TRACES``: scatter, bar, heatmap), which the build
   makes from npm's ``plotly.js`` package with esbuild (``build_plotly_bundle``; the same
   plotly.js version as the pinned plotly package, or the build stops; a figure with
   another trace type stops it too), gives the drawing ``role="img"`` and a label, and
   wires the keyboard to the slider. The drawer fetches the bundle itself, named by its
   ``data-bundle`` attribute, once a figure comes near the window, so a reader who never
   reaches a figure never downloads plotly.js.
2. Scripts by page content (``page_scripts``): figure-layout.js and the drawer only on a
   page whose body holds a figure, MathJax only on a page whose body holds math. The theme's
   Font Awesome script (1.5 MB, which redraws the icons its own stylesheet and web fonts
   already draw) is taken out of every page once the build has written them, with two
   small fixes to the theme's markup for screen readers (``PAGE_FIXES``).
3. The PDF edition (``print_pdf.py``, run by ``make pdf``) replaces the theme's print-this-
   page entry in the download menu of every page, with its size once it is printed.
4. Vendored files. MathJax (``tex-chtml.js``, with the TeX extensions it loads on demand,
   its web fonts and its accessibility components) and the plotly bundle come from
   ``node_modules`` (``npm ci`` against the committed ``package-lock.json``). They are
   copied into ``<outdir>/_vendor/``, not ``_static/``: Jupyter Book adds every ``.js`` file
   found in a static folder to every page. The book's own files in ``static/`` (the plotly
   drawer, ``site.css`` with the print rules of the PDF edition) go there too.
5. ``singlehtml`` draws every node ``html`` draws (``share_html_handlers``).

Configuration (``_config.yml``, ``sphinx.config``): ``mathjax_path`` must point into
``_vendor``. The site needs no widget embedder (a live explorer shows its code and the
plotly twin below it does the work), so ``nb_ipywidgets_js`` is empty; any script named
there must be a file of this build, and the build stops with an error on a remote URL,
such as myst-nb's default require.js and embed-amd.js from CDNs.
"""

from __future__ import annotations

import hashlib
import html as html_lib
import json
import posixpath
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import plotly.offline
from docutils import nodes
from myst_nb.core import render as nb_render
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.ext.mathjax import html_visit_displaymath, html_visit_math
from sphinx.util import logging

PLOTLY_MIME = "application/vnd.plotly.v1+json"
# How a figure appears in a page's body; page_scripts looks for it.
PLOTLY_BLOCK = f'<script type="{PLOTLY_MIME}">'
# How Sphinx writes math into a page's body (inline and display).
MATH_MARKER = re.compile(r'class="math[ "]')
# Sphinx's markup around the TeX of a formula, and what typeset_math.js adds to a page it
# has typeset.
MATH_TEX = 'class="math notranslate nohighlight"'
MATH_TYPESET = '<style id="mathjax-chtml">'
VENDOR_DIR = "_vendor"
# Sphinx resolves relative script paths against _static/; "../" reaches the site root.
VENDOR_FROM_STATIC = f"../{VENDOR_DIR}"
HTML_BUILDERS = ("html", "dirhtml", "singlehtml")
STATIC_DIR = Path(__file__).parent / "static"

# MathJax's CommonHTML web fonts, inside its es5 folder.
MATHJAX_FONTS = "output/chtml/fonts/woff-v2"
# plotly.js draws a figure without layout.height this tall (px).
PLOTLY_DEFAULT_HEIGHT = 450
PLOTLY_PACKAGE = "plotly.js"
PLOTLY_BUNDLE = "plotly-book.min.js"
# The trace types the book's figures use: plotly.js's core (which holds scatter) and these.
# A figure of any other type stops the build (PlotlyMimeRenderer); add the type here.
PLOTLY_TRACES = ("bar", "heatmap")
DRAWN_TRACES = frozenset({"scatter", *PLOTLY_TRACES})
# What the bundle holds, as the module esbuild bundles (from the repository root).
PLOTLY_ENTRY = (
    "var Plotly = require('plotly.js/lib/core');\n"
    + "Plotly.register([{}]);\n".format(
        ", ".join(f"require('plotly.js/lib/{trace}')" for trace in PLOTLY_TRACES)
    )
    + "module.exports = Plotly;\n"
)
# esbuild's settings for it: those of plotly.js's own dist bundles (its esbuild-config.js),
# minified, without the plugins that only its WebGL and map traces need.
ESBUILD_ARGS = (
    "--bundle",
    "--minify",
    "--format=iife",
    "--global-name=Plotly",
    "--define:global=window",
    "--define:define.amd=false",
    "--target=es2016",
    "--log-level=warning",
)
# The script a page with a figure loads, deferred, so that it never holds up the text; it
# fetches the bundle (its data-bundle attribute, with the bundle's digest for caches) when a
# figure nears the window.
PLOTLY_SCRIPTS = (f"{VENDOR_FROM_STATIC}/plotly/render-plotly.js",)
# The digest of the bundle this build copied (copy_vendored_assets), by output folder.
_BUNDLE_DIGESTS: dict[str, str] = {}
# Read before the page's body (not deferred): it sizes each figure's box as the page is read.
FIGURE_LAYOUT_SCRIPT = f"{VENDOR_FROM_STATIC}/plotly/figure-layout.js"

# What to copy from node_modules: (package folder, folder inside it, entries inside that
# folder, destination folder under _vendor); an entry keeps its relative path.
# MathJax: the web fonts the typeset math is drawn with (typeset_math.js writes the math at
# build time; no page loads MathJax itself), and its licence. Plotly: its licence (the
# bundle itself is built, build_plotly_bundle).
NPM_ASSETS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("mathjax", "es5", (MATHJAX_FONTS,), "mathjax"),
    ("mathjax", "", ("LICENSE",), "mathjax"),
    (PLOTLY_PACKAGE, "", ("LICENSE",), "plotly"),
)
# Typesets the math of the built pages with MathJax under Node (see that file).
TYPESET_MATH = Path(__file__).parent / "typeset_math.js"
# The HTML math renderer that leaves TeX in the page for typeset_math.js: Sphinx's MathJax
# markup (\(...\) and \[...\]) without MathJax's script.
MATH_RENDERER = "build_time"

# Edits to every page the build wrote: (pattern, replacement). See tidy_pages.
PAGE_FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    # The theme's Font Awesome script (1.5 MB) swaps its icons for SVG; the theme's
    # stylesheet already draws the same icons from the Font Awesome web fonts.
    (
        re.compile(
            r'[ \t]*<script\b[^>]*\bsrc="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*>'
            r"</script>\n?"
        ),
        "",
    ),
    # The search field's button shows "Search Ctrl+K" but is labelled "Search" alone; a
    # label that differs from the visible text fails WCAG 2.5.3. Its text names it.
    (
        re.compile(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="Search"'),
        r"\1",
    ),
    # Docutils marks bibliography entries with the deprecated DPUB role doc-biblioentry
    # inside role="list"; a list needs list items.
    (re.compile(r'role="doc-biblioentry"'), 'role="listitem"'),
)

# Runs in every page's head, before the page is drawn: in "auto" mode (the reader's system
# setting, until they pick a mode), the theme leaves data-theme="auto" until its deferred
# script has run; resolving it here draws the page, and its figures, in the right colours
# from the first paint.
RESOLVE_COLOUR_MODE = (
    "(function () { var root = document.documentElement;"
    ' var mode = localStorage.getItem("mode") || root.dataset.mode || "auto";'
    ' if (mode === "auto") { root.dataset.theme = window.matchMedia'
    '("(prefers-color-scheme: dark)").matches ? "dark" : "light"; } })();'
)

# On a narrow screen the theme opens the sidebars (site navigation, page contents) as modal
# dialogs and leaves them open after a link in them is followed; a link to a section of the
# same page then scrolls behind the dialog. A click on any link in one closes it.
CLOSE_DRAWER_ON_LINK = (
    'document.addEventListener("click", function (event) {'
    ' var link = event.target.closest && event.target.closest("dialog a[href]");'
    ' var drawer = link && link.closest("dialog");'
    " if (drawer && drawer.open) { drawer.close(); } });"
)

# The theme loads Sphinx's search scripts and the whole search index (searchindex.js) on
# every page, for a search-as-you-type box this book does not use (search_as_you_type is
# off: the search field sends the reader to search.html). Every page but the search page
# drops them, so the index is read when the reader searches.
SEARCH_SCRIPTS = re.compile(
    r'[ \t]*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|'
    r'searchindex\.js)"></script>\n?'
)
SEARCH_PAGE = "search.html"

# A display formula, a table or an output wider than the column scrolls sideways in its own
# box (site.css). Once the page is laid out, and whenever its width changes, each such box
# that overflows is marked "scrolls" (site.css draws a shadow at each edge past which there
# is more) and becomes a tab stop, since a region that scrolls must take the keyboard's
# focus (WCAG 2.1.1); a box that fits again loses both.
SCROLL_BOXES = (
    "article.bd-article div.math, article.bd-article div.math > mjx-container, "
    "article.bd-article .cell_output .output, "
    "article.bd-article .table-wrapper, article.bd-article .pst-scrollable-table-container"
)
SCROLL_CUES = (
    "(function () { function cues() {"
    f' document.querySelectorAll("{SCROLL_BOXES}").forEach(function (box) {{'
    " var wide = box.scrollWidth > box.clientWidth + 1;"
    ' box.classList.toggle("scrolls", wide);'
    ' if (wide && !box.hasAttribute("tabindex")) { box.setAttribute("tabindex", "0");'
    ' box.dataset.scrollStop = "1"; }'
    ' if (!wide && box.dataset.scrollStop) { box.removeAttribute("tabindex");'
    " delete box.dataset.scrollStop; }"
    " }); }"
    ' window.addEventListener("load", cues); window.addEventListener("resize", cues);'
    ' if (document.fonts) { document.fonts.ready.then(cues); } })();'
)

# A code block as Pygments writes it (Sphinx's highlighter, for code cells, their text
# outputs and code in the prose); hang_code_lines marks the blocks it has split into lines.
CODE_BLOCK = re.compile(r'<div class="highlight"><pre>(.*?)</pre>', re.DOTALL)
HUNG_BLOCK = '<div class="highlight"><pre class="hang">'
HTML_TAG = re.compile(r"(<[^>]+>)")
# Continuation lines of a wrapped code line start this many characters further in than the
# line's own indentation (site.css).
HANG_CHARACTERS = 4

logger = logging.getLogger(__name__)


def _hang_block(code: str) -> str:
    """One code block's HTML, each line in ``<span class="line">`` with its indentation.

    A line that wraps (site.css: ``white-space: pre-wrap``) then continues
    ``HANG_CHARACTERS`` past its own indentation: the line's span is an inline block whose
    first line is drawn ``--indent`` + 4 characters to the left of the rest (a hanging
    indent). Pygments' spans that run over a line break (a docstring) are closed at the end
    of the line and opened again on the next. The line breaks stay outside the spans, so
    the text that is copied or selected is the code unchanged.
    """
    lines: list[list[str]] = [[]]
    opened: list[str] = []
    for token in HTML_TAG.split(code):
        if not token:
            continue
        if token.startswith("<"):
            if token.startswith("</"):
                if opened:
                    opened.pop()
            elif not token.endswith("/>"):
                opened.append(token)
            lines[-1].append(token)
            continue
        pieces = token.split("\n")
        lines[-1].append(pieces[0])
        for piece in pieces[1:]:
            lines[-1].extend("</span>" for _ in opened)
            lines.append([*opened, piece])
    out = []
    for i, parts in enumerate(lines):
        text = "".join(parts)
        plain = html_lib.unescape(HTML_TAG.sub("", text))
        last = i == len(lines) - 1
        if last and not plain:
            out.append(text)  # the tags that close after the block's last line break
            continue
        indent = len(plain) - len(plain.lstrip(" "))
        style = f' style="--indent:{indent}"' if indent else ""
        out.append(f'<span class="line"{style}>{text}</span>' + ("" if last else "\n"))
    return "".join(out)


# A figure and its caption as figure_html writes them, before number_figures numbers them.
FIGURE_OPEN = '<figure class="plotly-output">'
CAPTION_OPEN = '<span class="plotly-caption-text">Figure: '
# Where the single-page build starts each document (each chapter of the PDF edition).
DOCUMENT_START = re.compile(r'<span id="document-')


def number_figures(page: str) -> str:
    """Number the figures of ``page`` in order (of each document, in the single-page build):
    ``<figure id="figure-2">`` with the caption "Figure 2. ...", so that the prose and a
    reader can refer to them."""
    if FIGURE_OPEN not in page:
        return page
    parts = DOCUMENT_START.split(page)
    for i, part in enumerate(parts):
        count = 0

        def figure(match: re.Match, base: int = i) -> str:
            nonlocal count
            count += 1
            prefix = f"figure-{count}" if len(parts) == 1 else f"figure-{base}-{count}"
            return f'<figure class="plotly-output" id="{prefix}" data-figure-number="{count}">'

        part = re.sub(re.escape(FIGURE_OPEN), figure, part)
        numbers = iter(range(1, count + 1))

        def caption(match: re.Match, numbers: Iterator[int] = numbers) -> str:
            return f'<span class="plotly-caption-text">Figure {next(numbers)}. '

        parts[i] = re.sub(re.escape(CAPTION_OPEN), caption, part)
    return '<span id="document-'.join(parts)


def hang_code_lines(page: str) -> str:
    """``page`` with every code block split into lines (``_hang_block``); a block split
    before is left as it is."""
    return CODE_BLOCK.sub(lambda m: f"{HUNG_BLOCK}{_hang_block(m.group(1))}</pre>", page)


def _plain(text: Any) -> str:
    """Figure text without its markup: <br> becomes a separator, other tags go."""
    text = re.sub(r"<br\s*/?>", "; ", str(text or ""), flags=re.IGNORECASE)
    text = re.sub(r"<[^>]+>", "", text)
    return " ".join(html_lib.unescape(text).split()).strip(" ;")


def _title(layout_part: dict, key: str = "title") -> str:
    title = layout_part.get(key)
    if isinstance(title, dict):
        title = title.get("text")
    return _plain(title)


def _twin(figure: dict) -> dict | None:
    """The twin description ``attnlib.viz.twin`` puts in ``layout.meta``, or None."""
    meta = (figure.get("layout") or {}).get("meta")
    twin = meta.get("twin") if isinstance(meta, dict) else None
    return twin if isinstance(twin, dict) and twin.get("params") else None


def _controls(twin: dict) -> list[dict]:
    """The parameters a reader can move (those with more than one value)."""
    return [p for p in twin["params"] if len(p["values"]) > 1]


def _settings(twin: dict, step: int) -> str:
    """``H = 4, d_head = 4``: the values of step ``step`` of the parameters that move."""
    at = twin["steps"][step]
    return ", ".join(
        f"{p['label']} = {p['text'][at[i]]}"
        for i, p in enumerate(twin["params"])
        if len(p["values"]) > 1
    )


def figure_caption(figure: dict) -> dict[str, str]:
    """The words that go with a figure: what it shows, and how it answers the reader.

    Returns ``title`` (the figure's title at its default step), ``shows`` (its axes and
    legend, in words; with the title, the drawing's ``aria-label``), ``screen`` (how to use
    it, shown on screen) and ``print`` (shown in print: the figure is interactive on the
    site and printed at its default step). ``render-plotly.js`` writes the same words for
    the step a reader picks.
    """
    layout = figure.get("layout") or {}
    twin = _twin(figure)
    if twin:  # the default step's own layout: the twin's holds every step's axes
        step = figure["layout"]["sliders"][0]["steps"][twin["active"]]["args"][1]
        layout = {**layout, **{k: v for k, v in step.items() if v is not None}}
    axes = []
    for key in sorted(layout):
        part = layout[key]
        if (
            isinstance(part, dict)
            and re.fullmatch(r"[xy]axis\d*", key)
            and part.get("visible") is not False
            and _title(part)
        ):
            direction = "horizontal" if key.startswith("x") else "vertical"
            axis = f"{direction} axis {_title(part)}"
            if axis not in axes:  # subplots that share an axis title name it once
                axes.append(axis)
    # The legend names what the colours stand for; listed once, in the order drawn.
    data = figure.get("data") or []
    if twin:
        start, stop = twin["traces"][twin["active"]]
        data = data[start:stop]
    names = []
    for trace in data:
        name = _plain(trace.get("name"))
        # Heatmaps appear in a legend only when a figure asks for it.
        listed = trace.get("showlegend", trace.get("type") != "heatmap") is not False
        if name and listed and name not in names:
            names.append(name)
    shows = []
    if axes:
        sentence = "; ".join(axes)
        shows.append(sentence[0].upper() + sentence[1:] + ".")
    if names:
        more = ", ..." if len(names) > 8 else ""
        shows.append("Legend: " + ", ".join(names[:8]) + more + ".")
    sliders = layout.get("sliders") or []
    steps = (sliders[0].get("steps") or []) if sliders else []
    if twin and _controls(twin):
        labels = [p["label"] for p in _controls(twin)]
        over = (f"a control for each of {', '.join(labels)}" if len(labels) > 1
                else f"a slider over {labels[0]}")
        screen = (
            "Interactive: the controls above change it; hover for values."
        )
        printed = (
            f"Interactive on the site, with {over}; printed here at the default step, "
            f"{_settings(twin, twin['active'])}."
        )
    elif steps:
        slider = sliders[0]
        active = slider.get("active") or 0
        prefix = _plain((slider.get("currentvalue") or {}).get("prefix", "")).rstrip(" =:")
        label = _plain(steps[min(active, len(steps) - 1)].get("label"))
        what = f"{prefix} = {label}" if prefix else f"step {label}"
        screen = f"Interactive: drag the slider ({len(steps)} steps); hover for values."
        printed = (
            "Interactive on the site, with a slider over "
            f"{prefix or 'its settings'}; printed here at the default step, {what}."
        )
    else:
        screen = "Interactive: hover for values."
        printed = "Interactive on the site: hover over it there for values."
    # The caption gives the title's first line (its headline); the subtitle below it is
    # drawn in the figure and read in the drawing's label.
    raw = layout.get("title")
    raw = raw.get("text") if isinstance(raw, dict) else raw
    headline = re.split(r"<br\s*/?>", str(raw or ""), flags=re.IGNORECASE)[0]
    title = _plain(headline) or "plotly figure"
    return {
        "title": title if title.endswith((".", "?", "!")) else f"{title}.",
        "shows": " ".join(shows),
        "screen": screen,
        "print": printed,
    }


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_number(value: object) -> float | None:
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


def reversed_params(figure: dict, twin: dict) -> set[int]:
    """The twin's numeric parameters whose values an axis of the figure draws right to left
    (or top to bottom): an axis titled with the parameter's label that is reversed, or
    whose categories run from the largest value down. Their sliders run the same way."""
    layout = dict(figure.get("layout") or {})
    step = (layout.get("sliders") or [{}])[0].get("steps", [{}])[twin["active"]]
    layout.update({k: v for k, v in ((step.get("args") or [None, {}])[1] or {}).items() if v})
    start, stop = twin["traces"][twin["active"]]
    traces = (figure.get("data") or [])[start:stop]
    found = set()
    for i, param in enumerate(twin["params"]):
        if len(param["values"]) < 2 or not all(_is_number(v) for v in param["values"]):
            continue
        for key, axis in layout.items():
            if not (re.fullmatch(r"[xy]axis\d*", key) and isinstance(axis, dict)):
                continue
            if _title(axis) != _plain(param["label"]):
                continue
            if axis.get("autorange") == "reversed":
                found.add(i)
                break
            letter, ref = key[0], key[0] + key[5:]
            on_axis = [t for t in traces if (t.get(f"{letter}axis") or letter) == ref]
            shown = [_as_number(v) for v in (on_axis[0].get(letter) or [])] if on_axis else []
            if len(shown) > 1 and None not in shown and shown == sorted(shown, reverse=True):
                found.add(i)
                break
    return found


def twin_controls(twin: dict, uid: str, backwards: set[int] | frozenset = frozenset()) -> str:
    """The controls of a twin, as HTML: one per parameter that has more than one value.

    A numeric parameter gets a range input over its values' positions (the arrow keys,
    Home, End, Page Up and Page Down move it), labelled with the parameter's name and its
    current value as the prose writes it; any other parameter gets a group of buttons. A
    parameter with a single value is stated. The controls stay disabled until
    ``render-plotly.js`` has wired them; the status line says when a choice moved another
    control too (a combination the twin does not hold). A parameter in ``backwards``
    (``reversed_params``) gets a slider that runs right to left, as its axis does.
    """
    esc = html_lib.escape
    at = twin["steps"][twin["active"]]
    parts = []
    for i, param in enumerate(twin["params"]):
        label, texts = esc(str(param["label"])), [esc(str(t)) for t in param["text"]]
        ident = f"{uid}-{i}"
        if len(texts) == 1:
            parts.append(f'<p class="twin-control twin-fixed">{label} = {texts[0]}</p>')
        elif all(_is_number(v) for v in param["values"]):
            ends = (texts[-1], texts[0]) if i in backwards else (texts[0], texts[-1])
            direction = ' dir="rtl"' if i in backwards else ""
            parts.append(
                '<div class="twin-control twin-range">'
                f'<label for="{ident}">{label}</label> '
                f'<output for="{ident}">{texts[at[i]]}</output>'
                f'<input type="range" id="{ident}" min="0" max="{len(texts) - 1}" step="1" '
                f'value="{at[i]}" aria-valuetext="{label} = {texts[at[i]]}" '
                f'data-twin-param="{i}"{direction} disabled>'
                f'<span class="twin-ends" aria-hidden="true"><span>{ends[0]}</span>'
                f"<span>{ends[1]}</span></span></div>"
            )
        else:
            buttons = "".join(
                f'<button type="button" data-twin-param="{i}" data-twin-value="{j}" '
                f'aria-pressed="{"true" if j == at[i] else "false"}" disabled>{text}</button>'
                for j, text in enumerate(texts)
            )
            parts.append(
                f'<div class="twin-control twin-choice" role="group" aria-labelledby="{ident}">'
                f'<span class="twin-name" id="{ident}">{label}</span>{buttons}</div>'
            )
    return (
        f'<div class="twin-controls">{"".join(parts)}'
        '<p class="twin-status" aria-live="polite"></p></div>'
    )


def drawable_template(figure: dict) -> dict:
    """The figure with its template's trace defaults cut to the types the bundle draws.

    plotly.py's templates carry defaults for some twenty trace types (``layout.template.data``:
    carpet, choropleth, barpolar, ...), about 4 KB in every figure; a default applies only to
    traces of its own type, and the build stops on any type outside ``DRAWN_TRACES``, so the
    others are never read. The notebook keeps them all.
    """
    layout = figure.get("layout") or {}
    template = layout.get("template") or {}
    defaults = template.get("data")
    if not isinstance(defaults, dict):
        return figure
    kept = {kind: value for kind, value in defaults.items() if kind in DRAWN_TRACES}
    return {**figure, "layout": {**layout, "template": {**template, "data": kept}}}


def figure_html(figure: dict) -> str:
    """A figure as the page holds it: its controls (a twin's), the box it is drawn into,
    its JSON, the line that sizes the box before anything is drawn, and its caption."""
    # In a <script> block only "<" can end the element early ("</script>", "<!--");
    # \u003c is the same character to JSON.parse.
    payload = json.dumps(figure, separators=(",", ":")).replace("<", "\\u003c")
    caption = {key: html_lib.escape(value) for key, value in figure_caption(figure).items()}
    twin = _twin(figure)
    layout = figure.get("layout") or {}
    height = layout.get("height")
    controls = ""
    if twin:
        height = twin["size"][twin["active"]].get("height")
        uid = "twin-" + hashlib.sha1(payload.encode()).hexdigest()[:10]
        controls = twin_controls(twin, uid, reversed_params(figure, twin))
    # The box keeps the figure's height before plotly.js has run (figure-layout.js sets the
    # height the figure will have at the box's width), so the text below does not jump.
    height = height or PLOTLY_DEFAULT_HEIGHT
    return (
        '<figure class="plotly-output">'
        f"{controls}"
        f'<div class="plotly-figure" style="height: {int(height)}px"></div>'
        f"{PLOTLY_BLOCK}{payload}</script>"
        "<script>window.BookFigures && BookFigures.reserve(document.currentScript)</script>"
        '<figcaption class="plotly-caption">'
        f'<span class="plotly-caption-text">Figure: {caption["title"]} '
        f'<span class="plotly-caption-shows">{caption["shows"]}</span></span> '
        f'<span class="plotly-caption-screen">{caption["screen"]}</span>'
        f'<span class="plotly-caption-print">{caption["print"]}</span>'
        "</figcaption></figure>"
    )


class PlotlyMimeRenderer:
    """myst-nb mime renderer plugin (``myst_nb.core.render.MimeRenderPlugin``) for plotly."""

    # Rank the figure above text/html (30) and widget views (10) in the HTML builders.
    mime_priority_overrides: ClassVar[list[tuple[str, str, int | None]]] = [
        (builder, PLOTLY_MIME, 5) for builder in HTML_BUILDERS
    ]

    @staticmethod
    def handle_mime(
        renderer: nb_render.NbElementRenderer, data: nb_render.MimeData, inline: bool
    ) -> list[nodes.Element] | None:
        if data.mime_type != PLOTLY_MIME:
            return None
        figure = data.content if isinstance(data.content, dict) else json.loads(data.string)
        other = {t.get("type", "scatter") for t in figure.get("data") or []} - DRAWN_TRACES
        if other:
            raise ExtensionError(
                f"a figure draws {sorted(other)}, which the site's plotly.js bundle does not "
                f"hold: add them to PLOTLY_TRACES in {Path(__file__).name}"
            )
        # The scripts that draw it are added by page_scripts, for every page that has one.
        html = figure_html(drawable_template(figure))
        return [nodes.raw(text=html, format="html", classes=["output", "plotly"])]


def _register_mime_renderer() -> None:
    """Add ``PlotlyMimeRenderer`` to the renderers myst-nb consults.

    myst-nb finds mime renderer plugins through the ``myst_nb.mime_renderers`` entry point
    group, which only installed distributions can provide; a local extension is not one.
    Its lookup, ``load_mime_renders``, is a module-level function that ``render_mime_type``
    and ``get_mime_priority`` call by name, so wrapping it adds the plugin to both.
    """
    original = nb_render.load_mime_renders
    if getattr(original, "_offline_site", False):
        return

    def load_mime_renders() -> list[Any]:
        return [*original(), PlotlyMimeRenderer]

    load_mime_renders._offline_site = True  # type: ignore[attr-defined]
    nb_render.load_mime_renders = load_mime_renders


def _script_name(script: Any) -> str:
    """A script's path as the builder holds it (relative paths are put under ``_static/``)."""
    return str(getattr(script, "filename", script))


def _in_static(uri: str) -> str:
    return uri if "://" in uri else posixpath.join("_static", uri)


def page_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Load plotly.js, its drawer and figure-layout.js only where the body holds a figure.

    Runs after myst-nb has added its scripts, and decides from the page body as written, so
    it also serves ``singlehtml``, whose one page holds the whole book.
    """
    if app.builder.name not in HTML_BUILDERS or "script_files" not in context:
        return
    body = context.get("body") or ""
    scripts = context["script_files"]
    scripts[:] = [
        script
        for script in scripts
        if not _script_name(script).startswith(_in_static(f"{VENDOR_FROM_STATIC}/plotly/"))
    ]
    if PLOTLY_BLOCK in body:
        app.builder.add_js_file(FIGURE_LAYOUT_SCRIPT)  # type: ignore[attr-defined]
        bundle = PLOTLY_BUNDLE
        digest = _BUNDLE_DIGESTS.get(str(app.outdir))
        if digest:
            bundle = f"{bundle}?v={digest}"
        for uri in PLOTLY_SCRIPTS:
            app.builder.add_js_file(  # type: ignore[attr-defined]
                uri, defer="defer", **{"data-bundle": bundle}
            )


def pdf_download_button(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Offer the PDF edition (``offline_site_pdf``, at the site root) in the theme's download
    menu, in place of its ".pdf" entry, which only prints the page on screen.

    The entry reads "Book PDF" and leaves a place for the file's size. It stays hidden
    until the PDF exists: ``tidy_pages`` shows it, with the size, when the build finds the
    file, and ``print_pdf.py`` does once it has printed the book.
    """
    if app.builder.name not in ("html", "dirhtml") or not app.config.offline_site_pdf:
        return
    for button in context.get("header_buttons", []):
        if button.get("label") == "download-buttons":
            button["buttons"] = [
                entry for entry in button["buttons"]
                if entry.get("label") != "download-pdf-button"
            ]
            button["buttons"].append(
                {
                    "type": "link",
                    "url": context["pathto"](app.config.offline_site_pdf, 1),
                    "text": 'Book PDF <span class="book-pdf-size"></span>',
                    "tooltip": "The whole book as one PDF",
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                }
            )


# The download menu's entry for the PDF edition as the theme writes it (pdf_download_button),
# hidden or not, and the place for its size; print_pdf.py shows it the same way.
PDF_ENTRY = re.compile(r'<li(?: hidden)?>(<a href="[^"]*" target="_blank"\s+class="btn btn-sm '
                       r'btn-download-book-pdf-button)')
PDF_SIZE = re.compile(r'<span class="book-pdf-size">[^<]*</span>')


def show_pdf_entry(page: str, size: int | None) -> str:
    """``page`` with its PDF entry hidden (``size`` None: no PDF) or shown with the size."""
    if size is None:
        return PDF_ENTRY.sub(r"<li hidden>\1", page)
    page = PDF_ENTRY.sub(r"<li>\1", page)
    return PDF_SIZE.sub(f'<span class="book-pdf-size">({size / 1e6:.1f} MB)</span>', page)


def _copy(source: Path, destination: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, destination, dirs_exist_ok=True)
    else:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _local_target(config_name: str, uri: str, outdir: Path) -> None:
    """Fail unless ``uri`` (relative to _static/) names a file this build put in _vendor."""
    if "://" in uri or uri.startswith("//"):
        raise ExtensionError(
            f"{config_name} must name a file served by the site itself, got the URL {uri!r}"
        )
    if not (outdir / "_static" / uri).resolve().is_file():
        raise ExtensionError(
            f"{config_name} names {uri!r}, which the build did not copy into "
            f"{outdir / VENDOR_DIR}; see NPM_ASSETS in {Path(__file__).name}"
        )


def check_plotly_bundle(node_modules: Path) -> str:
    """Return the npm bundle's plotly.js version; fail unless the plotly package's matches.

    The figures are written by the pinned plotly package for the plotly.js it ships; the
    site draws them with a bundle built from npm's plotly.js, so both must be the same
    release.
    """
    manifest = node_modules / PLOTLY_PACKAGE / "package.json"
    if not manifest.is_file():
        raise ExtensionError(
            f"{manifest} is missing: run `npm ci` in the repository root "
            "(the Makefile's `book` target does)"
        )
    bundled = json.loads(manifest.read_text(encoding="utf-8"))["version"]
    expected = plotly.offline.get_plotlyjs_version()
    if bundled != expected:
        raise ExtensionError(
            f"{PLOTLY_PACKAGE} is {bundled} in package.json, but the plotly package "
            f"{plotly.__version__} writes figures for plotly.js {expected}: pin "
            f'"{PLOTLY_PACKAGE}": "{expected}" in package.json and run `npm install`'
        )
    return bundled


def build_plotly_bundle(node_modules: Path, destination: Path) -> int:
    """Bundle plotly.js's core and ``PLOTLY_TRACES`` with esbuild (both from npm) into
    ``destination``; return its size in bytes.

    The bundle is kept in ``node_modules/.cache`` under a name made from what went into it
    (the entry, the settings and both packages' versions), so a later build copies it.
    """
    versions = [
        json.loads((node_modules / package / "package.json").read_text(encoding="utf-8"))["version"]
        for package in (PLOTLY_PACKAGE, "esbuild")
    ]
    key = hashlib.sha1(
        json.dumps([PLOTLY_ENTRY, ESBUILD_ARGS, versions]).encode()
    ).hexdigest()[:16]
    cached = node_modules / ".cache" / "book-plotly" / f"{key}.js"
    if not cached.is_file():
        node = shutil.which("node")
        esbuild = node_modules / "esbuild" / "bin" / "esbuild"
        if node is None or not esbuild.is_file():
            raise ExtensionError(
                "building plotly.js needs Node.js and npm's esbuild: run `npm ci` in the "
                "repository root (the Makefile's `book` target does)"
            )
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial.js")
        done = subprocess.run(
            [node, str(esbuild), *ESBUILD_ARGS, f"--outfile={partial}"],
            input=PLOTLY_ENTRY,
            cwd=node_modules.parent,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ExtensionError(f"esbuild could not bundle plotly.js:\n{done.stderr}")
        partial.with_suffix(".css").unlink(missing_ok=True)  # map styles, not used
        partial.replace(cached)
    _copy(cached, destination)
    return destination.stat().st_size


def share_html_handlers(app: Sphinx) -> None:
    """Let ``dirhtml`` and ``singlehtml`` draw every node that ``html`` can draw.

    Sphinx looks up an extension's node handlers by builder name and falls back to the
    format ("html") only when no extension registered any for that name. sphinx-exercise
    registers its nodes for ``singlehtml`` by name, so the other extensions' nodes
    (sphinx-design's dropdowns) would be unknown there; the single-page build (the PDF's
    source) needs them.
    """
    if app.builder.name not in HTML_BUILDERS or app.builder.name == "html":
        return
    handlers = app.registry.translation_handlers
    if app.builder.name in handlers:
        for node, visitors in handlers.get("html", {}).items():
            handlers[app.builder.name].setdefault(node, visitors)


def copy_vendored_assets(app: Sphinx) -> None:
    """Copy MathJax, plotly.js and the book's own scripts into ``<outdir>/_vendor``."""
    if app.builder.name not in HTML_BUILDERS:
        return
    outdir = Path(app.outdir)
    vendor = outdir / VENDOR_DIR
    node_modules = Path(app.srcdir) / app.config.offline_site_node_modules
    check_plotly_bundle(node_modules)
    # _vendor belongs to this extension alone: start it afresh so nothing stale survives.
    shutil.rmtree(vendor, ignore_errors=True)
    for package, folder, entries, target in NPM_ASSETS:
        package_dir = node_modules / package
        if not package_dir.is_dir():
            raise ExtensionError(
                f"{package_dir} is missing: run `npm ci` in the repository root "
                "(the Makefile's `book` target does)"
            )
        for entry in entries:
            source = package_dir / folder / entry
            if not source.exists():
                raise ExtensionError(f"{package} has no {folder}/{entry}; check package-lock.json")
            _copy(source, vendor / target / entry)
    build_plotly_bundle(node_modules, vendor / "plotly" / PLOTLY_BUNDLE)
    _BUNDLE_DIGESTS[str(outdir)] = hashlib.sha1(
        (vendor / "plotly" / PLOTLY_BUNDLE).read_bytes()
    ).hexdigest()[:12]
    for script in ("figure-layout.js", "render-plotly.js"):
        _copy(STATIC_DIR / script, vendor / "plotly" / script)
    _copy(STATIC_DIR / "site.css", vendor / "book" / "site.css")

    # Pages link the favicon from _static/; the redirect page Jupyter Book writes at the
    # site root links nothing, so browsers ask for /favicon.ico there.
    if app.config.html_favicon and app.config.html_favicon.endswith(".ico"):
        _copy(Path(app.srcdir) / app.config.html_favicon, outdir / "favicon.ico")

    for uri in app.config.nb_ipywidgets_js:
        _local_target("nb_ipywidgets_js", uri, outdir)
    logger.info("offline_site: copied MathJax's fonts and plotly.js into %s", vendor)


def typeset_math(app: Sphinx, pages: list[Path]) -> None:
    """Typeset the TeX left in ``pages`` with MathJax under Node (``typeset_math.js``).

    A page typeset by an earlier build holds no TeX and is not read again; a formula MathJax
    cannot read fails the build.
    """
    waiting = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if MATH_TEX in text and MATH_TYPESET not in text:
            waiting.append(page)
    if not waiting:
        return
    node = shutil.which("node")
    if node is None:
        raise ExtensionError("typesetting the math needs Node.js (`node`), which npm comes with")
    node_modules = Path(app.srcdir) / app.config.offline_site_node_modules
    fonts = Path(app.outdir) / VENDOR_DIR / "mathjax" / MATHJAX_FONTS
    done = subprocess.run(
        [node, str(TYPESET_MATH), str(node_modules), str(fonts), *map(str, waiting)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ExtensionError(f"typeset_math.js failed:\n{done.stderr or done.stdout}")
    logger.info(done.stdout.strip())


# Font Awesome, as the theme ships it: one rule per icon in the theme's stylesheet
# (.fa-bars:before{content:"\f0c9"}, 1,800 of them), and web fonts holding every icon.
ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:before,?)+)\{content:"\\([0-9a-f]{4,5})"\}')
ICON_CLASS = re.compile(r"\bfa-[a-z0-9-]+")
# Characters of Unicode's private use area: how the theme's own rules (admonition icons,
# breadcrumbs) name their icons in its CSS.
PRIVATE_USE = re.compile("[\ue000-\uf8ff]")
ICON_FONTS = "vendor/fontawesome/webfonts"


def _prune_icon_rules(css: str, named: set[str]) -> tuple[str, set[str]]:
    """``css`` without the icon rules of icons not in ``named``, and the characters of those
    it keeps."""
    kept = set()

    def keep(rule: re.Match) -> str:
        classes = {c[1:].removesuffix(":before") for c in rule.group(1).split(",") if c}
        if classes & named:
            kept.add(chr(int(rule.group(2), 16)))
            return rule.group(0)
        return ""

    return ICON_RULE.sub(keep, css), kept


def subset_icons(outdir: Path, pages: list[Path]) -> dict[str, int]:
    """Cut the theme's icon fonts and icon rules down to the icons the site uses.

    An icon is used when a page or one of the theme's scripts names its class (``fa-bars``)
    or the theme's CSS writes its character. The icon rules of the other icons go from the
    stylesheet, and each Font Awesome web font keeps only the used icons' glyphs (under
    their own names, at their own paths, so the theme's CSS finds them). Returns the bytes
    saved.
    """
    from fontTools import subset

    static = outdir / "_static"
    sheets = sorted(static.rglob("*.css"))
    named = set()
    for source in [*pages, *static.glob("scripts/*.js")]:
        named |= set(ICON_CLASS.findall(source.read_text(encoding="utf-8", errors="ignore")))
    characters = set()
    saved = 0
    for sheet in sheets:
        text = sheet.read_text(encoding="utf-8")
        pruned, kept = _prune_icon_rules(text, named)
        characters |= kept | set(PRIVATE_USE.findall(pruned))
        if pruned != text:
            saved += len(text.encode()) - len(pruned.encode())
            sheet.write_text(pruned, encoding="utf-8")
    options = subset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]
    for font_path in sorted((static / ICON_FONTS).glob("*.woff2")):
        before = font_path.stat().st_size
        font = subset.load_font(str(font_path), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=[ord(c) for c in characters])
        subsetter.subset(font)
        subset.save_font(font, str(font_path), options)
        saved += before - font_path.stat().st_size
    return {"icons": len(characters), "bytes saved": saved}


def tidy_pages(app: Sphinx, exception: Exception | None) -> None:
    """Apply ``PAGE_FIXES`` to every page the build wrote, typeset their math, delete the
    theme's Font Awesome script, which no page loads any more, and cut its icon fonts down to
    the icons the pages use (``subset_icons``)."""
    if exception is not None or app.builder.name not in HTML_BUILDERS:
        return
    outdir = Path(app.outdir)
    pages = [
        page
        for page in outdir.rglob("*.html")
        if page.relative_to(outdir).parts[0] not in ("_static", VENDOR_DIR)
    ]
    pdf = outdir / app.config.offline_site_pdf if app.config.offline_site_pdf else None
    pdf_size = pdf.stat().st_size if pdf is not None and pdf.is_file() else None
    for page in pages:
        text = page.read_text(encoding="utf-8")
        tidied = show_pdf_entry(text, pdf_size)
        for pattern, replacement in PAGE_FIXES:
            tidied = pattern.sub(replacement, tidied)
        if page.name != SEARCH_PAGE or page.parent != outdir:
            tidied = SEARCH_SCRIPTS.sub("", tidied)
        tidied = number_figures(hang_code_lines(tidied))
        if tidied != text:
            page.write_text(tidied, encoding="utf-8")
    typeset_math(app, pages)
    for leftover in (outdir / "_static" / "scripts").glob("fontawesome.js*"):
        leftover.unlink()
    logger.info("offline_site: icon fonts cut to the icons used: %s", subset_icons(outdir, pages))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("offline_site_node_modules", "node_modules", "env", [str])
    # The PDF edition's file name at the site root (`make pdf` writes it there).
    app.add_config_value("offline_site_pdf", "attention-book.pdf", "html", [str])
    _register_mime_renderer()
    # Sphinx's MathJax markup, typeset after the build by typeset_math.js (tidy_pages).
    app.add_html_math_renderer(
        MATH_RENDERER,
        inline_renderers=(html_visit_math, None),
        block_renderers=(html_visit_displaymath, None),
    )
    app.connect("builder-inited", share_html_handlers)
    app.connect("builder-inited", copy_vendored_assets)
    # After myst-nb's handlers (priority 500), which add scripts.
    app.connect("html-page-context", page_scripts, priority=900)
    # After sphinx-book-theme's header buttons (priority 501).
    app.connect("html-page-context", pdf_download_button, priority=900)
    app.connect("build-finished", tidy_pages)
    app.add_css_file(f"{VENDOR_FROM_STATIC}/book/site.css")
    app.add_js_file(None, body=RESOLVE_COLOUR_MODE, priority=100)
    app.add_js_file(None, body=CLOSE_DRAWER_ON_LINK, priority=100)
    app.add_js_file(None, body=SCROLL_CUES, priority=100)
    return {"version": "1.1", "parallel_read_safe": True, "parallel_write_safe": True}
