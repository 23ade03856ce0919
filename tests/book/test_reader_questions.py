"""Every lesson answers the questions readers ask, and the book lists them with their threads.

- Lessons 00-12 each have a section whose heading starts with "## Questions readers ask",
  with at least six questions, each a level-3 heading in quotes
  (``### "Why is the vocabulary padded to 50,304?"``). After each question, before the
  next one, comes a code cell that computes the answer: it has output, no error, and more
  in its source than imports and prints of constants.
- Lessons 13 and 14 have such a section already, in a form of their own (lesson 13's
  questions are not in quotes); their questions are read the same way, quotes or not.
- ``book/questions.md`` lists every question of every lesson (00-14) under its chapter's
  heading, as an item ``- "the question" — asked in [owner/repo#123](https://github.com/...)``
  with at least one link to a GitHub issue, pull request or discussion; and every question
  the page lists is one of its lesson's.

Each lesson is its own test case, so a lesson without its section fails alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
LESSONS = {path.name[:2]: path for path in sorted((REPO / "lessons").glob("[0-9][0-9]_*.ipynb"))}
PAGE = REPO / "book" / "questions.md"
ANSWERED = [n for n in LESSONS if int(n) <= 12]  # lessons whose questions follow the form
MIN_QUESTIONS = 6

SECTION = re.compile(r"^##\s+Questions readers ask\b")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.+?)\s*$")
QUOTED = re.compile(r'^"(?P<question>.+)"$')
FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,}|:{3,})")
CHAPTER = re.compile(r"^##\s+\[(?P<number>\d\d)\b[^\]]*\]\((?P<target>[^)]+)\)\s*$")
ITEM = re.compile(r'^-\s+"(?P<question>.+?)"\s+—\s+(?P<rest>.*)$')
THREAD = re.compile(
    r"\[[^\]]+\]\(https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|discussions)/\d+\)"
)


def _normalise(question: str) -> str:
    return " ".join(question.split())


def _headings(markdown: str) -> list[tuple[int, str]]:
    """``(level, text)`` of the headings of a markdown cell, outside code and directives."""
    found, fences = [], []
    for line in markdown.splitlines():
        match = FENCE.match(line)
        if match:
            fence = match["fence"]
            if fences and fence[0] == fences[-1][0] and len(fence) >= len(fences[-1]) \
                    and not line.strip()[len(fence):].strip():
                fences.pop()
            else:
                fences.append(fence)
            continue
        heading = HEADING.match(line)
        if heading and not fences:
            found.append((len(heading["level"]), heading["text"]))
    return found


def questions_section(notebook: nbformat.NotebookNode) -> tuple[list[tuple[int, str]], int]:
    """The questions of a lesson's section and where the section ends.

    The section runs from its "## Questions readers ask" heading to the next heading of
    level 1 or 2. Returns the questions as ``(cell index, heading text)`` in order (an empty
    list when the lesson has no such section) and the index of the cell that ends the
    section (the number of cells when nothing does).
    """
    questions: list[tuple[int, str]] = []
    inside = False
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        for level, text in _headings(cell.source):
            if level <= 2:
                if inside:
                    return questions, index
                inside = bool(SECTION.match(f"{'#' * level} {text}"))
            elif inside and level == 3:
                questions.append((index, text))
    return questions, len(notebook.cells)


def question_text(heading: str) -> str:
    """The question a heading asks, without its quotes."""
    match = QUOTED.match(heading.strip())
    return _normalise(match["question"] if match else heading)


def _is_constant_print(node: ast.stmt) -> bool:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    call = node.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "print"):
        return False
    return all(isinstance(arg, ast.Constant) for arg in call.args)


def computes(source: str) -> bool:
    """True when a code cell does more than import modules and print constants."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a bare string
        if _is_constant_print(node):
            continue
        return True
    return False


def _shows_output(cell: nbformat.NotebookNode) -> bool:
    outputs = cell.get("outputs", [])
    if any(output.output_type == "error" for output in outputs):
        return False
    for output in outputs:
        printed = output.output_type == "stream" and output.get("name") == "stdout"
        if printed and output.text.strip():
            return True
        if output.output_type in ("execute_result", "display_data") and output.get("data"):
            return True
    return False


def unanswered(notebook: nbformat.NotebookNode) -> list[str]:
    """The questions with no computing code cell, with output, before the next question."""
    questions, section_end = questions_section(notebook)
    missing = []
    ends = [index for index, _ in questions[1:]] + [section_end]
    for (start, heading), end in zip(questions, ends, strict=True):
        if not any(c.cell_type == "code" and computes(c.source) and _shows_output(c)
                   for c in notebook.cells[start + 1:end]):
            missing.append(heading)
    return missing


def page_questions(page: str) -> dict[str, list[tuple[str, str]]]:
    """``{chapter number: [(question, rest of the item)]}`` from book/questions.md."""
    chapters: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in page.splitlines():
        chapter = CHAPTER.match(line)
        if chapter:
            current = chapter["number"]
            chapters.setdefault(current, [])
            continue
        if line.startswith("#"):
            current = None
            continue
        item = ITEM.match(line)
        if item and current is not None:
            chapters[current].append((_normalise(item["question"]), item["rest"]))
    return chapters


