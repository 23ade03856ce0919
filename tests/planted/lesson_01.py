"""Planted wrong answers for lesson 01's exercises (the toy database typed in by hand)."""

from __future__ import annotations

import math

import torch

from planted import Planted

K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 1.0]],
                 dtype=torch.float64)
V = torch.tensor([[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [1.0, 4.0], [3.0, 1.0]],
                 dtype=torch.float64)

# 01.1: q = (2, 1); dot products (2, 1, -2, -1, 3)
DOTS = [2.0, 1.0, -2.0, -1.0, 3.0]


def _weights(q: list[float], scale: float) -> torch.Tensor:
    e = torch.exp(scale * (K @ torch.tensor(q, dtype=torch.float64)))
    return e / e.sum()


# 01.4: q = (1, 2), default scale 1/sqrt(2); v_2 moves from (4, 3) to (4, 9)
P_12 = _weights([1.0, 2.0], 2 ** -0.5)
Y_12 = P_12 @ V
P_12_UNSCALED = _weights([1.0, 2.0], 1.0)


# 01.6: lookup(Q, K, V, f)
def _exp_only(Q, K, V, f):
    """Ignores the kernel it is given and always takes the exponential."""
    A = torch.exp(Q @ K.mT / Q.shape[-1] ** 0.5)
    return A / A.sum(dim=-1, keepdim=True) @ V


def _dim0(Q, K, V, f):
    """Normalises over dim 0, which is the queries in 2-D but the batch in 3-D."""
    A = f(Q @ K.mT / Q.shape[-1] ** 0.5)
    return A / A.sum(dim=0, keepdim=True) @ V


def _value_width(Q, K, V, f):
    """Scales the logits by the values' width d_V."""
    A = f(Q @ K.mT / V.shape[-1] ** 0.5)
    return A / A.sum(dim=-1, keepdim=True) @ V


def _float64(Q, K, V, f):
    """Computes in float64 and returns float64 whatever the inputs' dtype."""
    Q, K, V = Q.double(), K.double(), V.double()
    A = f(Q @ K.mT / Q.shape[-1] ** 0.5)
    return A / A.sum(dim=-1, keepdim=True) @ V


def _mean(Q, K, V, f):
    """Divides the scores by the number of keys, not by their sum."""
    A = f(Q @ K.mT / Q.shape[-1] ** 0.5)
    return A / K.shape[-2] @ V


PLANTED = [
    # 01.1: relu weights of q = (2, 1), scale 1
    Planted("01.1", "|s| instead of relu(s)",
            [abs(s) / sum(abs(t) for t in DOTS) for s in DOTS], avoid=r"exponential|scores"),
    Planted("01.1", "softmax of the relu scores", torch.softmax(
        torch.tensor([max(s, 0.0) for s in DOTS]), 0).tolist(), avoid=r"exponential|scores A"),
    Planted("01.1", "relu scores over the number of keys", [max(s, 0.0) / 5 for s in DOTS],
            avoid=r"exponential|scores A"),
    Planted("01.1", "raw dot products over their sum", [s / sum(DOTS) for s in DOTS],
            names=r"negative"),
    # 01.3: multiply-adds for N_Q = 12, N_KV = 3000, d = 128
    Planted("01.3", "only Q K^T", 12 * 3000 * 128, names=r"one of the two products"),
    Planted("01.3", "the queries attend to the queries", 12 * 12 * 256,
            avoid=r"recompute|multiply and an add"),
    Planted("01.3", "flops: a multiply and an add each", 2 * 12 * 3000 * 256,
            names=r"multiply-add once"),
    Planted("01.3", "one query only", 3000 * 256, avoid=r"recompute|multiply and an add"),
    # 01.4: the output after v_2 moves by (0, 6)
    Planted("01.4", "the edit weighted at scale 1", (Y_12 + P_12_UNSCALED[2] * torch.tensor(
        [0.0, 6.0], dtype=torch.float64)).tolist(), avoid=r"before the edit|new value|weighted"),
    Planted("01.4", "the change put on the first coordinate", (Y_12 + P_12[2] * torch.tensor(
        [6.0, 0.0], dtype=torch.float64)).tolist(), avoid=r"before the edit|new value|weighted"),
    Planted("01.4", "the changed coordinate alone", float(Y_12[1] + 6 * P_12[2]),
            names=r"shape"),
    Planted("01.4", "the old output averaged with the new value",
            ((Y_12 + torch.tensor([4.0, 9.0], dtype=torch.float64)) / 2).tolist(),
            avoid=r"before the edit|new value|weighted"),
    # 01.5: the weights of q = k_0 as tau -> 0
    Planted("01.5", "the tau -> infinity limit, uniform", [0.2] * 5,
            avoid=r"e_0|default scale"),
    Planted("01.5", "the two tied keys not normalised", [1.0, 0.0, 0.0, 0.0, 1.0],
            avoid=r"e_0|default scale"),
    Planted("01.5", "the weights at tau = 0.1, not the limit", _weights([1.0, 0.0], 10.0).tolist(),
            avoid=r"e_0|default scale"),
    Planted("01.5", "all weight on the longer key 4", [0.0, 0.0, 0.0, 0.0, 1.0],
            avoid=r"e_0|default scale"),
    # 01.6: lookup(Q, K, V, f)
    Planted("01.6", "the kernel argument ignored", _exp_only),
    Planted("01.6", "normalised over dim 0", _dim0),
    Planted("01.6", "scaled by sqrt(d_V)", _value_width),
    Planted("01.6", "float64 whatever the input", _float64, names=r"dtype"),
    Planted("01.6", "divided by N_KV, not by the row sum", _mean),
]

assert math.isclose(sum(P_12.tolist()), 1.0)
