"""The experiments of lesson 05 as tables: decoding timings, operation counts, cache sizes.

- :func:`decode_timings` runs greedy generation the way :meth:`attnlib.TinyDecoder.generate`
  does, with or without caches, and times every pass.
- :func:`macs_table` adds up :func:`attnlib.analysis.costs.generation_macs` over a generation.
- :func:`preset_table` sizes the cache of the published models of
  :data:`attnlib.analysis.memory.PRESETS` against their weights, with sliding-window layers
  holding only their window (:meth:`attnlib.analysis.memory.ModelSpec.windowed_cache_bytes`);
  :func:`memory_table` gives the numbers of the lesson's explorer at
  :data:`MEMORY_SETTINGS`.
- :func:`reservation_table` compares what a batch of requests reserves when each cache is
  allocated for the longest context, in fixed-size pages, or exactly.

The figures of :mod:`attnlib.viz.kvcache` draw the same numbers.

Lesson: 05_kv_cache.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import pandas as pd
import torch

from attnlib._checks import check_choice, check_positive_int
from attnlib.analysis.costs import generation_macs
from attnlib.analysis.memory import PRESETS
from attnlib.layers.blocks import TinyDecoder

__all__ = [
    "DTYPES", "GB", "MEMORY_SETTINGS", "WEIGHT_DTYPE", "decode_timings", "macs_table", "memory",
    "memory_table", "preset_table", "reservation_table",
]


GB = 10**9
"""A gigabyte as the book uses it: 10^9 bytes (a GiB is 2^30 bytes, 7.4% more)."""

DTYPES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp8": 1}
"""Bytes per stored number ``n_b`` of the cache's formats."""

WEIGHT_DTYPE = "bf16"
"""The format the memory calculator stores the weights in, whatever the cache's format."""

MEMORY_SETTINGS: tuple[tuple[str, int, int, str], ...] = (
    ("Llama 3 70B", 131_072, 1, "bf16"),
    ("Llama 3 70B", 131_072, 4, "bf16"),
    ("Llama 3 70B", 131_072, 4, "fp8"),
    ("Llama 3 8B", 131_072, 1, "bf16"),
    ("Llama 2 7B", 4_096, 1, "bf16"),
    ("Llama 2 7B", 4_096, 16, "bf16"),
    ("Gemma 3 27B", 131_072, 1, "bf16"),
    ("DeepSeek-V2", 131_072, 1, "bf16"),
    ("DeepSeek-V2", 131_072, 64, "bf16"),
)
"""The twin's steps, as ``(model, context, batch, dtype)``: Llama 3 70B at 128k tokens for
one and four sequences, with a bf16 and an fp8 cache; Llama 3 8B at 128k; Llama 2 7B (plain
MHA) at its 4,096-token context for one and 16 sequences; Gemma 3 27B at 128k; DeepSeek-V2
(MLA) at 128k for one and 64 sequences."""


def decode_timings(
    model: TinyDecoder, ids: torch.Tensor, n_new: int, *, use_cache: bool, repeats: int = 1
) -> tuple[torch.Tensor, list[float]]:
    """Greedy generation as :meth:`attnlib.TinyDecoder.generate` does it, timing each pass.

    Pass ``t`` feeds the whole sequence (``use_cache=False``) or, after the prompt, only the
    newest token through per-layer caches, and appends the ``argmax`` of the last logits.
    The run is repeated ``repeats`` times on one CPU thread and each pass keeps its fastest
    time, which filters out most of the noise of a shared machine.

    Args:
        model: the decoder.
        ids: ``(B, N)`` prompt token ids.
        n_new: tokens to generate (>= 1).
        use_cache: decode with caches.
        repeats: runs to take the fastest time of (>= 1).

    Returns:
        ``(ids_out, seconds)``: the prompt followed by the generated ids, ``(B, N + n_new)``,
        and the wall-clock seconds of each of the ``n_new`` passes.
    """
    check_positive_int("n_new", n_new)
    check_positive_int("repeats", repeats)
    best = [math.inf] * n_new
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: a thread pool only adds noise
    try:
        with torch.no_grad():
            for _ in range(repeats):
                caches = model.new_caches() if use_cache else None
                out = step = ids
                for t in range(n_new):
                    start = time.perf_counter()
                    logits = model(step, caches=caches)  # (B, N_step, N_T)
                    next_id = logits[..., -1, :].argmax(dim=-1, keepdim=True)  # (B, 1)
                    best[t] = min(best[t], time.perf_counter() - start)
                    out = torch.cat((out, next_id), dim=-1)
                    step = next_id if use_cache else out
    finally:
        torch.set_num_threads(threads)
    return out, best


