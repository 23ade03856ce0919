"""The experiments of lesson 04 as tables: the mask builder, norm placement, feed-forward sizes.

The mask builder draws one sequence of :data:`N_MAX` tokens with queries and keys of width
:data:`D_QK` (i.i.d. standard normal entries, float64, on the CPU, from
``torch.Generator().manual_seed(seed)``: all queries first, then all keys). The keys are
the first ``N_KV`` tokens; the queries are the *last* ``N_Q`` of those tokens, rows
``N_KV - N_Q`` to ``N_KV - 1`` (the first ``N_Q`` rows when ``N_Q > N_KV``). So a setting
with fewer queries than keys shows exactly the last rows of the square setting, as when
new tokens are decoded against a cache, whatever the alignment of the mask. The figures of
:mod:`attnlib.viz.masks` draw the same numbers.

Lesson: 04_masks_and_layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import torch

from attnlib._checks import check_choice, check_nonnegative_int, check_positive_int
from attnlib.core.functional import attention_weights
from attnlib.core.masks import causal_mask, key_padding_mask, sliding_window_mask
from attnlib.device import seeded
from attnlib.layers.blocks import FeedForward, TransformerBlock

__all__ = [
    "ALIGNMENTS", "D_QK", "MASKS", "MASK_SETTINGS", "N_MAX", "PLACEMENTS", "WEIGHT_SCALES",
    "builder_weights", "feed_forward_table", "mask_for", "mask_table", "norm_variance_table",
    "residual_variances", "seen", "weight_scale_table",
]


MASKS: tuple[str, ...] = ("none", "causal", "sliding window", "padding", "causal + padding")
"""The masks the builder offers; ``"padding"`` hides the keys at positions ``>= length``."""

ALIGNMENTS: tuple[str, ...] = ("bottom-right", "top-left")
"""Where a causal or sliding-window mask puts the queries when ``N_Q != N_KV``.

``"bottom-right"`` (attnlib, flash-attn): the queries are the last ``N_Q`` positions.
``"top-left"`` (``scaled_dot_product_attention(..., is_causal=True)``): query ``i`` is
treated as position ``i``.
"""

N_MAX = 8
"""The most queries or keys the builder draws."""

D_QK = 4
"""Width of the builder's queries and keys."""

MASK_SETTINGS: tuple[tuple[str, int, int, int, int, str], ...] = (
    ("causal", 6, 6, 3, 6, "bottom-right"),
    ("causal", 2, 6, 3, 6, "bottom-right"),
    ("causal", 2, 6, 3, 6, "top-left"),
    ("causal", 1, 6, 3, 6, "bottom-right"),
    ("causal", 1, 6, 3, 6, "top-left"),
    ("sliding window", 6, 6, 3, 6, "bottom-right"),
    ("sliding window", 2, 6, 3, 6, "bottom-right"),
    ("padding", 6, 6, 3, 4, "bottom-right"),
    ("causal + padding", 6, 6, 3, 4, "bottom-right"),
    ("causal", 6, 4, 3, 4, "bottom-right"),
)
"""The settings of the lesson's twin, as ``(mask, n_q, n_kv, window, length, align)``:

a square causal mask; decoding two tokens and one token against six keys, with the right
(bottom-right) and the wrong (top-left) alignment; a sliding window of 3, square and while
decoding; padding to length 4 without and with the causal mask; and more queries than keys,
which leaves rows with no key at all.
"""

PLACEMENTS: tuple[str, ...] = ("pre", "post", "peri")
"""Norm placements measured by :func:`residual_variances` (``TransformerBlock(norm=...)``)."""

