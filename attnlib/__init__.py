"""attnlib: attention as a similarity kernel plus a row normalisation, ``Y = Z^-1 A V``.

A small PyTorch library written to be read next to Serret's "Understanding Transformers
and Attention Mechanisms" (arXiv:2604.00965) and the book built on it. A functional core
does the mathematics; the ``nn.Module`` classes only hold parameters and call it.

The package is laid out by layer of the design; each folder imports only from the ones
listed above it (the chapter that explains a module in brackets):

- ``core/``       the mathematics: ``functional`` (kernels, ``attention``; 01, 02), ``sdpa``
  (PyTorch's fused kernel; 02, 06), ``masks`` (04), ``heads`` (03, 06), ``rope`` (08)
- ``serving/``    decoding: ``cache`` (the cache protocol; 05, 07), ``sampling``, ``paged``,
  ``batching``, ``speculative``, ``quant``, ``streaming`` (11)
- ``layers/``     the layer contract ``base`` (03) and its variants ``gqa`` (03, 06), ``mla``
  (07), ``gates`` (09), ``sliding`` (05), the ``variants`` registry, ``norms`` (04) and
  ``blocks`` (feed-forward, transformer blocks, ``TinyDecoder``; 04, 05)
- ``analysis/``   costs and approximations: ``memory`` (00, 05-07), ``costs`` (01, 05, 07),
  ``flash`` (09), ``approx`` (09), ``randomised`` (10)
- ``models/``     the trained models: ``tasks``, ``train``, ``pretrained``, ``probes``,
  ``convert`` (01-09, 12)
- ``kernels/``    attention's backward pass and FlashAttention-2 in Triton (13)
- ``viz/``        figures and explorers for every chapter (loaded on first use)
- ``exercises/``  answer checks for the lessons' exercises (loaded on first use)
- at the root: ``tokens`` (00), ``examples`` (the lessons' fixed examples), ``device`` (the
  default device rule), and the shared input checks ``_checks`` and ``_params``.

The top level holds the contract of the book plus the functional core (``__all__``);
everything else stays in its submodule, for example ``attnlib.tokens.BPETokenizer``,
``attnlib.analysis.memory.LLAMA3_8B`` or ``attnlib.core.rope.rope_matrix``.

Example:
    >>> import attnlib
    >>> attnlib.causal_mask(2, 3).int()
    tensor([[1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
"""

from attnlib import examples, tokens  # noqa: F401  (attnlib.tokens, attnlib.examples)
from attnlib.analysis.flash import tiled_attention
from attnlib.analysis.memory import (
    DEEPSEEK_V2,
    GEMMA3_27B,
    LLAMA3_70B,
    ModelSpec,
    kv_cache_bytes,
    mla_cache_bytes,
)
from attnlib.core.functional import (
    KERNELS,
    attention,
    attention_weights,
    row_normalise,
    similarity,
)
from attnlib.core.heads import merge_heads, repeat_kv, split_heads
from attnlib.core.masks import causal_mask, key_padding_mask, sliding_window_mask
from attnlib.core.rope import apply_rope
from attnlib.device import default_device
from attnlib.layers.base import AttentionLayer
from attnlib.layers.blocks import FeedForward, TinyDecoder, TransformerBlock, feed_forward
from attnlib.layers.gqa import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiQueryAttention,
    grouped_query_attention,
)
from attnlib.layers.mla import MultiHeadLatentAttention, mla_absorbed, mla_from_mha, mla_naive
from attnlib.layers.norms import LayerNorm, RMSNorm, layer_norm, rms_norm
from attnlib.serving.cache import Cache, KVCache, LatentCache

__version__ = "0.5.0"

__all__ = [
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

# viz (plotly, ipywidgets), exercises, the trained models and the Triton kernels load on first
# use, so `import attnlib` stays light: `attnlib.viz.twin(...)` and
# `attnlib.models.pretrained.load(...)` work after a plain `import attnlib`.
_LAZY_SUBMODULES = ("viz", "exercises", "models", "kernels")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"attnlib.{name}")
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")
