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


def test_triton_softmax_stub_error_and_plain_function(capsys):
    """The three behaviours every check has, with kernels: a kernel whose body is ``raise
    NotImplementedError`` is not implemented yet; an error in the reader's kernel shows the
    reader's line, not Triton's; an unrelated wrong kernel gets the first case; and a
    function without @triton.jit is told so."""
    import triton
    import triton.language as tl

    from attnlib import exercises

    @triton.jit
    def stub_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
        raise NotImplementedError

    result = exercises.check("13.2", stub_kernel)
    assert result.status == "unanswered"
    assert capsys.readouterr().out.startswith("13.2: not implemented yet.")

    @triton.jit
    def broken_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x = tl.load(X + row * stride + tl.arange(0, BLOCK))
        tl.store(Y + row * stride + tl.arange(0, BLOCK), x @ x)

    result = exercises.check("13.2", broken_kernel)
    assert result.status == "incorrect"
    assert "  in broken_kernel, line" in result.message
    assert "x @ x" in result.message
    assert "triton" not in result.message.split("\n", 1)[1].split(":")[0]
    assert "InterpreterError" not in result.message

    @triton.jit
    def doubled_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        x = tl.load(X + row * stride + cols, mask=ok, other=float("-inf"))
        z = tl.exp(x - tl.max(x, axis=0))
        tl.store(Y + row * stride + cols, 2 * z / tl.sum(z, axis=0), mask=ok)

    result = exercises.check("13.2", doubled_kernel)
    assert result.status == "incorrect"
    assert result.message.startswith("13.2: case 1 of 3 ('4 rows of 16"), result.message

    def plain(X, Y, stride, n_cols, BLOCK):
        pass

    result = exercises.check("13.2", plain)
    assert result.status == "incorrect"
    assert "plain is a plain Python function, not a Triton kernel: put @triton.jit" \
        in result.message
    capsys.readouterr()
