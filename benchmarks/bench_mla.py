"""Benchmark 6: one decoding step of multi-head latent attention, along its three paths.

An MLA layer (``d_in`` 2048, ``H`` 32 heads of 64, ``d_L`` 256, no query latent and no
decoupled RoPE, so that the three paths compute the same function) holds ``N`` tokens and
decodes one more:

* absorbed: attention over the cached latent directly (``absorbed=True``), with
  ``impl="auto"`` (PyTorch's fused kernel) and ``impl="explicit"`` (``Z^-1 A V``
  literally);
* rebuilt: the latent cache, with every cached token's ``K_h`` and ``V_h`` formed again
  (``absorbed=False``);
* expanded: the same layer as multi-head attention (``W_K = W_L W_LK``, ...), caching each
  token's ``K_h`` and ``V_h``: ``2 H d_head`` numbers per token instead of ``d_L``.

Outputs must agree. ``impl="auto"`` should never be slower than the faster of the two
implementations by more than a little, and the absorbed path should beat rebuilding.
"""

from __future__ import annotations

from functools import partial

import torch
from timing import median_seconds

from attnlib.layers.gqa import MultiHeadAttention
from attnlib.layers.mla import MultiHeadLatentAttention

D_IN, HEADS, D_HEAD = 2048, 32, 64


def run(device: torch.device, n: int, d_latent: int, repeats: int) -> dict:
    """Seconds of one decoding step against ``n`` cached tokens, along each path."""
    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        mla = MultiHeadLatentAttention(D_IN, HEADS, D_HEAD, d_latent, device=device)
        mha = MultiHeadAttention(D_IN, HEADS, D_HEAD, device=device)
    with torch.no_grad():  # the same layer, its weights multiplied out
        mha.W_Q.copy_(mla.W_LQQ)
        mha.W_K.copy_(mla.W_L @ mla.W_LK)
        mha.W_V.copy_(mla.W_L @ mla.W_LV)
        mha.W_O.copy_(mla.W_O)
    X = torch.randn(1, n, D_IN, generator=gen).to(device)
    x = torch.randn(1, 1, D_IN, generator=gen).to(device)  # the new token
    room = n + repeats + 1  # the first step, then the timed ones
    latent, kv = mla.new_cache(room), mha.new_cache(room)
    with torch.no_grad():
        L = X @ mla.W_L  # (1, N, d_L): the latents of the tokens held
        latent.append(L)
        kv.append(*(
            (L @ W).unflatten(-1, (HEADS, D_HEAD)).transpose(-3, -2) for W in (mla.W_LK, mla.W_LV)
        ))  # K_h = L W_LK^h, V_h = L W_LV^h: (1, H, N, d_head)
        caches = {"absorbed": _copy(latent), "absorbed_explicit": _copy(latent),
                  "rebuilt": _copy(latent), "expanded": kv}  # each path its own, with room
        steps = {
            "absorbed": partial(mla, x, causal=True, cache=caches["absorbed"], absorbed=True),
            "absorbed_explicit": partial(mla, x, causal=True, cache=caches["absorbed_explicit"],
                                         absorbed=True, impl="explicit"),
            "rebuilt": partial(mla, x, causal=True, cache=caches["rebuilt"]),
            "expanded": partial(mha, x, causal=True, cache=kv),
        }
        outputs = {name: step() for name, step in steps.items()}  # the step at N + 1 tokens
        seconds = median_seconds(steps, device, repeats=repeats, warmup=0)
    ref = outputs["expanded"]
    diff = max((Y - ref).abs().max().item() for Y in outputs.values())
    return {
        "N": n,
        "H": HEADS,
        "d_head": D_HEAD,
        "d_latent": d_latent,
        "seconds": seconds,
        "auto_over_explicit": seconds["absorbed"] / seconds["absorbed_explicit"],
        "rebuilt_over_absorbed": seconds["rebuilt"] / seconds["absorbed"],
        "expanded_over_absorbed": seconds["expanded"] / seconds["absorbed"],
        "cache_bytes": {"latent": latent.nbytes // latent.n_tokens * n,
                        "expanded": kv.nbytes // kv.n_tokens * n},
        "max_abs_diff": diff,
        "outputs_agree": diff <= 1e-4,
    }


def _copy(cache):
    """A cache holding the same tokens as ``cache``, with as much room."""
    other = type(cache)(cache.max_tokens)
    held = (cache.L,) if hasattr(cache, "L") else (cache.K, cache.V)
    other.append(*(t.clone() for t in held))
    return other
