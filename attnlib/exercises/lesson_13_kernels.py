"""The Triton side of lesson 13's exercises: the kernels the reader writes, in attnlib's
version and with the catalogued mistakes, the launchers that run them, and
:func:`reader_flash_attention`, which makes the reader's kernels one differentiable function.

Each exercise's kernel is written once here with a ``BUG`` parameter: ``BUG=0`` is attnlib's
kernel (the fallback for a piece the reader has not written, and what the tests compare with
PyTorch), and each other value is one catalogued mistake, the kernel a reader writes who
holds that misconception. The checks run a mistake as ``Bug(kernel, n)``.

The layout every attention kernel of the exercises sees (one head per program of grid axis
1; the launcher repeats the shared key/value heads of grouped-query attention, so a kernel
never maps heads): ``Q``, ``O``, ``dO`` and ``dQ`` hold head ``h``, row ``i``, column ``c``
at ``h * stride_qh + i * stride_qn + c``; ``K``, ``V``, ``dK`` and ``dV`` the same with
``stride_kh`` and ``stride_kn``; ``L`` and ``D`` hold head ``h``, row ``i`` at ``h * N + i``.

Imported on first use of a lesson 13 check, since it imports triton (through
:mod:`attnlib.kernels.triton_flash`, which switches the interpreter on when no CUDA is
present).

Lesson: 13_attention_as_a_kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from attnlib.exercises.triton_checks import Guarded, cdiv, is_kernel, launch
from attnlib.kernels import triton_flash as _flash
from attnlib.kernels.backward import check_grouped_qkv

__all__ = ["Bug", "dkdv_kernel", "dq_kernel", "forward_kernel", "matmul_kernel",
           "reader_flash_attention", "softmax_kernel"]


class Bug(NamedTuple):
    """Catalogued mistake ``number`` of ``kernel`` (its ``BUG`` parameter)."""

    kernel: object
    number: int


def _unpack(fn) -> tuple[object, dict]:
    return (fn.kernel, {"BUG": fn.number}) if isinstance(fn, Bug) else (fn, {})


# ---------------------------------------------------------------------------------------
# 13.2: a row softmax
# ---------------------------------------------------------------------------------------


@triton.jit
def softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr, BUG: tl.constexpr = 0):
    """Row ``r`` of ``Y`` = softmax of row ``r`` of ``X`` (``n_cols`` numbers from
    ``X + r * stride``); one program per row. Mistakes: 1 an unmasked load, 2 the lanes past
    the row read as 0, 3 no max subtracted, 4 an unmasked store, 5 the row length as the
    row stride."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    start = row * stride
    if BUG == 5:
        start = row * n_cols
    if BUG == 1:
        x = tl.load(X + start + cols)
    elif BUG == 2:
        x = tl.load(X + start + cols, mask=ok, other=0.0)
    else:
        x = tl.load(X + start + cols, mask=ok, other=float("-inf"))
    if BUG == 3:
        z = tl.exp(x)
    else:
        z = tl.exp(x - tl.max(x, axis=0))
    y = z / tl.sum(z, axis=0)
    if BUG == 4:
        tl.store(Y + start + cols, y)
    else:
        tl.store(Y + start + cols, y, mask=ok)


def run_softmax(fn, x: torch.Tensor, *, pad: int = 3) -> torch.Tensor:
    """``fn`` on the rows of ``x`` (rows, n), laid out with ``pad`` numbers after each row."""
    kernel, meta = _unpack(fn)
    rows, n = x.shape
    X = Guarded("X", (rows, n), dtype=x.dtype, device=x.device, data=x, pad_cols=pad)
    Y = Guarded("Y", (rows, n), dtype=x.dtype, device=x.device, pad_cols=pad)
    launch(kernel, (rows,), (X.view, Y.view, X.stride_r, n),
           {"BLOCK": triton.next_power_of_2(n), **meta}, (X, Y))
    return Y.result()


# ---------------------------------------------------------------------------------------
# 13.3: a tiled matrix product
# ---------------------------------------------------------------------------------------


