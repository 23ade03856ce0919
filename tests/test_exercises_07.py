"""Tests for lesson 07's answer checks: right answers computed by hand from the published
shapes (DeepSeek-V2 and V3, Llama 3 8B), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 07.1: DeepSeek-V3, 61 layers, d_L + d_R = 512 + 64 numbers per token and layer, 2 bytes
V3_BYTES = 61 * (512 + 64) * 2
# 07.2: 32 heads of width 128 against d_L + d_R = 576
FACTOR = 2 * 32 * 128 / 576
# 07.3: 128 merged W_LQK^h of 1536 x 512, and W_LO of (128 * 512) x 5120
MERGED = 128 * 1536 * 512 + 128 * 512 * 5120
# 07.4: Llama 3 8B, [W_K | W_V] is 4096 x (2 * 8 * 128); Llama 2 7B, 4096 x (2 * 32 * 128)
EXACT = min(4096, 2 * 8 * 128)
EXACT_L2 = min(4096, 2 * 32 * 128)


def test_hand_values():
    assert V3_BYTES == 70_272
    assert round(FACTOR, 2) == 14.22
    assert MERGED == 436_207_616
    assert (EXACT, EXACT_L2) == (2048, 4096)


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("07.1", V3_BYTES),
        ("07.1", float(V3_BYTES)),
        ("07.1", np.int64(V3_BYTES)),
        ("07.2", FACTOR),
        ("07.2", round(FACTOR, 2)),
        ("07.2", torch.tensor(FACTOR)),
        ("07.3", MERGED),
        ("07.3", torch.tensor(MERGED)),
        ("07.4", (EXACT, EXACT_L2)),
        ("07.4", np.array([EXACT, EXACT_L2])),
        ("07.4", torch.tensor([EXACT, EXACT_L2])),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("07.1", 61 * 512 * 2, "leaves out the rotary key"),
        ("07.1", 2 * V3_BYTES, "no factor 2"),
        ("07.1", 576 * 2, "one layer"),
        ("07.1", 61 * 576, "counts numbers"),
        ("07.1", 61 * 2 * 128 * 128 * 2, "multi-head cache"),
        ("07.1", "70272", "got a str"),
        ("07.2", 2 * 32 * 128 / 512, "leaves out the rotary key"),
        ("07.2", 32 * 128 / 576, "keys and values"),
        ("07.2", 1 / FACTOR, "inverse"),
        ("07.2", 2 * 8 * 128 / 576, "GQA with G = 8"),
        ("07.2", [FACTOR, 1.0], "of shape ()"),
        ("07.3", 128 * 1536 * 512, "W_LQK^h of all heads alone"),
        ("07.3", 128 * 512 * 5120, "W_LO alone"),
        ("07.3", 1536 * 512 + 128 * 512 * 5120, "one matrix per head"),
        ("07.3", 1536 * 128 * 128 + 2 * 512 * 128 * 128 + 128 * 128 * 5120, "four factors"),
        ("07.4", (1024, 4096), "keys only"),
        ("07.4", (4096, 4096), "that is d_in"),
        ("07.4", (8192, 8192), "query heads"),
        ("07.4", (2048, 8192), "bound by the rows"),
        ("07.4", (2048, 2048), "d_in / 2"),
        ("07.4", (2048, 4000), "entry 1 is off"),
        ("07.4", 2048, "of shape (2,)"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_07_labels_are_registered():
    assert {"07.1", "07.2", "07.3", "07.4"} <= set(exercises.labels())
