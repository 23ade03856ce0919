"""Planted wrong answers for lesson 13's Triton exercises 13.3 to 13.7.

Each kernel is written here as a reader would write it from the lesson's text, in its own
words (names and layout differ from the lesson's solution and from the catalogue), and is
wrong in one way, named in its ``Planted`` entry. Triton reads a kernel's source, so every
kernel is defined at module level in this file.
"""

from __future__ import annotations

import triton
import triton.language as tl

import attnlib.kernels.triton_flash  # noqa: F401 - without a GPU, sets TRITON_INTERPRET=1 first
from planted import Planted

# ---------------------------------------------------------------------------------------
# 13.3: the tiled product
# ---------------------------------------------------------------------------------------


@triton.jit
def _mm_k_mask_off_by_one(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The inner mask is ks <= K: one lane too many, column K of A and row K of B."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    r = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    c = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_K)
        a = tl.load(A + r[:, None] * stride_a + kk[None, :],
                    mask=(r[:, None] < M) & (kk[None, :] <= K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_b + c[None, :],
                    mask=(kk[:, None] <= K) & (c[None, :] < N), other=0.0)
        total += tl.dot(a, b, input_precision="ieee")
    tl.store(C + r[:, None] * stride_c + c[None, :], total,
             mask=(r[:, None] < M) & (c[None, :] < N))


@triton.jit
def _mm_inner_block_n(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The inner block is BLOCK_N lanes wide while the loop steps by BLOCK_K."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_N)
        a = tl.load(A + r[:, None] * stride_a + kk[None, :],
                    mask=(r[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_b + c[None, :],
                    mask=(kk[:, None] < K) & (c[None, :] < N), other=0.0)
        total += tl.dot(a, b, input_precision="ieee")
    tl.store(C + r[:, None] * stride_c + c[None, :], total,
             mask=(r[:, None] < M) & (c[None, :] < N))


@triton.jit
def _mm_store_masked_on_columns(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr):
    """The store's mask keeps the columns inside N and forgets the rows past M."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_K)
        a = tl.load(A + r[:, None] * stride_a + kk[None, :],
                    mask=(r[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_b + c[None, :],
                    mask=(kk[:, None] < K) & (c[None, :] < N), other=0.0)
        total += tl.dot(a, b, input_precision="ieee")
    tl.store(C + r[:, None] * stride_c + c[None, :], total, mask=c[None, :] < N)


@triton.jit
def _mm_default_precision(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """tl.dot left at its default precision: TF32 on a GPU."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_K)
        a = tl.load(A + r[:, None] * stride_a + kk[None, :],
                    mask=(r[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_b + c[None, :],
                    mask=(kk[:, None] < K) & (c[None, :] < N), other=0.0)
        total += tl.dot(a, b)
    tl.store(C + r[:, None] * stride_c + c[None, :], total,
             mask=(r[:, None] < M) & (c[None, :] < N))


@triton.jit
def _mm_a_with_b_stride(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A's rows stepped by B's row stride."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_K)
        a = tl.load(A + r[:, None] * stride_b + kk[None, :],
                    mask=(r[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_b + c[None, :],
                    mask=(kk[:, None] < K) & (c[None, :] < N), other=0.0)
        total += tl.dot(a, b, input_precision="ieee")
    tl.store(C + r[:, None] * stride_c + c[None, :], total,
             mask=(r[:, None] < M) & (c[None, :] < N))


@triton.jit
def _mm_loop_short_of_k(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The loop ends at K - BLOCK_K, one block early."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K - BLOCK_K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_K)
        a = tl.load(A + r[:, None] * stride_a + kk[None, :],
                    mask=(r[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_b + c[None, :],
                    mask=(kk[:, None] < K) & (c[None, :] < N), other=0.0)
        total += tl.dot(a, b, input_precision="ieee")
    tl.store(C + r[:, None] * stride_c + c[None, :], total,
             mask=(r[:, None] < M) & (c[None, :] < N))


# ---------------------------------------------------------------------------------------
# 13.4: the forward (CAUSAL is False in every case of 13.4)
# ---------------------------------------------------------------------------------------


@triton.jit
def _fwd_max_from_zero(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                       scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The running max starts at 0."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        qk = tl.where(on[None, :] < M, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _fwd_uncast_weights(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                        scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The float32 weights go into the second product as they are."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        qk = tl.where(on[None, :] < M, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _fwd_int32_head(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                    scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The head index stays int32, so head * stride_qh wraps past 2**31."""
    pid = tl.program_id(0)
    head = tl.program_id(1)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        qk = tl.where(on[None, :] < M, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _fwd_default_precision(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                           scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Both products left at tl.dot's default precision: TF32 on a GPU."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * scale
        qk = tl.where(on[None, :] < M, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _fwd_correction_inverted(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M,
                             d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The correction is exp(m_new - m_old), the inverse of the right factor."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        qk = tl.where(on[None, :] < M, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.where(m_i > -1.0e29, tl.exp(m_ij - m_i), 0.0)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _fwd_no_width_mask(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                       scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """K and V are loaded with a mask on the keys only: BLOCK_D lanes read past d."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=on[:, None] < M, other=0.0)
        v = tl.load(V + kv, mask=on[:, None] < M, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        qk = tl.where(on[None, :] < M, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


# ---------------------------------------------------------------------------------------
# 13.5: the causal forward
# ---------------------------------------------------------------------------------------


@triton.jit
def _causal_all_tiles_masked_loads(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn,
                                   N, M, d, scale, CAUSAL: tl.constexpr,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                   BLOCK_D: tl.constexpr):
    """Every key tile is visited; the loads of the tiles past the diagonal are masked off."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    last = (pid + 1) * BLOCK_M - 1 + M - N  # the last key any query of this tile sees
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        if CAUSAL:
            kv_ok = kv_ok & (on[:, None] <= last)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = on[None, :] < M
        if CAUSAL:
            keep = keep & (on[None, :] <= om[:, None] + (M - N))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _causal_stop_without_shift(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N,
                               M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The mask is bottom-right aligned, but the loop's stop forgets the shift M - N."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = on[None, :] < M
        if CAUSAL:
            keep = keep & (on[None, :] <= om[:, None] + (M - N))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _causal_shift_reversed(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                           scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The shift is written N - M, in the stop and in the mask."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + (N - M))
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = on[None, :] < M
        if CAUSAL:
            keep = keep & (on[None, :] <= om[:, None] + (N - M))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _causal_rows_in_block_n(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                            scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The program's first row is counted in key blocks: pid * BLOCK_N."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_N + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, pid * BLOCK_N + BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = on[None, :] < M
        if CAUSAL:
            keep = keep & (on[None, :] <= om[:, None] + (M - N))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _causal_max_from_zero(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                          scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Causal right, but the running max starts at 0."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = on[None, :] < M
        if CAUSAL:
            keep = keep & (on[None, :] <= om[:, None] + (M - N))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head * N + om, m_i + tl.log(l_i), mask=om < N)


@triton.jit
def _causal_int32_head(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                       scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Causal right, the head offsets in int32 (cast only for L's row)."""
    pid = tl.program_id(0)
    head = tl.program_id(1)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    q = tl.load(Q + head * stride_qh + om[:, None] * stride_qn + od[None, :], mask=q_ok,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = on[None, :] < M
        if CAUSAL:
            keep = keep & (on[None, :] <= om[:, None] + (M - N))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_ij[:, None])
        corr = tl.exp(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_ij
    tl.store(O + head * stride_qh + om[:, None] * stride_qn + od[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_ok)
    tl.store(L + head.to(tl.int64) * N + om, m_i + tl.log(l_i), mask=om < N)


# ---------------------------------------------------------------------------------------
# 13.6: the backward's dK and dV
# ---------------------------------------------------------------------------------------


@triton.jit
def _dkdv_p_uncast(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn, N, M,
                   d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """dS is cast before its product, P is not."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = tl.maximum(0, pid_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for m0 in range(lo, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        q_ok = (om[:, None] < N) & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
        dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee") * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


@triton.jit
def _dkdv_first_tile_late(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh,
                          stride_kn, N, M, d, scale, CAUSAL: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_D: tl.constexpr):
    """The first query tile adds the shift M - N instead of subtracting it."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = (pid_n * BLOCK_N + (M - N)) // BLOCK_M * BLOCK_M
    for m0 in range(lo, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        q_ok = (om[:, None] < N) & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
        dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee") * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


@triton.jit
def _dkdv_all_tiles_masked_loads(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh,
                                 stride_kn, N, M, d, scale, CAUSAL: tl.constexpr,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_D: tl.constexpr):
    """Every query tile is visited; the rows that see none of the keys are masked off."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for m0 in range(0, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        rows_ok = om < N
        if CAUSAL:
            rows_ok = rows_ok & (om + (M - N) >= pid_n * BLOCK_N)
        q_ok = rows_ok[:, None] & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=rows_ok, other=0.0)
        dlt = tl.load(D + head * N + om, mask=rows_ok, other=0.0)
        ok = rows_ok[:, None] & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee") * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


@triton.jit
def _dkdv_delta_from_l(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn,
                       N, M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The row term is read from L's pointer instead of D's."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = tl.maximum(0, pid_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for m0 in range(lo, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        q_ok = (om[:, None] < N) & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
        dlt = tl.load(L + head * N + om, mask=om < N, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee") * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


@triton.jit
def _dkdv_int32_head(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn, N,
                     M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The head offsets in int32."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = tl.maximum(0, pid_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for m0 in range(lo, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        q_ok = (om[:, None] < N) & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
        dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee") * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


@triton.jit
def _dkdv_default_precision(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh,
                            stride_kn, N, M, d, scale, CAUSAL: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_D: tl.constexpr):
    """Every product at tl.dot's default precision: TF32 on a GPU."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = tl.maximum(0, pid_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for m0 in range(lo, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        q_ok = (om[:, None] < N) & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
        dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do)
        ds = p * (tl.dot(do, tl.trans(v)) - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


@triton.jit
def _dkdv_scale_twice(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn, N,
                      M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """dK takes the scale twice: once in dS and once in the product."""
    pid_n = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, BLOCK_D)
    kv_ok = (on[:, None] < M) & (od[None, :] < d)
    kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
    k = tl.load(K + kv, mask=kv_ok, other=0.0)
    v = tl.load(V + kv, mask=kv_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = tl.maximum(0, pid_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for m0 in range(lo, N, BLOCK_M):
        om = m0 + tl.arange(0, BLOCK_M)
        q_ok = (om[:, None] < N) & (od[None, :] < d)
        qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
        q = tl.load(Q + qo, mask=q_ok, other=0.0)
        do = tl.load(dO + qo, mask=q_ok, other=0.0)
        lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
        dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
        ds = scale * p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee") * scale
    tl.store(dK + kv, dk, mask=kv_ok)
    tl.store(dV + kv, dv, mask=kv_ok)


# ---------------------------------------------------------------------------------------
# 13.7: the backward's dQ
# ---------------------------------------------------------------------------------------


@triton.jit
def _dq_ds_uncast(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                  scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    """dS goes into its product with K in float32."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
    q = tl.load(Q + qo, mask=q_ok, other=0.0)
    do = tl.load(dO + qo, mask=q_ok, other=0.0)
    lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
    dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dq += tl.dot(ds, k, input_precision="ieee") * scale
    tl.store(dQ + qo, dq, mask=q_ok)


@triton.jit
def _dq_stop_from_key_tiles(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn,
                            N, M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The causal stop is pid * BLOCK_M + BLOCK_N + M - N: one key block past the tile's
    first row, not one query block."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
    q = tl.load(Q + qo, mask=q_ok, other=0.0)
    do = tl.load(dO + qo, mask=q_ok, other=0.0)
    lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
    dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, pid * BLOCK_M + BLOCK_N + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    tl.store(dQ + qo, dq, mask=q_ok)


@triton.jit
def _dq_all_tiles_masked_loads(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh,
                               stride_kn, N, M, d, scale, CAUSAL: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_D: tl.constexpr):
    """Every key tile is visited; the keys past the tile's last visible one are masked."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
    q = tl.load(Q + qo, mask=q_ok, other=0.0)
    do = tl.load(dO + qo, mask=q_ok, other=0.0)
    lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
    dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    last = (pid + 1) * BLOCK_M - 1 + M - N
    for n0 in range(0, M, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        if CAUSAL:
            kv_ok = kv_ok & (on[:, None] <= last)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    tl.store(dQ + qo, dq, mask=q_ok)


@triton.jit
def _dq_int32_head(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
                   scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr):
    """The head offsets in int32."""
    pid = tl.program_id(0)
    head = tl.program_id(1)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
    q = tl.load(Q + qo, mask=q_ok, other=0.0)
    do = tl.load(dO + qo, mask=q_ok, other=0.0)
    lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
    dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    tl.store(dQ + qo, dq, mask=q_ok)


@triton.jit
def _dq_default_precision(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N,
                          M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Every product at tl.dot's default precision: TF32 on a GPU."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
    q = tl.load(Q + qo, mask=q_ok, other=0.0)
    do = tl.load(dO + qo, mask=q_ok, other=0.0)
    lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
    dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - dlt[:, None])
        dq += tl.dot(ds.to(k.dtype), k) * scale
    tl.store(dQ + qo, dq, mask=q_ok)


@triton.jit
def _dq_row_term_outside(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N,
                         M, d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The row term is subtracted outside the product with P: dS = P dP - D."""
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    om = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, BLOCK_D)
    q_ok = (om[:, None] < N) & (od[None, :] < d)
    qo = head * stride_qh + om[:, None] * stride_qn + od[None, :]
    q = tl.load(Q + qo, mask=q_ok, other=0.0)
    do = tl.load(dO + qo, mask=q_ok, other=0.0)
    lse = tl.load(L + head * N + om, mask=om < N, other=0.0)
    dlt = tl.load(D + head * N + om, mask=om < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid + 1) * BLOCK_M + M - N)
    for n0 in range(0, hi, BLOCK_N):
        on = n0 + tl.arange(0, BLOCK_N)
        kv_ok = (on[:, None] < M) & (od[None, :] < d)
        kv = head * stride_kh + on[:, None] * stride_kn + od[None, :]
        k = tl.load(K + kv, mask=kv_ok, other=0.0)
        v = tl.load(V + kv, mask=kv_ok, other=0.0)
        ok = (om[:, None] < N) & (on[None, :] < M)
        if CAUSAL:
            ok = ok & (on[None, :] <= om[:, None] + (M - N))
        p = tl.where(ok, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale
                                - lse[:, None]), 0.0)
        ds = p * tl.dot(do, tl.trans(v), input_precision="ieee") - dlt[:, None]
        ds = tl.where(ok, ds, 0.0)
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    tl.store(dQ + qo, dq, mask=q_ok)


_NOT_A_MASK_MISSING = r"need a mask too|has no mask|without a mask"
_NO_CAUSAL_NAMED = r"ignores CAUSAL|top-left"
_INT64 = r"int64"
_TF32 = r"TF32"

PLANTED = [
    # 13.3
    Planted("13.3", "inner mask ks <= K, one lane too many", _mm_k_mask_off_by_one,
            names=r"loads from A outside its elements, at row 0, column 70",
            avoid=_NOT_A_MASK_MISSING),
    Planted("13.3", "inner block BLOCK_N wide", _mm_inner_block_n,
            names=r"case \d of 3 .* fails: C ", avoid=r"BLOCK_M in its place"),
    Planted("13.3", "store masked on the columns only", _mm_store_masked_on_columns,
            names=r"stores to C outside its elements, at row \d+, column \d+, past its \d+ rows",
            avoid=_NOT_A_MASK_MISSING + r"|rows past M but not the columns"),
    Planted("13.3", "tl.dot at its default precision (TF32)", _mm_default_precision,
            names=_TF32),
    Planted("13.3", "A stepped by B's row stride", _mm_a_with_b_stride,
            names=r"row stride", avoid=r"A \+ r \* K"),
    Planted("13.3", "loop stops one block short of K", _mm_loop_short_of_k,
            names=r"fails: C ", avoid=r"stops after one block"),
    # 13.4
    Planted("13.4", "running max starts at 0", _fwd_max_from_zero,
            names=r"running max starts at -inf"),
    Planted("13.4", "the weights not cast before P V", _fwd_uncast_weights,
            names=r"one dtype"),
    Planted("13.4", "int32 head offsets", _fwd_int32_head, names=_INT64),
    Planted("13.4", "tl.dot at its default precision (TF32)", _fwd_default_precision,
            names=_TF32),
    Planted("13.4", "correction factor inverted", _fwd_correction_inverted,
            names=r"fails: (O|L) ", avoid=r"must be rescaled"),
    Planted("13.4", "K and V loaded without the d mask", _fwd_no_width_mask,
            names=r"loads from K outside its elements", avoid=r"not i \* d"),
    # 13.5
    Planted("13.5", "every tile visited, its loads masked", _causal_all_tiles_masked_loads,
            names=r"stops its loop at the diagonal"),
    Planted("13.5", "loop's stop without the shift M - N", _causal_stop_without_shift,
            names=r"fails: (O|L) ", avoid=_NO_CAUSAL_NAMED),
    Planted("13.5", "shift written N - M", _causal_shift_reversed,
            names=r"fails: (O|L) ", avoid=r"ignores CAUSAL"),
    Planted("13.5", "rows counted in BLOCK_N", _causal_rows_in_block_n,
            avoid=_NO_CAUSAL_NAMED),
    Planted("13.5", "running max starts at 0 (causal)", _causal_max_from_zero,
            names=r"running max starts at -inf"),
    Planted("13.5", "int32 head offsets (causal)", _causal_int32_head, names=_INT64),
    # 13.6
    Planted("13.6", "P not cast before P^T dO", _dkdv_p_uncast, names=r"one dtype"),
    Planted("13.6", "first query tile adds the shift", _dkdv_first_tile_late,
            names=r"fails: (dK|dV) ", avoid=_NO_CAUSAL_NAMED),
    Planted("13.6", "every query tile visited, its loads masked", _dkdv_all_tiles_masked_loads,
            names=r"leaves out the tiles the mask would empty"),
    Planted("13.6", "the row term read from L", _dkdv_delta_from_l,
            names=r"fails: dK ", avoid=r"without the row term"),
    Planted("13.6", "int32 head offsets", _dkdv_int32_head, names=_INT64),
    Planted("13.6", "tl.dot at its default precision (TF32)", _dkdv_default_precision,
            names=_TF32),
    Planted("13.6", "scale twice in dK", _dkdv_scale_twice,
            names=r"fails: dK ", avoid=r"without its scale|brings one factor"),
    # 13.7
    Planted("13.7", "dS not cast before dS K", _dq_ds_uncast, names=r"one dtype"),
    # its stop adds BLOCK_N where the tile's rows end at BLOCK_M: the stop counted in BLOCK_N
    Planted("13.7", "stop a key block past the tile's first row", _dq_stop_from_key_tiles,
            names=r"counts query rows"),
    Planted("13.7", "every key tile visited, its loads masked", _dq_all_tiles_masked_loads,
            names=r"leaves out the tiles the mask would empty"),
    Planted("13.7", "int32 head offsets", _dq_int32_head, names=_INT64),
    Planted("13.7", "tl.dot at its default precision (TF32)", _dq_default_precision,
            names=_TF32),
    Planted("13.7", "row term subtracted outside P", _dq_row_term_outside,
            names=r"fails: dQ ", avoid=r"without the row term"),
]
