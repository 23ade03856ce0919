"""The Triton side of lesson 13's exercises: attnlib's version of each kernel the reader
writes, the catalogued mistakes as edits of its source, the launchers that run them, and
:func:`reader_flash_attention`, which makes the reader's kernels one differentiable function.

Each kernel here is the lesson's solution to its exercise (the forward's, 13.5's, with
``CAUSAL``), plus attnlib's contract that a row that sees no key gives zeros: the fallback for
a piece the reader has not written, and what the tests compare with PyTorch. A catalogued
mistake is that source with an edit or two applied (:func:`patched`): the kernel a reader
writes who holds the misconception, built once and compiled from its own text.

The layout every attention kernel of the exercises sees (one head per program of grid axis
1; the launcher repeats the shared key/value heads of grouped-query attention, so a kernel
never maps heads): ``Q``, ``O``, ``dO`` and ``dQ`` hold head ``h``, row ``i``, column ``c``
at ``h * stride_qh + i * stride_qn + c``; ``K``, ``V``, ``dK`` and ``dV`` the same with
``stride_kh`` and ``stride_kn``; ``L`` and ``D`` hold head ``h``, row ``i`` at ``h * N + i``.

Imported on first use of a lesson 13 check, since it imports triton (through
:mod:`attnlib.kernels.triton_flash`). Without a CUDA device the kernels run in Triton's
interpreter, which the process must switch on itself (``TRITON_INTERPRET=1`` before the
first kernel is defined: lesson 13's second cell does it); attnlib never sets it.

Lesson: 13_attention_as_a_kernel.
"""

from __future__ import annotations

import inspect
import linecache
import textwrap
from collections.abc import Sequence
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from attnlib.exercises.triton_checks import Guarded, cdiv, is_kernel, launch
from attnlib.kernels import triton_flash as _flash
from attnlib.kernels.backward import check_grouped_qkv

__all__ = ["dkdv_kernel", "dq_kernel", "forward_kernel", "is_patched", "matmul_kernel", "patched",
           "reader_flash_attention", "softmax_kernel"]


# ---------------------------------------------------------------------------------------
# 13.2 and 13.3: a row softmax, a tiled product
# ---------------------------------------------------------------------------------------


@triton.jit
def softmax_kernel(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=inside, other=float("-inf"))
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=inside)


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


# ---------------------------------------------------------------------------------------
# 13.4 and 13.5: FlashAttention-2's forward, causal or not
# ---------------------------------------------------------------------------------------


@triton.jit
def forward_kernel(Q, K, V, O, L, stride_qh, stride_qn, stride_kh, stride_kn, N, M, d, scale,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)  # int64: h * stride_qh may pass 2**31
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < N) & (dims[None, :] < d)
    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qn + dims[None, :], mask=q_mask,
                other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # the running max
    l = tl.zeros([BLOCK_M], dtype=tl.float32)  # the running sum
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL:  # the last key any query of this tile sees is (start_m + 1) * BLOCK_M - 1 + M - N
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + M - N)
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < M) & (dims[None, :] < d)
        at = h * stride_kh + keys[:, None] * stride_kn + dims[None, :]
        k = tl.load(K + at, mask=kv_mask, other=0.0)
        v = tl.load(V + at, mask=kv_mask, other=0.0)
        s = scale * tl.dot(q, tl.trans(k), input_precision="ieee")
        keep = keys[None, :] < M
        if CAUSAL:  # bottom-right: query i is position i + M - N
            keep = keep & (keys[None, :] <= rows[:, None] + M - N)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_exp = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key
        p = tl.exp(s - m_exp[:, None])
        alpha = tl.exp(m - m_exp)  # rescales what was summed under the old max
        l = alpha * l + tl.sum(p, 1)
        acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new
    l_out = tl.where(l == 0.0, 1.0, l)  # a row that saw no key writes zeros
    tl.store(O + h * stride_qh + rows[:, None] * stride_qn + dims[None, :],
             (acc / l_out[:, None]).to(O.dtype.element_ty), mask=q_mask)
    tl.store(L + h * N + rows, m + tl.log(l), mask=rows < N)


# ---------------------------------------------------------------------------------------
# 13.6 and 13.7: the backward, dK and dV, then dQ
# ---------------------------------------------------------------------------------------


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
    if CAUSAL:  # the query tile of the first query that sees any of these keys
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
        s = scale * tl.dot(q, tl.trans(k), input_precision="ieee")
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dk += scale * tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
    tl.store(dK + at, dk.to(dK.dtype.element_ty), mask=kv_mask)
    tl.store(dV + at, dv.to(dV.dtype.element_ty), mask=kv_mask)


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
        s = scale * tl.dot(q, tl.trans(k), input_precision="ieee")
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dq += scale * tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    tl.store(dQ + qa, dq.to(dQ.dtype.element_ty), mask=q_mask)


