"""Benchmark 2: greedy decoding with and without a KV cache on a small TinyDecoder.

Without a cache every step runs the whole sequence through the model again; with one,
the prompt is run once and each step feeds a single token. The generated tokens must be
identical: the cache changes the cost, never the result.
"""

from __future__ import annotations

from functools import partial

import torch
from timing import median_seconds

from attnlib.layers import TinyDecoder

CONFIG = {"vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4}
PROMPT_LEN = 8


def _decode(
    model: TinyDecoder, prompt: torch.Tensor, n: int, use_cache: bool, out: dict
) -> None:
    out[use_cache] = model.generate(prompt, n, use_cache=use_cache)


def run(device: torch.device, new_tokens: list[int], repeats: int) -> list[dict]:
    """Time ``generate`` with ``use_cache`` True and False for each count of new tokens."""
    model = TinyDecoder(**CONFIG, seed=0, device=device)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, CONFIG["vocab_size"], (1, PROMPT_LEN), generator=gen).to(device)
    model.generate(prompt, 4, use_cache=True)  # warm-up of both paths
    model.generate(prompt, 4, use_cache=False)
    rows = []
    for n in new_tokens:
        out: dict[bool, torch.Tensor] = {}
        fns = {
            "cache": partial(_decode, model, prompt, n, True, out),
            "no_cache": partial(_decode, model, prompt, n, False, out),
        }
        seconds = median_seconds(fns, device, repeats=repeats, warmup=0)
        identical = torch.equal(out[True], out[False])
        rows.append({
            "new_tokens": n,
            "prompt_tokens": PROMPT_LEN,
            "config": CONFIG,
            "seconds": seconds,
            "speedup": seconds["no_cache"] / seconds["cache"],
            "tokens_identical": identical,
        })
    return rows
