"""Link the API page back to the lessons: every ``Lesson:`` line of a docstring.

attnlib's docstrings end with a line such as ``Lesson: 07_mla (decoupled RoPE: 08_rope).``
naming the notebooks that explain the object. On the API page each such name becomes a
link to that lesson, titled with the lesson's own title; a name that matches no notebook
in ``lessons/`` stops the build with a warning (warnings are errors), so a renamed lesson
cannot leave a dead pointer behind.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
_LESSON_LINE = re.compile(r"^(\s*Lessons?:\s)(.*)$")
_LESSON_NAME = re.compile(r"\b\d\d_[a-z0-9_]+\b")


def link_lessons(app: Sphinx, what: str, name: str, obj: object, options: dict,
                 lines: list[str]) -> None:
    """Replace each lesson name on a ``Lesson:`` line by a ``:doc:`` link to it."""
    lessons = {p.stem for p in (Path(app.srcdir) / "lessons").glob("[0-9][0-9]_*.ipynb")}

    def link(match: re.Match) -> str:
        if match.group(0) not in lessons:
            LOGGER.warning("%s names lesson %s, which is not in lessons/", name,
                           match.group(0), type="attnbook", subtype="lesson")
            return match.group(0)
        return f":doc:`/lessons/{match.group(0)}`"

    in_lesson = False  # a Lesson: paragraph may wrap onto the following lines
    for i, line in enumerate(lines):
        found = _LESSON_LINE.match(line)
        if found:
            lines[i] = found.group(1) + _LESSON_NAME.sub(link, found.group(2))
        elif in_lesson and line.strip():
            lines[i] = _LESSON_NAME.sub(link, line)
        in_lesson = bool(found) or (in_lesson and bool(line.strip()))


def setup(app: Sphinx) -> dict:
    app.connect("autodoc-process-docstring", link_lessons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
