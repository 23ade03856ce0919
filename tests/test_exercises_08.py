"""Tests for lesson 08's answer checks: right answers computed by hand (a sine, a power of
the base, a sum of cache widths), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 08.1: d = 2, q = (1, 0) at m = 7, k = (0, 1) at n = 4; q turned by 3 rad is (cos 3, sin 3)
ANGLE = math.sin(7 - 4)
# 08.2: theta_63 = 500,000^(-126/128) for d_head = 128; wavelength 2 pi / theta_63
WAVELENGTH = 2 * math.pi * 500_000 ** (126 / 128)
# 08.4: DeepSeek-V2, d_L = 512, one rotary key of d_R = 64 for each of H = 128 heads
PER_HEAD = 512 + 128 * 64


def test_hand_values():
    assert round(ANGLE, 4) == 0.1411
    assert round(WAVELENGTH) == 2_559_196
    assert PER_HEAD == 8704


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("08.1", ANGLE),
        ("08.1", round(ANGLE, 4)),
        ("08.1", torch.tensor(ANGLE)),
        ("08.1", torch.tensor([[ANGLE]])),  # q_R @ k_R.T of two rows
        ("08.1", np.array([ANGLE])),
        ("08.2", WAVELENGTH),
        ("08.2", np.float64(WAVELENGTH)),
        ("08.2", 2_559_196),
        ("08.4", PER_HEAD),
        ("08.4", np.int64(PER_HEAD)),
        ("08.4", torch.tensor(PER_HEAD)),
        ("08.4", float(PER_HEAD)),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("08.1", -ANGLE, "sin(n - m)"),
        ("08.1", math.sin(11), "adds the angles"),
        ("08.1", math.cos(3), "that is the cosine"),
        ("08.1", math.sin(math.radians(3)), "radians, not degrees"),
        ("08.1", ANGLE / math.sqrt(2), "without the 1/sqrt(d) scaling"),
        ("08.1", math.sin(7), "turns the query only"),
        ("08.1", -math.sin(4), "turns the key only"),
        ("08.1", torch.tensor([[-ANGLE]]), "sin(n - m)"),
        ("08.1", [ANGLE, ANGLE], "of shape ()"),
        ("08.1", "0.14", "got a str"),
        ("08.2", WAVELENGTH / (2 * math.pi), "positions per radian"),
        ("08.2", 500_000 ** (-126 / 128), "the angle theta_63 itself"),
        ("08.2", 2 * math.pi * 500_000, "exponent 1"),
        ("08.2", 2 * math.pi * 10_000 ** (126 / 128), "base 10,000"),
        ("08.2", 2 * math.pi * 500_000 ** (126 / 4096), "head width 128"),
        ("08.2", -WAVELENGTH, "the sign is wrong"),
        ("08.2", 8 * WAVELENGTH, "Llama 3.1's wavelength, with its llama3 scaling"),
        ("08.4", 576, "the real design"),
        ("08.4", 128 * 64, "rotary keys alone"),
        ("08.4", 32_768, "full multi-head cache"),
        ("08.4", 512 + 2 * 128 * 64, "queries are never cached"),
        ("08.4", 60 * PER_HEAD, "all 60 layers"),
        ("08.4", 8000, "not quite"),
        ("08.4", 8704.5, "whole number"),
        ("08.4", "8704", "got a str"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_08_labels_are_registered():
    assert {"08.1", "08.2", "08.4"} <= set(exercises.labels())
    assert "08.3" not in exercises.labels()  # the proof exercise has no numeric answer
