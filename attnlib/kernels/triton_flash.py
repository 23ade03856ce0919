"""FlashAttention-2 as Triton kernels: forward, and backward recomputing P from L.

``flash_attention(Q, K, V, causal=False, scale=None, block_m=16, block_n=16)`` is a
differentiable function; ``Q`` is ``(B, H, N, d)``, ``K`` and ``V`` are ``(B, G, M, d)`` with
``G`` dividing ``H`` (query head ``h`` reads kv head ``h // (H // G)``).

The kernels (one Triton *program* per tile of rows; the grid is ``(row tiles, B * H)``):

- ``_fwd_kernel``: a program owns ``block_m`` query rows and walks the key tiles with an
  online softmax; it writes ``O`` and the row log-sum-exp ``L`` (a causal program stops at
  the diagonal: the tiles beyond it are skipped, not computed and masked);
- ``_bwd_dkdv_kernel``: a program owns ``block_n`` keys, walks the query tiles, rebuilds
  ``P = exp(s Q K^T - L)`` and accumulates ``dK`` and ``dV`` (one per query head; the heads
  sharing a kv head are summed afterwards);
- ``_bwd_dq_kernel``: a program owns ``block_m`` query rows and accumulates ``dQ``.

``D = rowsum(dO * O)`` is computed once in torch before the backward kernels. The backward
takes two kernels rather than FlashAttention-2's one (whose single pass over key tiles adds
each tile's share of ``dQ`` with atomic additions): every program then owns the rows it
writes, so no two programs add to one number and the result is the same bit for bit on every
run, at the price of computing ``S = s Q K^T`` and ``dP = dO V^T`` in both kernels.

Precision, as production kernels keep it: tiles are loaded in the inputs' dtype (float16,
bfloat16 or float32), every product accumulates in float32, ``P`` and ``dS`` are cast to the
dtype of the tile they multiply, and every ``tl.dot`` asks ``input_precision="ieee"``, which
on a GPU with tensor cores keeps float32 inputs from being rounded to TF32 (16-bit inputs
ignore the argument). Base offsets are computed in int64: ``B * H * N * d`` elements pass
``2**31`` long before memory runs out.

Triton is imported when this module is. With no CUDA device and ``TRITON_INTERPRET`` unset,
the module sets ``TRITON_INTERPRET=1`` before the import, so the kernels run on the CPU in
Triton's interpreter (slowly, and exactly as written); set ``TRITON_INTERPRET=0`` to refuse.
"""

from __future__ import annotations

import os

import torch

from attnlib.kernels.backward import check_grouped_qkv

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - exercised by simulating a missing triton
    raise ImportError(
        "attnlib.kernels.triton_flash needs the package triton: pip install triton "
        "(Colab's torch brings it; the CPU wheel of torch does not)"
    ) from error


