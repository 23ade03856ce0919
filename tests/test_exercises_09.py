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
# 09.2: 48 layers x 32 heads x (r d_V + r) numbers x 2 bytes, r = 128 features, d_V = 64
STATE = 48 * 32 * (128 * 64 + 128) * 2
# 09.3: (131,072 x 64 + 2,048 x 256) / (131,072 x 256)
SPARSE = (131072 * 64 + 2048 * 256) / (131072 * 256)


def test_hand_values():
    assert round(ONLINE, 4) == 2.8985
    assert STATE == 25_559_040
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
        ("09.1", 20 / 7, "logits themselves"),
        ("09.1", 3.0474, "second block alone"),
        ("09.2", 48 * 32 * 128 * 64 * 2, "counts S_t only"),
        ("09.2", 48 * 32 * (128 * 64 + 128), "2 for each bfloat16 number"),
        ("09.2", 32 * (128 * 64 + 128) * 2, "one layer"),
        ("09.2", 48 * 32 * (128 * 64 + 64) * 2, "z_t d_V numbers"),
        ("09.2", 48 * 32 * (128 * 128 + 128) * 2, "S_t r x r"),
        ("09.2", float(STATE) + 0.5, "a whole number of bytes"),
        ("09.2", 12345, "not quite"),
        ("09.3", 2048 / 131072, "top-k keys only"),
        ("09.3", 0.25, "indexer alone"),
        ("09.3", 26.5625, "percentage"),
        ("09.3", (131072 * 64 + 2048 * 128) / (131072 * 256), "d multiply-adds per chosen key"),
    ],
)
def test_wrong_answers_get_a_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def _online(Q, K, V, block_size):  # the reader's tiled attention
    m = torch.full((*Q.shape[:-1], 1), -math.inf, dtype=Q.dtype)
    l, O = torch.zeros_like(m), torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    for K_b, V_b in zip(K.split(block_size, dim=-2), V.split(block_size, dim=-2), strict=True):
        S = Q @ K_b.mT / Q.shape[-1] ** 0.5
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))
        P, alpha = torch.exp(S - m_new), torch.exp(m - m_new)
        l, O, m = alpha * l + P.sum(dim=-1, keepdim=True), alpha * O + P @ V_b, m_new
    return O / l


def _online_new_zeros(Q, K, V, block_size):  # the same, its running tensors made from V
    m = V.new_full((*Q.shape[:-1], 1), -math.inf)
    l, O = V.new_zeros(*Q.shape[:-1], 1), V.new_zeros(*Q.shape[:-1], V.shape[-1])
    for start in range(0, K.shape[-2], block_size):
        S = Q @ K[..., start:start + block_size, :].mT / Q.shape[-1] ** 0.5
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))
        P, alpha = torch.exp(S - m_new), torch.exp(m - m_new)
        l = alpha * l + P.sum(dim=-1, keepdim=True)
        O, m = alpha * O + P @ V[..., start:start + block_size, :], m_new
    return O / l


def test_tiled_attention_must_tile(capsys):
    """09.5 runs one case on keys and values that record what each computation reads: a
    function with the right outputs that is not tiled, or tiles by its own block size, is
    refused; one that tiles (here with split) is correct."""
    assert_correct("09.5", _online, capsys)
    assert_correct("09.5", _online_new_zeros, capsys)
    assert_hint("09.5", lambda Q, K, V, block_size: torch.softmax(
        Q @ K.mT / Q.shape[-1] ** 0.5, dim=-1) @ V, "reads 23 keys of K or V at once", capsys)
    assert_hint("09.5", lambda Q, K, V, block_size: _online(Q, K, V, 4),
                "at most 4 keys, with block_size = 5", capsys)
    assert_hint("09.5", lambda Q, K, V, block_size: _online(Q, K, V, 2 * block_size),
                "reads 10 keys of K or V at once", capsys)


def test_lesson_09_labels_are_registered():
    assert {"09.1", "09.2", "09.3"} <= set(exercises.labels())
