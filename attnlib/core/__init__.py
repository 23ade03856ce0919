"""The mathematics: the similarity kernel and row normalisation, masks, heads and RoPE.

``Y = Z^-1 A V`` and everything it needs to be computed for one layer's heads, as plain
functions on tensors; every other part of attnlib calls these.

- ``functional``  kernels, ``attention``, ``attention_weights``; the one dispatch from the
                  mathematics to PyTorch, ``ATTENTION_FUNCTIONS``        (lessons 01, 02)
- ``sdpa``        PyTorch's fused attention under attnlib's contract: the speed paths (02, 06)
- ``masks``       causal, padding and sliding-window masks; positions    (04)
- ``heads``       split/merge heads and the grouped-query map             (03, 06)
- ``rope``        rotary position embedding and its scalings              (08)

Each name lives in its module (``attnlib.core.rope.rope_tables``); nothing here imports
from the other subpackages.
"""

from attnlib.core import functional, heads, masks, rope, sdpa

__all__ = ["functional", "heads", "masks", "rope", "sdpa"]
