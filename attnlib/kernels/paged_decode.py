"""Paged decoding in Triton: one query per sequence, its keys and values read through its table.

``paged_decode(q, K, V, tables, lengths)`` is the decoding step of a paged cache
(:mod:`attnlib.serving.paged`): sequence ``i`` has one new query per head, ``q[i]`` of
``(H, d)``, and holds ``lengths[i]`` tokens whose keys and values lie in the blocks
``tables[i, 0], tables[i, 1], ...`` of the pools ``K (G, n_blocks, s, d)`` and
``V (G, n_blocks, s, d_v)``: token ``t`` at block ``tables[i, t // s]``, offset ``t mod s``.

One Triton *program* per sequence and KV head (the grid is ``(S, G)``). It owns the
``H / G`` query heads that read its KV head, so each block is loaded once for all of them,
and walks the sequence's blocks in order:

1. load the group's queries, ``(H / G, d)``;
2. for block ``j``: read its id from the table, load its keys and values ``(s, d)`` from the
   pool (the offsets past the sequence's length are masked), and fold them into an online
   softmax (:func:`_block_step`: running maximum ``m``, normaliser ``l``, output ``acc``);
3. write ``acc / l``, or zeros for a sequence that holds no token (attnlib's contract for a
   query that sees no key).

Loads are strided (any pool view with a contiguous last dimension), offsets are int64,
and products accumulate in float32; the output has the queries' dtype.

Triton is imported when this module is. On a machine without CUDA the kernel needs Triton's
interpreter, which reads ``TRITON_INTERPRET=1`` when the kernel is defined: set it in the
environment before importing this module (attnlib never sets it).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - the CPU wheel of torch brings no triton
    raise ImportError(
        "attnlib.kernels.paged_decode needs the package triton: pip install triton "
        "(Colab's torch brings it; the CPU wheel of torch does not)"
    ) from error

__all__ = ["paged_decode"]


@triton.jit
def _block_step(q, k, v, ok, m, l, acc, scale):
    """One block of keys and values folded into the online softmax of the group's queries."""
    s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # (R, S): the logits
    s = tl.where(ok[None, :], s, float("-inf"))  # offsets past the sequence's end
    m_new = tl.maximum(m, tl.max(s, 1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m - m_new)  # rescales what the earlier blocks gave
    l = alpha * l + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
    return m_new, l, acc


@triton.jit
def _paged_decode_kernel(Q, K, V, O, tables, lengths, scale,
                         stride_qs, stride_qh, stride_kg, stride_kb, stride_kt,
                         stride_vg, stride_vb, stride_vt, stride_os, stride_oh, stride_ts,
                         d, d_v, s, GROUP,
                         BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                         BLOCK_DV: tl.constexpr):
    seq = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1).to(tl.int64)  # the KV head; query heads g GROUP .. (g + 1) GROUP - 1
    n = tl.load(lengths + seq)  # tokens the sequence holds
    rows = tl.arange(0, BLOCK_R)
    row_ok = rows < GROUP
    heads = g * GROUP + rows
    dims = tl.arange(0, BLOCK_D)
    dims_v = tl.arange(0, BLOCK_DV)
    offs = tl.arange(0, BLOCK_S)
    # 1. the group's queries
    q = tl.load(Q + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :],
                mask=row_ok[:, None] & (dims < d)[None, :], other=0.0).to(tl.float32)
    m = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_DV], dtype=tl.float32)
    K_g = K + g * stride_kg
    V_g = V + g * stride_vg
    for j in range(0, tl.cdiv(n, s)):
        # 2. block j of the sequence: its id from the table, its rows from the pool
        block = tl.load(tables + seq * stride_ts + j).to(tl.int64)
        ok = (offs < s) & (j * s + offs < n)
        k = tl.load(K_g + block * stride_kb + offs[:, None] * stride_kt + dims[None, :],
                    mask=ok[:, None] & (dims < d)[None, :], other=0.0).to(tl.float32)
        v = tl.load(V_g + block * stride_vb + offs[:, None] * stride_vt + dims_v[None, :],
                    mask=ok[:, None] & (dims_v < d_v)[None, :], other=0.0).to(tl.float32)
        m, l, acc = _block_step(q, k, v, ok, m, l, acc, scale)
    # 3. normalise; a sequence with no token gives zeros
    out = tl.where(l[:, None] > 0, acc / tl.where(l > 0, l, 1.0)[:, None], 0.0)
    tl.store(O + seq * stride_os + heads[:, None] * stride_oh + dims_v[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None] & (dims_v < d_v)[None, :])


def paged_decode(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, tables: torch.Tensor,
                 lengths: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """Each sequence's one query per head against its keys and values, through its table.

    Args:
        q: ``(S, H, d)``: sequence ``i``'s query of every head.
        K: ``(G, n_blocks, s, d)``: the pool of keys (``G`` divides ``H``; query head ``h``
            reads KV head ``h // (H / G)``); any strides with a contiguous last dimension.
        V: ``(G, n_blocks, s, d_v)``: the pool of values.
        tables: ``(S, W)`` integers: sequence ``i``'s blocks in order (entries past its
            ``ceil(lengths[i] / s)`` blocks are never read).
        lengths: ``(S,)`` integers: the tokens each sequence holds (0: zeros out).
        scale: default ``1/sqrt(d)``.

    Returns:
        ``(S, H, d_v)``, in ``q``'s dtype.

    Equivalent to ``scaled_dot_product_attention(q_i, K_i, V_i, enable_gqa=True)`` for each
    sequence, with ``K_i`` its blocks laid end to end and cut at ``lengths[i]``.
    """
    if q.dim() != 3 or K.dim() != 4 or V.dim() != 4 or K.shape[:3] != V.shape[:3]:
        raise ValueError(f"q must be (S, H, d), K (G, n_blocks, s, d) and V (G, n_blocks, s, "
                         f"d_v); got {tuple(q.shape)}, {tuple(K.shape)}, {tuple(V.shape)}")
    S, H, d = q.shape
    G, _, s, _ = K.shape
    if H % G or K.shape[-1] != d:
        raise ValueError(f"K must have G heads dividing H={H} and width d={d}; got "
                         f"{tuple(K.shape)}")
    if tables.dim() != 2 or tables.shape[0] != S or lengths.shape != (S,):
        raise ValueError(f"tables must be (S, W) and lengths (S,) with S={S}; got "
                         f"{tuple(tables.shape)} and {tuple(lengths.shape)}")
    if q.stride(-1) != 1:
        q = q.contiguous()
    for name, T in (("K", K), ("V", V)):
        if T.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dimension; got strides "
                             f"{T.stride()}")
    d_v = V.shape[-1]
    out = q.new_empty((S, H, d_v))
    scale = d ** -0.5 if scale is None else scale
    _paged_decode_kernel[(S, G)](
        q, K, V, out, tables, lengths, scale,
        q.stride(0), q.stride(1), K.stride(0), K.stride(1), K.stride(2),
        V.stride(0), V.stride(1), V.stride(2), out.stride(0), out.stride(1), tables.stride(0),
        d, d_v, s, H // G,
        BLOCK_R=triton.next_power_of_2(H // G), BLOCK_S=triton.next_power_of_2(s),
        BLOCK_D=triton.next_power_of_2(d), BLOCK_DV=triton.next_power_of_2(d_v),
    )
    return out
