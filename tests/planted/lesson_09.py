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

# 09.2: 48 layers, 32 heads, r = 128 features, values of width d_V = 64, bfloat16
LAYERS, HEADS, R, D_V = 48, 32, 128, 64

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


def _online_variant(Q, K, V, block_size, *, one_max=False, alpha_inverted=False,
                    scale=None, float64=False, values_shift=0):
    """The online softmax with one thing changed (each planted answer below names it)."""
    s = Q.shape[-1] ** -0.5 if scale is None else scale
    work = torch.float64 if float64 else Q.dtype
    m = torch.full((*Q.shape[:-1], 1), -math.inf, dtype=work)
    l = torch.zeros_like(m)
    O = torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=work)
    V = torch.roll(V, -values_shift, dims=-2)
    for start in range(0, K.shape[-2], block_size):
        S = (Q @ K[..., start:start + block_size, :].mT * s).to(work)
        block_max = S.amax().expand_as(m) if one_max else S.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, block_max)
        alpha = torch.exp(m_new - m) if alpha_inverted else torch.exp(m - m_new)
        P = torch.exp(S - m_new)
        l = alpha * l + P.sum(dim=-1, keepdim=True)
        O = alpha * O + P @ V[..., start:start + block_size, :].to(work)
        m = m_new
    return O / l


def _one_max(Q, K, V, block_size):
    """One maximum over all the queries' logits of a block, S.amax()."""
    return _online_variant(Q, K, V, block_size, one_max=True)


def _alpha_inverted(Q, K, V, block_size):
    """Rescales by exp(m' - m) instead of exp(m - m')."""
    return _online_variant(Q, K, V, block_size, alpha_inverted=True)


def _scale_d_v(Q, K, V, block_size):
    """Scales the logits by 1/sqrt(d_V)."""
    return _online_variant(Q, K, V, block_size, scale=V.shape[-1] ** -0.5)


def _scale_d(Q, K, V, block_size):
    """Scales the logits by 1/d_QK."""
    return _online_variant(Q, K, V, block_size, scale=1 / Q.shape[-1])


def _float64_out(Q, K, V, block_size):
    """Accumulates in float64 and returns float64 for float32 inputs."""
    return _online_variant(Q, K, V, block_size, float64=True)


def _values_shifted(Q, K, V, block_size):
    """Pairs each key with the next key's value."""
    return _online_variant(Q, K, V, block_size, values_shift=1)


def _untiled(Q, K, V, block_size):
    """Right outputs, not tiled: one softmax over all the keys."""
    return torch.softmax(Q @ K.mT * Q.shape[-1] ** -0.5, dim=-1) @ V


