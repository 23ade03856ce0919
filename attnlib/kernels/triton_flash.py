"""FlashAttention-2 in Triton: a forward kernel and a backward in two kernels.

``flash_attention(Q, K, V, causal=False, scale=None, block_m=16, block_n=16)`` is a
differentiable function; ``Q`` is ``(B, H, N, d)``, ``K`` and ``V`` are ``(B, G, M, d)`` with
``G`` dividing ``H`` (query head ``h`` reads kv head ``h // (H // G)``).

Laid out as Triton's fused-attention tutorial (``python/tutorials/06-fused-attention.py``):
``@triton.jit`` helpers written once (the prologue ``_program``, the masked ``_load`` and
``_store``, the scores and causal ``keep`` of ``_scores``, the loop bounds), the tile steps
(``_fwd_step``, the tutorial's ``_attn_fwd_inner`` one tile at a time, and ``_bwd_step``,
shared by both backward kernels), then one kernel per pass. A program owns one tile; grid
axis 1 counts the ``B * H`` query heads. ``_fwd_kernel`` writes ``O`` and the row
log-sum-exp ``L``; ``_dkdv_kernel`` (a program per key tile) writes ``dK`` and ``dV`` per
query head, summed over each group afterwards; ``_dq_kernel`` (a program per query tile)
writes ``dQ``. ``D = rowsum(dO * O)`` is computed in torch. Two backward kernels rather than
FlashAttention-2's one, whose pass over key tiles adds ``dQ`` with atomics: every program
owns the rows it writes, so every run gives the same bits, at the price of computing
``S = s Q K^T`` and ``dP = dO V^T`` in both.

What attnlib adds to the tutorial: grouped-query heads in the kernel (nothing is copied), any
``N``, ``M`` and ``d`` (masked edges), the causal mask aligned bottom-right (the queries are
the last ``N`` of ``M`` positions, as when decoding with a cache), and the contract of
:func:`attnlib.attention`: a row that sees no key gives zeros, ``L = -inf`` and zero
gradients. What it leaves out: autotuning, ``exp2``, the split of a causal loop into unmasked
and masked stages, block pointers, fp8. Each kernel is given the batch, head and row strides
of every tensor, so a strided view is read where it lies; only its columns must be adjacent.

Precision, as production kernels keep it: tiles in the inputs' dtype (float16, bfloat16 or
float32), every product accumulated in float32, ``P`` and ``dS`` cast to the dtype of the tile
they multiply, and ``input_precision="ieee"`` on every ``tl.dot``, which keeps float32 inputs
from being rounded to TF32 on a GPU. Head offsets are int64: ``B * H * N * d`` elements pass
``2**31`` long before memory runs out.

Compiled or interpreted: Triton decides it for each function as ``@triton.jit`` decorates it,
that is when this module is first imported, from ``TRITON_INTERPRET`` in the environment then
(``1``: Triton's interpreter runs the kernels on the CPU, slowly and exactly as written).
attnlib never sets it: without a CUDA GPU, set ``os.environ["TRITON_INTERPRET"] = "1"`` before
the import, as lessons 13 and 14 do. :func:`interpreting` says which it is.
"""

from __future__ import annotations

import torch

from attnlib.kernels.backward import check_grouped_qkv

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - exercised by simulating a missing triton
    raise ImportError(
        "attnlib.kernels.triton_flash needs the package triton: pip install triton "
        "(Colab's torch brings it; the CPU wheel of torch does not)"
    ) from error


@triton.jit
def _program(H, GROUP):
    """The batch ``b``, query head ``h`` and kv head ``g`` of this program (grid axis 1 counts
    ``b * H + h``); int64, since ``b * stride_b`` can pass ``2**31``."""
    bh = tl.program_id(1).to(tl.int64)
    h = bh % H
    return bh // H, h, h // GROUP


@triton.jit
def _load(X, rows, dims, n, d, stride):
    """The tile of rows ``rows`` and columns ``dims`` of an ``(n, d)`` matrix whose row ``r``
    starts ``r * stride`` elements after ``X``; lanes past its edges read 0."""
    inside = (rows[:, None] < n) & (dims[None, :] < d)
    return tl.load(X + rows[:, None] * stride + dims[None, :], mask=inside, other=0.0)


@triton.jit
def _store(X, x, rows, dims, n, d, stride):
    """Write the tile ``x`` where :func:`_load` reads it, in ``X``'s dtype; lanes past the
    edges write nothing."""
    inside = (rows[:, None] < n) & (dims[None, :] < d)
    tl.store(X + rows[:, None] * stride + dims[None, :], x.to(X.dtype.element_ty), mask=inside)