def macs_table(n_passes: Sequence[int], **shape: int | str) -> pd.DataFrame:
    """Multiply-adds of a generation whose passes read ``n = 1, 2, ..., N`` tokens.

    For each ``N`` in ``n_passes``, :func:`attnlib.analysis.costs.generation_macs` is summed over
    ``N`` new tokens generated from a one-token prompt, with and without a cache.

    Args:
        n_passes: the numbers of passes ``N`` (each >= 1).
        **shape: the model's shape, as for :func:`attnlib.analysis.costs.decode_step_macs`.

    Returns:
        pd.DataFrame: indexed by ``N``; the attention and the total multiply-adds without
        and with the cache, and the ratio of the totals (1 decimal).
    """
    rows = {}
    for n in n_passes:
        check_positive_int("n_passes[...]", n)
        runs = {}
        for use_cache in (False, True):
            steps = generation_macs(1, n, use_cache=use_cache, **shape)
            runs[use_cache] = (sum(s["attention"] for s in steps),
                               sum(s["attention"] + s["other"] for s in steps))
        rows[n] = {
            "attention, recomputing": runs[False][0],
            "attention, cached": runs[True][0],
            "total, recomputing": runs[False][1],
            "total, cached": runs[True][1],
            "total ratio": round(runs[False][1] / runs[True][1], 1),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("N")


def preset_table(n_tokens: int = 131_072, *, bytes_per_elem: int = 2) -> pd.DataFrame:
    """Cache and weights of every preset, one sequence of ``n_tokens`` tokens.

    The cache is :meth:`attnlib.analysis.memory.ModelSpec.windowed_cache_bytes`: a sliding-window
    layer holds at most its window.

    Args:
        n_tokens: tokens in the sequence.
        bytes_per_elem: ``n_b`` of the cache and of the weights.

    Returns:
        pd.DataFrame: per model, its attention kind, ``N_L``, ``H``, ``G``, ``d_head``, the
        sliding window and the layers that use it, the cache bytes per token (every layer),
        the cache and the weights in GB (1 decimal) and the tokens of cache that weigh as
        much as the weights ("never" when the windows cap the cache below them).
    """
    check_positive_int("n_tokens", n_tokens)
    rows = {}
    for name, spec in PRESETS.items():
        per_token = spec.kv_bytes_per_token(bytes_per_elem)
        weights = spec.weight_bytes(bytes_per_elem)
        cache = spec.windowed_cache_bytes(n_tokens, bytes_per_elem=bytes_per_elem)
        rows[name] = {
            "attention": spec.attention_kind.upper(),
            "N_L": spec.n_layers,
            "H": spec.n_heads,
            "G": spec.n_kv_heads if spec.d_latent is None else "-",
            "d_head": spec.d_head,
            "window (layers)": (f"{spec.window:,} ({spec.n_window_layers})"
                                if spec.window else "-"),
            "cache bytes per token": per_token,
            f"cache GB at {n_tokens:,}": round(cache / GB, 1),
            "weights GB": round(weights / GB, 1),
            "tokens = weights": _crossover_text(_crossover(spec, weights, bytes_per_elem, 1)),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")


def _crossover(spec, weights: int, bytes_per_elem: int, batch: int) -> float:
    """Tokens per sequence at which ``spec.windowed_cache_bytes(N, batch)`` equals ``weights``
    (``math.inf`` when the windows keep the cache below the weights at every length)."""
    per_token = spec.kv_bytes_per_token(bytes_per_elem) * batch  # every layer, the batch
    if not spec.n_window_layers or weights <= per_token * spec.window:
        return weights / per_token  # reached while every layer still holds every token
    n_global = spec.n_layers - spec.n_window_layers
    if n_global == 0:
        return math.inf
    per_layer = per_token / spec.n_layers
    return (weights / per_layer - spec.n_window_layers * spec.window) / n_global


def _crossover_text(tokens: float) -> int | str:
    return "never" if math.isinf(tokens) else math.floor(tokens)


def memory(model: str, context: int, batch: int, dtype: str) -> dict[str, float]:
    check_choice("model", model, list(PRESETS))
    check_choice("dtype", dtype, list(DTYPES))
    check_positive_int("context", context)
    check_positive_int("batch", batch)
    spec = PRESETS[model]
    per_token = spec.kv_bytes_per_token(DTYPES[dtype])
    weights = spec.weight_bytes(DTYPES[WEIGHT_DTYPE])
    cache = spec.windowed_cache_bytes(context, batch=batch, bytes_per_elem=DTYPES[dtype])
    return {"per_token": per_token, "cache": cache, "weights": weights,
            "crossover": _crossover(spec, weights, DTYPES[dtype], batch)}


def memory_table(
    settings: Sequence[tuple[str, int, int, str]] = MEMORY_SETTINGS,
) -> pd.DataFrame:
    """The numbers behind :func:`~attnlib.viz.kvcache.memory_figure`, one row per
    ``(model, context, batch, dtype)``.

    Returns:
        pd.DataFrame: bytes per token, the cache and the weights in GB (1 decimal), their
        ratio (2 decimals) and the context per sequence at which they are equal.
    """
    rows = {}
    for model, context, batch, dtype in settings:
        m = memory(model, context, batch, dtype)
        rows[(model, context, batch, dtype)] = {
            "bytes per token": m["per_token"],
            "cache GB": round(m["cache"] / GB, 1),
            "weights GB": round(m["weights"] / GB, 1),
            "cache / weights": round(m["cache"] / m["weights"], 2),
            "N where equal": _crossover_text(m["crossover"]),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["model", "N", "B", "cache"])
    return table


def reservation_table(
    lengths: Sequence[int], *, max_tokens: int, block_tokens: int, bytes_per_token: int
) -> pd.DataFrame:
    """Bytes a batch of requests reserves under three ways of laying out the cache.

    - *preallocated*: every request gets room for ``max_tokens`` tokens up front;
    - *paged*: every request gets ``ceil(n / block_tokens)`` blocks of ``block_tokens``
      tokens, allocated as it grows (the idea of vLLM's PagedAttention);
    - *exact*: ``n`` tokens, what the request actually holds.

    Args:
        lengths: tokens each request holds (each ``<= max_tokens``).
        max_tokens: the longest context a request may reach.
        block_tokens: tokens per block.
        bytes_per_token: cache bytes per token, all layers.

    Returns:
        pd.DataFrame: reserved bytes per layout, in GB (3 decimals), and the share of them
        holding tokens (1 decimal, percent).
    """
    check_positive_int("max_tokens", max_tokens)
    check_positive_int("block_tokens", block_tokens)
    check_positive_int("bytes_per_token", bytes_per_token)
    for n in lengths:
        if check_positive_int("lengths[...]", n) > max_tokens:
            raise ValueError(f"lengths must be at most max_tokens={max_tokens}; got {n}")
    held = sum(lengths)
    reserved = {
        "preallocated": len(lengths) * max_tokens,
        "paged": sum(-(-n // block_tokens) * block_tokens for n in lengths),
        "exact": held,
    }
    rows = {name: {"tokens reserved": tokens,
                   "GB reserved": round(tokens * bytes_per_token / GB, 3),
                   "used %": round(100 * held / tokens, 1)}
            for name, tokens in reserved.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("layout")
