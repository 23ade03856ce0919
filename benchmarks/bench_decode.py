"""Benchmark 2: greedy decoding with and without a KV cache on a small TinyDecoder.

Without a cache every step runs the whole sequence through the model again; with one,
the prompt is run once and each step feeds a single token. The generated tokens must be
identical: the cache changes the cost, never the result.

Two measurements:

* :func:`run` times whole ``generate`` calls with ``use_cache`` True and False;
* :func:`profile` times each step of the same greedy loop, to show how the cost of one
  step grows with the context: flat with a cache (one new query against ``N`` cached
  keys, and the feed-forward work of one token), growing without one (``N`` tokens
  through every layer).
"""

from __future__ import annotations

import statistics
import time
from functools import partial

import torch
from timing import median_seconds, sync

from attnlib.layers import TinyDecoder

CONFIG = {"vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 512}
PROMPT_LEN = 8


def model_and_prompt(device: torch.device) -> tuple[TinyDecoder, torch.Tensor]:
    """The benchmark's TinyDecoder (SwiGLU, tied embeddings, RoPE) and 8-token prompt."""
    model = TinyDecoder(**CONFIG, seed=0, device=device).eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, CONFIG["vocab_size"], (1, PROMPT_LEN), generator=gen).to(device)
    return model, prompt


def _decode(
    model: TinyDecoder, prompt: torch.Tensor, n: int, use_cache: bool, out: dict
) -> None:
    with torch.inference_mode():
        out[use_cache] = model.generate(prompt, n, use_cache=use_cache)


def run(device: torch.device, new_tokens: list[int], repeats: int) -> list[dict]:
    """Time ``generate`` with ``use_cache`` True and False for each count of new tokens."""
    model, prompt = model_and_prompt(device)
    for use_cache in (True, False):  # warm-up of both paths
        _decode(model, prompt, 4, use_cache, {})
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


def step_seconds(
    model: TinyDecoder, prompt: torch.Tensor, n: int, use_cache: bool, device: torch.device
) -> tuple[torch.Tensor, list[float]]:
    """``TinyDecoder.generate``'s greedy loop with a clock around each step.

    Step 0 is the prefill (the prompt's forward pass) and is left out of the list; step
    ``t`` then feeds the ``t``-th new token (with a cache) or the whole sequence so far.
    """
    caches = model.new_caches() if use_cache else None
    out, step, seconds = prompt, prompt, []
    for t in range(n):
        sync(device)
        start = time.perf_counter()
        logits = model(step, caches=caches)  # (1, N_step, vocab_size)
        next_id = logits[..., -1, :].argmax(dim=-1, keepdim=True)  # (1, 1)
        sync(device)
        if t > 0:
            seconds.append(time.perf_counter() - start)
        out = torch.cat((out, next_id), dim=-1)
        step = next_id if use_cache else out
    return out, seconds


def profile(device: torch.device, new_tokens: int, window: int, repeats: int) -> dict:
    """Median step time over the first and the last ``window`` steps, with and without a cache.

    With a cache, each step index takes the median over ``repeats`` runs; without one,
    a single run after the first cached run (it only shows the growth for contrast).
    """
    model, prompt = model_and_prompt(device)
    n = new_tokens
    with torch.inference_mode():
        reference = model.generate(prompt, n, use_cache=True)
        cached_runs, identical = [], True
        for r in range(repeats):
            ids, seconds = step_seconds(model, prompt, n, True, device)
            cached_runs.append(seconds)
            identical &= torch.equal(ids, reference)
            if r == 0:
                ids, uncached = step_seconds(model, prompt, n, False, device)
                identical &= torch.equal(ids, reference)
    cached = [statistics.median(ts) for ts in zip(*cached_runs, strict=True)]

    def first_last(seconds: list[float]) -> dict[str, float]:
        first, last = statistics.median(seconds[:window]), statistics.median(seconds[-window:])
        return {"first": first, "last": last, "last_over_first": last / first}

    return {
        "new_tokens": n,
        "window": window,
        "context_first": [PROMPT_LEN + 1, PROMPT_LEN + window],
        "context_last": [PROMPT_LEN + n - window, PROMPT_LEN + n - 1],
        "cache": first_last(cached),
        "no_cache": first_last(uncached),
        "tokens_identical": identical,
    }
