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

from attnlib._checks import check_choice, check_positive_float, check_tensor
from attnlib.masks import causal_mask

__all__ = ["KERNELS", "attention", "attention_weights", "row_normalise", "similarity"]

Kernel = str | Callable[[torch.Tensor], torch.Tensor]


def _exp(S: torch.Tensor) -> torch.Tensor:
    return torch.exp(S)


KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": _exp,  # f(s) = exp(s): softmax attention once rows are normalised
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

_HALF = (torch.float16, torch.bfloat16)


def _check_qkv(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor | None) -> None:
    check_tensor("Q", Q, min_dim=2)
    check_tensor("K", K, min_dim=2)
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            "Q and K must share the last dimension d_QK (scores are dot products q . k); "
            f"got Q {tuple(Q.shape)} and K {tuple(K.shape)}"
        )
    tensors = {"Q": Q, "K": K}
    if V is not None:
        check_tensor("V", V, min_dim=2)
        if V.shape[-2] != K.shape[-2]:
            raise ValueError(
                "K and V must have the same number of rows N_KV (one value per key); "
                f"got K {tuple(K.shape)} and V {tuple(V.shape)}"
            )
        tensors["V"] = V
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        raise TypeError(f"Q, K and V must share one dtype; got {dtypes}")
    devices = {name: str(t.device) for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError(f"Q, K and V must live on one device; got {devices}")
    batch_shapes = {t.shape[:-2] for t in tensors.values()}
    if len(batch_shapes) == 1:
        return
    try:
        torch.broadcast_shapes(*batch_shapes)
    except RuntimeError as err:
        shapes = {name: tuple(t.shape) for name, t in tensors.items()}
        raise ValueError(
            "the batch dimensions (all but the last two) of Q, K and V must broadcast; "
            f"got {shapes}"
        ) from err


def _resolve_kernel(kernel: Kernel) -> Callable[[torch.Tensor], torch.Tensor]:
    if isinstance(kernel, str):
        check_choice("kernel", kernel, list(KERNELS))
        return KERNELS[kernel]
    if callable(kernel):
        return kernel
    raise TypeError(
        f"kernel must be a name in {list(KERNELS)} or a callable on the logits; "
        f"got {type(kernel).__name__}"
    )


def _resolve_scale(scale: float | None, d_qk: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d_qk)
    return check_positive_float("scale", scale)


def _allowed(
    mask: torch.Tensor | None, causal: bool, Q: torch.Tensor, K: torch.Tensor
) -> torch.Tensor | None:
    """Combine ``mask`` and ``causal`` into one boolean "may attend" tensor (or None)."""
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool; got {causal!r}")
    allowed = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a bool torch.Tensor; got {type(mask).__name__}")
        if mask.dtype != torch.bool:
            raise TypeError(
                f"mask must have dtype torch.bool (True = may attend); got {mask.dtype}"
            )
        if mask.device != Q.device:
            raise ValueError(f"mask must live on Q's device {Q.device}; got {mask.device}")
        target = (*torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2]), n_q, n_kv)
        try:
            torch.broadcast_shapes(mask.shape, target)
            if mask.dim() > len(target) or any(
                m not in (1, t) for m, t in zip(mask.shape[::-1], target[::-1], strict=False)
            ):
                raise RuntimeError
        except RuntimeError as err:
            raise ValueError(
                f"mask must broadcast to the logits' shape (..., N_Q, N_KV) = {target}; "
                f"got shape {tuple(mask.shape)}"
            ) from err
        allowed = mask
    if causal:
        cm = causal_mask(n_q, n_kv, device=Q.device)
        allowed = cm if allowed is None else allowed & cm
    return allowed


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
    Z = A.sum(dim=-1, keepdim=True)
    return A / torch.where(Z > 0, Z, torch.ones_like(Z))


