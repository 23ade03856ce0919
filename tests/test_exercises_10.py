"""Tests for lesson 10's answer checks: right answers computed by hand, and the hint each
kind of wrong answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 10.1: y = 1.5, Var = 0.5 * 2.25 + 0.25 * 0.25 + 0.25 * 6.25 = 2.75, over m = 4
VAR = 0.5 * 1.5**2 + 0.25 * 0.5**2 + 0.25 * 2.5**2
# 10.2: |A_:j| |V_j| = sqrt(20) * 1, 1 * 2, 1 * 2
C = [math.sqrt(20), 2.0, 2.0]
RHO = [c / sum(C) for c in C]
# 10.3: m / (N sum_j P_j^2) with P = (0.9, 0.1/99 x 99), m = 50 uniform draws, N = 100 keys
SUM_SQ = 0.81 + 99 * (0.1 / 99) ** 2
ESS = 50 / (100 * SUM_SQ)


def test_hand_values():
    assert VAR == 2.75
    assert round(RHO[0], 4) == 0.5279
    assert round(ESS, 4) == 0.6172


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("10.1", VAR / 4),
        ("10.1", 0.6875),
        ("10.1", np.float64(VAR / 4)),
        ("10.2", RHO),
        ("10.2", torch.tensor(RHO)),
        ("10.2", [0.528, 0.236, 0.236]),
        ("10.3", ESS),
        ("10.3", 0.6172),
        ("10.3", torch.tensor([ESS])),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("10.1", VAR, "variance of one sample"),
        ("10.1", math.sqrt(VAR / 4), "standard deviation"),
        ("10.1", (0.25 * 4 + 0.25 * 16) / 4, "E[v^2]"),
        ("10.1", "0.69", "got a str"),
        ("10.2", [c / (math.sqrt(20) + 2) for c in (math.sqrt(20), 1, 1)], "norms of A only"),
        ("10.2", [c * c / 28 for c in C], "squared products"),
        ("10.2", [1 / 3] * 3, "uniform probabilities"),
        ("10.2", [0.5, 0.5], "shape"),
        ("10.3", ESS / 50, "ESS per draw"),
        ("10.3", 100 * SUM_SQ, "1 + chi^2"),
        ("10.3", 50 * SUM_SQ, "multiplies m"),
        ("10.3", 50 / SUM_SQ, "100 times too large"),
        ("10.3", 1 / SUM_SQ, "effective number of keys"),
        ("10.3", 100 / (50 * SUM_SQ), "swaps m and N"),
        ("10.3", -ESS, "sign"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_10_labels_are_registered():
    assert {"10.1", "10.2", "10.3"} <= set(exercises.labels())
