"""Lesson 14's pieces as a reader writes them (the lesson's hidden solutions): each passes
its check, and the stubs the lesson commits are not implemented yet."""

from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def embed(E, ids):
    return E[ids]


def rms_norm(x, g, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * g


def rope(X, positions, base):
    d = X.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=X.device) / d)
    angle = positions.to(torch.float64)[:, None] * theta  # (N, d/2)
    cos, sin = angle.cos().to(X.dtype), angle.sin().to(X.dtype)
    x, y = X[..., : d // 2], X[..., d // 2:]  # pair i is (i, i + d/2)
    return torch.cat((x * cos - y * sin, x * sin + y * cos), dim=-1)


def repeat_kv(K, H):
    return K.repeat_interleave(H // K.shape[-3], dim=-3)


def attend(Q, K, V):
    S = Q @ K.mT / Q.shape[-1] ** 0.5
    n_q, n_kv = S.shape[-2:]
    hide = torch.ones(n_q, n_kv, dtype=torch.bool, device=Q.device).triu(1 + n_kv - n_q)
    return torch.softmax(S.masked_fill(hide, float("-inf")), dim=-1) @ V


def feed_forward(x, W_gate, W_up, W_down):
    return (torch.nn.functional.silu(x @ W_gate) * (x @ W_up)) @ W_down


class Cache:
    def __init__(self):
        self.K = self.V = None

    @property
    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[-2]

    def append(self, K, V):
        self.K = K if self.K is None else torch.cat((self.K, K), dim=-2)
        self.V = V if self.V is None else torch.cat((self.V, V), dim=-2)
        return self.K, self.V


def sample(logits, temperature, generator):
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    P = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(P.reshape(-1, P.shape[-1]), 1,
                             generator=generator).reshape(*P.shape[:-1], 1)


SOLUTIONS = {"14.1": embed, "14.2": rms_norm, "14.3": rope, "14.4": repeat_kv,
             "14.5": attend, "14.6": feed_forward, "14.7": Cache, "14.8": sample}


@pytest.mark.parametrize("label", sorted(SOLUTIONS))
def test_the_lessons_solutions_are_correct(label):
    assert check(label, SOLUTIONS[label]).status == "correct"


def test_a_wrong_rope_pairing_is_named():
    def interleaved(X, positions, base):
        d = X.shape[-1]
        theta = base ** (-torch.arange(0, d, 2, dtype=X.dtype) / d)
        a = positions.to(X.dtype)[:, None] * theta
        x, y = X[..., 0::2], X[..., 1::2]
        return torch.stack((x * a.cos() - y * a.sin(), x * a.sin() + y * a.cos()), -1).flatten(-2)

    assert "rotate_half" in check("14.3", interleaved).message
