"""Tests for lesson 06's answer checks: right answers computed by hand (products of the
published shapes, floor division), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 06.1: Llama 3 70B, one decoding step of one layer against N keys: 2 x 64 heads x N x 128
# multiply-adds, 2 x 8 KV heads x N x 128 x 2 bytes of cache read; N cancels. Gemma 3 27B:
# 32 heads, 16 KV heads of 128.
INTENSITY = (2 * 64 * 1000 * 128) / (2 * 8 * 1000 * 128 * 2)
INTENSITY_GEMMA = (2 * 32 * 1000 * 128) / (2 * 16 * 1000 * 128 * 2)
# 06.2: H = 32, G = 8, s = 4; query heads 13 and 23 read floor(13 / 4) and floor(23 / 4)
HEAD, HEAD_23 = 13 // 4, 23 // 4
# 06.3: Llama 3 70B, W_K and W_V each lose d (H - G) d_head = 8192 x 56 x 128 entries
SAVED = 2 * 8192 * (64 - 8) * 128


def test_hand_values():
    assert (INTENSITY, INTENSITY_GEMMA) == (4.0, 1.0)
    assert (HEAD, HEAD_23) == (3, 5)
    assert SAVED == 117_440_512


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("06.1", (INTENSITY, INTENSITY_GEMMA)), ("06.1", [4, 1]), ("06.1", np.array([4.0, 1.0])),
        ("06.2", (HEAD, HEAD_23)), ("06.2", np.array([HEAD, HEAD_23])),
        ("06.2", torch.tensor([HEAD, HEAD_23])),
        ("06.3", SAVED), ("06.3", torch.tensor(SAVED)),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("06.1", (8, 2), "per cached number"),
        ("06.1", (0.5, 0.5), "the multi-head layer"),
        ("06.1", (0.25, 1), "the inverse"),
        ("06.1", (2, 0.5), "count both products"),
        ("06.1", (8 / 2, 16 / 2), "G / n_b"),
        ("06.1", (128 / (2 * 8 * 2), 128 / (2 * 16 * 2)), "d_head / (2 G n_b)"),
        ("06.1", (4, 3), "entry 1 is off"),
        ("06.1", 4, "of shape (2,)"),
        ("06.1", "4", "got a str"),
        ("06.2", (13 // 8, 23 // 8), "h // 8, what dividing by G"),
        ("06.2", (13 % 4, 23 % 4), "h mod s"),
        ("06.2", (13 % 8, 23 % 8), "interleaved"),
        ("06.2", ((13 - 1) // 4 + 1, (23 - 1) // 4 + 1), "1-based answer"),
        ("06.2", (round(13 / 4), round(23 / 4)), "to the nearest"),
        ("06.2", (3, 7), "entry 1 is off"),
        ("06.2", 3, "of shape (2,)"),
        ("06.3", SAVED // 2, "one matrix"),
        ("06.3", 2 * 8192 * 8 * 128, "keep"),
        ("06.3", SAVED * 80, "all 80 layers"),
        ("06.3", 2 * SAVED, "or W_Q and W_O too"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_06_labels_are_registered():
    assert {"06.1", "06.2", "06.3"} <= set(exercises.labels())
