"""Benchmark 5: one cached decode step of grouped-query attention, what it copies and its time.

A ``GroupedQueryAttention`` (``d_in`` 2048, ``H`` 32 heads of 64, RoPE) holds ``N`` tokens
in the cache its ``new_cache(max_tokens)`` makes, and decodes one more token. Two things
are measured for ``G`` = 32 (MHA), 8 and 1 (MQA):

* the bytes the step copies: every tensor written by a data-movement operation (``cat``,
  ``copy_``, ``clone``, ``repeat_interleave``, ``index_select``, ...), counted as chapter
  05 counts a cache's writes, at ``N`` and at ``N / 2`` tokens held. A cache that
  concatenates rewrites all ``N`` rows, and expanding ``K`` and ``V`` to ``H`` heads copies
  them again ``H / G`` times; a step that copies only the new token's row (and a few
  vectors of its own) copies the same bytes at any ``N``;
* its time, against PyTorch's ``scaled_dot_product_attention`` with ``enable_gqa`` on the
  same query and cached keys and values: the attention alone, which a step cannot beat.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from timing import median_seconds
from torch.utils._python_dispatch import TorchDispatchMode

from attnlib.layers.gqa import GroupedQueryAttention

D_IN, HEADS, D_HEAD = 2048, 32, 64

aten = torch.ops.aten
# Operations that move data into a new (or an existing) tensor; the bytes they write.
_COPIES = {aten.cat.default, aten.stack.default, aten.clone.default, aten._to_copy.default,
           aten.repeat_interleave.self_int, aten.repeat_interleave.Tensor,
           aten.index_select.default, aten.index.Tensor, aten.repeat.default,
           aten.expand_copy.default, aten.roll.default, aten.flip.default,
           aten.slice_scatter.default, aten.index_put_.default}


class CopyCounter(TorchDispatchMode):
    """Adds up the bytes written by data-movement operations while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is aten.copy_.default:  # dst[...] = src: the bytes of src land in dst
            self.bytes += args[1].numel() * args[1].element_size()
        elif func in _COPIES:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.bytes += t.numel() * t.element_size()
        return out


def copied_bytes(fn: Callable[[], object]) -> int:
    """Bytes ``fn()`` copies (see :class:`CopyCounter`)."""
    with CopyCounter() as counter:
        fn()
    return counter.bytes


def _layer_and_cache(G: int, n: int, room: int, device: torch.device):
    """A layer with ``G`` KV heads and its cache, holding ``n`` tokens of random keys and
    values, with room for ``room`` more."""
    gen = torch.Generator().manual_seed(G)
    layer = GroupedQueryAttention(D_IN, HEADS, G, D_HEAD, rope_base=10000.0, device=device)
    cache = layer.new_cache(n + room)
    K, V = (torch.randn(1, G, n, D_HEAD, generator=gen).to(device) for _ in range(2))
    cache.append(K, V)
    return layer, cache


def run(device: torch.device, n: int, repeats: int, kv_heads: list[int]) -> list[dict]:
    """One decode step against ``n`` cached tokens for each ``G``: bytes copied and seconds."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, D_IN, generator=gen).to(device)  # the new token
    for G in kv_heads:
        copies = {}
        with torch.no_grad():
            for held in (n // 2, n):
                layer, cache = _layer_and_cache(G, held, 2, device)
                layer(x, causal=True, cache=cache)  # warm-up: the first step allocates
                copies[held] = copied_bytes(partial(layer, x, causal=True, cache=cache))
            layer, cache = _layer_and_cache(G, n, repeats + 2, device)
            q = torch.randn(1, HEADS, 1, D_HEAD, generator=gen).to(device)
            fns = {
                "step": partial(layer, x, causal=True, cache=cache),
                "sdpa": partial(F.scaled_dot_product_attention, q, cache.K, cache.V,
                                enable_gqa=True),
            }
            seconds = median_seconds(fns, device, repeats=repeats)
        rows.append({
            "G": G,
            "H": HEADS,
            "d_head": D_HEAD,
            "N": n,
            "seconds": seconds,
            "step_over_sdpa": seconds["step"] / seconds["sdpa"],
            "bytes_copied": copies[n],
            "bytes_copied_half": copies[n // 2],
            "copied_ratio": copies[n] / copies[n // 2],
            "row_bytes": 2 * G * D_HEAD * 4,  # the new token's keys and values, float32
            "outputs_agree": _agrees(G, device),
        })
    return rows


def _agrees(G: int, device: torch.device) -> bool:
    """Decoding token by token through ``new_cache`` equals one causal call (16 tokens)."""
    gen = torch.Generator().manual_seed(1)
    layer = GroupedQueryAttention(D_IN, HEADS, G, D_HEAD, rope_base=10000.0, device=device)
    X = torch.randn(1, 16, D_IN, generator=gen).to(device)
    with torch.no_grad():
        cache = layer.new_cache(16)
        steps = torch.cat([layer(X[:, t:t + 1], causal=True, cache=cache) for t in range(16)], 1)
        full = layer(X, causal=True)
    return bool(torch.allclose(steps, full, atol=1e-4, rtol=1e-4))
