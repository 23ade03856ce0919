"""The attention layers and what is built from them: one contract, its variants, blocks.

- ``base``      the layer contract: project, rotate, cache, attend, combine (lesson 03)
- ``gqa``       grouped-query attention (MHA and MQA are its limits)     (03, 06)
- ``mla``       multi-head latent attention and GQA -> MLA conversion    (07)
- ``gates``     gated attention, an output gate per head                 (09)
- ``sliding``   sliding-window attention                                 (05, 09)
- ``variants``  the registry of variants a block builds, by name         (04, 06, 07)
- ``norms``     LayerNorm and RMSNorm                                    (04)
- ``blocks``    feed-forward, transformer blocks, ``TinyDecoder``         (04, 05)

A new variant is one module here and one :func:`register_attention` call
(CONTRIBUTING.md, "Adding a variant").
"""

from attnlib.layers.base import (
    AttendFn,
    AttentionLayer,
    RopeFn,
)
from attnlib.layers.blocks import (
    FFN_KINDS,
    NORM_KINDS,
    NORM_PLACEMENTS,
    FeedForward,
    TinyDecoder,
    TransformerBlock,
    feed_forward,
    swiglu,
)
from attnlib.layers.gates import (
    GatedAttention,
    output_gate,
)
from attnlib.layers.gqa import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiQueryAttention,
    gqa_from_mha,
    grouped_query_attention,
)
from attnlib.layers.mla import (
    MultiHeadLatentAttention,
    mla_absorbed,
    mla_from_mha,
    mla_merged_weights,
    mla_naive,
)
from attnlib.layers.norms import (
    LayerNorm,
    RMSNorm,
    layer_norm,
    rms_norm,
)
from attnlib.layers.sliding import (
    SlidingWindowAttention,
)
from attnlib.layers.variants import (
    ATTENTION,
    register_attention,
)

__all__ = [
    "AttendFn",
    "AttentionLayer",
    "RopeFn",
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "gqa_from_mha",
    "grouped_query_attention",
    "MultiHeadLatentAttention",
    "mla_absorbed",
    "mla_from_mha",
    "mla_merged_weights",
    "mla_naive",
    "GatedAttention",
    "output_gate",
    "SlidingWindowAttention",
    "ATTENTION",
    "register_attention",
    "LayerNorm",
    "RMSNorm",
    "layer_norm",
    "rms_norm",
    "FFN_KINDS",
    "NORM_KINDS",
    "NORM_PLACEMENTS",
    "FeedForward",
    "TinyDecoder",
    "TransformerBlock",
    "feed_forward",
    "swiglu",
]
