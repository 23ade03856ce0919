"""Gated attention: a sigmoid gate on each head's output, ``Y' = Y * sigmoid(X W_theta)``.

The gate is computed from the layer's input ``X`` (the same rows the queries come from),
one gate per output coordinate of each head, and multiplies the attention output before
the heads are merged and ``W_O`` is applied (Qiu et al., 2025). It is not an approximation:
it adds a data-dependent, elementwise non-linearity after ``Z^-1 A V``. Its point is what
softmax attention cannot do on its own: return (nearly) zero. Each row of ``Z^-1 A`` sums
to 1, so a head with nothing to read must still average some values; without a gate it
learns to park its weight on a token whose value is close to 0 (an attention sink), while
a gated head can simply close its gate.

:class:`GatedAttention` is grouped-query attention with this gate on every head; it is
registered as attention variant ``"gated"``, so ``attnlib.TinyDecoder(...,
attention="gated")`` uses it in every block (the ``"book-gated"`` model of
:mod:`attnlib.models.pretrained`).

Lesson: 09_frontier.
"""

from __future__ import annotations

import torch

from attnlib._checks import check_matrix, check_tensor
from attnlib._params import init_weight
from attnlib.core.heads import merge_heads, split_heads
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.variants import register_attention

__all__ = ["GatedAttention", "output_gate"]


def output_gate(Y: torch.Tensor, X: torch.Tensor, W_theta: torch.Tensor) -> torch.Tensor:
    """``Y' = Y * sigmoid(X W_theta)``: the head-specific, elementwise output gate.

    Args:
        Y: attention output, either one head ``(..., N, d_V)`` or every head
            ``(..., H, N, d_head)`` (before merging the heads and applying ``W_O``).
        X: ``(..., N, d_in)`` the rows the queries were computed from.
        W_theta: ``(d_in, d_V)`` for one head, ``(d_in, H * d_head)`` for ``H`` heads;
            column block ``h`` gates head ``h``, the layout of ``W_Q``.

    Returns:
        Same shape as ``Y``; every entry is ``Y`` times a factor in ``(0, 1)``.

    Equivalent to ``merge_heads(Y) * torch.sigmoid(X @ W_theta)`` when ``Y`` holds heads: the
    gate may be applied before or after the merge, never after ``W_O``.

    Example:
        >>> Y = torch.ones(2, 3, 4)  # H = 2 heads, N = 3 tokens, d_head = 4
        >>> X = torch.ones(3, 5)
        >>> W_theta = torch.cat([torch.full((5, 4), -2.0), torch.full((5, 4), 2.0)], dim=1)
        >>> output_gate(Y, X, W_theta)[:, 0, 0].round(decimals=3)  # head 0's gate: nearly shut
        tensor([0., 1.])

    Lesson: 09_frontier.
    """
    _check_gate(Y, X, W_theta)
    G = torch.sigmoid(X @ W_theta)  # (..., N, H d_head) or (..., N, d_V)
    if Y.dim() > X.dim():  # every head: column block h gates head h
        G = split_heads(G, Y.shape[-3])  # (..., H, N, d_head)
    return Y * G


def _check_gate(Y: object, X: object, W_theta: object) -> None:
    check_tensor("Y", Y, min_dim=2)
    check_tensor("X", X, min_dim=2)
    check_matrix("W_theta", W_theta, rows=X.shape[-1])
    if X.dtype != Y.dtype or W_theta.dtype != Y.dtype:
        raise TypeError(
            f"Y, X and W_theta must share one dtype; got {Y.dtype}, {X.dtype}, {W_theta.dtype}"
        )
    heads = Y.dim() > X.dim()
    width = Y.shape[-3] * Y.shape[-1] if heads else Y.shape[-1]
    if W_theta.shape[1] != width or Y.shape[-2] != X.shape[-2]:
        layout = "(d_in, H * d_head)" if heads else "(d_in, d_V)"
        raise ValueError(
            f"W_theta must have shape {layout} = ({X.shape[-1]}, {width}) and Y the N = "
            f"{X.shape[-2]} rows of X; got W_theta {tuple(W_theta.shape)}, Y {tuple(Y.shape)}"
        )


class GatedAttention(GroupedQueryAttention):
    """Grouped-query attention with an output gate: ``Y = concat_col(Y_h * G_h) W_O``.

    ``G = sigmoid(X W_theta)``, one gate per output coordinate of every head, computed
    from the rows the queries come from (Qiu et al. 2025's head-specific, elementwise
    gate, placed after ``Z^-1 A V`` and before ``W_O``). The parameters are those of
    :class:`~attnlib.layers.gqa.GroupedQueryAttention` plus ``W_theta (d_in, H * d_head)``, drawn
    like the others after them; every step but :meth:`combine` (the checks, projection,
    RoPE, the cache, attend) is GQA's.

    Args:
        d_in, n_heads, n_kv_heads, d_head, d_out: as for
            :class:`~attnlib.layers.gqa.GroupedQueryAttention`.
        **kw: its keyword arguments (``rope_base``, ``device``, ``dtype``, ...).

    Equivalent to ``merge_heads(output_gate(Y, X, W_theta)) @ W_O``, with ``Y`` the heads
    of :class:`~attnlib.layers.gqa.GroupedQueryAttention`.

    Example:
        >>> attn = GatedAttention(d_in=16, n_heads=4, n_kv_heads=2, d_head=4)
        >>> with torch.no_grad():
        ...     _ = attn.W_theta.fill_(-1e4)  # every gate shut
        >>> attn(torch.ones(2, 5, 16), causal=True).abs().max().item()
        0.0

    Lesson: 09_frontier.
    """

    def __init__(self, d_in: int, n_heads: int, n_kv_heads: int, d_head: int,
                 d_out: int | None = None, **kw) -> None:
        super().__init__(d_in, n_heads, n_kv_heads, d_head, d_out, **kw)
        W = self.W_Q
        self.W_theta = init_weight(d_in, n_heads * d_head, device=W.device, dtype=W.dtype)

    def combine(self, Y: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """The heads gated before ``W_O``: ``(concat_col(Y_h) * sigmoid(X W_theta)) W_O``."""
        gate = torch.sigmoid(X @ self.W_theta)  # (..., N_Q, H d_head): from the query rows
        return (merge_heads(Y) * gate) @ self.W_O  # (..., N_Q, H d_head) @ W_O


register_attention("gated")(GatedAttention.for_block)
