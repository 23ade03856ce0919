"""Planted wrong answers for lesson 12's exercises."""

from __future__ import annotations

from planted import Planted

# 12.2: book: 4 layers, 4 heads of width 16; G = 1; float32; 40 characters
N_L, H, D_HEAD, G, TOKENS = 4, 4, 16, 1, 40


# 12.1: next_char_logits(x, g, E, eps)
def _rms(x):
    return x.pow(2).mean(dim=-1, keepdim=True)


def _no_eps(x, g, E, eps):
    """Leaves eps out."""
    return x / _rms(x).sqrt() * g @ E.mT


def _eps_fixed(x, g, E, eps):
    """Uses eps = 1e-6 whatever eps is given."""
    return x / (_rms(x) + 1e-6).sqrt() * g @ E.mT


def _eps_outside(x, g, E, eps):
    """Adds eps after the square root."""
    return x / (_rms(x).sqrt() + eps) * g @ E.mT


def _no_gains(x, g, E, eps):
    """Forgets the gains."""
    return x / (_rms(x) + eps).sqrt() @ E.mT


def _centred(x, g, E, eps):
    """Subtracts the mean first, as LayerNorm does."""
    c = x - x.mean(dim=-1, keepdim=True)
    return c / (_rms(c) + eps).sqrt() * g @ E.mT


def _mean_of_everything(x, g, E, eps):
    """Takes the mean square over every entry of x, all tokens together."""
    return x / (x.pow(2).mean() + eps).sqrt() * g @ E.mT


PLANTED = [
    # 12.1: the final norm and the tied head
    Planted("12.1", "eps left out", _no_eps),
    Planted("12.1", "eps fixed at 1e-6", _eps_fixed),
    Planted("12.1", "eps outside the square root", _eps_outside),
    Planted("12.1", "no gains", _no_gains, names=r"gains g"),
    Planted("12.1", "the mean subtracted", _centred, names=r"LayerNorm"),
    Planted("12.1", "one mean square over all tokens", _mean_of_everything),
    # 12.2: bytes of the G = 1 caches after 40 characters
    Planted("12.2", "H instead of G", 2 * N_L * H * D_HEAD * 4 * TOKENS,
            names=r"full multi-head"),
    Planted("12.2", "numbers, not bytes", 2 * N_L * G * D_HEAD * TOKENS, names=r"4 bytes"),
    Planted("12.2", "one layer", 2 * G * D_HEAD * 4 * TOKENS, names=r"4 layers"),
    Planted("12.2", "keys only", N_L * G * D_HEAD * 4 * TOKENS, names=r"factor 2"),
    Planted("12.2", "41 characters, counting the next one", 2 * N_L * G * D_HEAD * 4 * 41,
            avoid=r"multi-head|factor 2|quarter|not 8"),
]

