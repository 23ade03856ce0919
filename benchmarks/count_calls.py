"""Count the Python calls attnlib makes on a decoding path (``sys.setprofile``).

    python benchmarks/count_calls.py

Two paths, each run once to warm up and once under the profiler:

* one cached decode step of a ``GroupedQueryAttention`` (``d_in`` 128, ``H`` 4, ``G`` 2,
  ``d_head`` 32, RoPE): one new token against a cache that holds 8;
* ``TinyDecoder.generate`` of 4 new tokens from an 8-token prompt, with caches
  (:data:`bench_decode.CONFIG`: vocabulary 256, width 128, 2 layers, 4 heads, SwiGLU 512).

For each it prints:

* ``calls``: Python function calls whose code lives in the ``attnlib`` package;
* ``checks``: calls of an input check (a function or method named ``check``, ``check_*``
  or ``_check*``): the user's call is checked once, and ``generate``'s steps, which run
  inside its checked call (``attnlib._checks.checked_call``), check no module again;
* ``checks per step``: for ``generate``, the checks of 8 new tokens minus those of 4,
  divided by 4: what a step still checks, each cache's append (it refuses rows that do not
  fit what it holds) and the checks of the public functions a layer calls.

Calls made by torch itself (``nn.Module.__call__``, ``torch.no_grad``) are not counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import attnlib
from attnlib.layers import TinyDecoder

PACKAGE = str(Path(attnlib.__file__).resolve().parent)
CONFIG = {"vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 512}


def _is_check(code) -> bool:
    return code.co_name == "check" or code.co_name.startswith(("check_", "_check"))


def count(fn) -> dict[str, int]:
    """Run ``fn()`` under ``sys.setprofile`` and count attnlib's calls by kind."""
    totals = {"calls": 0, "checks": 0}

    def hook(frame, event, arg):
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE):
            return
        if event == "call":
            totals["calls"] += 1
            totals["checks"] += _is_check(code)

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return totals


def gqa_step() -> dict[str, int]:
    """One cached decode step: a token against 8 cached ones."""
    gen = torch.Generator().manual_seed(0)
    attn = attnlib.GroupedQueryAttention(128, 4, 2, 32, rope_base=10000.0)
    X = torch.randn(1, 9, 128, generator=gen)

    def step():
        cache = attnlib.KVCache()
        attn(X[:, :8], causal=True, cache=cache)  # prefill, not counted below
        return cache

    with torch.no_grad():
        step()
        cache = step()
        return count(lambda: attn(X[:, 8:], causal=True, cache=cache))


def generate_4() -> dict[str, int]:
    """``TinyDecoder.generate`` of 4 new tokens from an 8-token prompt, with caches."""
    model = TinyDecoder(**CONFIG, seed=0).eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, CONFIG["vocab_size"], (1, 8), generator=gen)
    model.generate(prompt, 8)
    four, eight = count(lambda: model.generate(prompt, 4)), count(lambda: model.generate(prompt, 8))
    return {**four, "checks per step": (eight["checks"] - four["checks"]) // 4}


def main() -> None:
    for name, fn in (("one cached GQA decode step", gqa_step),
                     ("TinyDecoder.generate, 4 new tokens", generate_4)):
        counts = fn()
        print(f"{name}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