# ---------------------------------------------------------------------------------------
# A mistake: the kernel's source, edited
# ---------------------------------------------------------------------------------------

Edit = tuple[str, str]
"""``(old, new)``: every occurrence of the text ``old`` in a kernel's source becomes ``new``."""

_PATCHED: dict[tuple[str, tuple[Edit, ...]], object] = {}


def patched(kernel, edits: Sequence[Edit], name: str = "kernel"):
    """``kernel`` with ``edits`` applied to its source, compiled as a kernel of its own.

    Each edit replaces every occurrence of its text and must change something. The source
    is registered with :mod:`linecache` under a name of its own, so that Triton (which
    reads a kernel's source), tracebacks and :func:`inspect.getsource` find it. Built once
    per kernel and edits.

    Raises:
        ValueError: an edit's text does not occur in the source.
    """
    key = (kernel.fn.__qualname__, tuple(edits))
    if key in _PATCHED:
        return _PATCHED[key]
    src = textwrap.dedent(inspect.getsource(kernel.fn))
    for old, new in edits:
        if old not in src:
            raise ValueError(f"the edit {old!r} -> {new!r} finds nothing in "
                             f"{kernel.fn.__name__}'s source")
        src = src.replace(old, new)
    filename = f"<lesson 13 mistake {len(_PATCHED)}: {name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace = {"triton": triton, "tl": tl}
    exec(compile(src, filename, "exec"), namespace)
    _PATCHED[key] = namespace[kernel.fn.__name__]
    return _PATCHED[key]


def is_patched(fn: object) -> bool:
    """Whether ``fn`` is a kernel :func:`patched` built (a catalogued mistake)."""
    return any(fn is built for built in _PATCHED.values())


# ---------------------------------------------------------------------------------------
# Launching the kernels
# ---------------------------------------------------------------------------------------


def run_softmax(kernel, x: torch.Tensor, *, pad: int = 3) -> torch.Tensor:
    """``kernel`` on the rows of ``x`` (rows, n), laid out with ``pad`` numbers after each row."""
    rows, n = x.shape
    X = Guarded("X", (rows, n), dtype=x.dtype, device=x.device, data=x, pad_cols=pad)
    Y = Guarded("Y", (rows, n), dtype=x.dtype, device=x.device, pad_cols=pad)
    launch(kernel, (rows,), (X.view, Y.view, X.stride_r, n),
           {"BLOCK": triton.next_power_of_2(n)}, (X, Y))
    return Y.result()


