"""The mathematics: the similarity kernel and row normalisation, masks, heads and RoPE.

``Y = Z^-1 A V`` and everything it needs to be computed for one layer's heads, as plain
functions on tensors; every other part of attnlib calls these.

- ``functional``  kernels, ``attention``, ``attention_weights``          (lessons 01, 02)
- ``masks``       causal, padding and sliding-window masks; positions    (04)
- ``heads``       split/merge heads and the grouped-query map             (03, 06)
- ``rope``        rotary position embedding and its scalings              (08)

Nothing here imports from the other subpackages.
"""

from attnlib.core.functional import (
    KERNELS,
    attention,
    attention_weights,
    row_normalise,
    similarity,
)
from attnlib.core.heads import (
    head_mask,
    kv_head_index,
    merge_heads,
    repeat_kv,
    split_heads,
)
from attnlib.core.masks import (
    causal_mask,
    key_padding_mask,
    position_ids,
    query_positions,
    sliding_window_mask,
)
from attnlib.core.rope import (
    Llama3Scaling,
    RopeTables,
    YarnScaling,
    apply_rope,
    rope_frequencies,
    rope_matrix,
    rope_permutation,
    rope_rotate,
    rope_tables,
)

__all__ = [
    "KERNELS",
    "attention",
    "attention_weights",
    "row_normalise",
    "similarity",
    "causal_mask",
    "key_padding_mask",
    "position_ids",
    "query_positions",
    "sliding_window_mask",
    "head_mask",
    "kv_head_index",
    "merge_heads",
    "repeat_kv",
    "split_heads",
    "Llama3Scaling",
    "RopeTables",
    "YarnScaling",
    "apply_rope",
    "rope_frequencies",
    "rope_matrix",
    "rope_permutation",
    "rope_rotate",
    "rope_tables",
]
