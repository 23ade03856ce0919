"""Wrong answers written apart from the exercises' catalogues, one module per lesson.

Each ``tests/planted/lesson_NN.py`` lists ``PLANTED``: answers a learner could write, each
wrong in one way. ``tests/test_exercises_planted.py`` checks every one and fails when a
checker calls it correct, or when the checker's message does not name the mistake where
``names`` says it should. A planted answer is written from the lesson's text and the
mistake's description alone, not by copying a catalogued mistake, so that it tests whether
the checks vary what the mistake gets wrong.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Planted:
    """One planted wrong answer.

    Attributes:
        label: the exercise, ``"NN.k"``.
        what: the mistake, in a few words ("running max starts at 0").
        answer: the wrong answer (a function, a class, a number, a tensor, ...), or a
            function of no argument that builds it (``build=True``), for answers such as
            Triton kernels that must be defined where they are used.
        names: a regular expression the checker's message must match (searched,
            case-insensitive), because the checker should name this mistake; ``None`` when
            it cannot tell which mistake it is, and the message must then say what differs
            and where without naming a mistake the answer did not make (``avoid``).
        avoid: a regular expression the message must NOT match (a mistake that was not made).
        build: ``answer`` is a factory to call first.
    """

    label: str
    what: str
    answer: object
    names: str | None = None
    avoid: str | None = None
    build: bool = False


def all_planted() -> list[Planted]:
    """Every ``PLANTED`` entry of every ``lesson_NN`` module of this package, in order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("lesson_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.extend(module.PLANTED)
    return found
