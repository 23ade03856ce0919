"""Tests for lesson 09's answer checks: right answers computed by hand, and the hint each
kind of wrong answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 09.1: softmax of the logits (0, 2, 4, 1) applied to the values (1, 2, 3, 4)
W = [math.exp(t) for t in (0, 2, 4, 1)]
ONLINE = sum(w * v for w, v in zip(W, (1, 2, 3, 4), strict=True)) / sum(W)
NO_RESCALE = (math.exp(-2) + 2 + 3 + 4 * math.exp(-3)) / (math.exp(-2) + 1 + 1 + math.exp(-3))
# 09.2: 48 layers x 32 heads x (128 x 128 + 128) numbers x 2 bytes
STATE = 48 * 32 * (128 * 128 + 128) * 2
# 09.3: (131,072 x 64 + 2,048 x 256) / (131,072 x 256)
SPARSE = (131072 * 64 + 2048 * 256) / (131072 * 256)


def test_hand_values():
    assert round(ONLINE, 4) == 2.8985
    assert STATE == 50_724_864
    assert SPARSE == 0.265625


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("09.1", ONLINE),
        ("09.1", round(ONLINE, 4)),
        ("09.1", torch.tensor([ONLINE])),
        ("09.2", STATE),
        ("09.2", np.int64(STATE)),
        ("09.2", float(STATE)),
        ("09.3", SPARSE),
        ("09.3", 0.2656),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("09.1", NO_RESCALE, "skips the rescaling"),
        ("09.1", 2.5, "plain mean"),
        ("09.1", -ONLINE, "sign"),
        ("09.1", "2.9", "got a str"),
        ("09.2", 48 * 32 * 128 * 128 * 2, "counts S_t only"),
        ("09.2", 48 * 32 * (128 * 128 + 128), "2 bytes"),
        ("09.2", 32 * (128 * 128 + 128) * 2, "one layer"),
        ("09.2", 12345, "not quite"),
        ("09.3", 2048 / 131072, "top-k keys only"),
        ("09.3", 0.25, "indexer alone"),
        ("09.3", 26.5625, "percentage"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_09_labels_are_registered():
    assert {"09.1", "09.2", "09.3"} <= set(exercises.labels())
