"""Tests for lesson 02's answer checks: right answers computed by hand (plain-Python
exponentials, the closed form p_j (v_j - y) of the gradient, IEEE limits of the half
formats), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

VALUES = (10.0, 20.0, 30.0)


def _softmax(logits: list[float]) -> list[float]:
    e = [math.exp(s) for s in logits]
    return [x / sum(e) for x in e]


def _worked(scale_q: float, scale: float = 1 / math.sqrt(2)) -> tuple[list[float], float]:
    """Weights and output for q = (scale_q, 0) against the keys (1, 0), (0, 1), (-1, 0)."""
    p = _softmax([scale_q * scale, 0.0, -scale_q * scale])
    return p, sum(pj * vj for pj, vj in zip(p, VALUES, strict=True))


def _gradient() -> list[float]:
    p, y = _worked(1.0)
    return [pj * (vj - y) for pj, vj in zip(p, VALUES, strict=True)]


# IEEE 754 half precision: largest finite (2 - 2^-10) 2^15; bfloat16: (2 - 2^-7) 2^127
FLOAT16_MAX = (2 - 2**-10) * 2**15
BFLOAT16_MAX = (2 - 2**-7) * 2**127
THRESHOLDS = [math.log(FLOAT16_MAX), math.log(BFLOAT16_MAX)]


def test_hand_values_are_the_lessons():
    p, y = _worked(1.0)
    assert [round(w, 3) for w in p] == [0.576, 0.284, 0.140]
    assert round(y, 1) == 15.6
    assert FLOAT16_MAX == 65504.0


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("02.1", _worked(2.0)[1]),
        ("02.1", torch.tensor([[_worked(2.0)[1]]]).reshape(())),
        ("02.1", round(_worked(2.0)[1], 3)),
        ("02.2", _gradient()),
        ("02.2", torch.tensor(_gradient(), dtype=torch.float32)),
        ("02.2", np.array(_gradient())),
        ("02.4", THRESHOLDS),
        ("02.4", [round(t, 2) for t in THRESHOLDS]),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


def test_the_gradient_sums_to_zero():
    # shifting every logit by the same amount changes nothing, so the gradient sums to 0
    assert sum(_gradient()) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("02.1", _worked(1.0)[1], "that is the output for q = (1, 0)"),
        ("02.1", _worked(2.0, scale=1.0)[1], "the factor 1/sqrt(d_QK)"),
        ("02.1", _worked(4.0)[1], "not twice"),
        ("02.1", _worked(2.0)[0], "of shape (); got shape (3,)"),
        ("02.1", "12.8", "got a str"),
        ("02.1", -_worked(2.0)[1], "the sign is wrong"),
        ("02.2", [p * v for p, v in zip(_worked(1.0)[0], VALUES, strict=True)],
         "diag(p) - p p^T"),
        ("02.2", [g / math.sqrt(2) for g in _gradient()], "with respect to the dot products"),
        ("02.2", [v - _worked(1.0)[1] for v in VALUES], "multiply by p_j"),
        ("02.2", _gradient()[:2], "of shape (3,); got shape (2,)"),
        ("02.2", [-g for g in _gradient()], "the sign is wrong"),
        ("02.4", [FLOAT16_MAX, BFLOAT16_MAX], "take the natural logarithm"),
        ("02.4", [math.log10(FLOAT16_MAX), math.log10(BFLOAT16_MAX)], "not log10"),
        ("02.4", THRESHOLDS[::-1], "float16 first, then bfloat16"),
        ("02.4", [math.log(torch.finfo(torch.float32).max)] * 2, "fewer exponent bits"),
        ("02.4", THRESHOLDS[0], "of shape (2,); got shape ()"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_02_labels_are_registered():
    assert {"02.1", "02.2", "02.4"} <= set(exercises.labels())
    assert all(re.fullmatch(r"\d\d\.\d+", label) for label in exercises.labels())
