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


def _relu_row(q: list[float]) -> list[float]:
    s = (K @ torch.tensor(q, dtype=torch.float64)).clamp(min=0.0)
    return (s / s.sum()).tolist()


def _shifted(Q, K, V, f):
    """Applies the kernel to the logits minus their row maximum (right for exp only)."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    A = f(S - S.amax(dim=-1, keepdim=True))
    return A / A.sum(dim=-1, keepdim=True) @ V


def _by_keys(Q, K, V, f):
    """Scales by sqrt(N_KV), the number of keys, instead of sqrt(d_QK)."""
    A = f(Q @ K.mT / K.shape[-2] ** 0.5)
    return A / A.sum(dim=-1, keepdim=True) @ V


def _plain_T(Q, K, V, f):
    """Transposes K with .T, which reverses every axis of a batched tensor."""
    A = f(Q @ K.T / Q.shape[-1] ** 0.5)
    return A / A.sum(dim=-1, keepdim=True) @ V


def _dim1(Q, K, V, f):
    """Normalises over dim 1: the keys in 2-D, the queries in 3-D."""
    A = f(Q @ K.mT / Q.shape[-1] ** 0.5)
    return A / A.sum(dim=1, keepdim=True) @ V


def _epsilon(Q, K, V, f):
    """Adds 1e-6 to each row sum."""
    A = f(Q @ K.mT / Q.shape[-1] ** 0.5)
    return A / (A.sum(dim=-1, keepdim=True) + 1e-6) @ V


def _float32(Q, K, V, f):
    """Computes and returns float32 whatever the inputs' dtype."""
    A = f(Q.float() @ K.float().mT / Q.shape[-1] ** 0.5)
    return A / A.sum(dim=-1, keepdim=True) @ V.float()


def _size_1(Q, K, V, f):
    """Takes d_QK from Q.size(1), which is N_Q once a batch axis leads."""
    A = f(Q @ K.mT / math.sqrt(Q.size(1)))
    return A / A.sum(dim=-1, keepdim=True) @ V


V_EDITED = V.clone()
V_EDITED[2] = torch.tensor([4.0, 9.0], dtype=torch.float64)
V_FOURTH = V.clone()
V_FOURTH[3] = torch.tensor([4.0, 9.0], dtype=torch.float64)
P_21 = _weights([2.0, 1.0], 2 ** -0.5)
GAUSS = torch.exp(-((K - K[0]) ** 2).sum(dim=1) / (2 * 0.25))

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
    # a permutation of the right row by coincidence: the mirrored query's weights
    Planted("01.1", "the weights of q = (1, 2)", _relu_row([1.0, 2.0]), names=r"another input",
            avoid=r"wrong order|exponential|scores A"),
    Planted("01.1", "the softplus kernel", (lambda s: (s / s.sum()).tolist())(
        torch.nn.functional.softplus(torch.tensor(DOTS, dtype=torch.float64))),
            avoid=r"order|exponential|scores A"),
    Planted("01.1", "weights as percentages", [100 * w for w in _relu_row([2.0, 1.0])],
            avoid=r"order|exponential|scores A"),
    # 01.3: multiply-adds for N_Q = 12, N_KV = 3000, d = 128
    Planted("01.3", "only Q K^T", 12 * 3000 * 128, names=r"count both products"),
    Planted("01.3", "the queries attend to the queries", 12 * 12 * 256,
            avoid=r"recompute|multiply and an add"),
    Planted("01.3", "flops: a multiply and an add each", 2 * 12 * 3000 * 256,
            names=r"multiply-add once"),
    Planted("01.3", "one query only", 3000 * 256, avoid=r"recompute|multiply and an add"),
    Planted("01.3", "the question left out of N_KV", 12 * 2988 * 256,
            names=r"matches exactly", avoid=r"close|tolerance|both products|recompute"),
    Planted("01.3", "the N_Q N_KV divisions of Z^-1 added", 12 * 3000 * 257,
            names=r"matches exactly", avoid=r"close|tolerance|both products|recompute"),
    Planted("01.3", "both products at width 64", 12 * 3000 * (64 + 64),
            names=r"count both products"),
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
    # entries off by 4.5% and 11%: no common factor, and never "about 1 times"
    Planted("01.4", "P[0, 2] times the new value added, not times the change",
            (Y_12 + P_12[2] * torch.tensor([4.0, 9.0], dtype=torch.float64)).tolist(),
            avoid=r"1 times|before the edit|new value|weighted"),
    Planted("01.4", "the fourth value edited ('third' counted from 1)",
            (P_12 @ V_FOURTH).tolist(), avoid=r"1 times|before the edit|new value|weighted"),
    Planted("01.4", "the query (2, 1)", (P_21 @ V_EDITED).tolist(),
            avoid=r"1 times|before the edit|new value|weighted"),
    # 01.5: the weights of q = k_0 as tau -> 0
    Planted("01.5", "the tau -> infinity limit, uniform", [0.2] * 5,
            avoid=r"e_0|default scale"),
    Planted("01.5", "the two tied keys not normalised", [1.0, 0.0, 0.0, 0.0, 1.0],
            avoid=r"e_0|default scale"),
    Planted("01.5", "the weights at tau = 0.1, not the limit", _weights([1.0, 0.0], 10.0).tolist(),
            avoid=r"e_0|default scale"),
    Planted("01.5", "all weight on the longer key 4", [0.0, 0.0, 0.0, 0.0, 1.0],
            avoid=r"e_0|default scale"),
    # a permutation of the right row by coincidence: q = k_1 ties keys 1 and 4
    Planted("01.5", "the limit for q = k_1", [0.0, 0.5, 0.0, 0.0, 0.5], names=r"another input",
            avoid=r"wrong order|e_0|default scale"),
    Planted("01.5", "the weights at tau = 0.5", _weights([1.0, 0.0], 2.0).tolist(),
            avoid=r"e_0|default scale"),
    Planted("01.5", "a Gaussian kernel of width 0.5", (GAUSS / GAUSS.sum()).tolist(),
            avoid=r"e_0|default scale"),
    # 01.6: lookup(Q, K, V, f)
    Planted("01.6", "the kernel argument ignored", _exp_only),
    Planted("01.6", "normalised over dim 0", _dim0),
    Planted("01.6", "scaled by sqrt(d_V)", _value_width),
    Planted("01.6", "float64 whatever the input", _float64, names=r"dtype"),
    Planted("01.6", "divided by N_KV, not by the row sum", _mean),
    Planted("01.6", "the kernel of the logits minus their row maximum", _shifted),
    Planted("01.6", "scaled by sqrt(N_KV)", _by_keys),
    Planted("01.6", "K.T for K.mT", _plain_T),
    Planted("01.6", "normalised over dim 1", _dim1),
    Planted("01.6", "1e-6 added to each row sum", _epsilon),
    Planted("01.6", "float32 whatever the input", _float32, names=r"dtype"),
    Planted("01.6", "d_QK from Q.size(1)", _size_1),
]

assert math.isclose(sum(P_12.tolist()), 1.0)
