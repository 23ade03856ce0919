"""Tests for attnlib.exercises itself: the placeholder, the errors, what a notebook shows,
and that checking an answer loads no figure library. Each lesson's checks are tested in
tests/test_exercises_NN.py, beside its module attnlib/exercises/lesson_NN.py."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
import torch

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
    import inspect

    for label in exercises.labels():
        module = importlib.import_module(f"attnlib.exercises.lesson_{label[:2]}")
        source = inspect.getsource(module)
        kernels = label[:2] == "13" and "lesson_13_kernels" in source  # 13's kernel exercises
        assert f'("{label}"' in source or kernels, label
    with pytest.raises(ValueError, match="already has a checker"):
        exercises.checker("00.2")(lambda answer: None)
    with pytest.raises(ValueError, match=r"look like 'NN\.k'"):
        exercises.checker("0.2")


@pytest.mark.slow
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


def _here(label: str, answer: object) -> bool:
    """Whether this file runs a catalogued wrong answer: all of lessons 00-12, and the
    numbers of lessons 13 and 14. Their wrong functions and kernels, slower to run, are run
    with the same assertion by tests/test_exercises_implement.py and, for the Triton
    kernels, tests/test_exercises_13.py."""
    return int(label[:2]) <= 12 or isinstance(answer, (int, float, torch.Tensor))


CATALOGUED = [(label, k) for label in exercises.labels()
              for k, (answer, _) in enumerate(exercises.catalogue(label))
              if _here(label, answer)]


def test_the_catalogue_is_public_and_checks_its_label():
    assert exercises.catalogue("00.2") and all(isinstance(hint, str)
                                               for _, hint in exercises.catalogue("00.2"))
    with pytest.raises(ValueError, match="label must name a checked exercise"):
        exercises.catalogue("00.9")


@pytest.mark.parametrize(("label", "k"), CATALOGUED)
def test_every_catalogued_wrong_answer_is_refused_with_its_own_hint(label, k, capsys):
    """Each known wrong answer of each exercise, given as the answer, is called incorrect,
    and its message is the hint catalogued for it (not one shadowed by another entry that
    gives the same answer)."""
    answer, hint = exercises.catalogue(label)[k]
    result = exercises.check(label, answer)
    assert result.status == "incorrect", f"{label}: a catalogued wrong answer is called correct"
    assert result.message.split("\n")[0] == f"{label}: {hint}"
    capsys.readouterr()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([3.0, 1.0, 2.0], "the values are right as a set, but entries 0, 1 and 2 hold values "
                          "that belong elsewhere: the order differs from the one the question "
                          "asks for, or these were computed for another input."),
        ([2.0, 1.0, 3.0], "the values are right as a set, but entries 0 and 1 hold values that "
                          "belong elsewhere: the order differs from the one the question asks "
                          "for, or these were computed for another input."),
        ([-1.0, -2.0, -3.0], "the sign is wrong in every entry."),
        ([1.0, -2.0, 3.0], "the sign is wrong in entry 1."),
        ([1.0, -5.0, 3.0], "entry 1 is off; the others are right."),
        ([-1.0, 5.0, 3.0], "entries 0 and 1 are off; the others are right."),
        ([1.0, 2.5, 3.5], "entries 1 and 2 are off; the others are right."),
        ([100.0, 200.0, 300.0], "off by a factor of 10^2: check the units and powers of ten "
                                "(a percentage is 100 times a fraction)."),
        ([1e3, 2e3, 3e3], "off by a factor of 10^3: check the units and powers of ten."),
        ([2.0, 4.0, 6.0], "the magnitude is off: your answer is about 2 times too large."),
        ([1.05, 2.1, 3.03], "close, but not within the tolerance: off by up to 5% where the "
                            "check allows 0.1%."),
        ([2.0, 3.0, 1.0e-3], "every entry is off, and not by one common factor."),
        # ratios 1.2 and 1.3: near one another, but no common factor (no "about 1 times")
        ([1.2, 2.6, 3.6], "every entry is off, and not by one common factor."),
        ([1.15, 2.3, 3.33], "every entry is off, and not by one common factor."),
        ([1.25, 2.5, 3.75], "the magnitude is off: your answer is about 1.2 times too large."),
    ],
)
def test_compare_says_what_differs_without_guessing_a_mistake(answer, message):
    """A wrong answer that is no known mistake is described (order, signs, which entries,
    one common factor, how close), never given a mistake it may not have made."""
    expected = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert exercises.compare(answer, expected, rel=1e-3, what="three numbers") == message


def test_compare_on_one_number():
    one = exercises.scalar(2.0)
    assert exercises.compare(-2.0, one, rel=1e-3, what="a number") == "the sign is wrong."
    assert exercises.compare(-7.0, one, rel=1e-3, what="a number") == (
        "the sign is wrong, and the size is off too.")
    assert exercises.compare(2.01, one, rel=1e-3, what="a number").startswith("close, but")
    assert exercises.compare(2.0 * 1.08, one, rel=1e-3, what="a number").startswith("close, but")
    assert exercises.compare(0.0, exercises.scalar(0.0), rel=1e-3, what="a number") is None
    assert exercises.compare(1.0, exercises.scalar(0.0), rel=1e-3, what="a number") == (
        "that is not the expected value.")


def test_compare_tells_a_whole_number_by_how_much_it_misses():
    """A count that misses by a few per cent is not 'close' (which suggests rounding): it is
    told by how much, and that a count must match exactly."""
    count = exercises.scalar(9_216_000)
    assert exercises.compare(9_179_136, count, rel=1e-6, what="a count") == (
        "that whole number is 0.4% smaller than the expected one; a count is right only when "
        "it matches exactly.")
    assert exercises.compare(9_252_000.0, count, rel=1e-6, what="a count").startswith(
        "that whole number is 0.39% larger")
    assert exercises.compare(9_216_000.5, count, rel=1e-9, what="a count").startswith(
        "close, but")  # not a whole number: possibly a rounding
    pair = torch.tensor([100.0, 200.0], dtype=torch.float64)
    assert exercises.compare([101, 202], pair, rel=1e-6, what="two counts") == (
        "whole numbers off by up to 1%; a count is right only when it matches exactly.")


def test_compare_names_a_mistake_made_exactly_even_within_the_tolerance():
    """A catalogued mistake that moves the answer less than the tolerance is still named when
    the answer equals it to nine digits; an answer merely near it is accepted."""
    expected = torch.tensor([1.0, 2.0], dtype=torch.float64)
    slip = torch.tensor([1.002, 2.0], dtype=torch.float64)
    mistakes = ((slip, "that is the slip."),)
    assert exercises.compare([1.002, 2.0], expected, rel=0.01, what="two numbers",
                             mistakes=mistakes) == "that is the slip."
    assert exercises.compare([1.001, 2.0], expected, rel=0.01, what="two numbers",
                             mistakes=mistakes) is None
    assert exercises.compare([1.0, 2.0], expected, rel=0.01, what="two numbers",
                             mistakes=mistakes) is None
