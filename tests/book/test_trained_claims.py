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
    ("07_mla", ["vm.trained_table()", "window_losses", "paired_bootstrap("]),
])
def test_the_dial_lessons_show_their_controls(lessons, stem, controls):
    """Lessons 06 and 07 print the control and the seed noise (06 the from-scratch models)."""
    code = _code(lessons[stem])
    for needle in controls:
        assert needle in code, (stem, needle)
    outputs = "\n".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in lessons[stem].cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "control" in outputs and "seed" in outputs, stem


def _outputs(lesson) -> str:
    return "\n".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in lesson.cells if c.cell_type == "code" for o in c.get("outputs", []))


# Counting a gap in units of one pair of seeds' difference: a noise estimate from n = 2 with
# no interval ("2.4 seed spreads", "within two seed spreads").
SPREAD_COUNT = re.compile(r"\bseed spreads?\b|\b\d+(\.\d+)? spreads\b|\bspreads? of two seeds\b")


@pytest.mark.parametrize("stem", TRAINED)
def test_no_lesson_counts_gaps_in_seed_spreads(lessons, stem):
    lesson = lessons[stem]
    text = "\n".join(c.source for c in lesson.cells) + "\n" + _outputs(lesson)
    found = SPREAD_COUNT.search(text)
    assert not found, f"{stem}: {found[0]!r}: state an interval with its n instead"


@pytest.mark.parametrize(("stem", "methods"), [
    ("06_gqa", ["paired bootstrap over 64 windows", "n = 5 seeds"]),
    ("07_mla", ["paired bootstrap over 64 windows", "seed noise from n = 5 seeds"]),
    ("09_frontier", ["seed noise from n = 5 seeds"]),
    ("11_serving", ["paired bootstrap over 64 windows"]),
])
def test_compared_losses_print_their_interval_and_n(lessons, stem, methods):
    """Each trained comparison prints a 95% interval that says what it is over."""
    outputs = _outputs(lessons[stem])
    assert "95% interval" in outputs, stem
    for method in methods:
        assert method in outputs, (stem, method)
