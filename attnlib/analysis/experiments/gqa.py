"""The experiments of lesson 06 as tables: what ``G`` saves, and the mean-pooling conversion.

The conversion experiments use two documented multi-head layers (:func:`draw_mha`), both
float64 on the CPU, with ``d_in = D_IN`` and heads of width ``D_HEAD``:

- ``"correlated"``: every head's key block is one shared base plus a small head-specific
  part, ``W_K^h = B_K + NOISE * E_K^h`` (values likewise), the case in which the heads of
  a group are near copies;
- ``"independent"``: every key and value block is drawn on its own.

All entries are i.i.d. normal with variance ``1 / d_in`` (before the ``NOISE`` factor),
drawn from ``torch.Generator().manual_seed(seed)`` in the order ``W_Q``, ``W_O``, then
``W_K`` and ``W_V`` (base first, then the head-specific parts, for the correlated layer).
The error of a conversion is the relative Frobenius error ``||Y_G - Y||_F / ||Y||_F`` of
the causal outputs on :func:`draw_tokens`. The figures of :mod:`attnlib.viz.gqa` draw the
same numbers.

Lesson: 06_gqa.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import torch

from attnlib._checks import check_choice, check_divisible, check_positive_int
from attnlib.analysis.memory import ModelSpec
from attnlib.core.heads import kv_head_index
from attnlib.layers.gqa import MultiHeadAttention, gqa_from_mha

__all__ = [
    "D_HEAD", "D_IN", "EXPLORER_SETTINGS", "HEAD_COUNTS", "KINDS", "KV_HEAD_COUNTS", "NOISE",
    "N_TOKENS", "conversion_error", "conversion_table", "draw_mha", "draw_tokens",
    "explorer_table", "savings_table", "seed_table", "weight_error",
]


D_IN = 32
"""Width of the tokens in the conversion experiments."""

D_HEAD = 4
"""Width of every head in the conversion experiments and the explorer."""

N_TOKENS = 16
"""Tokens in :func:`draw_tokens`."""

NOISE = 0.1
"""Size of each head's own part in the correlated layer, relative to the shared base."""

KINDS: tuple[str, ...] = ("correlated", "independent")
"""The two layers of :func:`draw_mha`."""

HEAD_COUNTS: tuple[int, ...] = (4, 6, 8, 12)
"""Query head counts ``H`` the explorer offers."""

KV_HEAD_COUNTS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12)
"""KV head counts ``G`` the explorer offers; only the divisors of ``H`` make a layer."""

EXPLORER_SETTINGS: tuple[tuple[int, int], ...] = tuple(
    (h, g) for h in HEAD_COUNTS for g in KV_HEAD_COUNTS if g <= h and h % g == 0
)
"""Every valid ``(H, G)`` of the explorer, in the order of the twin's slider."""


@lru_cache(maxsize=32)
def _mha(n_heads: int, kind: str, d_in: int, d_head: int, noise: float, seed: int):
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:  # variance 1 / d_in
        return torch.randn(*shape, generator=gen, dtype=torch.float64) / math.sqrt(d_in)

    mha = MultiHeadAttention(d_in, n_heads, d_head, dtype=torch.float64)
    width = n_heads * d_head
    with torch.no_grad():
        mha.W_Q.copy_(normal(d_in, width))
        mha.W_O.copy_(normal(width, d_in))
        for name in ("W_K", "W_V"):
            if kind == "independent":
                W = normal(d_in, width)
            else:  # one base for every head, plus a small part of its own
                base = normal(d_in, 1, d_head)
                W = (base + noise * normal(d_in, n_heads, d_head)).reshape(d_in, width)
            getattr(mha, name).copy_(W)
    return mha


def draw_mha(
    n_heads: int = 8,
    kind: str = "correlated",
    *,
    d_in: int = D_IN,
    d_head: int = D_HEAD,
    noise: float = NOISE,
    seed: int = 0,
) -> MultiHeadAttention:
    """One of the documented multi-head layers (see the module docstring).

    Args:
        n_heads: ``H``.
        kind: one of :data:`KINDS`.
        d_in: token width.
        d_head: head width.
        noise: size of each head's own part in the correlated layer.
        seed: seed of the draw.

    Returns:
        A float64 :class:`attnlib.MultiHeadAttention` on the CPU (a fresh copy: changing
        it changes no later draw).

    Example:
        >>> mha = draw_mha(4, "correlated")
        >>> K = mha.W_K.reshape(D_IN, 4, D_HEAD)
        >>> bool((K[:, 1] - K[:, 0]).norm() < 0.5 * K[:, 0].norm())  # near copies
        True
    """
    check_positive_int("n_heads", n_heads)
    check_choice("kind", kind, list(KINDS))
    check_positive_int("d_in", d_in)
    check_positive_int("d_head", d_head)
    source = _mha(n_heads, kind, d_in, d_head, float(noise), seed)
    copy = MultiHeadAttention(d_in, n_heads, d_head, dtype=torch.float64)
    copy.load_state_dict(source.state_dict())
    return copy