def similarity(
    Q: torch.Tensor,
    K: torch.Tensor,
    *,
    kernel: Kernel = "softmax",
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """The unnormalised kernel matrix ``A[i, j] = f(scale * <Q_i, K_j>) * 1[j in S_i]``.

    This is ``A`` of the book, literally. For the exponential kernel it overflows once a
    logit exceeds about 88 in float32; :func:`attention_weights` avoids that by factoring
    a per-row constant out of ``A`` (it cancels in ``Z^-1 A``).

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        kernel: a name in :data:`KERNELS` or a callable ``f`` on the logits.
        mask: bool, broadcastable to ``(..., N_Q, N_KV)``; True = may attend.
        causal: also apply :func:`attnlib.masks.causal_mask` (bottom-right aligned).
        scale: multiplies the dot products; default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, N_KV)`` non-negative kernel values, zero where masked.

    Lesson: 01_attention_as_lookup.
    """
    _check_qkv(Q, K, None)
    f = _resolve_kernel(kernel)
    s = _resolve_scale(scale, Q.shape[-1])
    allowed = _allowed(mask, causal, Q, K)
    A = _apply_kernel(f, (Q @ K.transpose(-2, -1)) * s)
    return A if allowed is None else A.masked_fill(~allowed, 0.0)


def _apply_kernel(f: Callable[[torch.Tensor], torch.Tensor], S: torch.Tensor) -> torch.Tensor:
    A = f(S)
    if not isinstance(A, torch.Tensor) or A.shape != S.shape:
        got = tuple(A.shape) if isinstance(A, torch.Tensor) else type(A).__name__
        raise ValueError(
            f"kernel must map the logits of shape {tuple(S.shape)} to a tensor of the same "
            f"shape; got {got}"
        )
    if (A < 0).any():
        raise ValueError(
            "kernel must return non-negative values (similarities are weights); "
            f"got a minimum of {A.min().item():.4g}"
        )
    return A


def _weights(
    Q: torch.Tensor,
    K: torch.Tensor,
    f: Callable[[torch.Tensor], torch.Tensor],
    allowed: torch.Tensor | None,
    s: float,
    exp_kernel: bool,
) -> torch.Tensor:
    """``Z^-1 A`` computed literally, with the row maximum factored out for ``exp``."""
    S = (Q @ K.transpose(-2, -1)) * s  # (..., N_Q, N_KV)
    if exp_kernel:
        if allowed is not None:
            S = S.masked_fill(~allowed, -math.inf)
        m = S.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # fully masked rows
        # exp(S - m) = A * e^{-m}: the factor e^{-m} cancels in Z^-1 A and keeps exp <= 1.
        A = torch.exp(S - m)
    else:
        A = _apply_kernel(f, S)
        if allowed is not None:
            A = A.masked_fill(~allowed, 0.0)  # mask after the kernel: 1[j in S_i] * f(s)
    return row_normalise(A)


def attention_weights(
    Q: torch.Tensor,
    K: torch.Tensor,
    *,
    kernel: Kernel = "softmax",
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
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
        causal: also apply :func:`attnlib.masks.causal_mask` (bottom-right aligned).
        scale: multiplies the dot products; default ``1/sqrt(d_QK)``.

    Returns:
        ``(..., N_Q, N_KV)``, in the dtype of ``Q``.

    Equivalent to ``torch.softmax(scale * Q @ K.mT + M, dim=-1)`` for the default kernel.

    Lesson: 02_softmax_attention.
    """
    _check_qkv(Q, K, None)
    f = _resolve_kernel(kernel)
    s = _resolve_scale(scale, Q.shape[-1])
    allowed = _allowed(mask, causal, Q, K)
    work = torch.float32 if Q.dtype in _HALF else Q.dtype
    P = _weights(Q.to(work), K.to(work), f, allowed, s, kernel == "softmax")
    return P.to(Q.dtype)


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
) -> torch.Tensor:
    """Kernel attention ``Y = Z^-1 A V`` with ``A = f(scale * Q K^T)`` masked by ``mask``.

    ``impl="explicit"`` forms ``A``, ``Z`` and the product literally (the formula the book
    teaches; half-precision inputs are computed in float32). ``impl="auto"`` hands the
    softmax kernel to PyTorch's fused ``scaled_dot_product_attention``, which computes the
    same thing faster; any other kernel takes the explicit path. Both paths return zeros,
    not NaN, for a query that may attend to no key.

    Args:
        Q: ``(..., N_Q, d_QK)`` queries.
        K: ``(..., N_KV, d_QK)`` keys.
        V: ``(..., N_KV, d_V)`` values.
        kernel: a name in :data:`KERNELS` or a callable ``f`` on the logits.
        mask: bool, broadcastable to ``(..., N_Q, N_KV)``; True = may attend.
        causal: also apply :func:`attnlib.masks.causal_mask` (bottom-right aligned, so
            fewer queries than keys means "the last N_Q positions").
        scale: multiplies the dot products; default ``1/sqrt(d_QK)``.
        impl: ``"auto"`` or ``"explicit"``.

    Returns:
        ``Y`` of shape ``(..., N_Q, d_V)`` (batch dimensions broadcast), dtype of ``Q``.

    Equivalent to ``F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=scale)``
    for the softmax kernel, apart from fully masked rows (zeros here, NaN there).

    Example:
        >>> Q = torch.tensor([[1.0, 0.0]]); K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
        >>> V = torch.tensor([[10.0], [20.0], [30.0]])
        >>> attention(Q, K, V)
        tensor([[15.6405]])

    Lesson: 01_attention_as_lookup (kernels), 02_softmax_attention (softmax).
    """
    _check_qkv(Q, K, V)
    f = _resolve_kernel(kernel)
    check_choice("impl", impl, ["auto", "explicit"])
    s = _resolve_scale(scale, Q.shape[-1])
    if impl == "auto" and kernel == "softmax":
        if mask is None and causal is True and Q.shape[-2] <= K.shape[-2]:
            return _sdpa_causal(Q, K, V, s)  # no mask tensor needed in the common cases
        return _sdpa(Q, K, V, _allowed(mask, causal, Q, K), s)
    allowed = _allowed(mask, causal, Q, K)
    work = torch.float32 if Q.dtype in _HALF else Q.dtype
    P = _weights(Q.to(work), K.to(work), f, allowed, s, kernel == "softmax")
    return (P @ V.to(work)).to(Q.dtype)  # Y = (Z^-1 A) V


def _sdpa_causal(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, s: float) -> torch.Tensor:
    """Bottom-right causal attention through SDPA, for ``N_Q <= N_KV``.

    SDPA's ``is_causal`` is top-left aligned, so it is used only when ``N_Q = N_KV``
    (where the two alignments coincide). One query at the end of the sequence sees every
    key and needs no mask; otherwise the bottom-right mask is passed explicitly. Every
    query sees at least one key here, so no row can come out NaN.
    """
    n_q, n_kv = Q.shape[-2], K.shape[-2]
    if n_q == n_kv:
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True, scale=s)
    if n_q == 1:
        return F.scaled_dot_product_attention(Q, K, V, scale=s)
    mask = causal_mask(n_q, n_kv, device=Q.device)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=s)


def _sdpa(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, allowed: torch.Tensor | None, s: float
) -> torch.Tensor:
    """PyTorch's fused softmax attention, with attnlib's rule for rows that see no key.

    Rows with no allowed key are opened up before the call (SDPA would return NaN there)
    and zeroed after it.
    """
    if allowed is None:
        return F.scaled_dot_product_attention(Q, K, V, scale=s)
    has_key = allowed.any(dim=-1, keepdim=True)  # (..., N_Q, 1)
    if bool(has_key.all()):
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, scale=s)
    Y = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed | ~has_key, scale=s)
    return Y.masked_fill(~has_key, 0.0)
