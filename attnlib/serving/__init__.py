"""Decoding: the caches, and what a server does with them.

- ``cache``        the cache protocol; KV, static, latent and window caches (lessons 05, 07)
- ``sampling``     temperature, top-k, top-p and min-p, a seeded draw        (11)
- ``paged``        a paged KV cache: one pool of blocks, block tables, prefix sharing (11)
- ``batching``     continuous batching: scheduler, engine, preemption          (11)
- ``speculative``  speculative decoding: a draft proposes, the target checks (11)
- ``quant``        int8/int4 quantised KV caches and their errors            (11)
- ``streaming``    a rolling KV cache with attention sinks                   (11)

Each name lives in its module (``attnlib.serving.cache.KVCache``). The layers in
:mod:`attnlib.layers` write to these caches; nothing here imports a layer.
"""

from attnlib.serving import batching, cache, paged, quant, sampling, speculative, streaming

__all__ = ["batching", "cache", "paged", "quant", "sampling", "speculative", "streaming"]