@triton.jit
def _fwd_kernel(Q, K, V, O, L, scale, N, M, d, GROUP, G_kv, H_q,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)                     # b * H + h
    b = bh // H_q
    kv = b * G_kv + (bh % H_q) // GROUP       # the kv head this query head reads
    q_base = bh.to(tl.int64) * N * d          # int64: B * H * N * d may pass 2**31
    kv_base = kv.to(tl.int64) * M * d
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < N
    dim_ok = dims < d
    q = tl.load(Q + q_base + rows[:, None] * d + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + (M - N))
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + cols
        key_ok = keys < M
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(K + kv_base + keys[:, None] * d + dims[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + kv_base + keys[:, None] * d + dims[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # float32 accumulator
        keep = key_ok[None, :]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + (M - N))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = alpha * l_i + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + q_base + rows[:, None] * d + dims[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])
    tl.store(L + bh.to(tl.int64) * N + rows, m_i + tl.log(l_i), mask=row_ok)


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, dO, L, D, dK, dV, scale, N, M, d, GROUP, G_kv, H_q,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr):
    start_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H_q
    kv = b * G_kv + (bh % H_q) // GROUP
    q_base = bh.to(tl.int64) * N * d
    kv_base = kv.to(tl.int64) * M * d
    keys = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    key_ok = keys < M
    dim_ok = dims < d
    kv_mask = key_ok[:, None] & dim_ok[None, :]
    k = tl.load(K + kv_base + keys[:, None] * d + dims[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + kv_base + keys[:, None] * d + dims[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    first = 0
    if CAUSAL:
        first = tl.maximum(0, start_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for start_m in range(first, N, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < N
        q_mask = row_ok[:, None] & dim_ok[None, :]
        q = tl.load(Q + q_base + rows[:, None] * d + dims[None, :], mask=q_mask, other=0.0)
        do = tl.load(dO + q_base + rows[:, None] * d + dims[None, :], mask=q_mask, other=0.0)
        lse = tl.load(L + bh.to(tl.int64) * N + rows, mask=row_ok, other=0.0)
        delta = tl.load(D + bh.to(tl.int64) * N + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + (M - N))
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee") * scale
    out_base = bh.to(tl.int64) * M * d  # one dK, dV per query head, summed over groups later
    tl.store(dK + out_base + keys[:, None] * d + dims[None, :], dk, mask=kv_mask)
    tl.store(dV + out_base + keys[:, None] * d + dims[None, :], dv, mask=kv_mask)


@triton.jit
def _bwd_dq_kernel(Q, K, V, dO, L, D, dQ, scale, N, M, d, GROUP, G_kv, H_q,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H_q
    kv = b * G_kv + (bh % H_q) // GROUP
    q_base = bh.to(tl.int64) * N * d
    kv_base = kv.to(tl.int64) * M * d
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < N
    dim_ok = dims < d
    q_mask = row_ok[:, None] & dim_ok[None, :]
    q = tl.load(Q + q_base + rows[:, None] * d + dims[None, :], mask=q_mask, other=0.0)
    do = tl.load(dO + q_base + rows[:, None] * d + dims[None, :], mask=q_mask, other=0.0)
    lse = tl.load(L + bh.to(tl.int64) * N + rows, mask=row_ok, other=0.0)
    delta = tl.load(D + bh.to(tl.int64) * N + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    stop = M
    if CAUSAL:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + (M - N))
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + cols
        key_ok = keys < M
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(K + kv_base + keys[:, None] * d + dims[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + kv_base + keys[:, None] * d + dims[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + (M - N))
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    tl.store(dQ + q_base + rows[:, None] * d + dims[None, :], dq, mask=q_mask)


DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes the kernels take: tiles in this dtype, accumulators in float32."""


def interpreting() -> bool:
    """Whether kernels run in Triton's interpreter (``TRITON_INTERPRET=1``) rather than compiled."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def tile_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels' tiles are loaded in: the inputs' own, except bfloat16 in the
    interpreter, which gets float32 copies, because Triton 3.9's interpreter keeps bfloat16
    as 16-bit integers and ``tl.dot`` multiplies them as integers."""
    return torch.float32 if dtype == torch.bfloat16 and interpreting() else dtype


def _check(Q, K, V, scale, block_m, block_n):
    s = check_grouped_qkv(Q, K, V, scale)
    if Q.dtype not in DTYPES:
        raise TypeError(f"Q, K and V must be float16, bfloat16 or float32 (the kernels "
                        f"accumulate in float32); got {Q.dtype}")
    if Q.dim() != 4:
        raise ValueError(f"Q must have 4 dimensions (B, H, N, d); got shape {tuple(Q.shape)}")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if not isinstance(b, int) or isinstance(b, bool) or b < 16 or b & (b - 1):
            raise ValueError(f"{name} must be a power of two of at least 16 (on a GPU, "
                             f"tl.dot needs an inner dimension of 16 or more for 16-bit "
                             f"inputs); got {b!r}")
    if Q.device != K.device or Q.device != V.device:
        raise ValueError(f"Q, K and V must be on one device; got {Q.device}, {K.device}, "
                         f"{V.device}")
    if not interpreting() and Q.device.type != "cuda":
        raise ValueError(f"Q must be on a CUDA device when TRITON_INTERPRET is not 1; got "
                         f"{Q.device}")
    return s


def _grid_args(Q, K):
    B, H, N, d = Q.shape
    G, M = K.shape[1], K.shape[2]
    return B, H, G, N, M, d, triton.next_power_of_2(max(d, 16))


def flash_forward(Q, K, V, causal, scale, block_m, block_n):
    """The forward kernel: returns ``(O, L)`` for checked, contiguous inputs."""
    B, H, G, N, M, d, block_d = _grid_args(Q, K)
    O = torch.empty_like(Q)
    L = torch.empty((B, H, N), device=Q.device, dtype=torch.float32)
    grid = (triton.cdiv(N, block_m), B * H)
    _fwd_kernel[grid](Q, K, V, O, L, scale, N, M, d, H // G, G, H, CAUSAL=causal,
                      BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d)
    return O, L


def flash_backward(Q, K, V, O, dO, L, causal, scale, block_m, block_n):
    """The two backward kernels: returns ``(dQ, dK, dV)`` for contiguous inputs."""
    B, H, G, N, M, d, block_d = _grid_args(Q, K)
    D = (dO.float() * O.float()).sum(-1).contiguous()
    dQ = torch.empty(Q.shape, device=Q.device, dtype=torch.float32)
    dK = torch.empty((B, H, M, d), device=Q.device, dtype=torch.float32)
    dV = torch.empty((B, H, M, d), device=Q.device, dtype=torch.float32)
    args = (scale, N, M, d, H // G, G, H)
    meta = dict(CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d)
    _bwd_dkdv_kernel[(triton.cdiv(M, block_n), B * H)](Q, K, V, dO, L, D, dK, dV, *args, **meta)
    _bwd_dq_kernel[(triton.cdiv(N, block_m), B * H)](Q, K, V, dO, L, D, dQ, *args, **meta)
    dK = dK.unflatten(1, (G, H // G)).sum(2)
    dV = dV.unflatten(1, (G, H // G)).sum(2)
    return dQ.to(Q.dtype), dK.to(K.dtype), dV.to(V.dtype)


class FlashAttentionTriton(torch.autograd.Function):
    """The Triton kernels as one differentiable function (see ``flash_attention``)."""

    @staticmethod
    def forward(ctx, Q, K, V, causal=False, scale=None, block_m=16, block_n=16):
        """``O`` by the forward kernel; saves ``Q, K, V, O`` and the row log-sum-exp ``L``."""
        s = _check(Q, K, V, scale, block_m, block_n)
        dtype, work = Q.dtype, tile_dtype(Q.dtype)
        Q, K, V = (x.to(work).contiguous() for x in (Q, K, V))
        O, L = flash_forward(Q, K, V, bool(causal), s, block_m, block_n)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.settings = (bool(causal), s, block_m, block_n)
        return O.to(dtype)

    @staticmethod
    def backward(ctx, dO):
        """``dQ, dK, dV`` by the two backward kernels, from the saved tensors and ``dO``."""
        Q, K, V, O, L = ctx.saved_tensors
        causal, s, block_m, block_n = ctx.settings
        dtype = dO.dtype
        dQ, dK, dV = flash_backward(Q, K, V, O, dO.to(Q.dtype).contiguous(), L, causal, s,
                                    block_m, block_n)
        return dQ.to(dtype), dK.to(dtype), dV.to(dtype), None, None, None, None


def flash_attention(Q, K, V, causal: bool = False, scale: float | None = None,
                    block_m: int = 16, block_n: int = 16) -> torch.Tensor:
    """FlashAttention-2 in Triton: softmax attention that never makes the N x M matrix.

    Args:
        Q: queries ``(B, H, N, d)``.
        K, V: keys and values ``(B, G, M, d)``, ``G`` dividing ``H``.
        causal: query ``i`` sees keys ``j <= i + (M - N)``.
        scale: multiplies ``Q K^T``; ``1/sqrt(d)`` when None.
        block_m, block_n: rows and keys per tile, powers of two of at least 16.

    Returns:
        torch.Tensor: ``O`` shaped like ``Q``; differentiable in Q, K and V.

    Example:
        >>> Q, K, V = torch.randn(3, 1, 2, 20, 16).unbind(0)
        >>> flash_attention(Q, K, V, causal=True).shape
        torch.Size([1, 2, 20, 16])
    """
    return FlashAttentionTriton.apply(Q, K, V, causal, scale, block_m, block_n)
