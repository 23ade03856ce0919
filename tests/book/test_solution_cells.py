"""Solutions stay hidden wherever a lesson is opened.

On the site the solutions are sphinx-exercise dropdowns (`:::{solution}` with
`:class: dropdown`, or the gated pair `:::{solution-start}` / `:::{solution-end}` around
code cells), collapsed until the reader opens them. In Colab and Jupyter those directives
do not hide code cells, so every code cell of a solution carries what each front end reads:

- Colab: a form cell, first line `#@title Solution to exercise NN.k` and cell metadata
  `cellView: "form"`, which shows the title and hides the code;
- JupyterLab and Notebook 7: `jupyter: {source_hidden: true, outputs_hidden: true}`, and
  the classic Notebook's `collapsed: true` (its outputs folded).

A markdown cell of the solutions that holds a solution's text (more than a heading or a
directive fence) carries `jupyter: {source_hidden: true}`, which folds it in JupyterLab.
Every implementation exercise's stub, among the exercises, is committed printing "not
implemented yet".
"""

from __future__ import annotations

import re

import nbformat

FENCE = re.compile(r"^\s*:{3,}\{(exercise|solution|solution-start)\}\s*(\S*)", re.MULTILINE)
EXERCISE_LABEL = re.compile(r":{3,}\{exercise\}[^\n]*\n:label:\s*(\S+)")


def _first_solution(notebook: nbformat.NotebookNode) -> int:
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and any(
            directive != "exercise" for directive, _ in FENCE.findall(cell.source)
        ):
            return index
    return len(notebook.cells)


def _text(source: str) -> str:
    """A markdown cell without its headings, directive fences and directive options."""
    return "\n".join(
        line for line in source.splitlines()
        if line.strip() and not line.lstrip().startswith(":::")
        and not line.startswith("#") and not line.startswith(":class:")
    )


def test_every_solution_cell_is_collapsed_in_colab_and_jupyter(lessons: dict) -> None:
    checked = 0
    for name, notebook in lessons.items():
        lesson = name[:2]
        numbers = {}
        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                for label in EXERCISE_LABEL.findall(cell.source):
                    numbers[label] = f"{lesson}.{len(numbers) + 1}"
        first = _first_solution(notebook)
        assert first < len(notebook.cells), f"{name}: no solution"
        current = None
        for index in range(first, len(notebook.cells)):
            cell = notebook.cells[index]
            where = f"{name}, cell {index}"
            if cell.cell_type == "markdown":
                if _text(cell.source):
                    assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, (
                        f"{where}: a solution's text; set metadata jupyter.source_hidden")
                for directive, label in FENCE.findall(cell.source):
                    if directive == "solution-start":
                        assert label in numbers, f"{where}: solution of an unknown exercise"
                        current = label
                continue
            assert current is not None, f"{where}: a code cell outside any solution"
            title = f"#@title Solution to exercise {numbers[current]}"
            assert cell.source.split("\n")[0] == title, (
                f"{where}: a solution's code cell starts with {title!r} (a Colab form)")
            assert cell.metadata.get("cellView") == "form", f"{where}: cellView 'form'"
            assert cell.metadata.get("jupyter") == {
                "source_hidden": True, "outputs_hidden": True}, f"{where}: jupyter metadata"
            assert cell.metadata.get("collapsed") is True, f"{where}: collapsed"
            checked += 1
    assert checked >= 40  # the book's solutions hold at least this many code cells


def test_implementation_stubs_are_committed_not_implemented(lessons: dict) -> None:
    """Each implementation exercise ends in a stub cell that raises NotImplementedError and
    runs its check, committed with the output "not implemented yet"; its solution after all
    the exercises runs the same check and prints "correct"."""
    from attnlib.exercises import implement

    stubs = {}
    for name, notebook in lessons.items():
        first = _first_solution(notebook)
        for index, cell in enumerate(notebook.cells):
            found = re.search(r'exercises\.check\("(\d\d\.\d+)", [A-Za-z_]\w*\)', cell.source)
            if cell.cell_type != "code" or not found or found.group(1) not in \
                    implement._IMPLEMENTATIONS:
                continue
            label = found.group(1)
            printed = "".join(o.get("text", "") for o in cell.outputs)
            if index < first:
                assert "raise NotImplementedError" in cell.source, f"{name}, cell {index}"
                assert printed.startswith(f"{label}: not implemented yet."), (name, index)
                stubs[label] = name
            else:
                assert f"{label}: correct." in printed, (name, index)
    assert sorted(stubs) == sorted(implement._IMPLEMENTATIONS)
