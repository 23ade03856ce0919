"""Planted wrong answers for lesson 02's exercises."""

from __future__ import annotations

import torch

from planted import Planted


def _no_scale(Q, K, V):
    """Softmax attention that forgets the 1/sqrt(d) of the logits."""
    return torch.softmax(Q @ K.mT, dim=-1) @ V


def _columns(Q, K, V):
    """Normalises each key's column instead of each query's row."""
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    return torch.softmax(S, dim=-2) @ V


PLANTED = [
    Planted("02.5", "logits not scaled by 1/sqrt(d)", _no_scale, names=r"sqrt|scale"),
    Planted("02.5", "softmax over the keys' column", _columns),
]
