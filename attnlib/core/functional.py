"""Attention as a similarity kernel plus a row normalisation: ``Y = Z^-1 A V``.

This module is the whole of chapter 01 and 02 in code. For queries ``Q`` (N_Q x d_QK),
keys ``K`` (N_KV x d_QK) and values ``V`` (N_KV x d_V):

* ``S = scale * Q K^T`` are the logits (``scale = 1/sqrt(d_QK)`` by default);
* ``A = f(S)`` applies a positive scalar function elementwise: the kernel
  ``kappa(q, k) = f(<q, k> * scale)``; masked pairs get ``A[i, j] = 0`` exactly;
* ``Z = diag(A 1)`` holds the row sums;
* ``Y = Z^-1 A V``: every output row is a convex combination of the rows of ``V``.

With ``f = exp`` this is the softmax attention of Vaswani et al.; other kernels are the
same lookup with a different notion of similarity. A row with ``Z[i, i] = 0`` (every key
masked, or a kernel that is zero everywhere on the row) returns a zero vector, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlib._checks import (
    check_attention_options,
    check_kernel,
    check_kernel_output,
    check_qkv,
    check_tensor,
)
from attnlib.core.masks import causal_mask
from attnlib.device import work_dtype

__all__ = [
    "KERNELS", "attention", "attention_weights", "online_softmax", "row_normalise", "similarity",
]

Kernel = str | Callable[[torch.Tensor], torch.Tensor]

KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": torch.exp,  # f(s) = exp(s): softmax attention once rows are normalised
    "softplus": F.softplus,  # f(s) = log(1 + e^s): positive, grows linearly, never saturates
    "sigmoid": torch.sigmoid,  # f(s) = 1 / (1 + e^-s): positive and bounded by 1
    "relu": F.relu,  # f(s) = max(s, 0): non-negative; a row can lose every key
}
"""Named kernels ``f`` acting on the scaled logits ``s = <q, k> * scale``.

``softmax`` (``exp``), ``softplus`` and ``sigmoid`` are strictly positive; ``relu`` is
non-negative, so a query whose logits are all negative gets ``Z = 0`` and a zero output.
Any callable ``f`` mapping the logits tensor to a non-negative tensor of the same shape is
accepted as ``kernel=`` as well.

