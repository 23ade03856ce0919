"""Tests for lesson 13's checks: the right answers pass; every catalogued mistake (each the
solution kernel with an edit of its source), and a few slips written independently, are
refused with the hint that names them (more planted answers: tests/planted/lesson_13.py);
the memory rules (a store outside a tensor, an element never written, a tile not skipped)
are enforced; the interpreter is made to show TF32 and head offsets past 2**31; attnlib's
forward kernel gives zeros for a row that sees no key; and the reader's kernels, as one
differentiable function, match SDPA and autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import assert_correct, assert_hint

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from attnlib.exercises import implement  # noqa: E402
from attnlib.exercises import lesson_13_kernels as kernels  # noqa: E402

LABELS = ["13.1", "13.2", "13.3", "13.4", "13.5", "13.6", "13.7"]

# ---------------------------------------------------------------------------------------
# The right answers, written as a reader writes them (no catalogue switches)
# ---------------------------------------------------------------------------------------


def tile_backward(Q, K, V, O, dO, L, scale):
    P = torch.exp(scale * Q @ K.mT - L[:, None])
    dS = P * (dO @ V.mT - (dO * O).sum(-1, keepdim=True))
    return scale * dS @ K, scale * dS.mT @ Q, P.mT @ dO


@triton.jit
def softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=ok, other=float("-inf"))
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=ok)


@triton.jit
def matmul_kernel(A, B, C, M, N, K, stride_a, stride_b, stride_c, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(A + rows[:, None] * stride_a + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(B + ks[:, None] * stride_b + cols[None, :],
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(C + rows[:, None] * stride_c + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def forward_kernel(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d, scale,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < N) & (dims[None, :] < d)
    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qn + dims[None, :], mask=q_mask,
                other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + M - N)
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < M) & (dims[None, :] < d)
        at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
        k = tl.load(K + at, mask=kv_mask, other=0.0)
        v = tl.load(V + at, mask=kv_mask, other=0.0)
        s = scale * tl.dot(q, tl.trans(k), input_precision="ieee")
        keep = keys[None, :] < M
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + M - N)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = alpha * l + tl.sum(p, 1)
        acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new
    tl.store(O + h * stride_qh + rows[:, None] * stride_qn + dims[None, :],
             (acc / l[:, None]).to(O.dtype.element_ty), mask=q_mask)
    tl.store(L + h * N + rows, m + tl.log(l), mask=rows < N)


@triton.jit
def dkdv_kernel(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn, N, M,
                d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr):
    h = tl.program_id(1).to(tl.int64)
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    kv_mask = (keys[:, None] < M) & (dims[None, :] < d)
    at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
    k = tl.load(K + at, mask=kv_mask, other=0.0)
    v = tl.load(V + at, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    first = 0
    if CAUSAL:
        first = tl.maximum(0, tl.program_id(0) * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for start_m in range(first, N, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q_mask = (rows[:, None] < N) & (dims[None, :] < d)
        qa = h * stride_qh + rows[:, None] * stride_qn + dims[None, :]
        q = tl.load(Q + qa, mask=q_mask, other=0.0)
        do = tl.load(dO + qa, mask=q_mask, other=0.0)
        lse = tl.load(L + h * N + rows, mask=rows < N, other=0.0)
        delta = tl.load(D + h * N + rows, mask=rows < N, other=0.0)
        keep = (rows[:, None] < N) & (keys[None, :] < M)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + M - N)
        p = tl.where(keep, tl.exp(scale * tl.dot(q, tl.trans(k), input_precision="ieee")
                                  - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dk += scale * tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee")
    tl.store(dK + at, dk, mask=kv_mask)
    tl.store(dV + at, dv, mask=kv_mask)


@triton.jit
def dq_kernel(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
              scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < N) & (dims[None, :] < d)
    qa = h * stride_qh + rows[:, None] * stride_qn + dims[None, :]
    q = tl.load(Q + qa, mask=q_mask, other=0.0)
    do = tl.load(dO + qa, mask=q_mask, other=0.0)
    lse = tl.load(L + h * N + rows, mask=rows < N, other=0.0)
    delta = tl.load(D + h * N + rows, mask=rows < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + M - N)
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < M) & (dims[None, :] < d)
        at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
        k = tl.load(K + at, mask=kv_mask, other=0.0)
        v = tl.load(V + at, mask=kv_mask, other=0.0)
        keep = (rows[:, None] < N) & (keys[None, :] < M)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + M - N)
        p = tl.where(keep, tl.exp(scale * tl.dot(q, tl.trans(k), input_precision="ieee")
                                  - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dq += scale * tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    tl.store(dQ + qa, dq, mask=q_mask)


RIGHT = {"13.1": tile_backward, "13.2": softmax_kernel, "13.3": matmul_kernel,
         "13.4": forward_kernel, "13.5": forward_kernel, "13.6": dkdv_kernel,
         "13.7": dq_kernel}


@pytest.mark.parametrize("label", LABELS)
def test_the_right_answers_pass(label, capsys):
    assert_correct(label, RIGHT[label], capsys)


@pytest.mark.parametrize("label", LABELS[1:])
def test_attnlibs_own_kernels_pass(label, capsys):
    """The kernels of lesson_13_kernels are what a piece falls back on."""
    own = {"13.2": kernels.softmax_kernel, "13.3": kernels.matmul_kernel,
           "13.4": kernels.forward_kernel, "13.5": kernels.forward_kernel,
           "13.6": kernels.dkdv_kernel, "13.7": kernels.dq_kernel}
    assert_correct(label, own[label], capsys)


def _catalogue():
    for label in LABELS[1:]:
        for k, _mistake in enumerate(implement.catalogue(label)):
            yield pytest.param(label, k, id=f"{label}-{k}")


@pytest.mark.parametrize(("label", "k"), list(_catalogue()))
def test_every_catalogued_mistake_is_refused_with_its_hint(label, k, capsys):
    """Each catalogued kernel, handed to check() as a reader's answer, is called incorrect
    with its own hint: the cases tell every mistake apart from the others."""
    mistake = implement.catalogue(label)[k]
    assert_hint(label, mistake.fn, mistake.hint, capsys)


# ---------------------------------------------------------------------------------------
# Planted bugs written independently of the catalogue: the slips the review met
# ---------------------------------------------------------------------------------------


def _ignores_scale(Q, K, V, O, dO, L, scale):
    return tile_backward(Q, K, V, O, dO, L, Q.shape[-1] ** -0.5)


def _rowsum_dp(Q, K, V, O, dO, L, scale):
    P = torch.exp(scale * Q @ K.mT - L[:, None])
    dP = dO @ V.mT
    dS = P * (dP - dP.sum(-1, keepdim=True))
    return scale * dS @ K, scale * dS.mT @ Q, P.mT @ dO


def _rebuilt_without_scale(Q, K, V, O, dO, L, scale):
    P = torch.exp(Q @ K.mT - L[:, None])
    dS = P * (dO @ V.mT - (dO * O).sum(-1, keepdim=True))
    return scale * dS @ K, scale * dS.mT @ Q, P.mT @ dO


def _dk_untransposed(Q, K, V, O, dO, L, scale):
    dQ, _, dV = tile_backward(Q, K, V, O, dO, L, scale)
    P = torch.exp(scale * Q @ K.mT - L[:, None])
    dS = P * (dO @ V.mT - (dO * O).sum(-1, keepdim=True))
    return dQ, scale * dS @ Q, dV


@pytest.mark.parametrize(("answer", "hint"), [
    (_ignores_scale, "the scale given is not 1/sqrt(d) here"),
    (_rowsum_dp, "D = rowsum(dP) sums dP over the row unweighted"),
    (_rebuilt_without_scale, "the scale is missing when P is rebuilt"),
    (_dk_untransposed, "dK = scale dS^T Q"),
])
def test_tile_backward_slips(answer, hint, capsys):
    assert_hint("13.1", answer, hint, capsys)


def test_tile_backward_names_the_output_that_is_off(capsys):
    def dv_doubled(Q, K, V, O, dO, L, scale):
        dQ, dK, dV = tile_backward(Q, K, V, O, dO, L, scale)
        return dQ, dK, 2 * dV

    assert_hint("13.1", dv_doubled, "dV is off by up to", capsys)


@triton.jit
def _softmax_unmasked_store(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0))


@triton.jit
def _softmax_row_length_stride(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=ok, other=float("-inf"))
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * n_cols + cols, z / tl.sum(z, axis=0), mask=ok)


@triton.jit
def _softmax_unmasked_load(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols)
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=cols < n_cols)


@pytest.mark.parametrize(("answer", "hint"), [
    (_softmax_unmasked_store, "a store without a mask writes past the row"),
    (_softmax_row_length_stride, "row r starts at X + r * stride, not X + r * n_cols"),
    (_softmax_unmasked_load, "a load without a mask reads past the row"),
])
def test_softmax_slips_the_interpreter_hides(answer, hint, capsys):
    assert_hint("13.2", answer, hint, capsys)


@triton.jit
def _matmul_no_k_mask(A, B, C, M, N, K, stride_a, stride_b, stride_c, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(A + rows[:, None] * stride_a + ks[None, :], mask=rows[:, None] < M)
        b = tl.load(B + ks[:, None] * stride_b + cols[None, :], mask=cols[None, :] < N)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(C + rows[:, None] * stride_c + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def test_matmul_slip(capsys):
    assert_hint("13.3", _matmul_no_k_mask, "the loads of A and B reach past the inner dimension",
                capsys)


@triton.jit
def _forward_top_left(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                      scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The right kernel with the causal mask aligned top-left: keys <= rows."""
    start_m = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < N) & (dims[None, :] < d)
    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qn + dims[None, :], mask=q_mask,
                other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M)
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < M) & (dims[None, :] < d)
        at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
        k = tl.load(K + at, mask=kv_mask, other=0.0)
        v = tl.load(V + at, mask=kv_mask, other=0.0)
        s = scale * tl.dot(q, tl.trans(k), input_precision="ieee")
        keep = keys[None, :] < M
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = alpha * l + tl.sum(p, 1)
        acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new
    tl.store(O + h * stride_qh + rows[:, None] * stride_qn + dims[None, :],
             (acc / l[:, None]).to(O.dtype.element_ty), mask=q_mask)
    tl.store(L + h * N + rows, m + tl.log(l), mask=rows < N)