WEIGHT_SCALES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Factors by which :func:`weight_scale_table` multiplies every weight matrix."""


def mask_for(
    mask: str,
    n_q: int,
    n_kv: int,
    *,
    window: int = 3,
    length: int | None = None,
    align: str = "bottom-right",
) -> torch.Tensor:
    """The boolean mask ``(N_Q, N_KV)`` of one builder setting; True = may attend.

    ``"causal"`` and ``"sliding window"`` come from :func:`attnlib.causal_mask` and
    :func:`attnlib.sliding_window_mask` (bottom-right), or, with ``align="top-left"``,
    from the same rule with query ``i`` placed at position ``i``. ``"padding"`` is
    :func:`attnlib.key_padding_mask` for one sequence of ``length`` real tokens, the same
    for every query. ``"causal + padding"`` is the conjunction of the two.

    Args:
        mask: one of :data:`MASKS`.
        n_q: number of queries ``N_Q``.
        n_kv: number of keys ``N_KV``.
        window: how many most recent positions a sliding-window query sees (>= 1).
        length: real tokens for the padding masks, clipped to ``[0, N_KV]``; ``None``
            means ``N_KV`` (no padding).
        align: one of :data:`ALIGNMENTS`.

    Returns:
        Bool tensor of shape ``(N_Q, N_KV)`` on the CPU.

    Example:
        >>> mask_for("causal", 2, 4, align="top-left").int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0]], dtype=torch.int32)
    """
    check_choice("mask", mask, list(MASKS))
    check_choice("align", align, list(ALIGNMENTS))
    n_q, n_kv = check_positive_int("n_q", n_q), check_positive_int("n_kv", n_kv)
    window = check_positive_int("window", window)
    length = n_kv if length is None else min(check_nonnegative_int("length", length), n_kv)
    allowed = torch.ones(n_q, n_kv, dtype=torch.bool)
    if mask in ("causal", "causal + padding", "sliding window"):
        if align == "bottom-right":
            rule = (sliding_window_mask(n_q, n_kv, window=window) if mask == "sliding window"
                    else causal_mask(n_q, n_kv))
        else:  # top-left: query i stands at position i
            offset = torch.arange(n_kv)[None, :] - torch.arange(n_q)[:, None]  # j - i
            rule = (offset <= 0) & (offset > -window) if mask == "sliding window" else offset <= 0
        allowed &= rule
    if mask in ("padding", "causal + padding"):
        allowed &= key_padding_mask([length], n_kv)[0]  # (1, N_KV) broadcast over queries
    return allowed


def _sequence(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The builder's draw: ``N_MAX`` queries, then ``N_MAX`` keys, width ``D_QK``."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(N_MAX, D_QK, generator=gen, dtype=torch.float64)
    K = torch.randn(N_MAX, D_QK, generator=gen, dtype=torch.float64)
    return Q, K


def _check_sizes(n_q: int, n_kv: int) -> None:
    for name, n in (("n_q", n_q), ("n_kv", n_kv)):
        if check_positive_int(name, n) > N_MAX:
            raise ValueError(f"{name} must be at most N_MAX = {N_MAX}; got {n}")


def builder_weights(
    mask: str, n_q: int, n_kv: int, window: int, length: int, align: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The setting's mask and weights ``P = Z^-1 A`` (zeros in rows with no key)."""
    _check_sizes(n_q, n_kv)
    allowed = mask_for(mask, n_q, n_kv, window=window, length=length, align=align)
    Q_seq, K_seq = _sequence(seed)
    start = max(n_kv - n_q, 0)  # the queries are the last N_Q tokens of the keys' sequence
    P = attention_weights(Q_seq[start:start + n_q], K_seq[:n_kv], mask=allowed)
    return allowed, P


def seen(row: torch.Tensor) -> str:
    keys = row.nonzero().flatten().tolist()
    if not keys:
        return "none"
    if keys == list(range(keys[0], keys[-1] + 1)):
        return f"{keys[0]}" if len(keys) == 1 else f"{keys[0]}-{keys[-1]}"
    return ", ".join(str(j) for j in keys)