@triton.jit
def _scores(q, k, rows, keys, N, M, scale, CAUSAL: tl.constexpr):
    """The tile's scaled scores ``s = scale q k^T`` in float32, and which pairs count: both
    inside their tensors and, causal, key ``j`` at or before query ``i``'s position
    ``i + M - N`` (the queries are the last ``N`` of ``M`` positions: bottom-right)."""
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    keep = (rows[:, None] < N) & (keys[None, :] < M)
    if CAUSAL:
        keep = keep & (keys[None, :] <= rows[:, None] + (M - N))
    return s, keep


@triton.jit
def _key_stop(start_m, N, M, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """Where the key loop of query tile ``start_m`` ends: ``M``, or causal just past the last
    key its last row sees; the key tiles beyond are skipped, not computed and masked."""
    stop = M
    if CAUSAL:
        stop = tl.minimum(M, (start_m + 1) * BLOCK_M + (M - N))
    return stop


@triton.jit
def _first_query(start_n, N, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr):
    """Where the query loop of key tile ``start_n`` starts: 0, or causal the query tile of the
    first query that sees its first key, ``start_n * BLOCK_N - (M - N)``."""
    first = 0
    if CAUSAL:
        first = tl.maximum(0, start_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    return first


@triton.jit
def _fwd_step(acc, l, m, s, keep, v):
    """One key tile of the online softmax for a tile of query rows: ``acc`` the unnormalised
    output, ``l`` the running sum and ``m`` the running max of each row, ``s`` the tile's
    scores, ``v`` its values."""
    s = tl.where(keep, s, float("-inf"))  # a pair that does not count gets no weight
    m_new = tl.maximum(m, tl.max(s, 1))  # the running max, this tile included
    # A row that has seen no key keeps m_new = -inf: shift it by 0, so that its weights are
    # exp(-inf) = 0 rather than exp(-inf + inf) = NaN (FlashAttention's CUDA kernels do so).
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - shift[:, None])  # the tile's weights, unnormalised
    alpha = tl.exp(m - shift)  # rescales what was summed under the old max
    l = alpha * l + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
    return acc, l, m_new


@triton.jit
def _bwd_step(s, keep, lse, delta, do, v):
    """One tile of the backward: the weights ``P = exp(s - L)`` rebuilt from the forward's
    log-sum-exp, and ``dS = P * (dP - D)`` with ``dP = dO V^T``."""
    # every exponent is at most 0; a pair that does not count, and every pair of a row that
    # sees no key (L = -inf), weighs exactly 0
    p = tl.exp(tl.where(keep, s - lse[:, None], float("-inf")))
    dp = tl.dot(do, tl.trans(v), input_precision="ieee")
    return p, p * (dp - delta[:, None])


@triton.jit
def _fwd_kernel(Q, K, V, O, L,
                stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_on,
                scale, N, M, d, H, GROUP,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr):
    # this program: query tile start_m of query head h of batch b, which reads kv head g
    start_m = tl.program_id(0)
    b, h, g = _program(H, GROUP)
    Q += b * stride_qb + h * stride_qh
    O += b * stride_ob + h * stride_oh
    K += b * stride_kb + g * stride_kh
    V += b * stride_vb + g * stride_vh
    L += (b * H + h) * N
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    # the query tile is loaded once and stays on chip while the key tiles stream past
    q = _load(Q, rows, dims, N, d, stride_qn)
    # the online softmax's state: running max, running sum, unnormalised output per row
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # walk the key tiles, up to the causal stop
    for start_n in range(0, _key_stop(start_m, N, M, BLOCK_M, CAUSAL), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _load(K, keys, dims, M, d, stride_kn)
        v = _load(V, keys, dims, M, d, stride_vn)
        s, keep = _scores(q, k, rows, keys, N, M, scale, CAUSAL)
        acc, l, m = _fwd_step(acc, l, m, s, keep, v)
    # O = acc / l and L = m + log l; a row that saw no key has l = 0: O = 0 and L = m = -inf
    l = tl.where(l > 0, l, 1.0)
    _store(O, acc / l[:, None], rows, dims, N, d, stride_on)
    tl.store(L + rows, m + tl.log(l), mask=rows < N)


@triton.jit
def _dkdv_kernel(Q, K, V, dO, L, D, dK, dV,
                 stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                 stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don,
                 stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn,
                 scale, N, M, d, H, GROUP,
                 CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_D: tl.constexpr):
    # this program: key tile start_n of kv head g, as query head h of batch b reads it; dK
    # and dV are written per query head (the heads of a group are summed afterwards)
    start_n = tl.program_id(0)
    b, h, g = _program(H, GROUP)
    Q += b * stride_qb + h * stride_qh
    dO += b * stride_dob + h * stride_doh
    K += b * stride_kb + g * stride_kh
    V += b * stride_vb + g * stride_vh
    dK += b * stride_dkb + h * stride_dkh
    dV += b * stride_dvb + h * stride_dvh
    L += (b * H + h) * N
    D += (b * H + h) * N
    keys = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    # the key and value tiles are loaded once and stay on chip while the query tiles stream past
    k = _load(K, keys, dims, M, d, stride_kn)
    v = _load(V, keys, dims, M, d, stride_vn)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    # walk the query tiles, from the first that sees one of these keys
    for start_m in range(_first_query(start_n, N, M, BLOCK_M, BLOCK_N, CAUSAL), N, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q = _load(Q, rows, dims, N, d, stride_qn)
        do = _load(dO, rows, dims, N, d, stride_don)
        lse = tl.load(L + rows, mask=rows < N, other=0.0)
        delta = tl.load(D + rows, mask=rows < N, other=0.0)
        s, keep = _scores(q, k, rows, keys, N, M, scale, CAUSAL)
        p, ds = _bwd_step(s, keep, lse, delta, do, v)
        # this tile's shares: dV += P^T dO and dK += scale dS^T Q
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee") * scale
    _store(dK, dk, keys, dims, M, d, stride_dkn)
    _store(dV, dv, keys, dims, M, d, stride_dvn)


@triton.jit
def _dq_kernel(Q, K, V, dO, L, D, dQ,
               stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
               stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don,
               stride_dqb, stride_dqh, stride_dqn,
               scale, N, M, d, H, GROUP,
               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_D: tl.constexpr):
    # this program: query tile start_m of query head h of batch b, which reads kv head g
    start_m = tl.program_id(0)
    b, h, g = _program(H, GROUP)
    Q += b * stride_qb + h * stride_qh
    dO += b * stride_dob + h * stride_doh
    dQ += b * stride_dqb + h * stride_dqh
    K += b * stride_kb + g * stride_kh
    V += b * stride_vb + g * stride_vh
    L += (b * H + h) * N
    D += (b * H + h) * N
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    # the query rows' tiles, L and D are loaded once
    q = _load(Q, rows, dims, N, d, stride_qn)
    do = _load(dO, rows, dims, N, d, stride_don)
    lse = tl.load(L + rows, mask=rows < N, other=0.0)
    delta = tl.load(D + rows, mask=rows < N, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # walk the key tiles, up to the forward's causal stop
    for start_n in range(0, _key_stop(start_m, N, M, BLOCK_M, CAUSAL), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _load(K, keys, dims, M, d, stride_kn)
        v = _load(V, keys, dims, M, d, stride_vn)
        s, keep = _scores(q, k, rows, keys, N, M, scale, CAUSAL)
        _, ds = _bwd_step(s, keep, lse, delta, do, v)
        # this tile's share: dQ += scale dS K
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    _store(dQ, dq, rows, dims, N, d, stride_dqn)


DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes the kernels take: tiles in this dtype, accumulators in float32."""


def interpreting() -> bool:
    """Whether attnlib's kernels run in Triton's interpreter rather than compiled: fixed when
    this module was imported, by ``TRITON_INTERPRET=1`` in the environment then."""
    return not isinstance(_fwd_kernel, triton.runtime.JITFunction)


def tile_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels' tiles are loaded in: the inputs' own, except bfloat16 in the
    interpreter, which gets float32 copies, because Triton 3.9's interpreter keeps bfloat16
    as 16-bit integers and ``tl.dot`` multiplies them as integers."""
    return torch.float32 if dtype == torch.bfloat16 and interpreting() else dtype


def _check(Q, K, V, scale, block_m, block_n) -> float:
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
    if Q.device.type != "cuda" and not interpreting():
        raise ValueError(f"Q is on {Q.device}, and compiled Triton kernels run on CUDA devices "
                         f"only: to run them in Triton's interpreter, set "
                         f"os.environ['TRITON_INTERPRET'] = '1' before "
                         f"attnlib.kernels.triton_flash is first imported")
    return s


def _strides(*tensors: torch.Tensor) -> list[int]:
    """The batch, head and row strides of each ``(B, heads, rows, d)`` tensor, in order."""
    return [stride for x in tensors for stride in x.stride()[:3]]


def _meta(causal, block_m, block_n, d) -> dict:
    return dict(CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
                BLOCK_D=triton.next_power_of_2(max(d, 16)))


def flash_forward(Q, K, V, causal, scale, block_m, block_n):
    """The forward kernel: returns ``(O, L)`` for checked inputs whose columns are adjacent."""
    B, H, N, d = Q.shape
    G, M = K.shape[1], K.shape[2]
    O = torch.empty((B, H, N, d), device=Q.device, dtype=Q.dtype)
    L = torch.empty((B, H, N), device=Q.device, dtype=torch.float32)
    _fwd_kernel[(triton.cdiv(N, block_m), B * H)](
        Q, K, V, O, L, *_strides(Q, K, V, O), scale, N, M, d, H, H // G,
        **_meta(causal, block_m, block_n, d))
    return O, L


def flash_backward(Q, K, V, O, dO, L, causal, scale, block_m, block_n):
    """The two backward kernels: returns ``(dQ, dK, dV)`` for inputs whose columns are
    adjacent."""
    B, H, N, d = Q.shape
    G, M = K.shape[1], K.shape[2]
    D = (dO.float() * O.float()).sum(-1).contiguous()  # rowsum(dO * O), one number per row
    dQ = torch.empty((B, H, N, d), device=Q.device, dtype=torch.float32)
    dK = torch.empty((B, H, M, d), device=Q.device, dtype=torch.float32)
    dV = torch.empty((B, H, M, d), device=Q.device, dtype=torch.float32)
    sizes = (scale, N, M, d, H, H // G)
    meta = _meta(causal, block_m, block_n, d)
    _dkdv_kernel[(triton.cdiv(M, block_n), B * H)](
        Q, K, V, dO, L, D, dK, dV, *_strides(Q, K, V, dO, dK, dV), *sizes, **meta)
    _dq_kernel[(triton.cdiv(N, block_m), B * H)](
        Q, K, V, dO, L, D, dQ, *_strides(Q, K, V, dO, dQ), *sizes, **meta)
    dK = dK.unflatten(1, (G, H // G)).sum(2)  # the query heads of a group add up their shares
    dV = dV.unflatten(1, (G, H // G)).sum(2)
    return dQ.to(Q.dtype), dK.to(K.dtype), dV.to(V.dtype)


def _columns_adjacent(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when its last dimension has stride 1, as the kernels need; else a copy."""
    return x if x.stride(-1) == 1 else x.contiguous()


class FlashAttentionTriton(torch.autograd.Function):
    """The Triton kernels as one differentiable function (see ``flash_attention``)."""

    @staticmethod
    def forward(ctx, Q, K, V, causal=False, scale=None, block_m=16, block_n=16):
        """``O`` by the forward kernel; saves ``Q, K, V, O`` and the row log-sum-exp ``L``."""
        s = _check(Q, K, V, scale, block_m, block_n)
        dtype, work = Q.dtype, tile_dtype(Q.dtype)
        Q, K, V = (_columns_adjacent(x.to(work)) for x in (Q, K, V))
        O, L = flash_forward(Q, K, V, bool(causal), s, block_m, block_n)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.settings = (bool(causal), s, block_m, block_n)
        return O.to(dtype)

    @staticmethod
    def backward(ctx, dO):
        """``dQ, dK, dV`` by the two backward kernels, from the saved tensors and ``dO``."""
        Q, K, V, O, L = ctx.saved_tensors
        dtype = dO.dtype
        dO = _columns_adjacent(dO.to(Q.dtype))
        dQ, dK, dV = flash_backward(Q, K, V, O, dO, L, *ctx.settings)
        return dQ.to(dtype), dK.to(dtype), dV.to(dtype), None, None, None, None


def flash_attention(Q, K, V, causal: bool = False, scale: float | None = None,
                    block_m: int = 16, block_n: int = 16) -> torch.Tensor:
    """FlashAttention-2 in Triton: softmax attention that never makes the N x M matrix.

    Args:
        Q: queries ``(B, H, N, d)``.
        K, V: keys and values ``(B, G, M, d)``, ``G`` dividing ``H``; any strides.
        causal: query ``i`` sees keys ``j <= i + (M - N)``; a query that sees none gives 0.
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
