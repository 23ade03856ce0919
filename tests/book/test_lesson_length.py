"""Each lesson fits one sitting: at most 4,000 words of main text.

The main text is the markdown a reader reads without opening anything: exercises, their
solutions, dropdowns (``:::{dropdown}`` and any directive with ``:class: dropdown``) and
everything after the lesson's ``## Exercises`` heading are left out, and so is math.
Words in inline code spans count (the reader reads them); a word is a run of
non-space characters with a letter or a digit in it. The reading of markdown is the
prose-number test's (:func:`segments`), so both tests agree on what the reader sees.

Run this file directly to print the count of every lesson:
``python tests/book/test_lesson_length.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_prose_numbers import DIRECTIVE, FENCE, LESSONS_DIR, _closes, segments

BUDGET = 4000
HIDDEN_DIRECTIVES = {"exercise", "solution", "dropdown"}
EXERCISES = re.compile(r"^#{1,3}\s+Exercises\b")



def _visible_lines(markdown: str, state: dict) -> list[str]:
    """The lines of one cell that a reader sees without opening a dropdown.

    ``state`` carries what spans cells: whether a ``solution-start`` is open, and whether
    the exercises have begun.
    """
    visible: list[str] = []
    stack: list[tuple[str, bool]] = []  # open fences: (fence, hidden)
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        if state["exercises"]:
            break
        if EXERCISES.match(line) and not stack:
            state["exercises"] = True
            break
        match = FENCE.match(line)
        if match and stack and _closes(match, stack[-1][0]) and not match["info"].strip():
            stack.pop()
            continue
        hidden = state["solution"] or any(h for _, h in stack)
        if match:
            directive = DIRECTIVE.match(match["info"].strip())
            name = directive["name"] if directive else ""
            if name == "solution-start":
                state["solution"] = True
            elif name == "solution-end":
                state["solution"] = False
            # A directive's options follow its opening line.
            options = []
            for following in lines[index + 1:]:
                if not following.startswith(":") or FENCE.match(following):
                    break
                options.append(following)
            dropdown = any(re.match(r":class:.*\bdropdown\b", o) for o in options)
            stack.append((match["fence"], hidden or name in HIDDEN_DIRECTIVES or dropdown))
            continue
        if not hidden:
            visible.append(line)
    return visible


def main_text_words(notebook: nbformat.NotebookNode) -> int:
    """The number of words of main text in a lesson (see the module's docstring)."""
    state = {"solution": False, "exercises": False}
    words = 0
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        lines = _visible_lines(cell.source, state)
        found, _ = segments("\n".join(lines))
        words += sum(_count(s.text) for s in found if not s.math)
    return words


def _count(text: str) -> int:
    """Words separated by white space; a token without a letter or a digit is not one."""
    return sum(any(ch.isalnum() for ch in token) for token in text.split())


def _lessons() -> list[Path]:
    return sorted(LESSONS_DIR.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", _lessons(), ids=lambda p: p.stem)
def test_lesson_fits_one_sitting(path: Path) -> None:
    words = main_text_words(nbformat.read(path, as_version=4))
    assert words <= BUDGET, (
        f"{path.name}: {words} words of main text, over the budget of {BUDGET}; move depth a "
        "first reading can skip into a dropdown, or cut"
    )


def test_hidden_text_is_not_counted() -> None:
    cells = [
        "# Title\n\nOne two three.\n\n:::{dropdown} Deeper\nfour five six seven\n:::\n",
        ":::{note}\n:class: dropdown\neight nine\n:::\nten $x + y = 11$ `code span`",
        ":::{solution-start} ex\n:class: dropdown\n:::",
        "hidden solution words",
        ":::{solution-end}\n:::\n\nback",
        "## Exercises\n\nnot counted",
        "not counted either",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(c) for c in cells])
    # Title, One, two, three; ten, code, span; back.
    assert main_text_words(notebook) == 8


if __name__ == "__main__":
    total = 0
    for path in _lessons():
        words = main_text_words(nbformat.read(path, as_version=4))
        total += words
        print(f"{path.stem:32s} {words:6d}{'  over' if words > BUDGET else ''}")
    print(f"{'total':32s} {total:6d}")
