"""Planted wrong answers for lesson 09's exercises."""

from __future__ import annotations

import math

import torch

from planted import Planted

# 09.1: logits (0, 2 | 4, 1), values (1, 2 | 3, 4), two blocks
E = math.exp
# after block 0: m = 2, l = e^-2 + 1, o = e^-2 * 1 + 2
L0, O0 = E(-2) + 1, E(-2) * 1 + 2
# block 1 raises m to 4: alpha = e^(2 - 4)
L1 = E(-2) * L0 + 1 + E(-3)
O1 = E(-2) * O0 + 3 + E(-3) * 4

# 09.2: 48 layers, 32 heads, r = d_V = 128, bfloat16
LAYERS, HEADS, R, D_V = 48, 32, 128, 128

# 09.3: N = 131,072, d = 128, indexer 64 per key, top k = 2,048
N, D, INDEX, K_TOP = 131_072, 128, 64, 2_048


# 09.5: tiled(Q, K, V, block_size)
def _online(Q, K, V, block_size, *, m0=-math.inf, running_max=True, rescale_l=True,
            keys_axis=-2):
    m = torch.full((*Q.shape[:-1], 1), m0, dtype=Q.dtype)
    l = torch.zeros_like(m)
    O = torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    n_kv = K.shape[-2]
    for start in range(0, n_kv, block_size):
        if keys_axis == -2:
            K_b, V_b = K[..., start:start + block_size, :], V[..., start:start + block_size, :]
        else:  # slices axis 0, which is a batch axis when there is one
            K_b, V_b = K[start:start + block_size], V[start:start + block_size]
        S = Q @ K_b.mT / Q.shape[-1] ** 0.5
        block_max = S.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, block_max) if running_max else block_max
        alpha = torch.exp(m - m_new)
        P = torch.exp(S - m_new)
        l = (alpha * l if rescale_l else l) + P.sum(dim=-1, keepdim=True)
        O = alpha * O + P @ V_b
        m = m_new
    return O / l


def _max_from_zero(Q, K, V, block_size):
    """Starts the running maximum at 0 instead of -inf."""
    return _online(Q, K, V, block_size, m0=0.0)


def _block_max(Q, K, V, block_size):
    """Uses each block's own maximum, not the running one."""
    return _online(Q, K, V, block_size, running_max=False)


def _l_kept(Q, K, V, block_size):
    """Rescales the output but not the running sum."""
    return _online(Q, K, V, block_size, rescale_l=False)


def _axis_0(Q, K, V, block_size):
    """Slices the keys on axis 0."""
    return _online(Q, K, V, block_size, keys_axis=0)


def _whole_blocks(Q, K, V, block_size):
    """Drops a last block shorter than block_size."""
    n = K.shape[-2] // block_size * block_size
    return _online(Q, K[..., :n, :], V[..., :n, :], block_size)


PLANTED = [
    # 09.1: the online softmax by hand
    Planted("09.1", "o rescaled, l not", O1 / (L0 + 1 + E(-3)), avoid=r"skips the rescaling"),
    Planted("09.1", "o after the second block, not divided by l", O1,
            avoid=r"rescal|averages|plain mean"),
    Planted("09.1", "no rescaling at all", (O0 + 3 + E(-3) * 4) / (L0 + 1 + E(-3)),
            names=r"skips the rescaling"),
    Planted("09.1", "the value of the largest logit", 3.0, avoid=r"rescal|averages|plain mean"),
    # 09.2: bytes of a linear-attention state
    Planted("09.2", "S_t only", LAYERS * HEADS * R * D_V * 2, names=r"S_t only"),
    Planted("09.2", "float32", LAYERS * HEADS * (R * D_V + R) * 4, names=r"float32"),
    Planted("09.2", "one head per layer", LAYERS * (R * D_V + R) * 2,
            avoid=r"counts S_t only|counts numbers|one layer|is float32"),
    Planted("09.2", "z_t of width d_V counted per row of S_t", LAYERS * HEADS * 2 * R * D_V * 2,
            avoid=r"counts S_t only|counts numbers|one layer|is float32"),
    # 09.3: the cost of a sparse query
    Planted("09.3", "as a percentage", 100 * (N * INDEX + K_TOP * 2 * D) / (N * 2 * D),
            names=r"percentage"),
    Planted("09.3", "the indexer plus full attention", (N * INDEX + N * 2 * D) / (N * 2 * D),
            avoid=r"top-k|indexer alone|percentage"),
    Planted("09.3", "the indexer against d, not 2d", (N * INDEX + K_TOP * 2 * D) / (N * D),
            avoid=r"top-k|indexer alone|percentage"),
    Planted("09.3", "top-k keys only", K_TOP / N, names=r"indexer scores every"),
    # 09.5: tiled attention
    Planted("09.5", "running maximum starting at 0", _max_from_zero),
    Planted("09.5", "each block's own maximum", _block_max),
    Planted("09.5", "l not rescaled", _l_kept, names=r"running sum l"),
    Planted("09.5", "keys sliced on axis 0", _axis_0),
    Planted("09.5", "a short last block dropped", _whole_blocks),
]
