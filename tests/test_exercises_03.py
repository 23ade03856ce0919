"""Tests for lesson 03's answer checks: right answers from closed forms (the parameter count
4 d_in H d_head) and from numpy (the toy layer redrawn from its documented seed, softmax
per head, head 1 removed), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib import exercises

D_GEMMA, H_GEMMA, D_HEAD_GEMMA = 5376, 32, 128  # Gemma 3 27B's published widths


def _toy() -> tuple[np.ndarray, ...]:
    """The lesson's toy layer, redrawn as attnlib.viz.heads documents it (d_in 6, N 4)."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    W = [torch.randn(6, 128, generator=gen, dtype=torch.float64) / math.sqrt(6)
         for _ in range(3)]
    W_O = torch.randn(128, 6, generator=gen, dtype=torch.float64) / math.sqrt(128)
    return X.numpy(), *(w[:, :6].numpy() for w in W), W_O[:6].numpy()


def _heads(X, W_Q, W_K, W_V) -> list[np.ndarray]:
    """Y_h = softmax(Q_h K_h^T / sqrt(3)) V_h for h = 0, 1, with explicit column blocks."""
    out = []
    for h in range(2):
        cols = slice(3 * h, 3 * h + 3)
        S = (X @ W_Q[:, cols]) @ (X @ W_K[:, cols]).T / math.sqrt(3)
        P = np.exp(S - S.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        out.append(P @ (X @ W_V[:, cols]))
    return out


def _removed() -> tuple[np.ndarray, np.ndarray]:
    X, W_Q, W_K, W_V, W_O = _toy()
    Y_0, Y_1 = _heads(X, W_Q, W_K, W_V)
    full = np.hstack([Y_0, Y_1]) @ W_O
    return Y_0 @ W_O[:3], full  # Y with Y_1 = 0 is Y_0 W_O^0 alone


def test_parameter_count_right_answers():
    expected = 4 * D_GEMMA * H_GEMMA * D_HEAD_GEMMA
    assert expected == 88_080_384
    for answer in (expected, float(expected), np.int64(expected), torch.tensor(expected)):
        assert exercises.check("03.1", answer)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (4 * D_GEMMA * D_GEMMA, "assumes H d_head = d_in"),
        (3 * D_GEMMA * 4096, "the output matrix W_O"),
        (4 * D_GEMMA * D_HEAD_GEMMA, "one head's share"),
        (4 * 4096 * 4096, "not H d_head"),
        (-4 * D_GEMMA * 4096, "sign"),
        ("88 million", "expected one number"),
    ],
)
def test_parameter_count_hints(answer, hint):
    result = exercises.check("03.1", answer)
    assert result.status == "incorrect" and hint in result.message


def test_head_removed_right_answer():
    expected, _ = _removed()
    assert exercises.check("03.2", expected)
    assert exercises.check("03.2", torch.from_numpy(expected).float())


def test_head_removed_hints():
    expected, full = _removed()
    X, W_Q, W_K, W_V, W_O = _toy()
    Y_0, Y_1 = _heads(X, W_Q, W_K, W_V)
    columns = full.copy()
    columns[:, 3:] = 0.0
    cases = [
        (full, "both heads"),
        (columns, "W_O mixes"),
        (Y_1 @ W_O[3:], "head 0 removed"),
        (np.hstack([Y_0, np.zeros_like(Y_1)]), "multiply it by W_O"),
        (expected[:, :3], "shape"),
        (-expected, "sign"),
    ]
    for answer, hint in cases:
        result = exercises.check("03.2", answer)
        assert result.status == "incorrect" and hint in result.message, result.message
    # removing a head changes every output column, so the column-zeroing mistake is real
    assert np.all(np.abs(expected - full) > 1e-9)
