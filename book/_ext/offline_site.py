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
   ``static/render-plotly.js`` draws it with plotly.js's cartesian partial bundle (npm
   ``plotly.js-cartesian-dist-min``, the same plotly.js version as the pinned plotly
   package; the build stops when they differ), gives the drawing ``role="img"`` and a label,
   and wires the keyboard to the slider.
2. Scripts by page content (``page_scripts``): plotly.js and its drawer only on a page
   whose body holds a figure, MathJax only on a page whose body holds math. The theme's
   Font Awesome script (1.5 MB, which redraws the icons its own stylesheet and web fonts
   already draw) is taken out of every page once the build has written them, with two
   small fixes to the theme's markup for screen readers (``PAGE_FIXES``).
3. The PDF edition (``print_pdf.py``, run by ``make pdf``) gets an entry in the theme's
   download menu on every page.
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

import html as html_lib
import json
import posixpath
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar

import plotly.offline
from docutils import nodes
from myst_nb.core import render as nb_render
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

PLOTLY_MIME = "application/vnd.plotly.v1+json"
# How a figure appears in a page's body; page_scripts looks for it.
PLOTLY_BLOCK = f'<script type="{PLOTLY_MIME}">'
# How Sphinx writes math into a page's body (inline and display).
MATH_MARKER = re.compile(r'class="math[ "]')
VENDOR_DIR = "_vendor"
# Sphinx resolves relative script paths against _static/; "../" reaches the site root.
VENDOR_FROM_STATIC = f"../{VENDOR_DIR}"
HTML_BUILDERS = ("html", "dirhtml", "singlehtml")
STATIC_DIR = Path(__file__).parent / "static"

# plotly.js draws a figure without layout.height this tall (px).
PLOTLY_DEFAULT_HEIGHT = 450
PLOTLY_PACKAGE = "plotly.js-cartesian-dist-min"
PLOTLY_BUNDLE = "plotly-cartesian.min.js"
# The scripts a page with a figure loads, in order; deferred, so they never hold up the text.
PLOTLY_SCRIPTS = (
    f"{VENDOR_FROM_STATIC}/plotly/{PLOTLY_BUNDLE}",
    f"{VENDOR_FROM_STATIC}/plotly/render-plotly.js",
)

# What to copy from node_modules: (package folder, folder inside it, entries inside that
# folder, destination folder under _vendor); an entry keeps its relative path.
# MathJax: the CommonHTML bundle (TeX input, the menu, assistive MathML), the TeX extensions
# it loads on demand, its web fonts, the accessibility components the menu can switch on,
# and its licence. Plotly: the cartesian partial bundle (bar, scatter, heatmap, ...).
NPM_ASSETS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "mathjax",
        "es5",
        (
            "tex-chtml.js",
            "input/tex/extensions",
            "output/chtml/fonts/woff-v2",
            "ui",
            "a11y",
            "sre",
        ),
        "mathjax",
    ),
    ("mathjax", "", ("LICENSE",), "mathjax"),
    (PLOTLY_PACKAGE, "", (PLOTLY_BUNDLE, "LICENSE"), "plotly"),
)

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

logger = logging.getLogger(__name__)


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


def figure_caption(figure: dict) -> dict[str, str]:
    """The words that go with a figure: what it shows, and how it answers the reader.

    Returns ``title`` (the figure's title at its default step), ``shows`` (its axes and
    legend, in words; with the title, the drawing's ``aria-label``), ``screen`` (how to use
    it, shown on screen) and ``print`` (shown in print: the figure is interactive on the
    site and printed at its default step).
    """
    layout = figure.get("layout") or {}
    axes = []
    for key in sorted(layout):
        part = layout[key]
        if isinstance(part, dict) and re.fullmatch(r"[xy]axis\d*", key) and _title(part):
            direction = "horizontal" if key.startswith("x") else "vertical"
            axes.append(f"{direction} axis {_title(part)}")
    # The legend names what the colours stand for; listed once, in the order drawn.
    names = []
    for trace in figure.get("data") or []:
        name = _plain(trace.get("name"))
        if name and trace.get("showlegend", True) is not False and name not in names:
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
    if steps:
        slider = sliders[0]
        active = slider.get("active") or 0
        prefix = _plain((slider.get("currentvalue") or {}).get("prefix", "")).rstrip(" =:")
        label = _plain(steps[min(active, len(steps) - 1)].get("label"))
        what = f"{prefix} = {label}" if prefix else f"step {label}"
        screen = (
            f"Interactive: drag the slider ({len(steps)} steps), or press Tab to reach it "
            "and then the arrow keys; hover for values."
        )
        printed = (
            "Interactive on the site, with a slider over "
            f"{prefix or 'its settings'}; printed here at the default step, {what}."
        )
    else:
        screen = "Interactive: hover for values."
        printed = "Interactive on the site: hover over it there for values."
    title = _title(layout) or "plotly figure"
    return {
        "title": title if title.endswith((".", "?", "!")) else f"{title}.",
        "shows": " ".join(shows),
        "screen": screen,
        "print": printed,
    }


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
        # In a <script> block only "<" can end the element early ("</script>", "<!--");
        # \u003c is the same character to JSON.parse.
        payload = json.dumps(figure, separators=(",", ":")).replace("<", "\\u003c")
        caption = {key: html_lib.escape(value) for key, value in figure_caption(figure).items()}
        # The box the figure is drawn into keeps the figure's height before plotly.js has
        # run, so the text below does not jump and an undrawn figure leaves a blank box.
        height = (figure.get("layout") or {}).get("height") or PLOTLY_DEFAULT_HEIGHT
        # The scripts that draw it are added by page_scripts, for every page that has one.
        html = (
            '<figure class="plotly-output">'
            f'<div class="plotly-figure" style="height: {int(height)}px"></div>'
            f"{PLOTLY_BLOCK}{payload}</script>"
            '<figcaption class="plotly-caption">'
            f'<span class="plotly-caption-text">Figure: {caption["title"]} '
            f'<span class="plotly-caption-shows">{caption["shows"]}</span></span> '
            f'<span class="plotly-caption-screen">{caption["screen"]}</span>'
            f'<span class="plotly-caption-print">{caption["print"]}</span>'
            "</figcaption></figure>"
        )
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


