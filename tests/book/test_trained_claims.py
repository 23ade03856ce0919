"""The trained comparisons of lessons 05 to 09 use one evaluation set, and the differences
their prose quotes are printed by their cells.

Every held-out loss of a model trained on the book that these lessons compare is computed
on ``attnlib.models.train.eval_set()`` (by ``attnlib.models.train.eval_loss``, or read from a
card, which
records that set), so no lesson scores one number on some held-out windows and the next on
others. The test reads the lessons' code: no other book held-out set may appear in them.
"""

from __future__ import annotations

import re

import pytest

TRAINED = ("05_kv_cache", "06_gqa", "07_mla", "08_rope", "09_frontier", "11_serving")

# Ways to reach held-out book text other than the one evaluation set.
OTHER_SETS = [
    re.compile(r"held_out\(\s*[\"']book"),  # train.held_out("book", ...), "book-nope", ...
    re.compile(r"book_held_out\("),  # attnlib.models.tasks.book_held_out
    re.compile(r"n_windows\s*="),  # a subset of windows
    re.compile(r"\bevaluate\(\s*[^)]*\bids_"),  # train.evaluate on an ad-hoc batch
]


def _code(lesson) -> str:
    return "\n".join(c.source for c in lesson.cells if c.cell_type == "code")


@pytest.mark.parametrize("stem", TRAINED)
def test_trained_lessons_use_the_one_evaluation_set(lessons, stem):
    code = _code(lessons[stem])
    for pattern in OTHER_SETS:
        assert not pattern.search(code), (stem, pattern.pattern, pattern.search(code)[0])


@pytest.mark.parametrize("stem", ("05_kv_cache", "06_gqa", "07_mla"))
def test_lessons_that_compare_book_losses_score_them_with_eval_loss(lessons, stem):
    code = _code(lessons[stem])
    assert ("attnlib.models.train.eval_loss(" in code
            or "attnlib.models.train.eval_set()" in code), stem


@pytest.mark.parametrize(("stem", "controls"), [
    ("06_gqa", ["vg.trained_table()", "vt.scratch_table()", "steps=400"]),
    ("07_mla", ["vm.trained_table()", "vt.budget_column("]),
])
def test_the_dial_lessons_show_their_controls(lessons, stem, controls):
    """Lessons 06 and 07 print the control and the seed spread (06 the from-scratch models)."""
    code = _code(lessons[stem])
    for needle in controls:
        assert needle in code, (stem, needle)
    outputs = "\n".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in lessons[stem].cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "control" in outputs and "seed" in outputs, stem
