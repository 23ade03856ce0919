"""The lessons' experiments as tables, one module per chapter, beside the figures of
:mod:`attnlib.viz` that draw the same numbers.

- ``tokens``      tokenizers and embeddings                              (lesson 00)
- ``lookup``      kernels as lookups                                      (01)
- ``softmax``     the spread of the logits, saturation, temperature       (02)
- ``heads``       parameters and widths of multi-head layers              (03)
- ``masks``       masks, norm placements, feed-forward networks           (04)
- ``kvcache``     the cost of decoding with and without a cache           (05)
- ``gqa``         converting multi-head attention to grouped-query        (06)
- ``mla``         latent attention's names, cache and conversion          (07)
- ``rope``        RoPE's wavelengths and rotations                        (08)
- ``frontier``    tiling, top-k, features, sinks                          (09)
- ``randomised``  sampling, sketching and low-rank estimators compared    (10)

Each returns a ``pandas.DataFrame`` a lesson shows as a table; every draw is seeded and every
number rounded where a CPU's last bits could show.
"""

from attnlib.analysis.experiments import (
    frontier,
    gqa,
    heads,
    kvcache,
    lookup,
    masks,
    mla,
    randomised,
    rope,
    softmax,
    tokens,
)

__all__ = [
    "frontier", "gqa", "heads", "kvcache", "lookup", "masks", "mla", "randomised", "rope",
    "softmax", "tokens",
]