def _is_mathjax(script: Any, mathjax_path: str) -> bool:
    """MathJax itself, or the inline script that configures it (``window.MathJax = ...``)."""
    body = getattr(script, "attributes", {}).get("body", "")
    return _script_name(script) == _in_static(mathjax_path) or body.lstrip().startswith(
        "window.MathJax"
    )


def page_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Load plotly.js only where the body holds a figure and MathJax only where it holds math.

    Runs after myst-nb and sphinx.ext.mathjax have added their scripts, and decides from
    the page body as written, so it also serves ``singlehtml``, whose one page holds the
    whole book.
    """
    if app.builder.name not in HTML_BUILDERS or "script_files" not in context:
        return
    body = context.get("body") or ""
    has_figure = PLOTLY_BLOCK in body
    has_math = MATH_MARKER.search(body) is not None
    scripts = context["script_files"]
    scripts[:] = [
        script
        for script in scripts
        if not (not has_math and _is_mathjax(script, app.config.mathjax_path))
        and not _script_name(script).startswith(_in_static(f"{VENDOR_FROM_STATIC}/plotly/"))
    ]
    if has_figure:
        for uri in PLOTLY_SCRIPTS:
            app.builder.add_js_file(uri, defer="defer")  # type: ignore[attr-defined]


def pdf_download_button(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Add the PDF edition (``offline_site_pdf``, at the site root) to the theme's download
    menu, beside its ".pdf" entry, which prints the page alone."""
    if app.builder.name not in ("html", "dirhtml") or not app.config.offline_site_pdf:
        return
    for button in context.get("header_buttons", []):
        if button.get("label") == "download-buttons":
            button["buttons"].append(
                {
                    "type": "link",
                    "url": context["pathto"](app.config.offline_site_pdf, 1),
                    "text": "book",
                    "tooltip": "The whole book as one PDF",
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                }
            )


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
    site draws them with the npm partial bundle, so both must be the same release.
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
    _copy(STATIC_DIR / "render-plotly.js", vendor / "plotly" / "render-plotly.js")
    _copy(STATIC_DIR / "site.css", vendor / "book" / "site.css")

    # Pages link the favicon from _static/; the redirect page Jupyter Book writes at the
    # site root links nothing, so browsers ask for /favicon.ico there.
    if app.config.html_favicon and app.config.html_favicon.endswith(".ico"):
        _copy(Path(app.srcdir) / app.config.html_favicon, outdir / "favicon.ico")

    _local_target("mathjax_path", app.config.mathjax_path, outdir)
    for uri in app.config.nb_ipywidgets_js:
        _local_target("nb_ipywidgets_js", uri, outdir)
    logger.info("offline_site: copied MathJax and plotly.js into %s", vendor)


def tidy_pages(app: Sphinx, exception: Exception | None) -> None:
    """Apply ``PAGE_FIXES`` to every page the build wrote; delete the theme's Font Awesome
    script, which no page loads any more."""
    if exception is not None or app.builder.name not in HTML_BUILDERS:
        return
    outdir = Path(app.outdir)
    for page in outdir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        tidied = text
        for pattern, replacement in PAGE_FIXES:
            tidied = pattern.sub(replacement, tidied)
        if tidied != text:
            page.write_text(tidied, encoding="utf-8")
    for leftover in (outdir / "_static" / "scripts").glob("fontawesome.js*"):
        leftover.unlink()


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("offline_site_node_modules", "node_modules", "env", [str])
    # The PDF edition's file name at the site root (`make pdf` writes it there).
    app.add_config_value("offline_site_pdf", "attention-book.pdf", "html", [str])
    _register_mime_renderer()
    app.connect("builder-inited", share_html_handlers)
    app.connect("builder-inited", copy_vendored_assets)
    # After myst-nb's and sphinx.ext.mathjax's handlers (priority 500), which add scripts.
    app.connect("html-page-context", page_scripts, priority=900)
    # After sphinx-book-theme's header buttons (priority 501).
    app.connect("html-page-context", pdf_download_button, priority=900)
    app.connect("build-finished", tidy_pages)
    app.add_css_file(f"{VENDOR_FROM_STATIC}/book/site.css")
    return {"version": "1.1", "parallel_read_safe": True, "parallel_write_safe": True}
