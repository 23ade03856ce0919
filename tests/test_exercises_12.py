"""Tests for lesson 12's answer checks: the cache count by hand, and the hint each mistake gets
(the implementation exercise 12.1 is covered by tests/test_exercises_implement.py)."""

from __future__ import annotations

import pytest

from attnlib.exercises import check

# 12.2: 2 N_L G d_head numbers per token, n_b bytes each, 40 tokens. book at G = 1 in
# float32: 2 * 4 * 1 * 16 * 4 * 40; Llama 3 70B in bf16: 2 * 80 * 8 * 128 * 2 * 40
BYTES = 20480
BYTES_70B = 13_107_200


def test_hand_values():
    assert BYTES == 2 * 4 * 1 * 16 * 4 * 40
    assert BYTES_70B == 2 * 80 * 8 * 128 * 2 * 40


@pytest.mark.parametrize("answer", [(BYTES, BYTES_70B), [20480.0, 13107200.0]])
def test_right_answers(answer):
    assert check("12.2", answer).status == "correct"


@pytest.mark.parametrize(("answer", "hint"), [
    ((81920, 2 * 80 * 64 * 128 * 2 * 40), "full multi-head cache"),
    ((10240, BYTES_70B // 2), "factor 2"),
    ((5120, BYTES_70B // 80), "one layer"),
    ((5120, BYTES_70B // 2), "counts numbers, not bytes"),
    ((40960, BYTES_70B), "not 8"),
    ((BYTES, 2 * BYTES_70B), "bf16"),
    ((BYTES, 123), "entry 1 is off"),
    (BYTES, "of shape (2,)"),
])
def test_each_mistake_gets_its_hint(answer, hint):
    result = check("12.2", answer)
    assert result.status == "incorrect"
    assert hint in result.message