def _lesson_questions(number: str) -> list[str]:
    notebook = nbformat.read(LESSONS[number], as_version=4)
    return [question_text(heading) for _, heading in questions_section(notebook)[0]]


@pytest.fixture(scope="module")
def page() -> dict[str, list[tuple[str, str]]]:
    return page_questions(PAGE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("number", ANSWERED)
def test_lesson_answers_reader_questions(number: str) -> None:
    notebook = nbformat.read(LESSONS[number], as_version=4)
    questions, _ = questions_section(notebook)
    name = LESSONS[number].name
    assert len(questions) >= MIN_QUESTIONS, (
        f"{name}: {len(questions)} questions in a '## Questions readers ask' section; "
        f"at least {MIN_QUESTIONS} are needed, each a '### \"question\"' heading"
    )
    unquoted = [heading for _, heading in questions if not QUOTED.match(heading)]
    assert not unquoted, f"{name}: question headings not in quotes: {unquoted}"
    missing = unanswered(notebook)
    assert not missing, (
        f"{name}: no code cell that computes, with output, after these questions: {missing}"
    )


@pytest.mark.parametrize("number", list(LESSONS))
def test_every_lesson_question_is_on_the_page_with_its_thread(number: str, page) -> None:
    listed = dict(page.get(number, []))
    problems = []
    for question in _lesson_questions(number):
        if question not in listed:
            problems.append(f"not on the page: {question!r}")
        elif not THREAD.search(listed[question]):
            problems.append(f"no link to a GitHub thread: {question!r}")
    assert not problems, f"book/questions.md, chapter {number}: " + "; ".join(problems)


@pytest.mark.parametrize("number", list(LESSONS))
def test_every_question_on_the_page_is_in_its_lesson(number: str, page) -> None:
    asked = set(_lesson_questions(number))
    extra = [question for question, _ in page.get(number, []) if question not in asked]
    assert not extra, f"book/questions.md, chapter {number}: not in the lesson: {extra}"


def test_the_page_has_a_heading_per_lesson(page) -> None:
    assert sorted(page) == sorted(LESSONS)


# --- the readers of this file, on cases whose answer is known ------------------------------


def _notebook(*cells: tuple) -> nbformat.NotebookNode:
    """Cells from ``("md", source)`` and ``("code", source, outputs)``."""
    made = []
    for kind, source, *outputs in cells:
        if kind == "md":
            made.append(nbformat.v4.new_markdown_cell(source))
        else:
            made.append(nbformat.v4.new_code_cell(source, outputs=outputs[0]))
    return nbformat.v4.new_notebook(cells=made)


PRINTED = [nbformat.v4.new_output("stream", name="stdout", text="4\n")]


def test_a_question_needs_a_computing_cell_with_output_before_the_next() -> None:
    notebook = _notebook(
        ("md", '## Questions readers ask\n\n### "First?"\n\n'
               ':::{dropdown} x\n### not a question\n:::'),
        ("code", "print(2 + 2)", PRINTED),
        ("md", 'Yes.\n\n### "Second?"'),
        ("code", "import math\nprint('four')", PRINTED),  # imports and a constant
        ("md", '### "Third?"'),
        ("code", "x = 2 + 2", []),  # no output
        ("md", '### "Fourth?"\n\n### "Fifth?"'),  # two questions, one cell
        ("code", "print(len('abcd'))", PRINTED),
        ("md", "## What this sets up\n\n### \"Not in the section?\""),
        ("code", "print(len('abcd'))", PRINTED),
    )
    questions, end = questions_section(notebook)
    assert [question_text(h) for _, h in questions] == [
        "First?", "Second?", "Third?", "Fourth?", "Fifth?"]
    assert end == 8
    assert unanswered(notebook) == ['"Second?"', '"Third?"', '"Fourth?"']


def test_computes_tells_work_from_constants() -> None:
    assert computes("y = torch.randn(3)\nprint(y.sum())")
    assert computes("%pip install x\nprint(1 + 1)")
    assert not computes("import torch\nfrom math import pi")
    assert not computes("print('a constant')\n'a string'")


def test_page_items_are_read_with_their_threads() -> None:
    page = (
        "# Questions\n\n## [00 · Tokens](../lessons/00_tokens_and_embeddings.ipynb)\n\n"
        '- "Why pad?" — asked in [a/b#1](https://github.com/a/b/issues/1)\n'
        '- "No thread?" — asked somewhere\n\n'
        "## [13 · Kernels](../lessons/13_attention_as_a_kernel.ipynb)\n\n"
        '- "Why   safe?" — [c/d#2](https://github.com/c/d/pull/2)\n'
    )
    read = page_questions(page)
    assert [q for q, _ in read["00"]] == ["Why pad?", "No thread?"]
    assert THREAD.search(read["00"][0][1]) and not THREAD.search(read["00"][1][1])
    assert read["13"][0][0] == "Why safe?"