def draw_tokens(*, n_tokens: int = N_TOKENS, d_in: int = D_IN, seed: int = 1) -> torch.Tensor:
    """The experiments' input: ``(N, d_in)`` i.i.d. standard normal, float64.

    Example:
        >>> draw_tokens().shape
        torch.Size([16, 32])
    """
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n_tokens, d_in, generator=gen, dtype=torch.float64)


@lru_cache(maxsize=256)
def _error(n_heads: int, n_kv_heads: int, kind: str, seed: int) -> float:
    mha = _mha(n_heads, kind, D_IN, D_HEAD, NOISE, seed)
    X = draw_tokens()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small run faster without a thread pool
    try:
        with torch.no_grad():
            Y = mha(X, causal=True)  # (N, d_in)
            Y_G = gqa_from_mha(mha, n_kv_heads)(X, causal=True)
    finally:
        torch.set_num_threads(threads)
    return float((Y_G - Y).norm() / Y.norm())


def conversion_error(n_heads: int, n_kv_heads: int, kind: str = "correlated", *,
                     seed: int = 0) -> float:
    """``||Y_G - Y||_F / ||Y||_F``: what mean-pooling :func:`draw_mha`'s layer to ``G`` changes.

    ``Y`` is the multi-head layer's causal output on :func:`draw_tokens`, ``Y_G`` that of
    :func:`attnlib.layers.gqa.gqa_from_mha` with ``n_kv_heads`` KV heads.

    Args:
        n_heads: ``H``.
        n_kv_heads: ``G``, a divisor of ``H``.
        kind: one of :data:`KINDS`.
        seed: seed of the layer.

    Returns:
        float: the relative error (0 up to rounding when ``G = H``).

    Example:
        >>> conversion_error(8, 8) < 1e-12
        True
    """
    check_positive_int("n_heads", n_heads)
    check_positive_int("n_kv_heads", n_kv_heads)
    check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    check_choice("kind", kind, list(KINDS))
    return _error(n_heads, n_kv_heads, kind, seed)


def weight_error(n_heads: int, n_kv_heads: int, kind: str = "correlated", *,
                 seed: int = 0) -> float:
    """What mean pooling does to the weights: ``||W' - W||_F / ||W||_F`` over ``[W_K  W_V]``.

    ``W`` holds every head's own key and value blocks of :func:`draw_mha`'s layer, ``W'``
    the block each head reads after :func:`attnlib.layers.gqa.gqa_from_mha` pools it to
    ``n_kv_heads`` (its group's mean). Averaged over the draw, the square of this is
    ``1 - G/H`` for independent blocks and the own part's share times that for the
    correlated ones (lesson 06 derives it).

    Args:
        n_heads: ``H``.
        n_kv_heads: ``G``, a divisor of ``H``.
        kind: one of :data:`KINDS`.
        seed: seed of the layer.

    Returns:
        float: the relative error of the weights.

    Example:
        >>> weight_error(8, 8)
        0.0
    """
    check_positive_int("n_heads", n_heads)
    check_positive_int("n_kv_heads", n_kv_heads)
    check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    check_choice("kind", kind, list(KINDS))
    mha = _mha(n_heads, kind, D_IN, D_HEAD, NOISE, seed)
    with torch.no_grad():
        pooled = gqa_from_mha(mha, n_kv_heads)
        reads = kv_head_index(n_heads, n_kv_heads)  # g(h) for every query head
        own = torch.cat([mha.W_K, mha.W_V], dim=1)
        read = torch.cat([W.unflatten(1, (n_kv_heads, D_HEAD))[:, reads].flatten(1)
                          for W in (pooled.W_K, pooled.W_V)], dim=1)
        return float((read - own).norm() / own.norm())