Lesson: 01_attention_as_lookup.
"""


def attention(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    *,
    kernel: Kernel = "softmax",
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    impl: str = "auto",
    enable_gqa: bool = False,
    check: bool = True,
) -> torch.Tensor:
    """Kernel attention ``Y = Z^-1 A V`` with ``A = f(scale * Q K^T)`` masked by ``mask``.

    ``impl="explicit"`` forms ``S``, ``A``, ``Z`` and the product literally (the formula
    the book teaches; half-precision inputs are computed in float32). ``impl="auto"`` hands
    the softmax kernel to PyTorch's fused ``scaled_dot_product_attention``, which computes
    the same thing faster; any other kernel takes the explicit path. Both paths return
    zeros, not NaN, for a query that may attend to no key (``Z[i, i] = 0``).

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        kernel: a name in :data:`KERNELS` or a callable ``f`` on the logits.
        mask: bool, broadcastable to ``(..., N_Q, N_KV)``; True = may attend.
        causal: also apply :func:`attnlib.core.masks.causal_mask` (bottom-right aligned, so
            fewer queries than keys means "the last N_Q positions").
        scale: multiplies the dot products; default ``1/sqrt(d_QK)``.
        impl: ``"auto"`` or ``"explicit"``.
        enable_gqa: (fused path only) ``K`` and ``V`` may have ``G`` heads in dimension -3
            where ``Q`` has ``H``, a multiple of ``G``: query head ``h`` reads KV head
            ``h // (H // G)``, as in :func:`attnlib.layers.gqa.grouped_query_attention`.
        check: validate the arguments first (the default); attnlib's own calls on tensors
            it made pass False.

    Returns:
        ``Y`` of shape ``(..., N_Q, d_V)`` (batch dimensions broadcast), dtype of ``Q``.

    Equivalent to ``F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=scale)``
    for the softmax kernel, apart from fully masked rows: zeros here by definition, while
    SDPA's result there depends on the PyTorch version and backend (NaN in older releases).

    Example:
        >>> Q = torch.tensor([[1.0, 0.0]]); K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
        >>> V = torch.tensor([[10.0], [20.0], [30.0]])
        >>> attention(Q, K, V)
        tensor([[15.6405]])

    Lesson: 01_attention_as_lookup (kernels), 02_softmax_attention (softmax).
    """
    if check:
        _check_attention(Q, K, V, kernel, mask, causal, scale, impl)
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    if impl == "auto" and kernel == "softmax":
        return _sdpa(Q, K, V, mask, causal, scale, enable_gqa)  # fused kernel, same Y
    dtype = Q.dtype
    work = work_dtype(dtype)  # half precision: work in float32
    Q, K, V = (T.to(work) for T in (Q, K, V))
    S = scale * Q @ K.mT  # (..., N_Q, N_KV) logits
    A = _kernel_matrix(kernel, S, _allowed(mask, causal, Q, K))  # (..., N_Q, N_KV), 0 if masked
    Z = A.sum(dim=-1, keepdim=True)  # (..., N_Q, 1) the diagonal of Z
    Y = (A @ V) / torch.where(Z > 0, Z, 1.0)  # (..., N_Q, d_V) Z^-1 A V; a row with Z = 0 is 0
    return Y.to(dtype)


def attention_weights(
    Q: torch.Tensor,
    K: torch.Tensor,
    *,
    kernel: Kernel = "softmax",
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    check: bool = True,
) -> torch.Tensor:
    """The normalised weights ``P = Z^-1 A``: row ``i`` is how much query ``i`` takes from each key.

    For ``kernel="softmax"``, ``P = softmax(scale * Q K^T + M)`` with ``M`` = 0 where
    allowed and ``-inf`` where masked. Rows sum to 1, except rows with no allowed key,
    which are all zeros.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        kernel: a name in :data:`KERNELS` or a callable ``f`` on the logits.
        mask: bool, broadcastable to ``(..., N_Q, N_KV)``; True = may attend.
        causal: also apply :func:`attnlib.core.masks.causal_mask` (bottom-right aligned).
        scale: multiplies the dot products; default ``1/sqrt(d_QK)``.
        check: validate the arguments first (the default); attnlib's own calls on tensors
            it made pass False.

    Returns:
        ``(..., N_Q, N_KV)``, in the dtype of ``Q``.

    Equivalent to ``torch.softmax(scale * Q @ K.mT + M, dim=-1)`` for the default kernel.

    Example:
        >>> attention_weights(torch.tensor([[1.0, 0.0]]), torch.eye(2), scale=1.0)
        tensor([[0.7311, 0.2689]])

    Lesson: 02_softmax_attention.
    """
    if check:
        _check_attention(Q, K, None, kernel, mask, causal, scale)
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    work = work_dtype(Q.dtype)  # half precision: work in float32
    S = scale * Q.to(work) @ K.to(work).mT  # (..., N_Q, N_KV) logits
    A = _kernel_matrix(kernel, S, _allowed(mask, causal, Q, K))  # (..., N_Q, N_KV)
    Z = A.sum(dim=-1, keepdim=True)  # (..., N_Q, 1)
    return (A / torch.where(Z > 0, Z, 1.0)).to(Q.dtype)  # P = Z^-1 A


def similarity(
    Q: torch.Tensor,
    K: torch.Tensor,
    *,
    kernel: Kernel = "softmax",
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """The unnormalised kernel matrix ``A[i, j] = f(scale * <Q_i, K_j>) * 1[j in M_i]``.

    This is ``A`` of the book, literally. For the exponential kernel it overflows once a
    logit exceeds about 88 in float32; :func:`attention_weights` avoids that by factoring
    a per-row constant out of ``A`` (it cancels in ``Z^-1 A``).

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        kernel: a name in :data:`KERNELS` or a callable ``f`` on the logits.
        mask: bool, broadcastable to ``(..., N_Q, N_KV)``; True = may attend.
        causal: also apply :func:`attnlib.core.masks.causal_mask` (bottom-right aligned).
        scale: multiplies the dot products; default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, N_KV)`` non-negative kernel values, zero where masked.

    Example:
        >>> similarity(torch.tensor([[1.0, 0.0]]), torch.eye(2), kernel="relu", scale=1.0)
        tensor([[1., 0.]])

    Lesson: 01_attention_as_lookup.
    """
    _check_attention(Q, K, None, kernel, mask, causal, scale)
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    S = scale * Q @ K.mT  # (..., N_Q, N_KV) logits
    A = _kernel(kernel)(S)  # A = f(S)
    check_kernel_output(A, S)
    allowed = _allowed(mask, causal, Q, K)
    return A if allowed is None else A.masked_fill(~allowed, 0.0)  # 1[j in M_i] f(s_ij)


def row_normalise(A: torch.Tensor) -> torch.Tensor:
    """``P = Z^-1 A`` with ``Z = diag(A 1)``: divide each row by its sum.

    Rows that sum to zero stay zero (instead of 0/0 = NaN); that is how attnlib treats
    a query that may attend to no key.

    Args:
        A: ``(..., N_Q, N_KV)`` non-negative similarities.

    Returns:
        ``(..., N_Q, N_KV)`` with every non-zero row summing to 1.

    Example:
        >>> row_normalise(torch.tensor([[1.0, 3.0], [0.0, 0.0]]))
        tensor([[0.2500, 0.7500],
                [0.0000, 0.0000]])

    Lesson: 01_attention_as_lookup.
    """
    check_tensor("A", A, min_dim=2)
    Z = A.sum(dim=-1, keepdim=True)  # (..., N_Q, 1)
    return A / torch.where(Z > 0, Z, 1.0)


# --- helpers of the explicit path --------------------------------------------------------


def _kernel(kernel: Kernel) -> Callable[[torch.Tensor], torch.Tensor]:
    return KERNELS[kernel] if isinstance(kernel, str) else kernel


def _allowed(
    mask: torch.Tensor | None, causal: bool, Q: torch.Tensor, K: torch.Tensor
) -> torch.Tensor | None:
    """``mask & causal_mask(N_Q, N_KV)``: one bool "may attend" tensor, or None for all keys."""
    if not causal:
        return mask
    causal_part = causal_mask(Q.shape[-2], K.shape[-2], device=Q.device, check=False)
    return causal_part if mask is None else mask & causal_part


def _kernel_matrix(kernel: Kernel, S: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """``A = f(S)``, exactly 0 where ``allowed`` is False.

    For ``exp``, each row's largest allowed logit ``m`` is subtracted first:
    ``exp(S - m) = e^{-m} A``, and the factor ``e^{-m}`` cancels in ``Z^-1 A`` while
    keeping every exponential at most 1. A row with no allowed key has ``m = -inf``;
    it is shifted by 0 instead and stays all zeros.
    """
    if kernel == "softmax":
        S = S if allowed is None else S.masked_fill(~allowed, -math.inf)
        m = S.amax(dim=-1, keepdim=True)  # (..., N_Q, 1)
        return torch.exp(S - torch.where(torch.isfinite(m), m, 0.0))
    A = _kernel(kernel)(S)
    check_kernel_output(A, S)  # a user's callable: its output is checked, never trusted
    return A if allowed is None else A.masked_fill(~allowed, 0.0)  # 1[j in M_i] f(s_ij)


def _sdpa(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """PyTorch's fused softmax attention, with attnlib's causal alignment and zero rows.

    SDPA's ``is_causal`` is top-left aligned, so it is used only when ``N_Q = N_KV``
    (where the two alignments agree); a single query at the end sees every key and needs
    no mask; otherwise the bottom-right mask is passed explicitly. Rows with no allowed
    key (older PyTorch releases return NaN there) are opened up for the call and zeroed after it.
    """
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    kw = {"scale": scale, "enable_gqa": True} if enable_gqa else {"scale": scale}
    if mask is None and (not causal or n_q == 1):
        return F.scaled_dot_product_attention(Q, K, V, **kw)
    if mask is None and n_q == n_kv:
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True, **kw)
    allowed = _allowed(mask, causal, Q, K)
    if mask is None and n_q < n_kv:  # bottom-right causal: every query sees a key
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, **kw)
    has_key = allowed.any(dim=-1, keepdim=True)  # (..., N_Q, 1)
    Y = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed | ~has_key, **kw)
    return Y.masked_fill(~has_key, 0.0)


IMPLS = ("auto", "explicit")
"""The two implementations of :func:`attention`: the fused kernel, or ``Z^-1 A V`` literally."""


def _check_attention(Q, K, V, kernel, mask, causal, scale, impl="auto") -> None:
    """The arguments of :func:`attention` (``V=None``: of :func:`attention_weights`)."""
    batch = check_qkv(Q, K, V)
    check_kernel(kernel, KERNELS)
    logits = (*batch, Q.shape[-2], K.shape[-2])
    check_attention_options(mask, causal, scale, impl, logits=logits, device=Q.device)


def online_softmax(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    *,
    scale: float,
    block_size: int,
    positions: torch.Tensor | None = None,
    on_tile: Callable[..., None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The online softmax over blocks of keys: ``(Y, L)``, with no ``N_Q x N_KV`` matrix.

    It checks nothing: :func:`attnlib.analysis.flash.tiled_attention` and
    :func:`attnlib.kernels.tiled_forward` check their arguments and call it. The loop's
    derivation, and the contract for a row that sees no key, are in
    :mod:`attnlib.analysis.flash`.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries, ``K`` ``(..., N_KV, d_QK)`` keys and ``V``
            ``(..., N_KV, d_V)`` values, whose batch dimensions broadcast.
        scale: multiplies ``Q K^T``.
        block_size: keys per block.
        positions: ``(N_Q,)`` the queries' positions for a causal mask (a query at ``p``
            sees the keys ``j <= p``; the key blocks after the last query's position are
            skipped), or None for no mask.
        on_tile: called after each key block as ``on_tile(j0, m, l, acc)``: its first key,
            then the running max ``(..., N_Q, 1)``, running sum ``(..., N_Q, 1)`` and
            unnormalised output ``(..., N_Q, d_V)`` (the loop's own tensors).

    Returns:
        ``Y (..., N_Q, d_V)`` and the row log-sum-exp of the scaled scores ``L (..., N_Q)``,
        both in ``work_dtype(Q.dtype)`` (float32 for half precision); a row that sees no key
        has ``Y = 0`` and ``L = -inf``.

    Example:
        >>> Q, K, V = torch.randn(3, 4, 2, dtype=torch.float64).unbind(0)
        >>> Y, L = online_softmax(Q, K, V, scale=1.0, block_size=3)
        >>> torch.allclose(L, torch.logsumexp(Q @ K.T, -1))
        True

    Lesson: 09_frontier (the loop), 13_attention_as_a_kernel (``L`` and the tiles).
    """
    work = work_dtype(Q.dtype)  # half precision: work in float32
    Qs = Q.to(work) * scale
    n_kv = K.shape[-2]
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    rows = (*batch, Q.shape[-2], 1)
    m = torch.full(rows, -math.inf, dtype=work, device=Q.device)  # running max
    l = torch.zeros(rows, dtype=work, device=Q.device)  # running normaliser
    acc = torch.zeros((*batch, Q.shape[-2], V.shape[-1]), dtype=work, device=Q.device)
    stop = n_kv if positions is None else min(n_kv, int(positions.max()) + 1)
    for start in range(0, stop, block_size):
        end = min(start + block_size, n_kv)
        S = Qs @ K[..., start:end, :].to(work).mT  # (..., N_Q, block) scaled scores
        if positions is not None:  # key j is hidden from a query at p when j > p
            hidden = torch.arange(start, end, device=Q.device)[None, :] > positions[:, None]
            S = S.masked_fill(hidden, -math.inf)
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))
        # A row that has seen no visible key yet keeps m = -inf; shift it by 0 instead, so
        # that its weights are exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
        shift = torch.where(m_new == -math.inf, 0.0, m_new)
        alpha = torch.exp(m - shift)  # rescales the old sums; exp(-inf) = 0 at the start
        P = torch.exp(S - shift)  # (..., N_Q, block) this block's weights, unnormalised
        l = alpha * l + P.sum(dim=-1, keepdim=True)
        acc = alpha * acc + P @ V[..., start:end, :].to(work)
        m = m_new
        if on_tile is not None:
            on_tile(start, m, l, acc)
    l = torch.where(l > 0, l, 1.0)  # a row that saw no key: l = 0, so Y = 0 and L = m = -inf
    return acc / l, (m + torch.log(l)).squeeze(-1)
