"""The book is linked together: chapters link to chapters, prose links to the API.

- Every mention of a chapter or lesson by number in the prose of a lesson or a page
  ("chapter 05", "Lesson 00's", "chapters 06 and 07") is a link to that lesson: in a
  lesson ``[chapter 05](05_kv_cache.ipynb)``, on a page under ``book/``
  ``[chapter 05](../lessons/05_kv_cache.ipynb)``. MyST turns the notebook path into a link
  to the lesson's page on the site, and the same relative link opens the notebook in
  Jupyter. In a list only the numbers are links: ``chapters [06](06_gqa.ipynb) and
  [07](07_mla.ipynb)``.
- Every link to a lesson names an existing notebook, and the number in its text (if any)
  is that lesson's.
- In a lesson, the first mention in the prose of an attnlib module, function or class
  (``attnlib.attention``, ``attnlib.analysis.memory``, ``attnlib.KVCache.update``) is a link to its
  entry on the API page: ``[`attnlib.attention`](#attnlib.core.functional.attention)``, the target
  being the name where the object is defined (``#`` + module + qualified name), which is
  what the API page documents. Later mentions may stay plain.
- Every term of the glossary links to a lesson that explains it.

The book build (warnings are errors) fails on a link MyST cannot resolve; these checks fail
on a mention that is not a link at all, and on a link that points at the wrong place.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
LESSONS = sorted((REPO / "lessons").glob("[0-9][0-9]_*.ipynb"))
SLUGS = {path.name[:2]: path.name for path in LESSONS}
PAGES = sorted((REPO / "book").glob("*.md"))

# Text where a mention is not prose: code, math, existing links, HTML, directive options.
_NOT_PROSE = re.compile(
    r"```.*?```"
    r"|\$\$.*?\$\$"
    r"|(?<!\\)\$[^$\n]+?\$"
    r"|!?\[[^\]]*\]\([^)\s]*\)"
    r"|`[^`\n]*`"
    r"|<[^>\n]+>"
    r"|^:[a-z-]+:[^\n]*$",
    re.S | re.M,
)
_SEP = r"(?:,\s*|\s+(?:and|to|or|through)\s+|–|-)"
_MENTION = re.compile(
    rf"\b(?:[Cc]hapters?|[Ll]essons?)\s+(?:(?:LINK|\d\d){_SEP})*\d\d\b"
)
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
_LESSON_TARGET = re.compile(r"^(?:\.\./lessons/)?(?P<file>\d\d_[a-z0-9_]+\.ipynb)(?:#.*)?$")
_API_MENTION = re.compile(r"`(?P<name>attnlib(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")


def _prose_cells(path: Path) -> list[tuple[str, str]]:
    """``(where, markdown)`` for each markdown cell of a lesson, or the whole page."""
    if path.suffix == ".md":
        return [(path.name, path.read_text(encoding="utf-8"))]
    nb = nbformat.read(path, as_version=4)
    return [(f"{path.name}, cell {i}", c.source) for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown"]


def _masked(text: str) -> str:
    """Links become the word LINK; other non-prose spans become spaces."""
    def blank(m: re.Match) -> str:
        return "LINK" if _LINK.fullmatch(m.group(0)) else re.sub(r"[^\n]", " ", m.group(0))

    return _NOT_PROSE.sub(blank, text)


def _api_target(name: str) -> str | None:
    """``#module.qualname`` of the attnlib object ``name``, or None for data (not linked)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        break
    if inspect.ismodule(obj):
        return f"#{obj.__name__}"
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj):
        return f"#{obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, property):
        return None
    return None


@pytest.mark.parametrize("path", [*LESSONS, *PAGES], ids=lambda p: p.name)
def test_chapter_mentions_are_links(path: Path) -> None:
    plain = []
    for where, text in _prose_cells(path):
        plain += [f"{where}: {m.group(0)!r}" for m in _MENTION.finditer(_masked(text))]
    assert not plain, (
        "write each chapter mention as a link to its lesson (see this test's docstring):\n"
        + "\n".join(plain)
    )


@pytest.mark.parametrize("path", [*LESSONS, *PAGES], ids=lambda p: p.name)
def test_links_to_lessons_point_at_the_right_lesson(path: Path) -> None:
    wrong = []
    prefix = "" if path.suffix == ".ipynb" else "../lessons/"
    for where, text in _prose_cells(path):
        for m in _LINK.finditer(text):
            target = m.group("target")
            if not target.endswith(".ipynb") and ".ipynb#" not in target:
                continue
            found = _LESSON_TARGET.match(target)
            if not found or not target.startswith(prefix) or found["file"] not in SLUGS.values():
                wrong.append(f"{where}: {m.group(0)} names no lesson "
                             f"(expected {prefix}NN_slug.ipynb)")
                continue
            numbers = re.findall(r"\b\d\d\b", m.group("text"))
            if numbers and numbers != [found["file"][:2]]:
                wrong.append(f"{where}: {m.group(0)} says {numbers} but links {found['file']}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_first_mention_of_an_attnlib_name_links_to_the_api(path: Path) -> None:
    seen: set[str] = set()
    problems = []
    for where, text in _prose_cells(path):
        links = {m.start(): m for m in _LINK.finditer(text)}
        for m in _API_MENTION.finditer(text):
            name = m.group("name")
            if name in seen:
                continue
            seen.add(name)
            try:
                target = _api_target(name)
            except AttributeError:
                problems.append(f"{where}: `{name}` is no attnlib name")
                continue
            if target is None:
                continue
            link = links.get(m.start() - 1)  # the mention is the whole text of a link
            if link is None or link.group("text") != m.group(0):
                problems.append(f"{where}: first mention of `{name}` is not a link to {target}")
            elif link.group("target") != target:
                problems.append(f"{where}: `{name}` links {link.group('target')}, not {target}")
    assert not problems, "\n".join(problems)


def test_every_glossary_term_links_to_a_lesson() -> None:
    text = (REPO / "book" / "glossary.md").read_text(encoding="utf-8")
    body = text.split("```{glossary}", 1)[1].split("```", 1)[0]
    entries: list[str] = []  # an entry: its term lines (one or more), then its indented text
    for line in body.strip("\n").splitlines():
        if line[:1].strip() and (not entries or entries[-1].splitlines()[-1][:1] in ("", " ")):
            entries.append(line)
        elif entries:
            entries[-1] += "\n" + line
    unlinked = [entry.splitlines()[0] for entry in entries
                if not re.search(r"\]\(\.\./lessons/\d\d_[a-z0-9_]+\.ipynb", entry)]
    assert not unlinked, f"glossary terms without a link to a lesson: {unlinked}"
