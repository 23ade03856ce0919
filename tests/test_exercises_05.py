"""Tests for lesson 05's answer checks: right answers computed by hand (the cache formula,
the multiply-adds of a decoding step written out, memory left after the weights), and the
hint each kind of wrong answer gets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises

# 05.1: 2 x 32 layers x 8 KV heads x 128 x 1 byte per token, 16 x 32,768 tokens
FP8 = 2 * 32 * 8 * 128 * 1 * 16 * 32_768
# 05.2: Llama 3 8B, one token against N keys. Attention: 2 x 32 layers x 32 heads x 128 per
# key. The rest, per layer: W_Q, W_K, W_V (4096 x (32 + 2 x 8) x 128), W_O (32 x 128 x 4096),
# SwiGLU (3 x 4096 x 14,336); once, the output head 4096 x 128,256. Llama 3 70B: 80 layers,
# 64 heads, d = 8192, d_ff = 28,672, the same G = 8, d_head and head. 8B's division is exact.
PER_KEY = 2 * 32 * 32 * 128
LAYER = 4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14_336
REST = 32 * LAYER + 4096 * 128_256
CROSS = -(-REST // PER_KEY)
PER_KEY_70 = 2 * 80 * 64 * 128
LAYER_70 = 8192 * (64 + 16) * 128 + 64 * 128 * 8192 + 3 * 8192 * 28_672
REST_70 = 80 * LAYER_70 + 8192 * 128_256
CROSS_70 = -(-REST_70 // PER_KEY_70)
# 05.3: Llama 3 8B, 8,030,261,248 weights in bf16; 2 x 32 x 8 x 128 x 2 bytes per token
PER_TOKEN = 2 * 32 * 8 * 128 * 2
FITS = (80 * 10**9 - 2 * 8_030_261_248) // PER_TOKEN


def test_hand_values():
    assert FP8 == 34_359_738_368
    assert (PER_KEY, REST, CROSS) == (262_144, 7_504_658_432, 28_628)
    assert CROSS * PER_KEY >= REST > (CROSS - 1) * PER_KEY
    assert REST == CROSS * PER_KEY  # exact: rounding down gives the same N for 8B
    assert (PER_KEY_70, REST_70, CROSS_70) == (1_310_720, 69_501_714_432, 53_026)
    assert CROSS_70 * PER_KEY_70 > REST_70 > (CROSS_70 - 1) * PER_KEY_70  # not exact
    assert PER_TOKEN == 131_072 and FITS == 487_819


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("05.1", FP8),
        ("05.1", float(FP8)),
        ("05.1", 3.436e10),
        ("05.1", np.int64(FP8)),
        ("05.2", (CROSS, CROSS_70)),
        ("05.2", [CROSS, CROSS_70]),
        ("05.2", np.array([CROSS, CROSS_70])),
        ("05.2", torch.tensor([CROSS, CROSS_70])),
        ("05.3", FITS),
        ("05.3", np.int64(FITS)),
        ("05.3", float(FITS)),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("05.1", FP8 // 2, "keys only"),
        ("05.1", 2 * FP8, "2-byte (bf16)"),
        ("05.1", FP8 // 16, "one sequence"),
        ("05.1", 65_536, "a single token"),
        ("05.1", 32.0, "in GiB"),
        ("05.1", 34.36, "in GB"),
        ("05.1", "34 GB", "got a str"),
        ("05.2", (-(-(REST - 4096 * 128_256) // PER_KEY), -(-(REST_70 - 8192 * 128_256)
                                                            // PER_KEY_70)),
         "leaves out the output head"),
        ("05.2", (-(-(REST - 32 * 4096 * 14_336) // PER_KEY),
                  -(-(REST_70 - 80 * 8192 * 28_672) // PER_KEY_70)), "two matrices"),
        ("05.2", (-(-REST // (PER_KEY // 4)), -(-REST_70 // (PER_KEY_70 // 8))),
         "once per KV head"),
        ("05.2", (-(-REST // (PER_KEY // 2)), -(-REST_70 // (PER_KEY_70 // 2))), "Q K^T only"),
        ("05.2", (-(-(REST + 32 * 4096 * 48 * 128) // PER_KEY),
                  -(-(REST_70 + 80 * 8192 * 112 * 128) // PER_KEY_70)), "G = 8 key/value heads"),
        ("05.2", (REST // PER_KEY, REST_70 // PER_KEY_70), "rounds the division down"),
        ("05.2", (REST // PER_KEY + 1, REST_70 // PER_KEY_70 + 1), "at least as many"),
        ("05.2", (CROSS - 1, CROSS_70 - 1), "round up"),
        ("05.2", (CROSS + 1, CROSS_70 + 1), "one too many"),
        ("05.2", (CROSS, 2731), "entry 1 is off"),
        ("05.2", CROSS, "of shape (2,)"),
        ("05.3", (80 * 2**30 - 2 * 8_030_261_248) // PER_TOKEN, "80 GiB"),
        ("05.3", 80 * 10**9 // PER_TOKEN, "ignores the weights"),
        ("05.3", (80 * 10**9 - 2 * 8_030_261_248) // (PER_TOKEN // 2), "fp8 cache"),
        ("05.3", (80 * 10**9 - 2 * 8_030_261_248) // (4 * PER_TOKEN), "all 32 query heads"),
        ("05.3", FITS + 1, "round the number of tokens down"),
        ("05.3", 12345, "not quite"),
        ("05.3", FITS + 0.5, "whole number"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_lesson_05_labels_are_registered():
    assert {"05.1", "05.2", "05.3"} <= set(exercises.labels())
