"""Number each lesson's exercises "NN.k", the labels that ``attnlib.exercises.check`` uses.

sphinx-exercise numbers exercises through Sphinx's figure numbering, which counts across
the whole book when the table of contents is not numbered: the first exercise of lesson 02
would be "Exercise 6". A reader who meets ``check("02.1", answer)`` in the notebook should
find "Exercise 02.1" on the page, so once Sphinx has assigned the numbers, this extension
renumbers the exercises of every ``lessons/NN_slug`` page as ``(NN, 1), (NN, 2), ...`` in
page order. Titles and ``{numref}`` references both read these numbers.
"""

from __future__ import annotations

import re

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

_LESSON = re.compile(r"(?:^|/)lessons/(\d\d)_[^/]+$")


def renumber(app: Sphinx, env: BuildEnvironment) -> list[str]:
    """Give the exercises of lesson NN the numbers NN.1, NN.2, ... in page order."""
    for docname, numbers in env.toc_fignumbers.items():
        match = _LESSON.search(docname)
        exercises = numbers.get("exercise")
        if match is None or not exercises:
            continue
        in_order = sorted(exercises, key=lambda node_id: exercises[node_id])
        numbers["exercise"] = {
            node_id: (match.group(1), k) for k, node_id in enumerate(in_order, start=1)
        }
    return []


def setup(app: Sphinx) -> dict:
    # Sphinx assigns figure numbers in its own "env-get-updated" handler (priority 500);
    # a later priority renumbers after it, before any page is written.
    app.connect("env-get-updated", renumber, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
