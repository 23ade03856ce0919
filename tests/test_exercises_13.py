"""Tests for lesson 13's implementation checks: the right answers pass, and each catalogued
wrong answer (the rowsum(dO * O) term forgotten, the scale twice, an unmasked load past the
end of a row that is not a multiple of the block, ...) fails with the hint that names it."""

from __future__ import annotations

import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

pytest.importorskip("triton")


def _tile_backward(Q, K, V, O, dO, L, scale):
    P = torch.exp(scale * Q @ K.mT - L[:, None])
    dS = P * (dO @ V.mT - (dO * O).sum(-1, keepdim=True))
    return scale * dS @ K, scale * dS.mT @ Q, P.mT @ dO


def test_tile_backward_right(capsys):
    assert_correct("13.1", _tile_backward, capsys)


def _no_rowsum(Q, K, V, O, dO, L, scale):
    P = torch.exp(scale * Q @ K.mT - L[:, None])
    dS = P * (dO @ V.mT)
    return scale * dS @ K, scale * dS.mT @ Q, P.mT @ dO


def _scale_twice(Q, K, V, O, dO, L, scale):
    dQ, dK, dV = _tile_backward(Q, K, V, O, dO, L, scale)
    return scale * dQ, scale * dK, dV


@pytest.mark.parametrize(("answer", "hint"), [
    (_no_rowsum, "forgetting the rowsum(dO * O) term"),
    (_scale_twice, "the scale applied twice"),
])
def test_tile_backward_mistakes(answer, hint, capsys):
    assert_hint("13.1", answer, hint, capsys)


def test_triton_softmax_right_and_wrong(capsys):
    import triton
    import triton.language as tl

    @triton.jit
    def softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        x = tl.load(X + row * stride + cols, mask=ok, other=float("-inf"))
        z = tl.exp(x - tl.max(x, axis=0))
        tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=ok)

    @triton.jit
    def unmasked_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(X + row * stride + cols)
        z = tl.exp(x - tl.max(x, axis=0))
        tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=cols < n_cols)

    @triton.jit
    def zero_padded_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        x = tl.load(X + row * stride + cols, mask=ok, other=0.0)
        z = tl.exp(x - tl.max(x, axis=0))
        tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=ok)

    assert_correct("13.2", softmax_kernel, capsys)
    assert_hint("13.2", unmasked_kernel, "reads out of bounds: n_cols = 10 is not a multiple",
                capsys)
    assert_hint("13.2", zero_padded_kernel, "other=float('-inf')", capsys)
