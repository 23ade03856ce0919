"""Answer checks for the lessons' exercises: ``check("00.2", answer)``.

Each checked exercise has a label ``"NN.k"`` (lesson ``NN``, exercise ``k``) and a checker
registered by the module of its lesson, ``attnlib.exercises.lesson_NN``. A checker computes
the expected answer with attnlib when it runs (no answer is stored as a literal) and
compares the reader's answer with it. The verdict is printed and returned:

- the placeholder ``...`` gives "not answered yet", so a lesson runs top to bottom as
  committed;
- a right answer gives "correct";
- anything else gives a hint that says what is off: the type, the shape, the sign, the
  magnitude (a factor of 100 from a percentage, a factor of 2 from counting a matrix
  twice), or a mistake the exercise invites.

An *implementation exercise* is answered with the reader's own function (or class):
``check("02.5", attend)`` runs it on a fixed set of small seeded cases and compares it
with attnlib's reference (:mod:`attnlib.exercises.implement`). A stub that raises
``NotImplementedError`` gives "not implemented yet"; a wrong function gets the name of the
misconception it makes, when it matches one of the exercise's catalogued mistakes, or else
the first case it fails, with the shapes and the largest difference; an error in the
reader's code is shown with the reader's own lines.

Adding a checked exercise to lesson ``NN`` means adding one entry to ``lesson_NN.py``, in
one of four forms (the fourth, ``@implementation``, is described in
:mod:`attnlib.exercises.implement`):

- ``@numbers("NN.k", rel=..., what=...)`` on a function that returns the expected tensor
  and the mistakes the exercise invites, ``(expected, ((wrong, hint), ...))``; the answer
  is compared by :func:`compare`;
- ``@whole_number("NN.k", what=...)`` on a function that returns the expected integer, the
  hints for known wrong integers and the hint for any other, ``(expected, ((wrong, hint),
  ...), otherwise)``;
- ``@checker("NN.k", mistakes=...)`` on a function from the answer to a hint (``None`` when
  right), for anything else; ``mistakes`` (optional) returns the wrong answers it knows,
  ``((wrong, hint), ...)``.

:func:`catalogue` lists every exercise's known wrong answers with the hint each gets, so
that a test can run them all as answers.

The lesson modules import only attnlib's computing modules (never :mod:`attnlib.viz`), so
checking an answer loads neither plotly, ipywidgets nor pandas.

Example:
    >>> result = check("00.4", ...)
    00.4: not answered yet. Replace ... with your answer and run the cell again.
    >>> result.status
    'unanswered'

Lesson: every lesson's exercises (first used in 00_tokens_and_embeddings).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CheckResult", "catalogue", "check", "labels"]

_LABEL = re.compile(r"\d\d\.\d+")

Checker = Callable[[object], "str | None"]
_CHECKERS: dict[str, Checker] = {}
Catalogue = Callable[[], "list[tuple[object, str]]"]
_CATALOGUES: dict[str, Catalogue] = {}


@dataclass(frozen=True)
class CheckResult:
    """The verdict of :func:`check`; true exactly when the answer is correct.

    Attributes:
        label: the exercise, ``"NN.k"``.
        status: ``"unanswered"``, ``"correct"`` or ``"incorrect"``.
        message: the line :func:`check` printed.
    """

    label: str
    status: str
    message: str

    def __bool__(self) -> bool:
        return self.status == "correct"

    def _ipython_display_(self) -> None:
        """Show nothing: :func:`check` has printed the message already."""


def check(label: str, answer: object) -> CheckResult:
    """Check the answer to exercise ``label``; print and return the verdict.

    Args:
        label: the exercise, ``"NN.k"`` (for example ``"00.2"``).
        answer: the reader's answer, or ``...`` while there is none.

    Returns:
        CheckResult: ``status`` is ``"unanswered"``, ``"correct"`` or ``"incorrect"``;
        ``message`` is the printed line (a hint when incorrect).

    Raises:
        TypeError: ``label`` is not a str.
        ValueError: no exercise has this label.
    """
    if not isinstance(label, str):
        raise TypeError(f"label must be a str such as '00.2'; got {type(label).__name__}")
    if label not in _CHECKERS:
        raise ValueError(f"label must name a checked exercise, one of {labels()}; got {label!r}")
    if answer is ...:
        status, text = "unanswered", "not answered yet. Replace ... with your answer and run " \
                                     "the cell again."
    else:
        try:
            hint = _CHECKERS[label](answer)
        except NotImplementedYetError:
            status, text = "unanswered", "not implemented yet. Replace the line " \
                "`raise NotImplementedError` with your code and run the cell again."
        else:
            status, text = ("correct", "correct.") if hint is None else ("incorrect", hint)
    result = CheckResult(label, status, f"{label}: {text}")
    print(result.message)
    return result


def labels() -> list[str]:
    """The labels of every checked exercise, sorted."""
    return sorted(_CHECKERS)


def catalogue(label: str) -> list[tuple[object, str]]:
    """The known wrong answers of exercise ``label``, each with the hint its check gives.

    Each entry is ``(answer, hint)``: ``check(label, answer)`` refuses ``answer`` and its
    message starts with ``hint`` (an implementation exercise's answer is a wrong function
    or class). An exercise with no known wrong answers gives an empty list.

    Raises:
        ValueError: no exercise has this label.
    """
    if label not in _CHECKERS:
        raise ValueError(f"label must name a checked exercise, one of {labels()}; got {label!r}")
    return list(_CATALOGUES[label]()) if label in _CATALOGUES else []


# ---------------------------------------------------------------------------------------
# the registry: the three forms of an exercise


def _register(label: str, fn: Checker, mistakes: Catalogue | None = None) -> None:
    if not _LABEL.fullmatch(label):
        raise ValueError(f"label must look like 'NN.k'; got {label!r}")
    if label in _CHECKERS:
        raise ValueError(f"exercise {label!r} already has a checker")
    _CHECKERS[label] = fn
    if mistakes is not None:
        _CATALOGUES[label] = mistakes


def checker(label: str, *, mistakes: Catalogue | None = None) -> Callable[[Checker], Checker]:
    """Register ``fn(answer) -> hint or None`` as the checker of exercise ``label``.

    ``mistakes``, when given, is a function of no argument that returns the wrong answers
    the checker knows, ``((wrong, hint), ...)`` (read by :func:`catalogue`).
    """
    if not _LABEL.fullmatch(label):
        raise ValueError(f"label must look like 'NN.k'; got {label!r}")

    def add(fn: Checker) -> Checker:
        _register(label, fn, mistakes)
        return fn

    return add


Mistakes = tuple[tuple[torch.Tensor, str], ...]


def numbers(
    label: str, *, rel: float, what: str
) -> Callable[[Callable[[], tuple[torch.Tensor, Mistakes]]], Callable]:
    """Register an exercise answered with numbers, compared by :func:`compare`.

    The decorated function takes no argument and returns ``(expected, mistakes)``: the
    expected answer as a float64 tensor and the known wrong answers with their hints.
    """

    def add(spec: Callable[[], tuple[torch.Tensor, Mistakes]]) -> Callable:
        def check_numbers(answer: object) -> str | None:
            expected, mistakes = spec()
            return compare(answer, expected, rel=rel, what=what, mistakes=mistakes)

        checker(label, mistakes=lambda: list(spec()[1]))(check_numbers)
        return spec

    return add


def whole_number(
    label: str, *, what: str, floats: str | None = None
) -> Callable[[Callable[[], tuple[int, object, str]]], Callable]:
    """Register an exercise answered with one integer.

    The decorated function takes no argument and returns ``(expected, hints, otherwise)``:
    the expected integer, a hint for each known wrong integer (pairs ``((wrong, hint),
    ...)``, or a dict; of two pairs with the same wrong integer the later wins, and
    :func:`catalogue` still lists both, so that a test can see the first is never given)
    and the hint for any other integer. A float answer
    gets "expected ``what``", unless ``floats`` is ``"equal"`` (a float equal to the
    expected integer is right) or ``"whole"`` (a float with no fractional part is read as
    that integer).
    """

    def pairs(hints: object) -> list[tuple[int, str]]:
        return list(hints.items()) if isinstance(hints, dict) else list(hints)

    def add(spec: Callable[[], tuple[int, object, str]]) -> Callable:
        def check_whole_number(answer: object) -> str | None:
            expected, hints, otherwise = spec()
            hints = dict(pairs(hints))
            got = integer(answer)
            if got is None and isinstance(answer, float):
                if floats == "equal" and answer == expected:
                    return None
                if floats == "whole" and answer.is_integer():
                    got = int(answer)
            if got is None:
                return f"expected {what}; got a {type(answer).__name__}."
            return None if got == expected else hints.get(got, otherwise)

        checker(label, mistakes=lambda: pairs(spec()[1]))(check_whole_number)
        return spec

    return add


# ---------------------------------------------------------------------------------------
# comparison helpers: each returns a hint, or None when the answer is right


def as_tensor(answer: object) -> torch.Tensor | None:
    """``answer`` as a float64 tensor, or ``None`` when it is not numbers."""
    if isinstance(answer, (bool, np.bool_, str, bytes)) or answer is None:
        return None
    try:
        if isinstance(answer, torch.Tensor):
            out = answer.detach().to("cpu")
        else:
            out = torch.as_tensor(np.asarray(answer, dtype=np.float64))
    except (TypeError, ValueError, RuntimeError):
        return None
    if out.dtype == torch.bool or out.is_complex():
        return None
    return out.to(torch.float64)


def compare(
    answer: object,
    expected: torch.Tensor,
    *,
    rel: float,
    what: str,
    mistakes: Mistakes = (),
) -> str | None:
    """Compare numbers: type, then shape, then known mistakes, order, sign and magnitude.

    A wrong answer that is none of the known ``mistakes`` gets a description of what
    differs, not a guess at the mistake: the right numbers in other places, the entries
    whose sign differs, one common factor (a power of ten or another), how close it is, or
    which entries are off. An answer equal to a known mistake to nine digits gets that
    mistake's hint even when it lies within ``rel`` of the expected answer (a mistake that
    moves the answer less than the tolerance allows for rounding). A whole-number answer
    that misses a whole-number expected value by a few per cent is told by how much, not
    that it is close: a count is right only when it matches.
    """
    got = as_tensor(answer)
    if got is None:
        return f"expected {what}; got a {type(answer).__name__}."
    if got.shape != expected.shape:
        return (f"expected {what}, of shape {tuple(expected.shape)}; got shape "
                f"{tuple(got.shape)}.")
    if not bool(torch.isfinite(got).all()):
        return "your answer contains nan or inf."
    if not torch.allclose(got, expected, rtol=_EXACT, atol=0.0):
        for wrong, hint in mistakes:  # a mistake within the tolerance, made exactly
            if torch.allclose(got, wrong, rtol=_EXACT, atol=0.0):
                return hint
    if torch.allclose(got, expected, rtol=rel, atol=0.0):
        return None
    for wrong, hint in mistakes:
        if torch.allclose(got, wrong, rtol=rel, atol=0.0):
            return hint
    off = ~torch.isclose(got, expected, rtol=rel, atol=0.0)
    if got.numel() > 1 and torch.allclose(got.flatten().sort().values,
                                          expected.flatten().sort().values, rtol=rel, atol=0.0):
        # A permutation of the right numbers: a wrong order, or another input whose answer
        # happens to permute this one (a mirrored query); the check cannot tell which.
        return (f"the values are right as a set, but {_entries(off)} hold values that belong "
                "elsewhere: the order differs from the one the question asks for, or these "
                "were computed for another input.")
    flipped = (got * expected) < 0
    if bool(flipped.any()):
        size_right = torch.isclose(got.abs(), expected.abs(), rtol=max(rel, 0.1), atol=0.0)
        if bool(size_right[flipped].all()) and not bool(off[~flipped].any()):  # signs only
            if got.numel() == 1:
                return "the sign is wrong."
            if bool(flipped.all()):
                return "the sign is wrong in every entry."
            return f"the sign is wrong in {_entries(flipped)}."
        if got.numel() == 1:
            return "the sign is wrong, and the size is off too."
    if got.numel() > 1 and not bool(off.all()):
        verb = "is" if int(off.sum()) == 1 else "are"
        return f"{_entries(off)} {verb} off; the others are right."
    if bool((expected != 0).all()):
        ratios = got / expected
        worst = float((ratios - 1).abs().max())
        if worst <= 0.1:
            whole = bool((expected == expected.round()).all() and (got == got.round()).all())
            if not whole:
                return (f"close, but not within the tolerance: off by up to {100 * worst:.2g}% "
                        f"where the check allows {100 * rel:.2g}%.")
            if got.numel() == 1:  # a count: a miss is a miss, not a rounding
                side = "larger" if float(ratios) > 1 else "smaller"
                return (f"that whole number is {100 * worst:.2g}% {side} than the expected "
                        "one; a count is right only when it matches exactly.")
            return (f"whole numbers off by up to {100 * worst:.2g}%; a count is right only "
                    "when it matches exactly.")
        if bool((ratios > 0).all()):
            ratio = math.exp(float(ratios.log().mean()))  # geometric mean
            agree = float((ratios / ratio - 1).abs().max()) <= _COMMON
            if agree and abs(ratio - 1) > 0.1:  # one common factor, clearly not 1
                power = round(math.log10(ratio))
                if power != 0 and abs(math.log10(ratio) - power) < 0.05:
                    percent = " (a percentage is 100 times a fraction)" if abs(power) == 2 else ""
                    return (f"off by a factor of 10^{power}: check the units and powers of "
                            f"ten{percent}.")
                side = "large" if ratio > 1 else "small"
                return f"the magnitude is off: your answer is about {ratio:.2g} times too {side}."
    if got.numel() > 1:
        return "every entry is off, and not by one common factor."
    return "that is not the expected value."


_EXACT = 1e-9  # an answer this close to a catalogued mistake is that mistake
_COMMON = 0.02  # entries off by factors this close to one another share a common factor


def _entries(where: torch.Tensor) -> str:
    """``"entry 2"``, ``"entries 0 and 2"``, ``"entries (0, 1), (1, 3) and 4 more"``."""
    found = [tuple(int(i) for i in ix) for ix in where.nonzero()]
    names = [str(ix[0]) if len(ix) == 1 else str(ix) for ix in found]
    if len(names) == 1:
        return f"entry {names[0]}"
    shown, more = names[:3], len(names) - 3
    if more > 0:
        return f"entries {', '.join(shown)} and {more} more"
    return f"entries {', '.join(shown[:-1])} and {shown[-1]}"


def scalar(x: float) -> torch.Tensor:
    """A number as a float64 scalar tensor, the form :func:`compare` compares."""
    return torch.tensor(float(x), dtype=torch.float64)


def integer(answer: object) -> int | None:
    """``answer`` as an int when it is one (a Python, NumPy or one-element integer tensor)."""
    if isinstance(answer, (bool, np.bool_)):
        return None
    if isinstance(answer, (int, np.integer)):
        return int(answer)
    if isinstance(answer, torch.Tensor) and answer.numel() == 1 and not answer.is_floating_point():
        return int(answer.item())
    return None


# Each lesson module registers its exercises when it is imported.
from attnlib.exercises import (  # noqa: E402, F401
    lesson_00,
    lesson_01,
    lesson_02,
    lesson_03,
    lesson_04,
    lesson_05,
    lesson_06,
    lesson_07,
    lesson_08,
    lesson_09,
    lesson_10,
    lesson_11,
    lesson_12,
    lesson_13,
    lesson_14,
)
from attnlib.exercises.implement import NotImplementedYetError  # noqa: E402
