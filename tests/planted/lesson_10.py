"""Planted wrong answers for lesson 10's exercises."""

from __future__ import annotations

import math

import torch

from planted import Planted

# 10.1: P_0 = (0.5, 0.25, 0.25), v = (0, 2, 4), m = 4
P0, V0 = [0.5, 0.25, 0.25], [0.0, 2.0, 4.0]
Y0 = sum(p * v for p, v in zip(P0, V0, strict=True))
VAR = sum(p * (v - Y0) ** 2 for p, v in zip(P0, V0, strict=True))

# 10.2: A rows (4, 0, 1), (2, 1, 0); V = (1, 2, 2)
COLUMNS = [math.hypot(4, 2), 1.0, 1.0]
ROWS = [1.0, 2.0, 2.0]

# 10.3: P = (0.9, 0.1/99 x 99), m = 50 uniform draws over N = 100 keys
SQUARES = 0.9 ** 2 + 99 * (0.1 / 99) ** 2


# 10.6: estimate(Q, K, V, rho, m, generator)
def _snis(Q, K, V, rho, m, generator, *, scale=None, draw=None):
    j = (draw or (lambda: torch.multinomial(rho, m, replacement=True, generator=generator)))()
    s = Q.shape[-1] ** -0.5 if scale is None else scale
    logits = (K[j] * Q[:, None, :]).sum(-1) * s
    w = torch.exp(logits) / torch.gather(rho, -1, j)
    return (w[..., None] * V[j]).sum(-2) / w.sum(-1, keepdim=True)


def _half_scale(Q, K, V, rho, m, generator):
    """Hard-codes the scale 1/2, right only for d_QK = 4."""
    return _snis(Q, K, V, rho, m, generator, scale=0.5)


def _global_rng(Q, K, V, rho, m, generator):
    """Draws with the global random generator, ignoring the one given."""
    return _snis(Q, K, V, rho, m, generator,
                 draw=lambda: torch.multinomial(rho, m, replacement=True))


def _first_row_keys(Q, K, V, rho, m, generator):
    """Draws one set of keys from the first query's proposal and uses it for every query."""
    def draw():
        j = torch.multinomial(rho[0], m, replacement=True, generator=generator)
        return j.expand(Q.shape[0], m)
    return _snis(Q, K, V, rho, m, generator, draw=draw)


def _values_mean(Q, K, V, rho, m, generator):
    """The plain mean of the sampled values."""
    j = torch.multinomial(rho, m, replacement=True, generator=generator)
    return V[j].mean(dim=-2)


def _uniform_draws(Q, K, V, rho, m, generator):
    """Draws uniformly but weighs as if the draws came from rho."""
    uniform = torch.ones_like(rho)
    return _snis(Q, K, V, rho, m, generator,
                 draw=lambda: torch.multinomial(uniform, m, replacement=True,
                                                generator=generator))


def _exact(Q, K, V, rho, m, generator):
    """Returns the exact softmax attention, drawing nothing."""
    return torch.softmax(Q @ K.T / Q.shape[-1] ** 0.5, dim=-1) @ V


PLANTED = [
    # 10.1: the mean squared error of m = 4 samples
    Planted("10.1", "divided by m - 1", VAR / 3, avoid=r"one sample|standard deviation|E\[v\^2\]"),
    Planted("10.1", "the unweighted variance of v", sum((v - 2) ** 2 for v in V0) / 3 / 4,
            avoid=r"one sample|standard deviation|E\[v\^2\]|round"),
    Planted("10.1", "the standard deviation", math.sqrt(VAR / 4), names=r"standard deviation"),
    Planted("10.1", "the variance of one sample", VAR, names=r"one sample"),
    # 10.2: the optimal column probabilities
    Planted("10.2", "the products, not normalised",
            [c * r for c, r in zip(COLUMNS, ROWS, strict=True)],
            avoid=r"column norms of A only|squared|uniform"),
    Planted("10.2", "l1 norms of A's columns", [6 / 10, 2 / 10, 2 / 10],
            avoid=r"column norms of A only|squared|uniform"),
    Planted("10.2", "the row norms of V alone", [1 / 5, 2 / 5, 2 / 5],
            avoid=r"column norms of A only|squared|uniform"),
    Planted("10.2", "the squared products", [(c * r) ** 2 / sum((a * b) ** 2 for a, b in zip(
        COLUMNS, ROWS, strict=True)) for c, r in zip(COLUMNS, ROWS, strict=True)],
        names=r"squared"),
    # 10.3: the ESS of 50 uniform draws over 100 keys
    Planted("10.3", "m / sum_j P_j^2", 50 / SQUARES, names=r"m / sum_j P_j\^2"),
    Planted("10.3", "m sum_j P_j^2", 50 * SQUARES, names=r"multiplies m"),
    Planted("10.3", "the ESS per draw", 1 / (100 * SQUARES), names=r"per draw"),
    Planted("10.3", "m over (1 + sum_j P_j^2)", 50 / (1 + SQUARES),
            avoid=r"per draw|divide m by it|percentage"),
    # the old question (m = N = 100) passed these: m and N cancel, or trade places
    Planted("10.3", "1 / sum_j P_j^2, the effective number of keys", 1 / SQUARES,
            names=r"effective number of keys"),
    Planted("10.3", "N / (m sum_j P_j^2)", 100 / (50 * SQUARES), names=r"swaps m and N"),
    Planted("10.3", "m / (N sum_j P_j^2) with m read as N", 100 / (100 * SQUARES),
            names=r"effective number of keys"),
    # 10.6: the importance-sampled row
    Planted("10.6", "the scale 1/2 hard-coded", _half_scale),
    Planted("10.6", "the generator ignored", _global_rng, names=r"generator=generator"),
    Planted("10.6", "one set of keys for every query", _first_row_keys),
    Planted("10.6", "the plain mean of the sampled values", _values_mean, names=r"plain mean"),
    Planted("10.6", "uniform draws weighed by 1/rho", _uniform_draws),
    Planted("10.6", "the exact row, no draws", _exact),
]
