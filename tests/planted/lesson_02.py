"""Planted wrong answers for lesson 02's exercises."""

from __future__ import annotations

import math

import torch

from planted import Planted

# the worked example: q = (1, 0); keys (1, 0), (0, 1), (-1, 0); values 10, 20, 30
VALUES = [10.0, 20.0, 30.0]


def _worked(logits: list[float]) -> tuple[list[float], float]:
    e = [math.exp(s) for s in logits]
    p = [x / sum(e) for x in e]
    return p, sum(pj * v for pj, v in zip(p, VALUES, strict=True))


S = [1 / math.sqrt(2), 0.0, -1 / math.sqrt(2)]  # the logits of q = (1, 0)
P, Y = _worked(S)
P2, Y2 = _worked([2 * s for s in S])  # the doubled query
GRADIENT = [p * (v - Y) for p, v in zip(P, VALUES, strict=True)]


def _no_scale(Q, K, V):
    """Softmax attention that forgets the 1/sqrt(d) of the logits."""
    return torch.softmax(Q @ K.mT, dim=-1) @ V


def _columns(Q, K, V):
    """Normalises each key's column instead of each query's row."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    return torch.softmax(S, dim=-2) @ V


def _minus_first(Q, K, V):
    """Subtracts each row's first logit, which need not be its largest."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S[..., :1])
    return E / E.sum(dim=-1, keepdim=True) @ V


def _minus_mean(Q, K, V):
    """Subtracts each row's mean logit: the largest can still overflow."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.mean(dim=-1, keepdim=True))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _clamped(Q, K, V):
    """Clamps the logits below the overflow point instead of shifting them."""
    S = (Q @ K.mT / Q.shape[-1] ** 0.5).clamp(max=80.0)
    E = torch.exp(S)
    return E / E.sum(dim=-1, keepdim=True) @ V


def _in_float32(Q, K, V):
    """The stable softmax, computed in float32 and cast back."""
    S = Q.float() @ K.float().mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    return (E / E.sum(dim=-1, keepdim=True) @ V.float()).to(Q.dtype)


def _matrix_max(Q, K, V):
    """Subtracts the largest logit of each whole matrix."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.amax(dim=(-2, -1), keepdim=True))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _by_d(Q, K, V):
    """Scales by 1/d instead of 1/sqrt(d)."""
    S = Q @ K.mT / Q.shape[-1]
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _max_no_keepdim(Q, K, V):
    """Subtracts the row maxima without keepdim, which broadcasts them along the wrong axis."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.amax(dim=-1))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _column_max(Q, K, V):
    """Subtracts each key's column maximum, which need not bound the row."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.amax(dim=-2, keepdim=True))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _value_width(Q, K, V):
    """Scales by the values' width d_V."""
    S = Q @ K.mT / V.shape[-1] ** 0.5
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _unshifted_sum(Q, K, V):
    """Divides the shifted exponentials by the sum of the unshifted ones."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    return E / torch.exp(S).sum(dim=-1, keepdim=True) @ V


def _largest_magnitude(Q, K, V):
    """Subtracts the largest |logit|, which underflows a row of large negative logits."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    E = torch.exp(S - S.abs().amax(dim=-1, keepdim=True))
    return E / E.sum(dim=-1, keepdim=True) @ V


def _size_1(Q, K, V):
    """Takes d_QK from Q.size(1), which is N_Q once a batch axis leads."""
    return torch.softmax(Q @ K.mT / math.sqrt(Q.size(1)), dim=-1) @ V


F16_MAX, BF16_MAX = 65504.0, 3.3895313892515355e38
F32_MAX = 3.4028234663852886e38
F16_TINY, BF16_TINY = 6.103515625e-05, 1.1754943508222875e-38

