"""Attention as a kernel: the backward pass in closed form, and FlashAttention-2 in Triton.

- ``backward``      the closed-form backward of softmax attention, a tiled forward that
                    keeps O and the row log-sum-exp L, and a tiled backward that
                    recomputes P from L, in plain torch                      (lesson 13)
- ``triton_flash``  FlashAttention-2's forward and backward as Triton kernels (causal,
                    grouped-query) behind ``flash_attention``                (13)
- ``paged_decode``  a decoding step through a paged cache's block tables, as a Triton
                    kernel (imports Triton; attnlib.serving.paged calls it)  (11)

Importing ``attnlib.kernels`` imports no Triton: ``attnlib.kernels.triton_flash`` does, on
first use. Its kernels are compiled for a CUDA GPU, or run on the CPU in Triton's interpreter
when ``TRITON_INTERPRET=1`` is in the environment as that module is first imported; attnlib
never sets the variable (lessons 13 and 14 do, in a cell of their own).
"""

from attnlib.kernels.backward import (
    FlashAttentionTorch,
    attention_backward,
    attention_forward,
    tiled_backward,
    tiled_forward,
)

__all__ = [
    "FlashAttentionTorch",
    "attention_backward",
    "attention_forward",
    "tiled_backward",
    "tiled_forward",
]
