"""Tests for lesson 01's answer checks: the placeholder, right answers computed by hand or
by plain loops (never by attnlib), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

KEYS = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 1.0]]
VALUES = [[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [1.0, 4.0], [3.0, 1.0]]

RELU_WEIGHTS = [1 / 3, 1 / 6, 0.0, 0.0, 1 / 2]  # relu(<(2, 1), k_j>) = 2, 1, 0, 0, 3; Z = 6
CHAT_COST = 12 * 3000 * (128 + 128)  # N_Q N_KV (d_QK + d_V)
# q = k_0: <k_0, k_j> = 1, 0, -1, 0, 1, so keys 0 and 4 tie and share the weight as tau -> 0
TIE_LIMIT = [0.5, 0.0, 0.0, 0.0, 0.5]


def _exp_lookup(q, values):
    """Output of the exponential kernel with scale 1/sqrt(2), by loops."""
    a = [math.exp((q[0] * k[0] + q[1] * k[1]) / math.sqrt(2)) for k in KEYS]
    z = sum(a)
    return [sum(a[j] * values[j][c] for j in range(5)) / z for c in range(2)], [x / z for x in a]


EDITED = [row[:] for row in VALUES]
EDITED[2] = [4.0, 9.0]
Y_AFTER, _ = _exp_lookup((1.0, 2.0), EDITED)
Y_BEFORE, W_BEFORE = _exp_lookup((1.0, 2.0), VALUES)


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("01.1", RELU_WEIGHTS),
        ("01.1", [0.333, 0.167, 0, 0, 0.5]),  # rounded to 3 decimals: within 1%
        ("01.1", torch.tensor(RELU_WEIGHTS)),
        ("01.3", CHAT_COST),
        ("01.3", np.int64(CHAT_COST)),
        ("01.3", 9.216e6),
        ("01.4", Y_AFTER),
        ("01.4", torch.tensor(Y_AFTER, dtype=torch.float32)),
        ("01.5", TIE_LIMIT),
        ("01.5", (0.5, 0, 0, 0, 0.5)),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


def test_the_edit_answer_is_the_linear_update():
    # y' = y + P[0, 2] (v_2' - v_2): the closed form the exercise asks for
    predicted = [Y_BEFORE[0], Y_BEFORE[1] + W_BEFORE[2] * 6.0]
    assert predicted == pytest.approx(Y_AFTER)
    assert exercises.check("01.4", predicted)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("01.1", [2, 1, 0, 0, 3], "divide each by their sum"),
        ("01.1", [0.2, 0.1, 0.0, 0.0, 0.7][:4], "of shape (5,)"),
        ("01.1", "a third", "expected five weights"),
        ("01.1", [2 / 3, 1 / 3, -2 / 3, -1 / 3, 1.0], "a weight is negative"),
        ("01.3", 2 * CHAT_COST, "count each multiply-add once"),
        ("01.3", CHAT_COST // 2, "count both products"),
        ("01.3", 12 * 3000 * (64 + 64), "count both products"),  # both at width 64: half too
        ("01.3", 3000 * 3000 * 256, "only the question's N_Q tokens are queries"),
        ("01.3", CHAT_COST * 1000, "factor of 10^3"),
        ("01.4", Y_BEFORE, "output before the edit"),
        ("01.4", [Y_BEFORE[0], Y_BEFORE[1] + 6.0], "weighted"),
        ("01.4", [4.0, 9.0], "the new value itself"),
        ("01.4", [1.0, 2.0, 3.0], "of shape (2,)"),
        ("01.5", [1.0, 0.0, 0.0, 0.0, 0.0], "key 4 ties with key 0"),
        ("01.5", _exp_lookup(KEYS[0], VALUES)[1], "default scale"),
        ("01.5", [0.5, 0.5], "of shape (5,)"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_softmax_weights_are_named_in_01_1(capsys):
    weights = [math.exp(q) for q in (2.0, 1.0, -2.0, -1.0, 3.0)]  # scale 1
    weights = [w / sum(weights) for w in weights]
    assert not exercises.check("01.1", weights)
    assert "exponential kernel" in capsys.readouterr().out


def test_lesson_01_labels_are_registered():
    assert {"01.1", "01.3", "01.4", "01.5"} <= set(exercises.labels())