def _blocks_of_4(Q, K, V, block_size):
    """Right outputs, tiled by 4 keys whatever block_size says."""
    return _online(Q, K, V, 4)


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
    Planted("09.1", "weights proportional to the logits", (0 * 1 + 2 * 2 + 4 * 3 + 1 * 4) / 7,
            names=r"logits themselves"),
    Planted("09.1", "the second block alone", (3 * E(4) + 4 * E(1)) / (E(4) + E(1)),
            names=r"second block alone"),
    Planted("09.1", "logits halved", sum(E(t / 2) * v for t, v in ((0, 1), (2, 2), (4, 3), (1, 4)))
            / sum(E(t / 2) for t in (0, 2, 4, 1)), names=r"divides the logits by 2"),
    # 09.2: bytes of a linear-attention state
    Planted("09.2", "S_t only", LAYERS * HEADS * R * D_V * 2, names=r"S_t only"),
    Planted("09.2", "float32", LAYERS * HEADS * (R * D_V + R) * 4, names=r"float32"),
    Planted("09.2", "one head per layer", LAYERS * (R * D_V + R) * 2,
            avoid=r"counts S_t only|counts numbers|one layer|is float32"),
    Planted("09.2", "z_t of width d_V counted per row of S_t", LAYERS * HEADS * 2 * R * D_V * 2,
            avoid=r"counts S_t only|half the answer|one layer|is float32|z_t d_V|x r,|x d_V,"),
    Planted("09.2", "z_t of width d_V", LAYERS * HEADS * (R * D_V + D_V) * 2,
            names=r"gives z_t d_V numbers"),
    Planted("09.2", "S_t of r x r", LAYERS * HEADS * (R * R + R) * 2, names=r"makes S_t r x r"),
    Planted("09.2", "24 layers", 24 * HEADS * (R * D_V + R) * 2, names=r"over all 48 layers",
            avoid=r"counts numbers|S_t only|one layer|float32|z_t d_V|S_t r x r|S_t d_V"),
    Planted("09.2", "8 heads", LAYERS * 8 * (R * D_V + R) * 2,
            avoid=r"S_t only|half the answer|one layer|float32|z_t d_V|S_t r x r|S_t d_V"),
    Planted("09.2", "in KiB", LAYERS * HEADS * (R * D_V + R) * 2 // 1024,
            avoid=r"S_t only|half the answer|one layer|float32|z_t d_V|S_t r x r|S_t d_V"),
    # 09.3: the cost of a sparse query
    Planted("09.3", "as a percentage", 100 * (N * INDEX + K_TOP * 2 * D) / (N * 2 * D),
            names=r"percentage"),
    Planted("09.3", "the indexer plus full attention", (N * INDEX + N * 2 * D) / (N * 2 * D),
            avoid=r"top-k|indexer alone|percentage"),
    Planted("09.3", "the indexer against d, not 2d", (N * INDEX + K_TOP * 2 * D) / (N * D),
            avoid=r"top-k|indexer alone|percentage"),
    Planted("09.3", "top-k keys only", K_TOP / N, names=r"indexer scores every"),
    Planted("09.3", "d per chosen key, not 2d", (N * INDEX + K_TOP * D) / (N * 2 * D),
            names=r"d multiply-adds per chosen key"),
    Planted("09.3", "the speed-up, full over sparse", (N * 2 * D) / (N * INDEX + K_TOP * 2 * D),
            avoid=r"top-k|indexer alone|percentage|chosen key"),
    Planted("09.3", "the saving, one minus the fraction",
            1 - (N * INDEX + K_TOP * 2 * D) / (N * 2 * D),
            avoid=r"top-k|indexer alone|percentage|chosen key"),
    Planted("09.3", "d = 64", (N * INDEX + K_TOP * 2 * 64) / (N * 2 * 64),
            avoid=r"top-k|indexer alone|percentage|chosen key"),
    # 09.5: tiled attention
    Planted("09.5", "running maximum starting at 0", _max_from_zero),
    Planted("09.5", "each block's own maximum", _block_max),
    Planted("09.5", "l not rescaled", _l_kept, names=r"running sum l"),
    Planted("09.5", "keys sliced on axis 0", _axis_0),
    Planted("09.5", "a short last block dropped", _whole_blocks),
    Planted("09.5", "one maximum over all queries", _one_max, avoid=r"keys of K or V at once"),
    Planted("09.5", "alpha inverted", _alpha_inverted, avoid=r"keys of K or V at once"),
    Planted("09.5", "scale 1/sqrt(d_V)", _scale_d_v, avoid=r"rescal|running|keys of K or V"),
    Planted("09.5", "scale 1/d", _scale_d, avoid=r"rescal|running|keys of K or V"),
    Planted("09.5", "float64 out for float32 in", _float64_out, names=r"dtype"),
    Planted("09.5", "values shifted by one key", _values_shifted,
            avoid=r"rescal|running|keys of K or V"),
    Planted("09.5", "not tiled", _untiled, names=r"reads 23 keys of K or V at once"),
    Planted("09.5", "tiled by 4 whatever block_size", _blocks_of_4,
            names=r"at most 4 keys, with block_size = 5"),
]
