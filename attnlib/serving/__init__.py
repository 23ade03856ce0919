"""Decoding: the caches, and what a server does with them.

- ``cache``        the cache protocol; KV, static, latent and window caches (lessons 05, 07)
- ``sampling``     temperature, top-k, top-p and min-p, a seeded draw        (11)
- ``paged``        a paged KV cache: one pool of blocks, block tables, prefix sharing (11)
- ``batching``     continuous batching: scheduler, engine, preemption          (11)
- ``speculative``  speculative decoding: a draft proposes, the target checks (11)
- ``quant``        int8/int4 quantised KV caches and their errors            (11)
- ``streaming``    a rolling KV cache with attention sinks                   (11)

The layers in :mod:`attnlib.layers` write to these caches; nothing here imports a layer.
"""

from attnlib.serving.batching import (
    BatchCounts,
    BatchResult,
    Engine,
    Request,
    Scheduler,
    continuous_batching,
    static_batching_counts,
)
from attnlib.serving.cache import (
    Cache,
    KVCache,
    LatentCache,
    Rows,
    StaticKVCache,
    StaticLatentCache,
    WindowCache,
)
from attnlib.serving.paged import (
    BlockManager,
    PagedKVCache,
    PagingMemory,
    Sequence,
    paged_attention,
    paging_memory,
)
from attnlib.serving.quant import (
    AXES,
    BITS,
    Quantised,
    QuantKVCache,
    attention_error,
    dequantise,
    quantise,
    quantised_loss,
    quantised_window_losses,
)
from attnlib.serving.sampling import (
    check_options,
    min_p_filter,
    sample,
    temperature_scale,
    top_k_filter,
    top_p_filter,
    warp,
)
from attnlib.serving.speculative import (
    RollbackKVCache,
    SpeculativeResult,
    accept_reject,
    speculative_generate,
)
from attnlib.serving.streaming import (
    SinkCache,
    held_values,
    kept_positions,
    recomputed_logits,
    rolling_logits,
)

__all__ = [
    "Cache",
    "KVCache",
    "LatentCache",
    "Rows",
    "StaticKVCache",
    "StaticLatentCache",
    "WindowCache",
    "check_options",
    "min_p_filter",
    "sample",
    "temperature_scale",
    "top_k_filter",
    "top_p_filter",
    "warp",
    "BlockManager",
    "PagedKVCache",
    "PagingMemory",
    "Sequence",
    "paged_attention",
    "paging_memory",
    "BatchCounts",
    "BatchResult",
    "Engine",
    "Request",
    "Scheduler",
    "continuous_batching",
    "static_batching_counts",
    "RollbackKVCache",
    "SpeculativeResult",
    "accept_reject",
    "speculative_generate",
    "AXES",
    "BITS",
    "QuantKVCache",
    "Quantised",
    "attention_error",
    "dequantise",
    "quantise",
    "quantised_loss",
    "quantised_window_losses",
    "SinkCache",
    "held_values",
    "kept_positions",
    "recomputed_logits",
    "rolling_logits",
]
