"""Planted wrong answers for lesson 12's exercises."""

from __future__ import annotations

from planted import Planted

# 12.2: book: 4 layers, 4 heads of width 16; G = 1; float32; 40 characters. Llama 3 70B: 80
# layers, 64 heads, 8 KV heads of width 128, bf16, 40 tokens
N_L, H, D_HEAD, G, TOKENS = 4, 4, 16, 1, 40
SHAPES = ((4, 4, 1, 16, 4), (80, 64, 8, 128, 2))  # (N_L, H, G, d_head, bytes)


def _both(formula):
    """formula(N_L, H, G, d_head, n_b) * 40 tokens for book (G = 1) and Llama 3 70B."""
    return tuple(formula(*shape) * TOKENS for shape in SHAPES)



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
    # 12.2: bytes of the caches after 40 tokens, (book at G = 1, Llama 3 70B)
    Planted("12.2", "H instead of G", _both(lambda n_l, h, g, d, n_b: 2 * n_l * h * d * n_b),
            names=r"full multi-head"),
    Planted("12.2", "numbers, not bytes", _both(lambda n_l, h, g, d, n_b: 2 * n_l * g * d),
            names=r"not bytes"),
    Planted("12.2", "one layer", _both(lambda n_l, h, g, d, n_b: 2 * g * d * n_b),
            names=r"one layer"),
    Planted("12.2", "keys only", _both(lambda n_l, h, g, d, n_b: n_l * g * d * n_b),
            names=r"factor 2"),
    Planted("12.2", "41 characters, counting the next one",
            tuple(b * 41 // 40 for b in _both(lambda n_l, h, g, d, n_b: 2 * n_l * g * d * n_b)),
            avoid=r"multi-head|factor 2|one layer|not 8|not bytes"),
    # the old question (book alone: N_L = H = 4 = bytes of a float32) passed these
    Planted("12.2", "the multi-head cache's numbers, no bytes",
            _both(lambda n_l, h, g, d, n_b: 2 * n_l * h * d)),
    Planted("12.2", "H in place of N_L", _both(lambda n_l, h, g, d, n_b: 2 * h * g * d * n_b)),
    Planted("12.2", "H in place of the bytes",
            _both(lambda n_l, h, g, d, n_b: 2 * n_l * g * d * h)),
    Planted("12.2", "N_L in place of the bytes",
            _both(lambda n_l, h, g, d, n_b: 2 * n_l * g * d * n_l)),
    Planted("12.2", "one multi-head layer in float32",
            _both(lambda n_l, h, g, d, n_b: 2 * h * d * 4)),
]

