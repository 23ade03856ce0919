"""The experiments of lesson 03 as tables: the heads' patterns, parameters and widths.

The toy layer is :func:`attnlib.examples.draw_layer`, one seeded draw (its docstring
gives the order); the exercise checks of lesson 03 use the same layer. The figures of
:mod:`attnlib.viz.heads` draw the same numbers.

Lesson: 03_multi_head_attention.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from attnlib._checks import check_positive_int
from attnlib.analysis.memory import ModelSpec
from attnlib.core.functional import attention_weights
from attnlib.core.heads import split_heads
from attnlib.examples import D_IN, TOKENS, draw_layer
from attnlib.layers.gqa import MultiHeadAttention

__all__ = ["head_patterns", "model_widths_table", "parameter_table"]


def head_patterns(
    n_heads: int, d_head: int, *, d_in: int = D_IN, n_tokens: int = len(TOKENS), seed: int = 0
) -> torch.Tensor:
    """Every head's attention weights ``P_h = softmax(Q_h K_h^T / sqrt(d_head))`` on the toy layer.

    Args:
        n_heads: ``H``.
        d_head: ``d_head``.
        d_in: input width.
        n_tokens: ``N``.
        seed: seed of :func:`attnlib.examples.draw_layer`.

    Returns:
        ``(H, N, N)``: row ``i`` of ``P_h`` is token ``i``'s weights over the tokens.
    """
    X, W_Q, W_K, _, _ = draw_layer(n_heads, d_head, d_in=d_in, n_tokens=n_tokens, seed=seed)
    Q = split_heads(X @ W_Q, n_heads)  # (H, N, d_head): one product, then a reshape
    K = split_heads(X @ W_K, n_heads)  # (H, N, d_head)
    return attention_weights(Q, K)  # (H, N, N)


def parameter_table(d_in: int, settings: Sequence[tuple[int, int]]) -> pd.DataFrame:
    """Parameters of :class:`attnlib.MultiHeadAttention` for several ``(H, d_head)``.

    Each row builds the layer on PyTorch's ``meta`` device (shapes only, no memory) with
    ``d_out = d_in`` and counts the entries of ``W_Q``, ``W_K``, ``W_V`` and ``W_O``.

    Args:
        d_in: the input (and output) width.
        settings: pairs ``(H, d_head)``.

    Returns:
        pd.DataFrame: ``H d_head``, the entries of each matrix and their total, indexed by
        ``(H, d_head)``.
    """
    check_positive_int("d_in", d_in)
    rows = {}
    for n_heads, d_head in settings:
        layer = MultiHeadAttention(d_in, n_heads, d_head, device="meta")
        row = {"H d_head": n_heads * d_head}
        row.update({name: p.numel() for name, p in layer.named_parameters()})
        row["total"] = sum(p.numel() for p in layer.parameters())
        rows[n_heads, d_head] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["H", "d_head"])
    return table


def model_widths_table(specs: Sequence[ModelSpec]) -> pd.DataFrame:
    """Head counts and widths of published models against their model width ``d``.

    Args:
        specs: presets from :mod:`attnlib.analysis.memory`, e.g. ``LLAMA3_70B``, ``GEMMA3_27B``.

    Returns:
        pd.DataFrame: ``d``, ``H``, ``d_head``, ``H d_head``, ``H d_head / d`` (4
        decimals) and ``G``, the key/value heads, indexed by model name.
    """
    rows = {}
    for spec in specs:
        if not isinstance(spec, ModelSpec):
            raise TypeError(f"specs must hold ModelSpec presets; got {type(spec).__name__}")
        rows[spec.name] = {"d": spec.d_model, "H": spec.n_heads, "d_head": spec.d_head,
                           "H d_head": spec.qk_width,
                           "H d_head / d": round(spec.qk_width / spec.d_model, 4),
                           "G": spec.n_kv_heads}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")
