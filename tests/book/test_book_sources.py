"""The book's sources follow the pipeline's rules (no build needed).

The table of contents lists exactly the lessons that exist; every lesson starts with the
setup cell, which installs attnlib from the URL that drives the Colab buttons; lessons are
committed executed top to bottom; only live-explorer and timing cells skip nbval's output
check, by a cell tag and never by a comment the reader would see, and on the site explorers
show their code, a note and the plotly twin, never a frozen widget; exercises render in
Jupyter and keep their solutions after all of them.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
# nbval's cell tag for a cell whose output it runs but does not compare. A tag, not the
# comment "# NBVAL_IGNORE_OUTPUT": a comment is part of the code every reader sees, on the
# site and in Colab; a tag is metadata (myst-nb turns it into a CSS class, tag_<name>).
IGNORE_TAG = "nbval-ignore-output"
# The one other reason a cell may skip nbval: it shows measured timings (a figure of time
# against size), which no two machines reproduce. Its first line says so, and a lesson has
# at most one such cell; the stable quantity beside it (an operation count, a rounded
# exponent) is printed in a checked cell.
TIMING_MARKER = "# timings differ from machine to machine"
# The markdown cell right after a live explorer, word for word.
EXPLORER_NOTE = (
    "In Jupyter or Colab the cell above shows live controls; the figure below works on this page."
)
# An opening fence of an exercise or solution directive: (fence, directive name).
EXERCISE_FENCE = re.compile(
    r"^\s*(`{3,}|:{3,})\{(exercise|solution|solution-start)\}", re.MULTILINE
)
# nbval's comment markers (the lessons use none: they would show in the code) and its other
# tags (the lessons use none of them either).
NBVAL_MARKERS = ("NBVAL_IGNORE_OUTPUT", "PYTEST_VALIDATE_IGNORE_OUTPUT", "NBVAL_SKIP",
                 "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION")
OTHER_NBVAL_TAGS = ("nbval-skip", "nbval-check-output", "raises-exception")
# Paths that only exist on the machine that ran the notebook.
MACHINE_PATH = re.compile(r"(/work/|/root/|/home/[\w.-]+/|/Users/[\w.-]+/|[A-Z]:\\Users\\)")


def _code_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _mime_types(cell: nbformat.NotebookNode) -> set[str]:
    return {mime for output in cell.get("outputs", []) for mime in output.get("data", {})}


def test_toc_lessons_are_the_lessons_folder(toc: dict, lesson_paths: list[Path]) -> None:
    listed = [
        chapter["file"]
        for part in toc["parts"]
        for chapter in part.get("chapters", [])
        if chapter["file"].startswith("lessons/")
    ]
    assert listed == sorted(listed), "lessons must appear in the order of their numbers"
    assert listed == [f"lessons/{path.stem}" for path in lesson_paths]


def test_toc_files_exist(book_root: Path, toc_files: list[str]) -> None:
    missing = [
        name
        for name in toc_files
        if not any((book_root / f"{name}{suffix}").is_file() for suffix in (".md", ".ipynb"))
    ]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


def test_setup_cell_installs_from_repository_url(lessons: dict, book_config: dict) -> None:
    """The Colab buttons and the install line must name the same repository."""
    url = book_config["repository"]["url"]
    for name, notebook in lessons.items():
        first = _code_cells(notebook)[0].source
        installs = re.findall(r'%pip install --quiet "attnlib @ git\+([^"]+)"', first)
        assert installs == [url], f"{name}: first code cell installs from {installs}, not {url}"


def test_first_code_cell_is_the_setup_cell(lessons: dict, setup_cell: str) -> None:
    for name, notebook in lessons.items():
        assert _code_cells(notebook)[0].source == setup_cell, f"{name}: setup cell differs"


def test_contributing_shows_the_setup_cell(book_root: Path, setup_cell: str) -> None:
    readme = (book_root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    # Fenced Python blocks, possibly indented under a list item.
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", readme, flags=re.MULTILINE | re.DOTALL)
    sources = [textwrap.dedent(body).strip() for _, body in blocks]
    assert setup_cell in sources, "CONTRIBUTING.md's setup cell differs from the lessons' one"


def test_readme_colab_badge_matches_repository(book_root: Path, book_config: dict) -> None:
    readme = (book_root / "README.md").read_text(encoding="utf-8")
    repository = book_config["repository"]
    slug = repository["url"].removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{slug}/blob/{repository['branch']}/lessons/"
    assert colab in readme


def test_lessons_are_committed_executed_in_order(lessons: dict) -> None:
    for name, notebook in lessons.items():
        counts = [cell.execution_count for cell in _code_cells(notebook) if cell.source.strip()]
        assert counts == list(range(1, len(counts) + 1)), (
            f"{name}: execution counts {counts}; run the notebook top to bottom in a fresh "
            "kernel and save it with its outputs"
        )


def _is_timing_cell(cell) -> bool:
    lines = cell.source.splitlines()
    return bool(lines) and lines[0].startswith(TIMING_MARKER)


def _ignores_output(cell) -> bool:
    return IGNORE_TAG in cell.metadata.get("tags", [])


def test_only_live_explorer_cells_ignore_their_output(lessons: dict) -> None:
    """A live explorer needs a kernel, and a timing figure differs on every machine; every
    other output is compared by nbval. Skipping is the cell tag, never a comment in the code."""
    for name, notebook in lessons.items():
        timing_cells: list[int] = []
        for index, cell in enumerate(notebook.cells):
            where = f"{name}, cell {index}"
            for marker in NBVAL_MARKERS:
                assert marker not in cell.source, (
                    f"{where}: {marker} is a comment the reader sees; use the cell tag "
                    f"{IGNORE_TAG!r} (and no other nbval marker)"
                )
            tags = set(cell.metadata.get("tags", []))
            assert not tags & set(OTHER_NBVAL_TAGS), (
                f"{where}: nbval tags {tags & set(OTHER_NBVAL_TAGS)}"
            )
            if cell.cell_type != "code":
                assert IGNORE_TAG not in tags, f"{where}: {IGNORE_TAG!r} on a markdown cell"
                continue
            shows_widget = WIDGET_VIEW in _mime_types(cell)
            if not _ignores_output(cell) and not shows_widget:
                continue
            assert _ignores_output(cell), (
                f"{where}: a cell that shows a live widget carries the tag {IGNORE_TAG!r}"
            )
            if _is_timing_cell(cell):
                assert not shows_widget, f"{where}: a timing cell shows no live widget"
                timing_cells.append(index)
                continue
            assert shows_widget, (
                f"{where}: only cells that display a live widget, or measured timings "
                f"(first line {TIMING_MARKER!r}), may skip the output check"
            )
        assert len(timing_cells) <= 1, (
            f"{name}: cells {timing_cells} show timings; keep that to one cell per lesson"
        )


def test_live_explorer_is_code_then_note_then_twin(lessons: dict) -> None:
    """On the site a live explorer shows its code only; the note and the twin follow it.

    The cell carries the tag remove-output (no frozen copy of the controls on the site), the
    next cell is the one-line note, and the cell after that draws the plotly twin: a figure
    with a built-in slider, which works on the static page.
    """
    for name, notebook in lessons.items():
        cells = notebook.cells
        for index, cell in enumerate(cells):
            if cell.cell_type != "code" or not _ignores_output(cell):
                continue
            if _is_timing_cell(cell):
                continue
            where = f"{name}, cell {index}"
            assert "remove-output" in cell.metadata.get("tags", []), (
                f"{where}: a live explorer cell carries the tag remove-output"
            )
            assert index + 2 < len(cells), f"{where}: the note and the twin must follow"
            note, twin = cells[index + 1], cells[index + 2]
            assert note.cell_type == "markdown" and note.source.strip() == EXPLORER_NOTE, (
                f"{name}, cell {index + 1}: the cell after a live explorer is the note "
                f"{EXPLORER_NOTE!r}"
            )
            figures = [
                output["data"][PLOTLY]
                for output in twin.get("outputs", [])
                if PLOTLY in output.get("data", {})
            ]
            assert twin.cell_type == "code" and any(
                figure.get("layout", {}).get("sliders") for figure in figures
            ), f"{name}, cell {index + 2}: the twin (a plotly figure with a slider) follows"


def test_no_widget_state_is_saved(lessons: dict) -> None:
    """The site draws no widget, so lessons carry no widget state."""
    for name, notebook in lessons.items():
        assert "widgets" not in notebook.metadata, (
            f"{name}: the notebook's metadata holds widget state; execute it without "
            "store_widget_state (the README's command)"
        )


def test_exercises_render_in_jupyter_and_hide_their_solutions(lessons: dict) -> None:
    """Colon fences render as text and math in Jupyter and Colab; backtick fences show raw.

    Solutions come after all the exercises, so a reader meets none before trying.
    """
    for name, notebook in lessons.items():
        directives = []  # (cell index, directive name) in reading order
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "markdown":
                continue
            for fence, directive in EXERCISE_FENCE.findall(cell.source):
                assert fence.startswith(":"), (
                    f"{name}, cell {index}: write {{{directive}}} in a colon fence "
                    f"(:::{{{directive}}}), not {fence}"
                )
                directives.append((index, directive))
        exercises = [index for index, directive in directives if directive == "exercise"]
        solutions = [index for index, directive in directives if directive != "exercise"]
        if exercises and solutions:
            assert max(exercises) < min(solutions), (
                f"{name}: a solution (cell {min(solutions)}) comes before the last exercise "
                f"(cell {max(exercises)}); put every solution after all the exercises"
            )


def _first_solution_cell(notebook: nbformat.NotebookNode) -> int:
    """Index of the first cell that opens a solution (the cell count when none does)."""
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and any(
            directive != "exercise" for _, directive in EXERCISE_FENCE.findall(cell.source)
        ):
            return index
    return len(notebook.cells)


def test_lessons_check_at_least_two_answers(lessons: dict) -> None:
    """Two or more exercises end in a check cell, committed with the placeholder answer.

    Check cells among the exercises (before the first solution) must print "not answered
    yet"; a solution may run the same check on its worked answer.
    """
    for name, notebook in lessons.items():
        checks = [
            (index, cell)
            for index, cell in enumerate(notebook.cells[: _first_solution_cell(notebook)])
            if cell.cell_type == "code" and "exercises.check(" in cell.source
        ]
        assert len(checks) >= 2, (
            f"{name}: {len(checks)} exercise check cells before the solutions; at least two "
            "exercises end in attnlib.exercises.check(label, answer)"
        )
        for index, cell in checks:
            printed = nbformat.writes(nbformat.from_dict({"outputs": cell.outputs}))
            assert "not answered yet" in printed or "not implemented yet" in printed, (
                f"{name}, cell {index}: commit check cells with the placeholder answer "
                "(they print 'not answered yet'), so no answer shows before the reader tries"
            )


def test_plotly_figures_use_the_plotly_mime_type(lessons: dict) -> None:
    """Figures come from plotly's default renderer in a kernel: JSON, no HTML.

    That JSON is what the site draws and what nbval compares; an HTML renderer would put a
    random div id and a copy of plotly.js into the notebook instead.
    """
    for name, notebook in lessons.items():
        for index, cell in enumerate(_code_cells(notebook)):
            for output in cell.outputs:
                html = output.get("data", {}).get("text/html", "")
                html = "".join(html) if isinstance(html, list) else html
                assert "Plotly.newPlot" not in html, (
                    f"{name}, code cell {index}: a plotly figure rendered as HTML; keep "
                    "plotly's default renderer"
                )


def test_outputs_name_no_machine_paths(lessons: dict) -> None:
    for name, notebook in lessons.items():
        for index, cell in enumerate(_code_cells(notebook)):
            text = nbformat.writes(nbformat.from_dict({"outputs": cell.outputs}))
            found = MACHINE_PATH.findall(text)
            assert not found, f"{name}, code cell {index}: outputs mention {found}"


def test_site_loads_nothing_remote(book_config: dict) -> None:
    config = book_config["sphinx"]["config"]
    # Math is typeset at build time (book/_ext/typeset_math.js): no page loads MathJax.
    assert config["html_math_renderer"] == "build_time" and "mathjax_path" not in config
    # No widget embedder: an empty dict also replaces myst-nb's default CDN scripts.
    assert config["nb_ipywidgets_js"] == {}
    launch = book_config["launch_buttons"]
    assert not launch.get("thebe") and not launch.get("binderhub_url")
    assert not book_config["html"]["analytics"]["google_analytics_id"]
    assert book_config["execute"]["execute_notebooks"] == "off"


def test_jupyterlab_renders_myst() -> None:
    """`make lab` renders exercises, notes and math through the jupyterlab-myst extension.

    It is enabled once installed; this fails when it is missing or has been disabled.
    """
    prefix = Path(sys.prefix)
    extension = prefix / "share" / "jupyter" / "labextensions" / "jupyterlab-myst"
    assert (extension / "package.json").is_file(), (
        f"jupyterlab-myst is not installed in {prefix} (it is pinned in requirements.txt)"
    )
    for folder in (prefix / "etc" / "jupyter", Path.home() / ".jupyter"):
        page_config = folder / "labconfig" / "page_config.json"
        if page_config.is_file():
            disabled = json.loads(page_config.read_text(encoding="utf-8")).get(
                "disabledExtensions", {}
            )
            assert not disabled.get("jupyterlab-myst"), f"{page_config} disables jupyterlab-myst"


def test_the_bibliography_parses_and_every_entry_is_closed():
    """The book build reads book/references.bib with pybtex; a syntax error there fails the
    whole build, so catch it here, with the line, before a build is tried."""
    from pybtex.database import parse_file

    path = Path(__file__).resolve().parents[2] / "book" / "references.bib"
    entries = parse_file(str(path)).entries
    text = path.read_text(encoding="utf-8")
    assert len(entries) == len(re.findall(r"^@\w+\{", text, re.M))
    for key, entry in entries.items():
        assert "title" in entry.fields and "year" in entry.fields, key
