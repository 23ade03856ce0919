"""The attention layers and what is built from them: one contract, its variants, blocks.

- ``base``      the layer contract: project, rotate, cache, heads, attend, combine (lesson 03)
- ``gqa``       grouped-query attention (MHA and MQA are its limits)     (03, 06)
- ``mla``       multi-head latent attention and GQA -> MLA conversion    (07)
- ``gates``     gated attention, an output gate per head                 (09)
- ``sliding``   sliding-window attention                                 (05, 09)
- ``variants``  the registry of variants a block builds, by name         (04, 06, 07)
- ``norms``     LayerNorm and RMSNorm                                    (04)
- ``blocks``    feed-forward, transformer blocks, ``TinyDecoder``         (04, 05)

Each name lives in its module (``attnlib.layers.gqa.gqa_from_mha``); the decoder and its
blocks are also importable from here. A new variant is one module here and one
:func:`~attnlib.layers.variants.register_attention` call (CONTRIBUTING.md, "Adding an
attention variant").
"""

from attnlib.layers import base, blocks, gates, gqa, mla, norms, sliding, variants
from attnlib.layers.blocks import FeedForward, TinyDecoder, TransformerBlock

__all__ = ["base", "blocks", "gates", "gqa", "mla", "norms", "sliding", "variants",
           "FeedForward", "TinyDecoder", "TransformerBlock"]