def mask_table(
    settings: Sequence[tuple[str, int, int, int, int, str]] = MASK_SETTINGS, *, seed: int = 0
) -> pd.DataFrame:
    """What each builder setting lets through: one row per ``(mask, n_q, n_kv, w, length, align)``.

    Args:
        settings: tuples as in :data:`MASK_SETTINGS`.
        seed: seed of the draw (for the largest weight of the last query).

    Returns:
        pd.DataFrame: the number of allowed (query, key) pairs, the keys seen per query,
        the number of rows with no key, the keys the last query sees and its largest
        weight ("its largest weight", 3 decimals), indexed by the setting.
    """
    rows = {}
    for mask, n_q, n_kv, window, length, align in settings:
        allowed, P = builder_weights(mask, n_q, n_kv, window, length, align, seed)
        counts = allowed.sum(dim=-1).tolist()
        label = (mask, n_q, n_kv, window if mask == "sliding window" else "-",
                 length if "padding" in mask else "-", align if mask != "padding" else "-")
        rows[label] = {
            "allowed pairs": int(allowed.sum()),
            "keys per query": ", ".join(str(c) for c in counts),
            "rows with no key": sum(1 for c in counts if c == 0),
            "last query sees": seen(allowed[-1]),
            "its largest weight": round(float(P[-1].max()), 3),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(
        table.index, names=["mask", "N_Q", "N_KV", "w", "length", "align"])
    return table


@lru_cache(maxsize=64)
def _variances(
    norm: str, n_layers: int, d_model: int, n_heads: int, n_tokens: int, batch: int,
    weight_scale: float, seed: int,
) -> tuple[float, ...]:
    # float64: after dozens of blocks, float32 rounding differs in the fourth digit from one
    # CPU to another (and explodes with the weight scale); float64 keeps every printed digit.
    with seeded(seed):
        blocks = [TransformerBlock(d_model, n_heads, norm=norm, dtype=torch.float64)
                  for _ in range(n_layers)]
    x = torch.randn(batch, n_tokens, d_model, generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64)
    out = [float(x.var())]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small run faster without a thread pool
    try:
        with torch.no_grad():
            for block in blocks:
                for name, W in block.named_parameters():
                    if name.rsplit(".", 1)[-1].startswith("W_"):
                        W.mul_(weight_scale)  # every weight matrix; norm gains stay 1
                x = block(x, causal=True)  # (B, N, d_model)
                out.append(float(x.var()))
    finally:
        torch.set_num_threads(threads)
    return tuple(out)


def residual_variances(
    norm: str,
    *,
    n_layers: int = 24,
    d_model: int = 64,
    n_heads: int = 4,
    n_tokens: int = 32,
    batch: int = 4,
    weight_scale: float = 1.0,
    seed: int = 0,
) -> list[float]:
    """The variance of the residual stream after each of ``n_layers`` fresh decoder blocks.

    The blocks are ``TransformerBlock(d_model, n_heads, norm=norm)`` (RMSNorm, SwiGLU,
    ``d_ff = 4 d_model``), created in order after ``torch.manual_seed(seed)`` (the global
    random state is restored afterwards); with ``weight_scale != 1`` every weight matrix
    ``W_*`` is multiplied by it, a stand-in for weights that grow during training. The
    input ``x`` has i.i.d. standard normal entries, ``(batch, n_tokens, d_model)``, drawn
    from ``torch.Generator().manual_seed(seed)``; each block is applied with
    ``causal=True``, in float64 on the CPU (so every CPU prints the same digits).

    Args:
        norm: one of :data:`PLACEMENTS`.
        n_layers: number of blocks.
        d_model: width of the residual stream.
        n_heads: heads per attention sublayer.
        n_tokens: tokens per sequence.
        batch: sequences.
        weight_scale: factor applied to every weight matrix (> 0).
        seed: seed of the weights and of the input.

    Returns:
        list[float]: ``n_layers + 1`` variances of all entries of ``x`` (unbiased), before
        the first block and after each block.
    """
    check_choice("norm", norm, list(PLACEMENTS))
    for name, value in (("n_layers", n_layers), ("d_model", d_model), ("n_heads", n_heads),
                        ("n_tokens", n_tokens), ("batch", batch)):
        check_positive_int(name, value)
    if isinstance(weight_scale, bool) or not isinstance(weight_scale, (int, float)) \
            or not weight_scale > 0:
        raise ValueError(f"weight_scale must be a positive number; got {weight_scale!r}")
    return list(_variances(norm, n_layers, d_model, n_heads, n_tokens, batch,
                           float(weight_scale), seed))


def norm_variance_table(
    depths: Sequence[int] = (0, 1, 2, 4, 8, 16, 24), *, n_layers: int = 24, seed: int = 0
) -> pd.DataFrame:
    """:func:`residual_variances` of the three placements at a few depths.

    Args:
        depths: numbers of blocks applied, each in ``[0, n_layers]``.
        n_layers: depth of the stack.
        seed: seed of the weights and of the input.

    Returns:
        pd.DataFrame: one column per placement (3 significant digits), indexed by depth.
    """
    runs = {norm: residual_variances(norm, n_layers=n_layers, seed=seed) for norm in PLACEMENTS}
    for depth in depths:
        if not 0 <= check_nonnegative_int("depths[...]", depth) <= n_layers:
            raise ValueError(f"depths must lie in [0, n_layers={n_layers}]; got {depth}")
    table = pd.DataFrame({f"{norm}-LN": [_significant(runs[norm][k], 3) for k in depths]
                          for norm in PLACEMENTS}, index=list(depths))
    return table.rename_axis("blocks applied")


def weight_scale_table(
    scales: Sequence[float] = WEIGHT_SCALES, *, n_layers: int = 24, seed: int = 0
) -> pd.DataFrame:
    """The variance after ``n_layers`` blocks when every weight matrix is scaled.

    Args:
        scales: factors for :func:`residual_variances`'s ``weight_scale``.
        n_layers: depth of the stack.
        seed: seed of the weights and of the input.

    Returns:
        pd.DataFrame: one column per placement (3 significant digits), indexed by the
        weight scale.
    """
    rows = {}
    for c in scales:
        finals = {norm: residual_variances(norm, n_layers=n_layers, weight_scale=c, seed=seed)[-1]
                  for norm in PLACEMENTS}
        rows[c] = {f"{norm}-LN": _significant(v, 3) for norm, v in finals.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("weight scale")


def feed_forward_table(d: int = 64) -> pd.DataFrame:
    """Parameter counts of :class:`attnlib.FeedForward` variants at width ``d`` (no biases).

    Rows: the ReLU and GELU MLPs with ``d_ff = 4d``; SwiGLU with the same ``d_ff = 4d``;
    SwiGLU with ``d_ff = round(8d/3)``, the width that matches the MLPs' count. The counts
    are read off modules built on the ``meta`` device (shapes only, no memory).

    Args:
        d: model width.

    Returns:
        pd.DataFrame: ``d_ff``, the number of weight matrices, the parameter count and the
        count divided by ``d²`` (3 decimals), indexed by the variant.
    """
    d = check_positive_int("d", d)
    variants = [("relu", 4 * d), ("gelu", 4 * d), ("swiglu", 4 * d), ("swiglu", round(8 * d / 3))]
    rows = {}
    for kind, d_ff in variants:
        ffn = FeedForward(d, d_ff, kind, device="meta")
        count = sum(p.numel() for p in ffn.parameters())
        label = f"{kind}, d_ff = {'4d' if d_ff == 4 * d else 'round(8d/3)'}"
        rows[label] = {"d_ff": d_ff, "matrices": len(list(ffn.parameters())),
                       "parameters": count, "parameters / d²": round(count / d**2, 3)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("feed-forward")


def _significant(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits, which every CPU prints alike (-0.0 as 0.0)."""
    return float(f"{float(x):.{digits}g}") + 0.0
