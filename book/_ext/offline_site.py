"""Keep the built book self-contained: every script it loads is served by the site itself.

Two jobs, both for the HTML builders:

1. Plotly figures. Notebooks keep plotly's default renderer, which in a Jupyter kernel emits
   the ``application/vnd.plotly.v1+json`` mime type (the figure as JSON, no HTML). myst-nb has
   no renderer for it and would drop the figure with a warning. ``PlotlyMimeRenderer`` writes
   the JSON into the page inside a ``<script type="application/vnd.plotly.v1+json">`` block;
   ``static/render-plotly.js`` draws it with ``plotly.min.js`` copied from the installed
   plotly package, so the figure, its sliders and its frames work without a kernel.
2. Vendored files. MathJax comes from ``node_modules`` (``npm ci`` against the committed
   ``package-lock.json``). It is copied into ``<outdir>/_vendor/``, not ``_static/``:
   Jupyter Book adds every ``.js`` file found in a static folder to every page, and MathJax
   and plotly.js are only needed where math or figures appear. The book's own files in
   ``static/`` (the plotly drawer, ``site.css``) go there too.

Configuration (``_config.yml``, ``sphinx.config``): ``mathjax_path`` must point into
``_vendor``. The site needs no widget embedder (a live explorer shows its code and the
plotly twin below it does the work), so ``nb_ipywidgets_js`` is empty; any script named
there must be a file of this build, and the build stops with an error on a remote URL,
such as myst-nb's default require.js and embed-amd.js from CDNs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

import plotly
from docutils import nodes
from myst_nb.core import render as nb_render
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

PLOTLY_MIME = "application/vnd.plotly.v1+json"
VENDOR_DIR = "_vendor"
# Sphinx resolves relative script paths against _static/; "../" reaches the site root.
VENDOR_FROM_STATIC = f"../{VENDOR_DIR}"
HTML_BUILDERS = ("html", "dirhtml", "singlehtml")
STATIC_DIR = Path(__file__).parent / "static"

# What to copy from node_modules: (package folder, entries inside it, destination folder).
# MathJax: the SVG bundle with every TeX extension, plus the folders it loads lazily from
# its own location (the context menu, accessibility, speech rules), and its licence.
NPM_ASSETS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("mathjax", ("es5/tex-svg-full.js", "es5/ui", "es5/a11y", "es5/sre", "LICENSE"), "mathjax"),
)

logger = logging.getLogger(__name__)


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
        renderer.add_js_file("plotly", f"{VENDOR_FROM_STATIC}/plotly/plotly.min.js", {})
        renderer.add_js_file(
            "plotly_render", f"{VENDOR_FROM_STATIC}/plotly/render-plotly.js", {}
        )
        html = (
            '<div class="plotly-output">'
            f'<script type="{PLOTLY_MIME}">{payload}</script>'
            "</div>"
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


def copy_vendored_assets(app: Sphinx) -> None:
    """Copy MathJax, plotly.js and the book's own scripts into ``<outdir>/_vendor``."""
    if app.builder.name not in HTML_BUILDERS:
        return
    outdir = Path(app.outdir)
    vendor = outdir / VENDOR_DIR
    node_modules = Path(app.srcdir) / app.config.offline_site_node_modules
    # _vendor belongs to this extension alone: start it afresh so nothing stale survives.
    shutil.rmtree(vendor, ignore_errors=True)
    for package, entries, target in NPM_ASSETS:
        package_dir = node_modules / package
        if not package_dir.is_dir():
            raise ExtensionError(
                f"{package_dir} is missing: run `npm ci` in the repository root "
                "(the Makefile's `book` target does)"
            )
        for entry in entries:
            sources = sorted(package_dir.glob(entry))
            if not sources:
                raise ExtensionError(f"{package} has no {entry!r}; check package-lock.json")
            for source in sources:
                _copy(source, vendor / target / source.name)
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    _copy(plotly_js, vendor / "plotly" / "plotly.min.js")
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


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("offline_site_node_modules", "node_modules", "env", [str])
    _register_mime_renderer()
    app.connect("builder-inited", copy_vendored_assets)
    app.add_css_file(f"{VENDOR_FROM_STATIC}/book/site.css")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