@triton.jit
def matmul_kernel(A, B, C, M, N, K, stride_a, stride_b, stride_c, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BUG: tl.constexpr = 0):
    """``C = A B`` for ``A (M, K)``, ``B (K, N)``, one program per ``BLOCK_M x BLOCK_N`` tile
    of ``C``; row ``r`` of a matrix starts at its row stride times ``r``. Mistakes: 1 the
    loads along K unmasked, 2 the row length K as A's row stride, 3 one block of K only,
    4 the accumulator overwritten, 5 an unmasked store."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inner = tl.arange(0, BLOCK_K)
    row_ok, col_ok = rows < M, cols < N
    step_a = stride_a
    if BUG == 2:
        step_a = K
    stop = K
    if BUG == 3:
        stop = BLOCK_K
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, stop, BLOCK_K):
        ks = k0 + inner
        if BUG == 1:
            a = tl.load(A + rows[:, None] * step_a + ks[None, :], mask=row_ok[:, None])
            b = tl.load(B + ks[:, None] * stride_b + cols[None, :], mask=col_ok[None, :])
        else:
            a = tl.load(A + rows[:, None] * step_a + ks[None, :],
                        mask=row_ok[:, None] & (ks[None, :] < K), other=0.0)
            b = tl.load(B + ks[:, None] * stride_b + cols[None, :],
                        mask=(ks[:, None] < K) & col_ok[None, :], other=0.0)
        if BUG == 4:
            acc = tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b, input_precision="ieee")
    out = C + rows[:, None] * stride_c + cols[None, :]
    if BUG == 5:
        tl.store(out, acc.to(C.dtype.element_ty))
    else:
        tl.store(out, acc.to(C.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def run_matmul(fn, a: torch.Tensor, b: torch.Tensor, blocks: tuple[int, int, int]) -> torch.Tensor:
    """``fn`` on ``a (M, K)`` and ``b (K, N)`` in padded layouts (three row strides that all
    differ from the row lengths); returns ``C (M, N)``."""
    kernel, meta = _unpack(fn)
    (M, K), N = a.shape, b.shape[1]
    A = Guarded("A", (M, K), dtype=a.dtype, device=a.device, data=a, pad_cols=3)
    B = Guarded("B", (K, N), dtype=b.dtype, device=b.device, data=b, pad_cols=5)
    C = Guarded("C", (M, N), dtype=a.dtype, device=a.device, pad_cols=2)
    bm, bn, bk = blocks
    launch(kernel, (cdiv(M, bm), cdiv(N, bn)),
           (A.view, B.view, C.view, M, N, K, A.stride_r, B.stride_r, C.stride_r),
           {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **meta}, (A, B, C))
    return C.result()


# ---------------------------------------------------------------------------------------
# 13.4 and 13.5: FlashAttention-2's forward, then causal
# ---------------------------------------------------------------------------------------


@triton.jit
def forward_kernel(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d, scale,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr, BUG: tl.constexpr = 0):
    """FlashAttention-2's forward for one tile of ``BLOCK_M`` query rows of head
    ``program_id(1)``: ``O = softmax(scale Q K^T) V`` and ``L`` the row log-sum-exp. Mistakes:
    1 the accumulator not rescaled, 2 the running sum not rescaled, 3 no running max, 4 L
    the max alone, 5 the width d as the row stride, 6 the scale ignored (1/sqrt(d) used),
    7 P left in float32 for the second product, 8 an unmasked store of O; causal: 9 aligned
    top-left, 10 masked but not skipped, 11 skipped but not masked, 12 the diagonal hidden,
    13 CAUSAL ignored."""
    start_m = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)  # int64: h * stride_qh may pass 2**31
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    row_ok, dim_ok = rows < N, dims < d
    step_q, step_k = stride_qn, stride_kn
    if BUG == 5:
        step_q, step_k = d, d
    s_scale = scale
    if BUG == 6:
        s_scale = 1.0 / tl.sqrt(d.to(tl.float32))
    shift = M - N  # the queries are the last N positions: query i sees keys j <= i + M - N
    if BUG == 9:
        shift = 0
    q = tl.load(Q + h * stride_qh + rows[:, None] * step_q + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL and BUG != 13 and BUG != 10:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + shift)
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + cols
        key_ok = keys < M
        kv = h * stride_kh + keys[:, None] * step_k + dims[None, :]
        k = tl.load(K + kv, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        v = tl.load(V + kv, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * s_scale
        keep = key_ok[None, :]
        if CAUSAL and BUG != 13 and BUG != 11:
            if BUG == 12:
                keep = keep & (keys[None, :] < rows[:, None] + shift)
            else:
                keep = keep & (keys[None, :] <= rows[:, None] + shift)
        s = tl.where(keep, s, float("-inf"))
        if BUG == 3:
            p = tl.exp(s)
            l_i = l_i + tl.sum(p, 1)
            acc = acc + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            if BUG == 2:
                l_i = l_i + tl.sum(p, 1)
            else:
                l_i = alpha * l_i + tl.sum(p, 1)
            if BUG == 7:
                pv = tl.dot(p, v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            if BUG == 1:
                acc = acc + pv
            else:
                acc = acc * alpha[:, None] + pv
            m_i = m_new
    out = O + h * stride_qh + rows[:, None] * step_q + dims[None, :]
    if BUG == 8:
        tl.store(out, (acc / l_i[:, None]).to(O.dtype.element_ty))
    else:
        tl.store(out, (acc / l_i[:, None]).to(O.dtype.element_ty),
                 mask=row_ok[:, None] & dim_ok[None, :])
    if BUG == 3:
        lse = tl.log(l_i)
    elif BUG == 4:
        lse = m_i
    else:
        lse = m_i + tl.log(l_i)
    tl.store(L + h * N + rows, lse, mask=row_ok)


# ---------------------------------------------------------------------------------------
# 13.6 and 13.7: the backward, dK and dV, then dQ
# ---------------------------------------------------------------------------------------


@triton.jit
def dkdv_kernel(Q, K, V, dO, L, D, dK, dV, stride_qh, stride_qn, stride_kh, stride_kn, N, M,
                d, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr, BUG: tl.constexpr = 0):
    """``dK`` and ``dV`` of one tile of ``BLOCK_N`` keys of head ``program_id(1)``, walking the
    query tiles and rebuilding ``P = exp(scale Q K^T - L)``. Mistakes: 1 without D, 2 the
    scale missing when P is rebuilt, 3 dK without its scale, 4 the causal mask missing,
    5 every query tile visited, 6 P not transposed in dV, 7 an unmasked store, 8 CAUSAL
    ignored."""
    start_n = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    keys = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    key_ok, dim_ok = keys < M, dims < d
    kv_mask = key_ok[:, None] & dim_ok[None, :]
    kv = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
    k = tl.load(K + kv, mask=kv_mask, other=0.0)
    v = tl.load(V + kv, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    first = 0
    if CAUSAL and BUG != 8 and BUG != 5:  # the first query tile that sees any of these keys
        first = tl.maximum(0, start_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for start_m in range(first, N, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < N
        qd = h * stride_qh + rows[:, None] * stride_qn + dims[None, :]
        q = tl.load(Q + qd, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        do = tl.load(dO + qd, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        lse = tl.load(L + h * N + rows, mask=row_ok, other=0.0)
        delta = tl.load(D + h * N + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
        if BUG != 2:
            s = s * scale
        keep = row_ok[:, None] & key_ok[None, :]
        if CAUSAL and BUG != 8 and BUG != 4:
            keep = keep & (keys[None, :] <= rows[:, None] + (M - N))
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        if BUG == 6:
            dv += tl.dot(p.to(do.dtype), do, input_precision="ieee")
        else:
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        if BUG == 1:
            ds = p * dp
        else:
            ds = p * (dp - delta[:, None])
        if BUG == 3:
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
        else:
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee") * scale
    if BUG == 7:
        tl.store(dK + kv, dk.to(dK.dtype.element_ty))
        tl.store(dV + kv, dv.to(dV.dtype.element_ty))
    else:
        tl.store(dK + kv, dk.to(dK.dtype.element_ty), mask=kv_mask)
        tl.store(dV + kv, dv.to(dV.dtype.element_ty), mask=kv_mask)


@triton.jit
def dq_kernel(Q, K, V, dO, L, D, dQ, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d,
              scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr, BUG: tl.constexpr = 0):
    """``dQ`` of one tile of ``BLOCK_M`` query rows of head ``program_id(1)``, walking the key
    tiles. Mistakes: 1 without D, 2 the scale missing when P is rebuilt, 3 dQ without its
    scale, 4 the causal mask missing, 5 the causal stop counted in key blocks, 6 every key
    tile visited, 7 an unmasked store, 8 CAUSAL ignored."""
    start_m = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    row_ok, dim_ok = rows < N, dims < d
    q_mask = row_ok[:, None] & dim_ok[None, :]
    qd = h * stride_qh + rows[:, None] * stride_qn + dims[None, :]
    q = tl.load(Q + qd, mask=q_mask, other=0.0)
    do = tl.load(dO + qd, mask=q_mask, other=0.0)
    lse = tl.load(L + h * N + rows, mask=row_ok, other=0.0)
    delta = tl.load(D + h * N + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL and BUG != 8 and BUG != 6:
        if BUG == 5:
            stop = tl.minimum(M, (start_m + 1) * BLOCK_N + (M - N))
        else:
            stop = tl.minimum(M, (start_m + 1) * BLOCK_M + (M - N))
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + cols
        key_ok = keys < M
        kv = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
        k = tl.load(K + kv, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        v = tl.load(V + kv, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
        if BUG != 2:
            s = s * scale
        keep = row_ok[:, None] & key_ok[None, :]
        if CAUSAL and BUG != 8 and BUG != 4:
            keep = keep & (keys[None, :] <= rows[:, None] + (M - N))
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        if BUG == 1:
            ds = p * dp
        else:
            ds = p * (dp - delta[:, None])
        if BUG == 3:
            dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
        else:
            dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    if BUG == 7:
        tl.store(dQ + qd, dq.to(dQ.dtype.element_ty))
    else:
        tl.store(dQ + qd, dq.to(dQ.dtype.element_ty), mask=q_mask)


# ---------------------------------------------------------------------------------------
# Launching the attention kernels
# ---------------------------------------------------------------------------------------

# The checks' layouts: Q's rows (and O's, dO's, dQ's) padded by 3 numbers with 2 rows between
# heads, K's (and V's, dK's, dV's) by 5 with 1, so that no stride equals a row length, and
# the two layouts differ from each other.
_Q_PAD, _K_PAD = {"pad_cols": 3, "pad_rows": 2}, {"pad_cols": 5, "pad_rows": 1}


class _Layout(NamedTuple):
    """The tensors of one launch, guarded (checks) or contiguous (production)."""

    tensors: dict[str, torch.Tensor]
    guards: tuple[Guarded, ...]
    strides: tuple[int, int, int, int]


def _layout(inputs: dict[str, torch.Tensor], outputs: dict[str, tuple], guarded: bool) -> _Layout:
    """Lay out ``inputs`` (name -> tensor) and allocate ``outputs`` (name -> (shape, dtype)).

    Names starting with ``Q``/``O``/``dO``/``dQ`` take Q's layout, ``K``/``V``/``dK``/``dV``
    K's, ``L`` and ``D`` a contiguous ``(heads, N)``.
    """
    q_names, k_names = {"Q", "O", "dO", "dQ"}, {"K", "V", "dK", "dV"}
    device = next(iter(inputs.values())).device
    tensors, guards = {}, []
    for name, spec in [*inputs.items(), *outputs.items()]:
        data = spec if isinstance(spec, torch.Tensor) else None
        shape, dtype = (tuple(data.shape), data.dtype) if data is not None else spec
        if guarded:
            pad = _Q_PAD if name in q_names else _K_PAD if name in k_names else {}
            g = Guarded(name, shape, dtype=dtype, device=device, data=data, **pad)
            guards.append(g)
            tensors[name] = g.view
        else:
            tensors[name] = data.contiguous() if data is not None else \
                torch.empty(shape, dtype=dtype, device=device)
    q_strides = tensors["Q"].stride()[:2]
    k_strides = tensors["K"].stride()[:2]
    return _Layout(tensors, tuple(guards), (*q_strides, *k_strides))


def _meta(causal, block_m, block_n, d, extra):
    return {"CAUSAL": bool(causal), "BLOCK_M": block_m, "BLOCK_N": block_n,
            "BLOCK_D": triton.next_power_of_2(d), **extra}


def run_forward(fn, Q, K, V, *, scale, causal, block_m, block_n, guarded=True):
    """``fn`` as the forward kernel on ``Q (heads, N, d)``, ``K, V (heads, M, d)``: returns
    ``(O, L, watch)``, watch the record of the loads (None unless interpreted and guarded)."""
    kernel, extra = _unpack(fn)
    heads, N, d = Q.shape
    M = K.shape[1]
    lay = _layout({"Q": Q, "K": K, "V": V},
                  {"O": (Q.shape, Q.dtype), "L": ((heads, N), torch.float32)}, guarded)
    t = lay.tensors
    watch = launch(kernel, (cdiv(N, block_m), heads),
                   (t["Q"], t["K"], t["V"], t["O"], t["L"], *lay.strides, N, M, d,
                    float(scale)), _meta(causal, block_m, block_n, d, extra), lay.guards)
    return t["O"].clone(), t["L"].clone(), watch


def run_dkdv(fn, Q, K, V, dO, L, D, *, scale, causal, block_m, block_n, guarded=True):
    """``fn`` as the dK/dV kernel: returns ``(dK, dV, watch)``."""
    kernel, extra = _unpack(fn)
    heads, N, d = Q.shape
    M = K.shape[1]
    lay = _layout({"Q": Q, "K": K, "V": V, "dO": dO, "L": L, "D": D},
                  {"dK": (K.shape, K.dtype), "dV": (V.shape, V.dtype)}, guarded)
    t = lay.tensors
    watch = launch(kernel, (cdiv(M, block_n), heads),
                   (t["Q"], t["K"], t["V"], t["dO"], t["L"], t["D"], t["dK"], t["dV"],
                    *lay.strides, N, M, d, float(scale)),
                   _meta(causal, block_m, block_n, d, extra), lay.guards)
    return t["dK"].clone(), t["dV"].clone(), watch


def run_dq(fn, Q, K, V, dO, L, D, *, scale, causal, block_m, block_n, guarded=True):
    """``fn`` as the dQ kernel: returns ``(dQ, watch)``."""
    kernel, extra = _unpack(fn)
    heads, N, d = Q.shape
    M = K.shape[1]
    lay = _layout({"Q": Q, "K": K, "V": V, "dO": dO, "L": L, "D": D},
                  {"dQ": (Q.shape, Q.dtype)}, guarded)
    t = lay.tensors
    watch = launch(kernel, (cdiv(N, block_m), heads),
                   (t["Q"], t["K"], t["V"], t["dO"], t["L"], t["D"], t["dQ"],
                    *lay.strides, N, M, d, float(scale)),
                   _meta(causal, block_m, block_n, d, extra), lay.guards)
    return t["dQ"].clone(), watch


# ---------------------------------------------------------------------------------------
# Tiles a causal kernel may skip, as the watch recorded them
# ---------------------------------------------------------------------------------------


def unskipped_query_tiles(watch, N: int, M: int, block_m: int, block_n: int,
                          tensor: str = "K") -> str | None:
    """For a forward or dQ launch (one program per query tile): the first program that
    loaded key rows from a tile wholly in the future of all its queries, in words."""
    for (tile, h, _), rows in sorted(watch.loads[tensor].items()):
        last_query = min(N, (tile + 1) * block_m) - 1
        last_key = last_query + (M - N)  # the last key any query of the tile sees
        needed = (last_key // block_n + 1) * block_n - 1  # the end of that key's tile
        if rows and max(rows) > needed:
            return (f"the program of query tile {tile} (rows {tile * block_m} to "
                    f"{last_query}) of head {h} loaded {tensor} up to row {max(rows)}, "
                    f"though none of its queries sees a key past {last_key}")
    return None


def unskipped_key_tiles(watch, N: int, M: int, block_m: int, block_n: int) -> str | None:
    """For a dK/dV launch (one program per key tile): the first program that loaded query
    rows from a tile none of whose queries sees any of its keys, in words."""
    for (tile, h, _), rows in sorted(watch.loads["Q"].items()):
        first_query = max(0, tile * block_n - (M - N))  # the first query that sees the tile
        needed = first_query // block_m * block_m
        if rows and min(rows) < needed:
            return (f"the program of key tile {tile} (keys {tile * block_n} onwards) of head "
                    f"{h} loaded Q from row {min(rows)}, though no query before row "
                    f"{first_query} sees its keys")
    return None


# ---------------------------------------------------------------------------------------
# The reader's kernels as one differentiable function
# ---------------------------------------------------------------------------------------


def _kernel_or_ours(name: str, given, ours):
    if given is None:
        return ours
    if not is_kernel(given):
        raise TypeError(f"{name} must be a Triton kernel (a function under @triton.jit) or "
                        f"None for attnlib's; got {type(given).__name__}")
    return given


def reader_flash_attention(forward=None, dkdv=None, dq=None):
    """The reader's kernels of exercises 13.4 to 13.7 as one differentiable attention.

    Args:
        forward: the forward kernel (exercises 13.4 and 13.5), or None for attnlib's.
        dkdv: the dK/dV kernel (13.6), or None for attnlib's.
        dq: the dQ kernel (13.7), or None for attnlib's.

    Returns:
        A function ``attend(Q, K, V, causal=False, scale=None, block_m=16, block_n=16)`` on
        ``Q (B, H, N, d)``, ``K, V (B, G, M, d)`` (``G`` dividing ``H``), differentiable in
        all three through a ``torch.autograd.Function`` whose forward runs ``forward`` and
        whose backward runs ``dkdv`` and ``dq``. The launcher repeats each key/value head
        for the ``H / G`` query heads that share it and sums their gradients afterwards, so
        the kernels see one head per program. ``attend.whose`` says, per kernel, whose
        code runs (``"yours"`` or ``"attnlib"``).

    Raises:
        TypeError: a kernel given is not a Triton kernel.

    Example:
        >>> attend = reader_flash_attention()
        >>> attend.whose
        {'forward': 'attnlib', 'dK, dV': 'attnlib', 'dQ': 'attnlib'}
    """
    kernels = (_kernel_or_ours("forward", forward, forward_kernel),
               _kernel_or_ours("dkdv", dkdv, dkdv_kernel),
               _kernel_or_ours("dq", dq, dq_kernel))

    class ReaderFlash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, Q, K, V, causal, scale, block_m, block_n):
            B, H, N, d = Q.shape
            G, M = K.shape[1], K.shape[2]
            work = _flash.tile_dtype(Q.dtype)
            q = Q.to(work).reshape(B * H, N, d)
            k, v = (x.to(work).repeat_interleave(H // G, dim=1).reshape(B * H, M, d)
                    for x in (K, V))
            O, L, _ = run_forward(kernels[0], q, k, v, scale=scale, causal=causal,
                                  block_m=block_m, block_n=block_n, guarded=False)
            ctx.save_for_backward(q, k, v, O, L)
            ctx.settings = (B, H, G, causal, scale, block_m, block_n, Q.dtype)
            return O.reshape(B, H, N, d).to(Q.dtype)

        @staticmethod
        def backward(ctx, dO):
            q, k, v, O, L = ctx.saved_tensors
            B, H, G, causal, scale, block_m, block_n, dtype = ctx.settings
            N, M, d = q.shape[1], k.shape[1], q.shape[2]
            do = dO.to(q.dtype).reshape(B * H, N, d).contiguous()
            D = (do.float() * O.float()).sum(-1)  # rowsum(dO * O), one number per row
            args = dict(scale=scale, causal=causal, block_m=block_m, block_n=block_n,
                        guarded=False)
            dK, dV, _ = run_dkdv(kernels[1], q, k, v, do, L, D, **args)
            dQ, _ = run_dq(kernels[2], q, k, v, do, L, D, **args)

            def fold(x):  # the H / G query heads sharing a kv head add up their gradients
                return x.reshape(B, G, H // G, M, d).sum(2).to(dtype)

            return dQ.reshape(B, H, N, d).to(dtype), fold(dK), fold(dV), None, None, None, None

    def attend(Q, K, V, causal: bool = False, scale: float | None = None,
               block_m: int = 16, block_n: int = 16) -> torch.Tensor:
        s = check_grouped_qkv(Q, K, V, scale)
        if Q.dim() != 4:
            raise ValueError(f"Q must have 4 dimensions (B, H, N, d); got shape "
                             f"{tuple(Q.shape)}")
        if Q.dtype not in _flash.DTYPES:
            raise TypeError(f"Q, K and V must be float16, bfloat16 or float32; got {Q.dtype}")
        return ReaderFlash.apply(Q, K, V, bool(causal), s, block_m, block_n)

    attend.whose = {piece: "attnlib" if given is None else "yours"
                    for piece, given in (("forward", forward), ("dK, dV", dkdv), ("dQ", dq))}
    return attend