def seed_table(n_heads: int = 8, *, seeds: Sequence[int] = tuple(range(16))) -> pd.DataFrame:
    """Mean pooling's errors averaged over the draws of the layers, for every ``G < H``.

    Args:
        n_heads: ``H``.
        seeds: the seeds of :func:`draw_mha` to average over.

    Returns:
        pd.DataFrame indexed by ``G`` (largest first): the predicted weight error of each
        layer (``sqrt(1 - G/H)``, and that times the own part's share ``NOISE / sqrt(1 +
        NOISE^2)`` for the correlated one), the mean :func:`weight_error` and the mean
        :func:`conversion_error` of the outputs, all to 4 decimals.
    """
    check_positive_int("n_heads", n_heads)
    if not seeds:
        raise ValueError("seeds must hold at least one seed; got none")
    own = NOISE / math.sqrt(1 + NOISE**2)
    rows = {}
    for G in sorted((g for g in range(1, n_heads) if n_heads % g == 0), reverse=True):
        row = {"s": n_heads // G}
        for kind, share in (("independent", 1.0), ("correlated", own)):
            row[f"predicted, {kind}"] = round(share * math.sqrt(1 - G / n_heads), 4)
            row[f"weights, {kind}"] = round(
                sum(weight_error(n_heads, G, kind, seed=k) for k in seeds) / len(seeds), 4)
            row[f"outputs, {kind}"] = round(
                sum(conversion_error(n_heads, G, kind, seed=k) for k in seeds) / len(seeds), 4)
        rows[G] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("G")


def savings_table(specs: Sequence[ModelSpec]) -> pd.DataFrame:
    """What grouping saves in real models, against the same model with one KV head per query head.

    Args:
        specs: model presets from :mod:`attnlib.analysis.memory`.

    Returns:
        pd.DataFrame indexed by model name: ``H``, ``G``, ``s = H/G``; the entries of
        ``W_K`` and ``W_V`` in one layer, ``2 d G d_head``, and as MHA, ``2 d H d_head``;
        the cache per token over all layers in 16-bit numbers (bytes), MHA and GQA
        (:meth:`attnlib.analysis.memory.ModelSpec.cache_bytes_per_token`); and the factor saved.
    """
    rows = {}
    for spec in specs:
        if not isinstance(spec, ModelSpec):
            raise TypeError(f"specs must hold ModelSpec presets; got {type(spec).__name__}")
        H, G, d, d_head = spec.n_heads, spec.n_kv_heads, spec.d_model, spec.d_head
        mha, gqa = spec.cache_bytes_per_token("mha"), spec.cache_bytes_per_token("gqa")
        rows[spec.name] = {
            "H": H, "G": G, "s = H/G": spec.group_size,
            "W_K + W_V per layer, MHA": 2 * d * H * d_head,
            "W_K + W_V per layer, GQA": 2 * d * G * d_head,
            "cache bytes per token, MHA": mha,
            "cache bytes per token, GQA": gqa,
            "saved": f"{mha // gqa}x",
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")


def conversion_table(n_heads: int = 8, *, seed: int = 0) -> pd.DataFrame:
    """Errors of mean-pooling the two documented layers to every ``G`` that divides ``H``.

    Args:
        n_heads: ``H``.
        seed: seed of the layers.

    Returns:
        pd.DataFrame indexed by ``G`` (largest first): ``s``, the relative output error of
        each layer (4 decimals) and ``sqrt(1 - G/H)`` (4 decimals), the weight error of
        pooling unrelated heads.
    """
    check_positive_int("n_heads", n_heads)
    rows = {}
    for G in sorted((g for g in range(1, n_heads + 1) if n_heads % g == 0), reverse=True):
        row = {"s": n_heads // G}
        for kind in KINDS:
            row[f"error, {kind}"] = round(conversion_error(n_heads, G, kind, seed=seed), 4)
        row["√(1 − G/H)"] = round(math.sqrt(1 - G / n_heads), 4)
        rows[G] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("G")


def explorer_table(settings: Sequence[tuple[int, int]] = EXPLORER_SETTINGS, *,
                   d_head: int = D_HEAD, seed: int = 0) -> pd.DataFrame:
    """The explorer's numbers for each ``(H, G)``.

    Args:
        settings: ``(H, G)`` pairs with ``G`` dividing ``H``.
        d_head: head width for the cache count.
        seed: seed of the layers.

    Returns:
        pd.DataFrame indexed by ``(H, G)``: ``s``, the query heads that read KV head 0,
        the numbers cached per token and layer ``2 G d_head``, its fraction of MHA's
        ``2 H d_head`` (as ``1/s``), and both conversion errors (4 decimals).
    """
    rows = {}
    for H, G in settings:
        s = H // G
        rows[(H, G)] = {
            "s": s,
            "query heads on KV head 0": f"0-{s - 1}" if s > 1 else "0",
            "cache per token and layer": 2 * G * d_head,
            "of MHA's": f"1/{s}",
            **{f"error, {kind}": round(conversion_error(H, G, kind, seed=seed), 4)
               for kind in KINDS},
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["H", "G"])
    return table
