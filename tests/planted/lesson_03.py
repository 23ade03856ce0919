"""Planted wrong answers for lesson 03's exercises."""

from __future__ import annotations

import torch

from attnlib.examples import draw_layer
from planted import Planted

# 03.1: Gemma 3 27B's widths
D, H, D_HEAD = 5376, 32, 128
WIDTH = H * D_HEAD

# 03.2: the lesson's toy layer, written out with plain reshapes
X, W_Q, W_K, W_V, W_O = draw_layer(2, 3, d_in=6, n_tokens=4, seed=0)


def _heads(W_Q: torch.Tensor, W_K: torch.Tensor, W_V: torch.Tensor) -> list[torch.Tensor]:
    out = []
    for h in range(2):
        cols = slice(3 * h, 3 * h + 3)
        Q, K, V = X @ W_Q[:, cols], X @ W_K[:, cols], X @ W_V[:, cols]
        out.append(torch.softmax(Q @ K.T / 3 ** 0.5, dim=-1) @ V)
    return out


def _query_of_head_1_zeroed() -> torch.Tensor:
    """Zeroes head 1's query weights: its weights turn uniform, its output does not vanish."""
    W = W_Q.clone()
    W[:, 3:] = 0.0
    return torch.cat(_heads(W, W_K, W_V), dim=-1) @ W_O


def _strided_head_zeroed() -> torch.Tensor:
    """Zeroes every second column of the concatenation, as if heads were interleaved."""
    Y = torch.cat(_heads(W_Q, W_K, W_V), dim=-1)
    Y[:, 1::2] = 0.0
    return Y @ W_O


def _head_1_alone() -> torch.Tensor:
    """What head 1 contributes, Y_1 W_O^1, instead of what is left without it."""
    return _heads(W_Q, W_K, W_V)[1] @ W_O[3:]


# 03.5: multi_head(X, W_Q, W_K, W_V, W_O, n_heads)
def _layer(X, W_Q, W_K, W_V, W_O, n_heads, *, d_head=None, scale=None, causal=False):
    d_head = d_head or W_Q.shape[1] // n_heads

    def split(T):
        return T.reshape(*T.shape[:-1], n_heads, d_head).transpose(-3, -2)

    Q, K, V = split(X @ W_Q), split(X @ W_K), split(X @ W_V)
    S = Q @ K.mT * (d_head ** -0.5 if scale is None else scale)
    if causal:
        n = S.shape[-1]
        S = S.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    Y = torch.softmax(S, dim=-1) @ V
    return Y.transpose(-3, -2).reshape(*X.shape[:-1], -1) @ W_O


