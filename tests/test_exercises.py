"""Tests for attnlib.exercises itself: the placeholder, the errors, what a notebook shows,
and that checking an answer loads no figure library. Each lesson's checks are tested in
tests/test_exercises_NN.py, beside its module attnlib/exercises/lesson_NN.py."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from attnlib import exercises


@pytest.mark.parametrize("label", exercises.labels())
def test_placeholder_is_not_answered_yet(label, capsys):
    """Every checked exercise of every lesson accepts the placeholder ``...``."""
    result = exercises.check(label, ...)
    assert result.status == "unanswered" and not result
    assert capsys.readouterr().out == f"{label}: not answered yet. Replace ... with your " \
                                      "answer and run the cell again.\n"


def test_unknown_label_is_a_clear_error():
    with pytest.raises(ValueError, match=re.escape("label must name a checked exercise, one of "
                                                   "['00.2', '00.4', '00.5'") + r".*; got '00\.9'"):
        exercises.check("00.9", 1)
    with pytest.raises(TypeError, match="label must be a str"):
        exercises.check(2, 1)


def test_result_shows_nothing_more_in_a_notebook():
    result = exercises.check("00.5", ...)
    assert result._ipython_display_() is None  # the printed line is the whole output
    assert [x for x in exercises.labels() if x.startswith("00.")] == ["00.2", "00.4", "00.5"]


def test_each_lesson_module_registers_the_checks_of_its_lesson():
    import importlib

    for label in exercises.labels():
        module = importlib.import_module(f"attnlib.exercises.lesson_{label[:2]}")
        checker = exercises._CHECKERS[label]
        assert checker.__module__ in (module.__name__, exercises.__name__), label
    with pytest.raises(ValueError, match="already has a checker"):
        exercises.checker("00.2")(lambda answer: None)
    with pytest.raises(ValueError, match=r"look like 'NN\.k'"):
        exercises.checker("0.2")


def test_checking_answers_loads_no_figure_library():
    """``import attnlib.exercises; check(...)`` needs neither plotly, ipywidgets nor pandas:
    every check runs, with a wrong answer so that each computes its expected value."""
    code = textwrap.dedent("""
        import sys
        import attnlib.exercises
        for label in attnlib.exercises.labels():
            attnlib.exercises.check(label, 0)
        loaded = sorted(m for m in ("plotly", "ipywidgets", "pandas") if m in sys.modules)
        print("loaded:", loaded)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.splitlines()[-1] == "loaded: []", done.stdout
