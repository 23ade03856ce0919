"""Tests for lesson 12's answer checks: the cache count by hand, and the hint each mistake gets
(the implementation exercise 12.1 is covered by tests/test_exercises_implement.py)."""

from __future__ import annotations

import pytest

from attnlib.exercises import check

# 12.2: 2 N_L G d_head numbers per token, 4 bytes each, 40 tokens: 2 * 4 * 1 * 16 * 4 * 40
BYTES = 20480


@pytest.mark.parametrize("answer", [BYTES, 20480.0])
def test_right_answers(answer):
    assert check("12.2", answer).status == "correct"


@pytest.mark.parametrize(("answer", "hint"), [
    (81920, "full multi-head cache"), (10240, "factor 2"), (5120, "4 layers"),
    (40960, "not 8"), (123, "2 N_L G d_head"),
])
def test_each_mistake_gets_its_hint(answer, hint):
    result = check("12.2", answer)
    assert result.status == "incorrect"
    assert hint in result.message
