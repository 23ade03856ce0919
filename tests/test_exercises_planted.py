"""No wrong answer passes: every planted answer (tests/planted) is refused by its checker.

A planted answer is a mistake written apart from the checker's own catalogue; the checker
must call it incorrect, and where ``names`` is set its message must name the mistake.
Messages never name a mistake the answer did not make (``avoid``), and where ``names`` is
not set (the checker cannot tell which mistake it is) the message gives none of the
exercise's catalogued hints.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from planted import Planted, all_planted

from attnlib.exercises import catalogue, check, labels

PLANTED = all_planted()


def _id(p: Planted) -> str:
    return f"{p.label}-{p.what}"


def test_planted_answers_name_existing_exercises():
    known = set(labels())
    assert PLANTED, "no planted answers found"
    assert not [p.label for p in PLANTED if p.label not in known]


@pytest.mark.parametrize("planted", PLANTED, ids=[_id(p) for p in PLANTED])
def test_planted_answer_is_refused(planted: Planted):
    answer = planted.answer() if planted.build else planted.answer
    with contextlib.redirect_stdout(io.StringIO()):
        result = check(planted.label, answer)
    assert result.status == "incorrect", f"{planted.what}: called {result.status}"
    if planted.names is not None:
        assert re.search(planted.names, result.message, re.IGNORECASE), (
            f"{planted.what}: the message does not name it: {result.message}")
    if planted.avoid is not None:
        assert not re.search(planted.avoid, result.message, re.IGNORECASE), (
            f"{planted.what}: the message names a mistake not made: {result.message}")
    if planted.names is None:
        named = [hint for _, hint in catalogue(planted.label) if hint in result.message]
        assert not named, f"{planted.what}: the message names a catalogued mistake: {named}"