def run_matmul(kernel, a: torch.Tensor, b: torch.Tensor, blocks: tuple[int, int, int], *,
               tf32: bool = True):
    """``kernel`` on ``a (M, K)`` and ``b (K, N)`` in padded layouts (three row strides that
    all differ from the row lengths); returns ``(C, watch)``, ``C (M, N)``."""
    (M, K), N = a.shape, b.shape[1]
    A = Guarded("A", (M, K), dtype=a.dtype, device=a.device, data=a, pad_cols=3)
    B = Guarded("B", (K, N), dtype=b.dtype, device=b.device, data=b, pad_cols=5)
    C = Guarded("C", (M, N), dtype=a.dtype, device=a.device, pad_cols=2)
    bm, bn, bk = blocks
    watch = launch(kernel, (cdiv(M, bm), cdiv(N, bn)),
                   (A.view, B.view, C.view, M, N, K, A.stride_r, B.stride_r, C.stride_r),
                   {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, (A, B, C), tf32=tf32)
    return C.result(), watch

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


def _meta(causal, block_m, block_n, d):
    return {"CAUSAL": bool(causal), "BLOCK_M": block_m, "BLOCK_N": block_n,
            "BLOCK_D": triton.next_power_of_2(d)}


def run_forward(kernel, Q, K, V, *, scale, causal, block_m, block_n, guarded=True, tf32=True,
                far_heads=False):
    """``kernel`` as the forward kernel on ``Q (heads, N, d)``, ``K, V (heads, M, d)``: returns
    ``(O, L, watch)``, watch the record of the launch (None unless interpreted and guarded;
    ``tf32`` and ``far_heads`` as in :func:`attnlib.exercises.triton_checks.launch`)."""
    heads, N, d = Q.shape
    M = K.shape[1]
    lay = _layout({"Q": Q, "K": K, "V": V},
                  {"O": (Q.shape, Q.dtype), "L": ((heads, N), torch.float32)}, guarded)
    t = lay.tensors
    watch = launch(kernel, (cdiv(N, block_m), heads),
                   (t["Q"], t["K"], t["V"], t["O"], t["L"], *lay.strides, N, M, d,
                    float(scale)), _meta(causal, block_m, block_n, d), lay.guards,
                   tf32=tf32, far_heads=far_heads)
    return t["O"].clone(), t["L"].clone(), watch


def run_dkdv(kernel, Q, K, V, dO, L, D, *, scale, causal, block_m, block_n, guarded=True,
             tf32=True, far_heads=False):
    """``kernel`` as the dK/dV kernel: returns ``(dK, dV, watch)``."""
    heads, N, d = Q.shape
    M = K.shape[1]
    lay = _layout({"Q": Q, "K": K, "V": V, "dO": dO, "L": L, "D": D},
                  {"dK": (K.shape, K.dtype), "dV": (V.shape, V.dtype)}, guarded)
    t = lay.tensors
    watch = launch(kernel, (cdiv(M, block_n), heads),
                   (t["Q"], t["K"], t["V"], t["dO"], t["L"], t["D"], t["dK"], t["dV"],
                    *lay.strides, N, M, d, float(scale)),
                   _meta(causal, block_m, block_n, d), lay.guards, tf32=tf32,
                   far_heads=far_heads)
    return t["dK"].clone(), t["dV"].clone(), watch


def run_dq(kernel, Q, K, V, dO, L, D, *, scale, causal, block_m, block_n, guarded=True,
           tf32=True, far_heads=False):
    """``kernel`` as the dQ kernel: returns ``(dQ, watch)``."""
    heads, N, d = Q.shape
    M = K.shape[1]
    lay = _layout({"Q": Q, "K": K, "V": V, "dO": dO, "L": L, "D": D},
                  {"dQ": (Q.shape, Q.dtype)}, guarded)
    t = lay.tensors
    watch = launch(kernel, (cdiv(N, block_m), heads),
                   (t["Q"], t["K"], t["V"], t["dO"], t["L"], t["D"], t["dQ"],
                    *lay.strides, N, M, d, float(scale)),
                   _meta(causal, block_m, block_n, d), lay.guards, tf32=tf32,
                   far_heads=far_heads)
    return t["dQ"].clone(), watch


# ---------------------------------------------------------------------------------------
# Tiles a causal kernel may skip, as the watch recorded them
# ---------------------------------------------------------------------------------------


def unskipped_query_tiles(watch, N: int, M: int, block_m: int, block_n: int,
                          tensor: str = "K") -> str | None:
    """For a forward or dQ launch (one program per query tile): the first program whose
    loads addressed key rows (masked or not) of a tile wholly in the future of all its
    queries, in words."""
    for (tile, h, _), pairs in sorted(watch.addressed[tensor].items()):
        rows = {r for head, r in pairs if head == h}  # a masked lane may reach the next head
        last_query = min(N, (tile + 1) * block_m) - 1
        last_key = last_query + (M - N)  # the last key any query of the tile sees
        needed = (last_key // block_n + 1) * block_n - 1  # the end of that key's tile
        if rows and max(rows) > needed:
            return (f"the program of query tile {tile} (rows {tile * block_m} to "
                    f"{last_query}) of head {h} addressed {tensor} up to row {max(rows)} "
                    f"(loads issued, masked or not), though none of its queries sees a key "
                    f"past {last_key}")
    return None


def unskipped_key_tiles(watch, N: int, M: int, block_m: int, block_n: int) -> str | None:
    """For a dK/dV launch (one program per key tile): the first program whose loads
    addressed query rows (masked or not) of a tile none of whose queries sees any of its
    keys, in words."""
    for (tile, h, _), pairs in sorted(watch.addressed["Q"].items()):
        rows = {r for head, r in pairs if head == h}  # a masked lane may reach the next head
        first_query = max(0, tile * block_n - (M - N))  # the first query that sees the tile
        needed = first_query // block_m * block_m
        if rows and min(rows) < needed:
            return (f"the program of key tile {tile} (keys {tile * block_n} onwards) of head "
                    f"{h} addressed Q from row {min(rows)} (loads issued, masked or not), "
                    f"though no query before row {first_query} sees its keys")
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