PLANTED = [
    # 02.1: the output for q = (2, 0)
    Planted("02.1", "the values doubled, not the query", 2 * Y, avoid=r"q = \(1, 0\)|twice"),
    Planted("02.1", "the query halved", _worked([s / 2 for s in S])[1],
            avoid=r"q = \(1, 0\)|twice|1/sqrt"),
    Planted("02.1", "the weights instead of the output", P2, names=r"shape"),
    Planted("02.1", "rounded to one decimal", round(Y2, 1), names=r"close"),
    Planted("02.1", "the doubled query with no 1/sqrt(2)", _worked([1.0, 0.0, -1.0])[1],
            avoid=r"q = \(1, 0\)|twice"),
    Planted("02.1", "the hard lookup: the best key's value", 10.0,
            avoid=r"q = \(1, 0\)|twice|close"),
    Planted("02.1", "the values read in reverse order",
            sum(p * v for p, v in zip(P2, VALUES[::-1], strict=True)),
            avoid=r"q = \(1, 0\)|twice|close"),
    Planted("02.1", "the query (0, 2)", _worked([0.0, 2 / math.sqrt(2), 0.0])[1],
            avoid=r"q = \(1, 0\)|twice|close"),
    # 02.2: dy/ds_j
    Planted("02.2", "p_j (v_j - mean of v)",
            [p * (v - 20.0) for p, v in zip(P, VALUES, strict=True)],
            avoid=r"diag|dot products|multiply by p_j"),
    Planted("02.2", "the gradient negated", [-g for g in GRADIENT], names=r"sign"),
    Planted("02.2", "the gradient in the order j = 2, 1, 0", GRADIENT[::-1], names=r"order"),
    Planted("02.2", "the gradient with respect to q", [GRADIENT[0] - GRADIENT[2], GRADIENT[1]],
            names=r"shape"),
    Planted("02.2", "the -p p^T part only", [-p * Y for p in P],
            avoid=r"diag|dot products|multiply by p_j|order"),
    Planted("02.2", "the logits without 1/sqrt(2)", (lambda p, y: [
        pj * (v - y) for pj, v in zip(p, VALUES, strict=True)])(*_worked([1.0, 0.0, -1.0])),
            avoid=r"diag|dot products|multiply by p_j|order"),
    Planted("02.2", "the gradient for the doubled query of 02.1",
            [p * (v - Y2) for p, v in zip(P2, VALUES, strict=True)],
            avoid=r"diag|dot products|multiply by p_j|order"),
    # 02.4: ln of the largest float16 and bfloat16
    Planted("02.4", "log2 of the largest numbers", [math.log2(F16_MAX), math.log2(BF16_MAX)],
            avoid=r"log10|natural"),
    Planted("02.4", "the largest exponents, 15 and 127", [15.0, 127.0], avoid=r"log10|natural"),
    Planted("02.4", "float16 only", math.log(F16_MAX), names=r"shape"),
    Planted("02.4", "bfloat16 first", [math.log(BF16_MAX), math.log(F16_MAX)],
            names=r"float16 first"),
    Planted("02.4", "float32's largest for float16's", [math.log(F32_MAX), math.log(BF16_MAX)],
            names=r"float16"),
    Planted("02.4", "the smallest normal numbers (underflow)",
            [math.log(F16_TINY), math.log(BF16_TINY)], avoid=r"log10|natural|float16 first"),
    # 02.5: attend(Q, K, V)
    Planted("02.5", "logits not scaled by 1/sqrt(d)", _no_scale, names=r"sqrt|scale"),
    Planted("02.5", "softmax over the keys' column", _columns, names=r"over the queries"),
    Planted("02.5", "each row's first logit subtracted", _minus_first),
    Planted("02.5", "each row's mean logit subtracted", _minus_mean),
    Planted("02.5", "logits clamped at 80", _clamped),
    Planted("02.5", "computed in float32", _in_float32, names=r"float32"),
    Planted("02.5", "the whole matrix's maximum", _matrix_max, names=r"row's own maximum"),
    Planted("02.5", "scaled by 1/d", _by_d, names=r"not 1/d_QK"),
    Planted("02.5", "row maxima without keepdim", _max_no_keepdim),
    Planted("02.5", "each column's maximum subtracted", _column_max),
    Planted("02.5", "scaled by sqrt(d_V)", _value_width),
    Planted("02.5", "shifted numerator over the unshifted sum", _unshifted_sum),
    Planted("02.5", "the largest |logit| subtracted", _largest_magnitude),
    Planted("02.5", "d_QK from Q.size(1)", _size_1),
]