@triton.jit
def _forward_acc_not_rescaled(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M,
                              d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    h = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    ok = (rows[:, None] < N) & (dims[None, :] < d)
    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qn + dims[None, :], mask=ok, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(0, M, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
        kv_ok = (keys[:, None] < M) & (dims[None, :] < d)
        k = tl.load(K + at, mask=kv_ok, other=0.0)
        v = tl.load(V + at, mask=kv_ok, other=0.0)
        s = tl.where(keys[None, :] < M, scale * tl.dot(q, tl.trans(k), input_precision="ieee"),
                     float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        l = tl.exp(m - m_new) * l + tl.sum(p, 1)
        acc += tl.dot(p.to(v.dtype), v, input_precision="ieee")  # the slip: acc not rescaled
        m = m_new
    tl.store(O + h * stride_qh + rows[:, None] * stride_qn + dims[None, :],
             (acc / l[:, None]).to(O.dtype.element_ty), mask=ok)
    tl.store(L + h * N + rows, m + tl.log(l), mask=rows < N)


def test_forward_slip(capsys):
    assert_hint("13.4", _forward_acc_not_rescaled, "the accumulator must be rescaled", capsys)


def test_causal_slip(capsys):
    assert_hint("13.5", _forward_top_left, "(bottom-right aligned)", capsys)


def test_the_forward_of_13_4_without_causal_is_told_it_is_not_causal_yet(capsys):
    """A correct non-causal kernel (13.4) submitted for 13.5 fails on the causal cases."""

    @triton.jit
    def plain(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d, scale,
              CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr):
        forward_kernel.fn(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                          scale, False, BLOCK_M, BLOCK_N, BLOCK_D)

    from attnlib import exercises

    assert exercises.check("13.4", plain)
    capsys.readouterr()
    result = exercises.check("13.5", plain)
    assert result.status == "incorrect"
    assert "the kernel ignores CAUSAL" in capsys.readouterr().out


@triton.jit
def _dkdv_without_d(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn,
                    N, M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    h = tl.program_id(1).to(tl.int64)
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    kv_mask = (keys[:, None] < M) & (dims[None, :] < d)
    at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
    k = tl.load(K + at, mask=kv_mask, other=0.0)
    v = tl.load(V + at, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    first = 0
    if CAUSAL:
        first = tl.maximum(0, tl.program_id(0) * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for start_m in range(first, N, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q_mask = (rows[:, None] < N) & (dims[None, :] < d)
        qa = h * stride_qh + rows[:, None] * stride_qn + dims[None, :]
        q = tl.load(Q + qa, mask=q_mask, other=0.0)
        do = tl.load(dO + qa, mask=q_mask, other=0.0)
        lse = tl.load(L + h * N + rows, mask=rows < N, other=0.0)
        keep = (rows[:, None] < N) & (keys[None, :] < M)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + M - N)
        p = tl.where(keep, tl.exp(scale * tl.dot(q, tl.trans(k), input_precision="ieee")
                                  - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = p * tl.dot(do, tl.trans(v), input_precision="ieee")  # the slip: no - D
        dk += scale * tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee")
    tl.store(dK + at, dk, mask=kv_mask)
    tl.store(dV + at, dv, mask=kv_mask)


def test_dkdv_slip(capsys):
    assert_hint("13.6", _dkdv_without_d, "without the row term D = rowsum(dO * O)", capsys)


@triton.jit
def _dq_unmasked_causal(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N,
                        M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    dq_kernel.fn(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                 scale, False, BLOCK_M, BLOCK_N, BLOCK_D)


def test_dq_slip(capsys):
    assert_hint("13.7", _dq_unmasked_causal, "the kernel ignores CAUSAL", capsys)


# ---------------------------------------------------------------------------------------
# The three behaviours every check has, with kernels
# ---------------------------------------------------------------------------------------


def test_a_stub_an_error_and_a_plain_function(capsys):
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
    assert "plain is a plain Python function, not a Triton kernel: put @triton.jit" \
        in result.message
    capsys.readouterr()


# ---------------------------------------------------------------------------------------
# The memory rules, directly
# ---------------------------------------------------------------------------------------


def test_a_far_store_is_stopped_before_it_touches_memory():
    """A store a million elements past the end would corrupt the Python process in the
    interpreter; the watch refuses it before it happens."""
    from attnlib.exercises.triton_checks import CheckFailedError, Guarded, launch

    @triton.jit
    def far(Y):
        tl.store(Y + 1_000_000 + tl.arange(0, 16), tl.zeros([16], dtype=tl.float32))

    Y = Guarded("Y", (16,), dtype=torch.float32, device="cpu")
    if not kernels._flash.interpreting():
        pytest.skip("the watch runs in the interpreter only")
    with pytest.raises(CheckFailedError, match="outside every tensor it was given"):
        launch(far, (1,), (Y.view,), {}, (Y,))
    assert bool(Y.buffer.isfinite().logical_not().any())  # untouched: still the NaN payload


def test_guard_bands_catch_what_the_watch_would_after_the_launch():
    """Compiled on a GPU nothing is watched: the guard bands and the payload NaNs are checked
    after the launch. Here the damage is done by hand, as such a kernel would."""
    from attnlib.exercises.triton_checks import CheckFailedError, Guarded

    out = Guarded("O", (2, 3, 4), dtype=torch.float32, device="cpu", pad_cols=2, pad_rows=1)
    out.view.fill_(1.0)
    out.check_after()  # every element written, nothing outside
    out.buffer[out.before + 4] = 0.0  # row 0, column 4: the padding
    with pytest.raises(CheckFailedError, match=r"stored outside O, at head 0, row 0, column 4"):
        out.check_after()
    out = Guarded("O", (2, 3, 4), dtype=torch.float32, device="cpu")
    out.view[:, :2].fill_(1.0)
    with pytest.raises(CheckFailedError, match=r"8 elements of O were never written, the "
                                               r"first at head 0, row 2, column 0"):
        out.check_after()
    inp = Guarded("K", (3, 4), dtype=torch.float32, device="cpu", data=torch.ones(3, 4))
    inp.view[1, 1] = 5.0
    with pytest.raises(CheckFailedError, match="stored into K, one of its inputs"):
        inp.check_after()


def test_a_computed_nan_is_not_mistaken_for_an_unwritten_element():
    from attnlib.exercises.triton_checks import Guarded

    out = Guarded("O", (3, 4), dtype=torch.float32, device="cpu")
    out.view.fill_(float("nan"))  # what 0/0 gives: another NaN than the payload
    out.check_after()


# ---------------------------------------------------------------------------------------
# The reader's kernels as one function
# ---------------------------------------------------------------------------------------


def _sdpa(Q, K, V, causal):
    H, G, N, M = Q.shape[1], K.shape[1], Q.shape[2], K.shape[2]
    mask = torch.ones(N, M, dtype=torch.bool).tril(M - N) if causal else None
    return F.scaled_dot_product_attention(Q, K.repeat_interleave(H // G, 1),
                                          V.repeat_interleave(H // G, 1), attn_mask=mask,
                                          scale=0.3)


@pytest.mark.parametrize("whose", ["attnlib", "yours"])
@pytest.mark.parametrize(("causal", "blocks"), [(False, (16, 32)), (True, (32, 16))])
def test_reader_flash_attention_matches_sdpa_and_autograd(whose, causal, blocks):
    pieces = {} if whose == "attnlib" else \
        {"forward": forward_kernel, "dkdv": dkdv_kernel, "dq": dq_kernel}
    attend = kernels.reader_flash_attention(**pieces)
    assert set(attend.whose.values()) == {whose}
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(2, 4, 40, 16, generator=g).requires_grad_()
    K, V = (torch.randn(2, 2, 57, 16, generator=g).requires_grad_() for _ in range(2))
    dO = torch.randn(2, 4, 40, 16, generator=g)
    O = attend(Q, K, V, causal=causal, scale=0.3, block_m=blocks[0], block_n=blocks[1])
    ref = _sdpa(Q, K, V, causal)
    torch.testing.assert_close(O, ref, atol=2e-5, rtol=2e-5)
    got = torch.autograd.grad(O, (Q, K, V), dO)
    want = torch.autograd.grad(ref, (Q, K, V), dO)
    for name, a, b in zip(("dQ", "dK", "dV"), got, want, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_reader_flash_attention_refuses_what_is_not_a_kernel():
    with pytest.raises(TypeError, match=r"dkdv must be a Triton kernel .* got function"):
        kernels.reader_flash_attention(dkdv=tile_backward)
    attend = kernels.reader_flash_attention()
    with pytest.raises(ValueError, match="H=3, G=2"):
        attend(torch.randn(1, 3, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))


def test_counted_dots_sees_each_kernels_products():
    """Forward: Q K^T and P V per pair of tiles; dK/dV: Q K^T, dO V^T, P^T dO and dS^T Q;
    dQ: Q K^T, dO V^T and dS K. Causal, the skipped pairs make no product."""
    from attnlib.exercises.triton_checks import counted_dots

    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(1, 48, 16, generator=g) for _ in range(4))
    L, D = torch.zeros(1, 48), torch.zeros(1, 48)
    args = dict(scale=0.25, block_m=16, block_n=16, guarded=False)
    for causal, pairs in ((False, 9), (True, 6)):
        with counted_dots() as fwd:
            kernels.run_forward(kernels.forward_kernel, q, k, v, causal=causal, **args)
        with counted_dots() as dkdv:
            kernels.run_dkdv(kernels.dkdv_kernel, q, k, v, do, L, D, causal=causal, **args)
        with counted_dots() as dq:
            kernels.run_dq(kernels.dq_kernel, q, k, v, do, L, D, causal=causal, **args)
        assert (fwd.products, dkdv.products, dq.products) == (2 * pairs, 4 * pairs, 3 * pairs)
        assert fwd.flops == 2 * pairs * 2 * 16 * 16 * 16
    with counted_dots() as none:
        pass
    assert none.products == 0 and none.flops == 0


# ---------------------------------------------------------------------------------------
# The catalogue's kernels, and what the interpreter is made to show
# ---------------------------------------------------------------------------------------


def test_a_mistake_is_the_solution_with_an_edit_of_its_source():
    import inspect

    edited = kernels.patched(kernels.matmul_kernel, [("acc += tl.dot(", "acc = tl.dot(")],
                             "overwritten")
    assert kernels.is_patched(edited) and not kernels.is_patched(kernels.matmul_kernel)
    assert "acc = tl.dot(" in inspect.getsource(edited.fn)
    assert kernels.patched(kernels.matmul_kernel, [("acc += tl.dot(", "acc = tl.dot(")]) \
        is edited  # built once
    with pytest.raises(ValueError, match="finds nothing in matmul_kernel's source"):
        kernels.patched(kernels.matmul_kernel, [("no such text", "x")])


def test_the_catalogues_name_no_mistake_twice():
    for label in LABELS[1:]:
        hints = [m.hint for m in implement.catalogue(label)]
        assert len(set(hints)) == len(hints), label


def test_attnlibs_forward_gives_zeros_for_a_row_that_sees_no_key():
    """Causal with more queries than keys: query i < N - M sees no key (bottom-right), and
    attnlib's online softmax writes zeros there, with L = -inf; the other rows match SDPA."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 40, 16, generator=g)
    k, v = (torch.randn(2, 24, 16, generator=g) for _ in range(2))
    O, L, _ = kernels.run_forward(kernels.forward_kernel, q, k, v, scale=0.25, causal=True,
                                  block_m=16, block_n=16, guarded=False)
    empty = 40 - 24
    assert torch.equal(O[:, :empty], torch.zeros_like(O[:, :empty]))
    assert bool((L[:, :empty] == float("-inf")).all())
    keep = torch.ones(40, 24, dtype=torch.bool).tril(24 - 40)
    ref = F.scaled_dot_product_attention(q[:, empty:], k, v, attn_mask=keep[empty:], scale=0.25)
    torch.testing.assert_close(O[:, empty:], ref, atol=2e-5, rtol=2e-5)


def test_the_watch_rounds_a_float32_product_left_at_tf32():
    from attnlib.exercises.triton_checks import to_tf32

    x = np.array([1.0, 1.0 + 2.0**-11, 1.0 + 2.0**-10, -3.0 - 2.0**-12], dtype=np.float32)
    assert to_tf32(x).tolist() == [1.0, 1.0 + 2.0**-10, 1.0 + 2.0**-10, -3.0]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(40, 70, generator=g), torch.randn(70, 50, generator=g)
    exact = (a.double() @ b.double()).float()
    tf32_kernel = kernels.patched(kernels.matmul_kernel, [(', input_precision="ieee"', "")])
    C, watch = kernels.run_matmul(tf32_kernel, a, b, (16, 32, 64))
    assert watch.tf32_dots == 3 * 2 * 2  # 3 x 2 tiles of C, 2 blocks of K each
    assert (C - exact).abs().max() > 1e-3  # what a GPU computes at TF32
    C, watch = kernels.run_matmul(tf32_kernel, a, b, (16, 32, 64), tf32=False)
    torch.testing.assert_close(C, exact, atol=1e-4, rtol=1e-4)
    C, watch = kernels.run_matmul(kernels.matmul_kernel, a, b, (16, 32, 64))
    assert watch.tf32_dots == 0
    torch.testing.assert_close(C, exact, atol=1e-4, rtol=1e-4)


def test_far_heads_put_the_head_offsets_past_two_to_the_31():
    from attnlib.exercises.triton_checks import Guarded, far_head

    Q = Guarded("Q", (2, 20, 16), dtype=torch.float32, device="cpu", data=torch.zeros(2, 20, 16),
                pad_cols=3, pad_rows=2)
    L = Guarded("L", (2, 20), dtype=torch.float32, device="cpu")
    h0 = far_head([Q, L])
    assert h0 * Q.view.stride(0) >= 2**31 > (h0 - 1) * Q.view.stride(0)
    assert (h0 + 2) * L.view.stride(0) < 2**31  # L's rows, h * N, stay in int32
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(2, 20, 16, generator=g), *(torch.randn(2, 24, 16, generator=g)
                                                     for _ in range(2))
    right = kernels.run_forward(kernels.forward_kernel, q, k, v, scale=0.25, causal=True,
                                block_m=16, block_n=16, far_heads=True)
    plain = kernels.run_forward(kernels.forward_kernel, q, k, v, scale=0.25, causal=True,
                                block_m=16, block_n=16)
    assert torch.equal(right[0], plain[0]) and torch.equal(right[1], plain[1])
    int32 = kernels.patched(kernels.forward_kernel,
                            [("h = tl.program_id(1).to(tl.int64)", "h = tl.program_id(1)")])
    kernels.run_forward(int32, q, k, v, scale=0.25, causal=True, block_m=16, block_n=16)
    from attnlib.exercises.triton_checks import CheckFailedError
    with pytest.raises(CheckFailedError, match="outside every tensor"):
        kernels.run_forward(int32, q, k, v, scale=0.25, causal=True, block_m=16, block_n=16,
                            far_heads=True)