def _input_width(X, W_Q, W_K, W_V, W_O, n_heads):
    """Takes d_head = d_in / H, which holds only when H d_head = d_in."""
    return _layer(X, W_Q, W_K, W_V, W_O, n_heads, d_head=X.shape[-1] // n_heads)


def _scale_d_in(X, W_Q, W_K, W_V, W_O, n_heads):
    """Scales every head's logits by 1/sqrt(d_in)."""
    return _layer(X, W_Q, W_K, W_V, W_O, n_heads, scale=X.shape[-1] ** -0.5)


def _causal(X, W_Q, W_K, W_V, W_O, n_heads):
    """Adds a causal mask the exercise does not ask for."""
    return _layer(X, W_Q, W_K, W_V, W_O, n_heads, causal=True)


def _no_output(X, W_Q, W_K, W_V, W_O, n_heads):
    """Returns the merged heads without W_O."""
    eye = torch.eye(W_O.shape[0], dtype=X.dtype)
    return _layer(X, W_Q, W_K, W_V, eye, n_heads)


def _view_split(X, W_Q, W_K, W_V, W_O, n_heads):
    """Splits (..., N, H d_head) straight into (..., H, N, d_head) with one reshape."""
    def split(T):
        *batch, N, width = T.shape
        return T.reshape(*batch, n_heads, N, width // n_heads)

    Q, K, V = split(X @ W_Q), split(X @ W_K), split(X @ W_V)
    Y = torch.softmax(Q @ K.mT / Q.shape[-1] ** 0.5, dim=-1) @ V
    return Y.transpose(-3, -2).reshape(*X.shape[:-1], -1) @ W_O


def _no_head_scale() -> torch.Tensor:
    """Head 0 alone with its logits not scaled by 1/sqrt(d_head)."""
    Q, K, V = X @ W_Q[:, :3], X @ W_K[:, :3], X @ W_V[:, :3]
    return torch.softmax(Q @ K.T, dim=-1) @ V @ W_O[:3]


def _first_block_for_all(X, W_Q, W_K, W_V, W_O, n_heads):
    """Multiplies every head's output by the first d_head rows of W_O."""
    d_head = W_Q.shape[1] // n_heads
    eye = torch.eye(W_Q.shape[1], dtype=X.dtype)
    heads = _layer(X, W_Q, W_K, W_V, eye, n_heads)  # the merged heads (..., N, H d_head)
    return sum(heads[..., h * d_head:(h + 1) * d_head] @ W_O[:d_head] for h in range(n_heads))


def _values_by_W_K(X, W_Q, W_K, W_V, W_O, n_heads):
    """Projects the values with W_K."""
    return _layer(X, W_Q, W_K, W_K, W_O, n_heads)


def _over_queries(X, W_Q, W_K, W_V, W_O, n_heads):
    """Normalises over the queries (dim=-2)."""
    d_head = W_Q.shape[1] // n_heads

    def split(T):
        return T.reshape(*T.shape[:-1], n_heads, d_head).transpose(-3, -2)

    Q, K, V = split(X @ W_Q), split(X @ W_K), split(X @ W_V)
    Y = torch.softmax(Q @ K.mT / d_head ** 0.5, dim=-2) @ V
    return Y.transpose(-3, -2).reshape(*X.shape[:-1], -1) @ W_O


def _no_batch(X, W_Q, W_K, W_V, W_O, n_heads):
    """Reshapes to (N, H, d_head), which fails with a batch axis in front."""
    N, d_head = X.shape[-2], W_Q.shape[1] // n_heads
    Q, K, V = ((X @ W).reshape(N, n_heads, d_head).transpose(0, 1) for W in (W_Q, W_K, W_V))
    Y = torch.softmax(Q @ K.mT / d_head ** 0.5, dim=-1) @ V
    return Y.transpose(0, 1).reshape(N, -1) @ W_O


def _by_heads(X, W_Q, W_K, W_V, W_O, n_heads):
    """Scales by 1/sqrt(H)."""
    return _layer(X, W_Q, W_K, W_V, W_O, n_heads, scale=n_heads ** -0.5)


def _input_slices_scale(X, W_Q, W_K, W_V, W_O, n_heads):
    """Splits right but scales by 1/sqrt(d_in // H), read from W_Q's rows."""
    return _layer(X, W_Q, W_K, W_V, W_O, n_heads, scale=(W_Q.shape[0] // n_heads) ** -0.5)


def _input_slices(X, W_Q, W_K, W_V, W_O, n_heads):
    """Takes d_head = W_Q.shape[0] // H and splits into width // d_head heads of that size."""
    d_head = W_Q.shape[0] // n_heads

    def split(T):
        return T.reshape(*T.shape[:-1], -1, d_head).transpose(-3, -2)

    Q, K, V = split(X @ W_Q), split(X @ W_K), split(X @ W_V)
    Y = torch.softmax(Q @ K.mT / d_head ** 0.5, dim=-1) @ V
    return Y.transpose(-3, -2).reshape(*X.shape[:-1], -1) @ W_O


PLANTED = [
    # 03.1: entries of W_Q, W_K, W_V, W_O
    Planted("03.1", "with the biases of nn.MultiheadAttention", 4 * D * WIDTH + 3 * WIDTH + D,
            avoid=r"W_O|one head|narrower|input features"),
    Planted("03.1", "W_O taken as d_in x d_in", 3 * D * WIDTH + D * D,
            avoid=r"W_O alone|one head|input features"),
    Planted("03.1", "one matrix", D * WIDTH, avoid=r"W_O|one head's share"),
    Planted("03.1", "16 key/value heads", 2 * D * WIDTH + 2 * D * 16 * D_HEAD,
            names=r"every head has its own keys and values"),
    Planted("03.1", "every matrix d_in x d_in", 4 * D * D, names=r"narrower"),
    Planted("03.1", "Gemma 3's two QK-norm gain vectors added", 4 * D * WIDTH + 2 * D_HEAD,
            names=r"matches exactly", avoid=r"close|tolerance|W_O|one head|narrower"),
    Planted("03.1", "W_O counted as (H d_head) x (H d_head)", 3 * D * WIDTH + WIDTH * WIDTH,
            names=r"matches exactly", avoid=r"close|tolerance|one head|narrower"),
    # 03.2: the toy layer with head 1 off
    Planted("03.2", "head 1's queries zeroed", _query_of_head_1_zeroed(),
            avoid=r"both heads|removes head 0|multiply it by W_O"),
    Planted("03.2", "every second column zeroed", _strided_head_zeroed(),
            avoid=r"both heads|removes head 0|multiply it by W_O"),
    Planted("03.2", "head 1's contribution itself", _head_1_alone(),
            names=r"head 1's contribution"),
    Planted("03.2", "head 0's 4 x 3 output", _heads(W_Q, W_K, W_V)[0], names=r"shape"),
    Planted("03.2", "the rest doubled to keep the output's scale",
            2 * (_heads(W_Q, W_K, W_V)[0] @ W_O[:3]), names=r"2 times",
            avoid=r"both heads|head 1's contribution|multiply it by W_O"),
    Planted("03.2", "head 0 through W_O's rows 3 to 5", _heads(W_Q, W_K, W_V)[0] @ W_O[3:],
            avoid=r"both heads|head 1's contribution|multiply it by W_O"),
    Planted("03.2", "head 0 without 1/sqrt(d_head)", _no_head_scale(),
            avoid=r"both heads|head 1's contribution|multiply it by W_O"),
    # 03.5: multi_head
    Planted("03.5", "d_head from the input width", _input_width),
    Planted("03.5", "scaled by 1/sqrt(d_in)", _scale_d_in),
    Planted("03.5", "a causal mask added", _causal),
    Planted("03.5", "W_O left out", _no_output),
    Planted("03.5", "split by one reshape", _view_split, names=r"mixes tokens across heads"),
    Planted("03.5", "the first block of W_O for every head", _first_block_for_all),
    Planted("03.5", "values projected by W_K", _values_by_W_K),
    Planted("03.5", "softmax over the queries", _over_queries),
    Planted("03.5", "no batch axes", _no_batch),
    Planted("03.5", "scaled by 1/sqrt(H)", _by_heads),
    Planted("03.5", "scaled by 1/sqrt(d_in // H)", _input_slices_scale,
            names=r"W_Q\.shape\[1\]"),
    Planted("03.5", "d_head = d_in // H, and as many heads as fit", _input_slices,
            avoid=r"W_Q\.shape\[1\]|1/sqrt\(H d_head\)"),
]
