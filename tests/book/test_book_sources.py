"""The book's sources follow the pipeline's rules (no build needed).

The table of contents lists exactly the lessons that exist; every lesson starts with the
setup cell, which installs attnlib from the URL that drives the Colab buttons; lessons are
committed executed top to bottom; only live-widget cells skip nbval's output check; figures
and widgets carry what the static site needs to draw them.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PLOTLY = "application/vnd.plotly.v1+json"
IGNORE_MARKER = "# NBVAL_IGNORE_OUTPUT"
# nbval's other cell markers and tags: the lessons use none of them.
OTHER_NBVAL_MARKERS = ("NBVAL_SKIP", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION")
NBVAL_TAGS = ("nbval-ignore-output", "nbval-skip", "nbval-check-output", "raises-exception")
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


def test_readme_shows_the_setup_cell(book_root: Path, setup_cell: str) -> None:
    readme = (book_root / "README.md").read_text(encoding="utf-8")
    # Fenced Python blocks, possibly indented under a list item.
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", readme, flags=re.MULTILINE | re.DOTALL)
    sources = [textwrap.dedent(body).strip() for _, body in blocks]
    assert setup_cell in sources, "README.md's setup cell differs from the lessons' one"


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


def test_only_live_widget_cells_ignore_their_output(lessons: dict) -> None:
    for name, notebook in lessons.items():
        for index, cell in enumerate(notebook.cells):
            where = f"{name}, cell {index}"
            for marker in OTHER_NBVAL_MARKERS:
                assert marker not in cell.source, f"{where}: {marker} is not used in lessons"
            tags = set(cell.metadata.get("tags", []))
            assert not tags & set(NBVAL_TAGS), f"{where}: nbval tags {tags & set(NBVAL_TAGS)}"
            if "NBVAL_IGNORE_OUTPUT" not in cell.source:
                continue
            lines = [line.strip() for line in cell.source.splitlines()]
            assert IGNORE_MARKER in lines, f"{where}: write the marker alone on its line"
            assert WIDGET_VIEW in _mime_types(cell), (
                f"{where}: only cells that display a live widget may skip the output check"
            )


def test_widget_views_have_embedded_state(lessons: dict) -> None:
    """The static site draws a widget from the state saved in the notebook's metadata."""
    for name, notebook in lessons.items():
        views = [
            output["data"][WIDGET_VIEW]["model_id"]
            for cell in _code_cells(notebook)
            for output in cell.outputs
            if WIDGET_VIEW in output.get("data", {})
        ]
        if not views:
            continue
        state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
        missing = [model for model in views if model not in state]
        assert not missing, (
            f"{name}: widget state missing for {missing}; execute with nbclient's "
            "store_widget_state=True (see the README)"
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
    assert "://" not in config["mathjax_path"]
    assert all("://" not in path for path in config["nb_ipywidgets_js"])
    launch = book_config["launch_buttons"]
    assert not launch.get("thebe") and not launch.get("binderhub_url")
    assert not book_config["html"]["analytics"]["google_analytics_id"]
    assert book_config["execute"]["execute_notebooks"] == "off"
