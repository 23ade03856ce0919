"""attnlib: attention as a similarity kernel plus a row normalisation, ``Y = Z^-1 A V``.

A small PyTorch library written to be read next to Serret's "Understanding Transformers
and Attention Mechanisms" (arXiv:2604.00965) and the book built on it. A functional core
does the mathematics; the ``nn.Module`` classes only hold parameters and call it.

Modules, one concept each (the chapter that explains it in brackets):

- ``core``    kernels, ``attention``, ``attention_weights``           (01, 02)
- ``masks``   causal, padding and sliding-window masks                 (04)
- ``heads``   split/merge heads and the GQA group map                  (03, 06)
- ``rope``    rotary position embedding                                (08)
- ``gqa``     grouped-query attention (MHA and MQA are its limits)     (03, 06)
- ``mla``     multi-head latent attention and GQA -> MLA conversion    (07)
- ``cache``   KV and latent caches                                     (05, 07)
- ``norms``   LayerNorm and RMSNorm                                    (04)
- ``layers``  feed-forward, transformer blocks, ``TinyDecoder``         (04, 05)
- ``memory``  cache byte accounting and published model presets        (00, 05, 06, 07)
- ``flash``   exact tiled attention with an online softmax             (09)
- ``tokens``  a toy word tokenizer and embedding lookup                (00)
- ``viz``     plotly figures; ``widgets``: ipywidgets explorers
- ``device``  the default device rule
"""

from attnlib.cache import KVCache, LatentCache
from attnlib.core import KERNELS, attention, attention_weights, row_normalise, similarity
from attnlib.device import default_device
from attnlib.flash import tiled_attention
from attnlib.gqa import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiQueryAttention,
    grouped_query_attention,
)
from attnlib.heads import kv_head_index, merge_heads, repeat_kv, split_heads
from attnlib.layers import (
    FFN_KINDS,
    NORM_KINDS,
    NORM_PLACEMENTS,
    FeedForward,
    TinyDecoder,
    TransformerBlock,
    feed_forward,
    swiglu,
)
from attnlib.masks import causal_mask, key_padding_mask, sliding_window_mask
from attnlib.memory import (
    CACHE_KINDS,
    DEEPSEEK_V2,
    DEEPSEEK_V3,
    GEMMA3_27B,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA3_70B,
    MISTRAL_7B,
    PRESETS,
    ModelSpec,
    kv_cache_bytes,
    mla_cache_bytes,
)
from attnlib.mla import (
    MultiHeadLatentAttention,
    mla_absorbed,
    mla_from_mha,
    mla_merged_weights,
    mla_naive,
)
from attnlib.norms import LayerNorm, RMSNorm, layer_norm, rms_norm
from attnlib.rope import (
    apply_rope,
    rope_angles,
    rope_cos_sin,
    rope_frequencies,
    rope_matrix,
    rope_permutation,
)
from attnlib.tokens import (
    CORPUS,
    HELD_OUT,
    PAD,
    UNK,
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    embed,
    row_cosines,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # core
    "KERNELS",
    "attention",
    "attention_weights",
    "row_normalise",
    "similarity",
    # masks
    "causal_mask",
    "key_padding_mask",
    "sliding_window_mask",
    # heads
    "kv_head_index",
    "merge_heads",
    "repeat_kv",
    "split_heads",
    # rope
    "apply_rope",
    "rope_angles",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_matrix",
    "rope_permutation",
    # gqa
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "grouped_query_attention",
    # mla
    "MultiHeadLatentAttention",
    "mla_absorbed",
    "mla_from_mha",
    "mla_merged_weights",
    "mla_naive",
    # cache
    "KVCache",
    "LatentCache",
    # layers
    "FFN_KINDS",
    "NORM_KINDS",
    "NORM_PLACEMENTS",
    "FeedForward",
    "LayerNorm",
    "RMSNorm",
    "TinyDecoder",
    "TransformerBlock",
    "feed_forward",
    "layer_norm",
    "rms_norm",
    "swiglu",
    # memory
    "CACHE_KINDS",
    "DEEPSEEK_V2",
    "DEEPSEEK_V3",
    "GEMMA3_27B",
    "LLAMA2_7B",
    "LLAMA3_8B",
    "LLAMA3_70B",
    "MISTRAL_7B",
    "PRESETS",
    "ModelSpec",
    "kv_cache_bytes",
    "mla_cache_bytes",
    # flash
    "tiled_attention",
    # tokens
    "CORPUS",
    "HELD_OUT",
    "PAD",
    "UNK",
    "BPETokenizer",
    "CharTokenizer",
    "WordTokenizer",
    "embed",
    "row_cosines",
    # device
    "default_device",
]


# viz (plotly) and widgets (ipywidgets) load on first use, so `import attnlib` stays light:
# `attnlib.viz.some_figure(...)` works after a plain `import attnlib`.
_LAZY_SUBMODULES = ("viz", "widgets")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"attnlib.{name}")
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")
