"""Tests for lesson 04's answer checks: right answers computed by hand (sums of visible
keys, products of matrix shapes, a root mean square), and the hint each kind of wrong
answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 04.1: new token i (0-based) of 4 sits at position 6 + i and sees keys 0 .. 6 + i
DECODE_PAIRS = sum(6 + i + 1 for i in range(4))
# 04.2: Llama 3 8B, d = 4096, d_ff = 14,336; W_gate and W_up (d x d_ff), W_down (d_ff x d)
SWIGLU = 4096 * 14336 * 3
# 04.3: x = (1, 3, 5, 7), mean square (1 + 9 + 25 + 49) / 4 = 21
X = [1.0, 3.0, 5.0, 7.0]
RMS_ROW = [v / math.sqrt(21 + 1e-6) for v in X]


def test_hand_values():
    assert DECODE_PAIRS == 34
    assert SWIGLU == 176_160_768
    assert [round(v, 4) for v in RMS_ROW] == [0.2182, 0.6547, 1.0911, 1.5275]


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("04.1", DECODE_PAIRS),
        ("04.1", np.int64(DECODE_PAIRS)),
        ("04.1", torch.tensor(DECODE_PAIRS)),
        ("04.2", SWIGLU),
        ("04.2", float(SWIGLU)),
        ("04.2", torch.tensor(SWIGLU)),
        ("04.3", RMS_ROW),
        ("04.3", torch.tensor(RMS_ROW, dtype=torch.float32)),
        ("04.3", [round(v, 4) for v in RMS_ROW]),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


def _layer_norm(x: list[float], eps: float = 1e-5) -> list[float]:
    mu = sum(x) / len(x)
    var = sum((v - mu) ** 2 for v in x) / len(x)
    return [(v - mu) / math.sqrt(var + eps) for v in x]


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("04.1", 1 + 2 + 3 + 4, "top-left"),
        ("04.1", 10 * 11 // 2, "all ten tokens as queries"),
        ("04.1", 4 * 10, "with no mask"),
        ("04.1", 33, "not quite"),
        ("04.1", 34.0, "whole number"),
        ("04.1", "34", "got a str"),
        ("04.2", 2 * 4096 * 14336, "three, W_gate, W_up and W_down"),
        ("04.2", SWIGLU * 32, "all the layers"),
        ("04.2", 8 * 4096 * 4096, "plain MLP"),
        ("04.2", -SWIGLU, "the sign is wrong"),
        ("04.3", _layer_norm(X), "that is LayerNorm"),
        ("04.3", [v / math.sqrt(84) for v in X], "Euclidean norm"),
        ("04.3", [v / float(np.std(X, ddof=1)) for v in X], "standard deviation"),
        ("04.3", RMS_ROW[:3], "of shape (4,); got shape (3,)"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_04_labels_are_registered():
    assert {"04.1", "04.2", "04.3"} <= set(exercises.labels())
