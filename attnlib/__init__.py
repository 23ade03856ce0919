"""attnlib: attention as a similarity kernel plus a row normalisation, ``Y = Z^-1 A V``.

A small PyTorch library written to be read next to Serret's "Understanding Transformers
and Attention Mechanisms" (arXiv:2604.00965) and the book built on it. A functional core
does the mathematics; the ``nn.Module`` classes only hold parameters and call it.

Modules, one concept each (the chapter that explains it in brackets):

- ``core``       kernels, ``attention``, ``attention_weights``          (01, 02)
- ``masks``      causal, padding and sliding-window masks                (04)
- ``heads``      split/merge heads and the GQA group map                 (03, 06)
- ``rope``       rotary position embedding                               (08)
- ``attention_layer`` the layer contract: project, rotate, cache, attend, combine (03)
- ``gqa``        grouped-query attention (MHA and MQA are its limits)    (03, 06)
- ``mla``        multi-head latent attention and GQA -> MLA conversion   (07)
- ``gates``      gated attention, an output gate per head                (09)
- ``sliding``    sliding-window attention and its window cache           (05)
- ``cache``      the cache protocol; KV and latent caches                (05, 07)
- ``sampling``   temperature, top-k, top-p and min-p, a seeded draw      (11)
- ``paged``      a paged KV cache: blocks, a free list, block tables      (11)
- ``batching``   continuous batching over paged caches                   (11)
- ``quant``      an int8/int4 quantised KV cache and its errors          (11)
- ``speculative`` speculative decoding: a draft proposes, the target checks (11)
- ``streaming``  a rolling KV cache with attention sinks                 (11)
- ``norms``      LayerNorm and RMSNorm                                   (04)
- ``variants``   the attention variants a block builds, by name          (04, 06, 07)
- ``layers``     feed-forward, transformer blocks, ``TinyDecoder``        (04, 05)
- ``memory``     cache byte accounting and published model presets       (00, 05, 06, 07)
- ``costs``      multiply-adds of decoding, MLA's decoding paths          (01, 05, 07)
- ``convert``    weights from Hugging Face's Llama and DeepSeek attention (06, 07)
- ``flash``      exact tiled attention with an online softmax            (09)
- ``approx``     linear attention, random features, top-k, the delta rule (09)
- ``randomised`` sampling, sketching and low-rank estimators of attention (10)
- ``tokens``     toy tokenizers and the embedding lookup                 (00)
- ``examples``   the lessons' fixed examples (toy database, toy layer)   (01, 03)
- ``device``     the default device rule
- ``tasks``      training data the book makes: recall, induction, its own text (01, 03, 05-09)
- ``train``      a short training loop, evaluation, the shipped models' recipes (01, 03, 06, 07)
- ``pretrained`` the small trained models shipped in the package, GQA/MLA conversions (01-09)
- ``probes``     attention maps, head scores and ablations of a trained model (01, 03, 09)
- ``viz``        figures and explorers for every chapter (loaded on first use)
- ``exercises``  answer checks for the lessons' exercises (loaded on first use)

The top level holds the contract of the book plus the functional core (``__all__``);
everything else stays in its submodule, for example ``attnlib.tokens.BPETokenizer``,
``attnlib.memory.LLAMA3_8B`` or ``attnlib.rope.rope_matrix``.

Example:
    >>> import attnlib
    >>> attnlib.causal_mask(2, 3).int()
    tensor([[1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
"""

# reachable as attnlib.tokens, ...: lesson 00's tokens, the lessons' examples, the cost
# accounting, the Hugging Face converters, lesson 09's approx and gates, lesson 10's randomised,
# the sliding window
from attnlib import approx, convert, costs, examples, gates, randomised, sliding, tokens  # noqa: F401
from attnlib.attention_layer import AttentionLayer
from attnlib.cache import Cache, KVCache, LatentCache
from attnlib.core import KERNELS, attention, attention_weights, row_normalise, similarity
from attnlib.device import default_device
from attnlib.flash import tiled_attention
from attnlib.gqa import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiQueryAttention,
    grouped_query_attention,
)
from attnlib.heads import merge_heads, repeat_kv, split_heads
from attnlib.layers import FeedForward, TinyDecoder, TransformerBlock, feed_forward
from attnlib.masks import causal_mask, key_padding_mask, sliding_window_mask
from attnlib.memory import (
    DEEPSEEK_V2,
    GEMMA3_27B,
    LLAMA3_70B,
    ModelSpec,
    kv_cache_bytes,
    mla_cache_bytes,
)
from attnlib.mla import MultiHeadLatentAttention, mla_absorbed, mla_from_mha, mla_naive
from attnlib.norms import LayerNorm, RMSNorm, layer_norm, rms_norm
from attnlib.rope import apply_rope

__version__ = "0.4.0"

__all__ = [
    "__version__",
    # core
    "KERNELS",
    "attention",
    "attention_weights",
    "similarity",
    "row_normalise",
    # masks
    "causal_mask",
    "key_padding_mask",
    "sliding_window_mask",
    # heads
    "split_heads",
    "merge_heads",
    "repeat_kv",
    # rope
    "apply_rope",
    # the layer contract
    "AttentionLayer",
    # gqa
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "grouped_query_attention",
    # mla
    "MultiHeadLatentAttention",
    "mla_from_mha",
    "mla_naive",
    "mla_absorbed",
    # cache
    "Cache",
    "KVCache",
    "LatentCache",
    # norms
    "LayerNorm",
    "RMSNorm",
    "layer_norm",
    "rms_norm",
    # layers
    "FeedForward",
    "TransformerBlock",
    "TinyDecoder",
    "feed_forward",
    # memory
    "ModelSpec",
    "kv_cache_bytes",
    "mla_cache_bytes",
    "LLAMA3_70B",
    "GEMMA3_27B",
    "DEEPSEEK_V2",
    # flash
    "tiled_attention",
    # device
    "default_device",
]

# viz (plotly, ipywidgets), exercises and the trained models' modules load on first use, so
# `import attnlib` stays light: `attnlib.viz.twin(...)` and `attnlib.pretrained.load(...)`
# work after a plain `import attnlib`.
_LAZY_SUBMODULES = ("viz", "exercises", "tasks", "train", "pretrained", "probes")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"attnlib.{name}")
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_SUBMODULES})
