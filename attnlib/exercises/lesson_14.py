"""Checked exercises of lesson 14: the pieces of a whole decoder, written by the reader."""

from __future__ import annotations

import torch

from attnlib.exercises.implement import (
    Case,
    CheckFailedError,
    Implementation,
    Mistake,
    function_case,
    implementation,
)
from attnlib.exercises.implement import randn as _randn
from attnlib.models import assemble as _assemble

_ref = _assemble.Pieces()


def _f64(*shape, seed, scale=1.0):
    return _randn(*shape, seed=seed, dtype=torch.float64, scale=scale)


@implementation("14.1")
def _embed() -> Implementation:
    """The embedding: the rows of E at the ids."""
    E = _f64(11, 6, seed=1)
    ids = torch.tensor([[3, 0, 10, 3], [1, 2, 2, 9]])
    return Implementation(
        "a function embed(E, ids) returning (B, N, d)", _ref.embed,
        [function_case("E (11, 6), ids (2, 4)", {"E": E, "ids": ids})],
        (Mistake(lambda E, ids: E[ids].cumsum(dim=-2),
                 "each token gets its own row E[t] alone; mixing the tokens is attention's "
                 "job, not the embedding's."),
         Mistake(lambda E, ids: E[ids] * E.shape[-1] ** 0.5,
                 "the book's model reads E[ids] as it is; the sqrt(d) factor of the original "
                 "Transformer is not part of it."),
         Mistake(lambda E, ids: E[(ids - 1) % E.shape[0]],
                 "token ids count from 0: id t is row t of E, not row t - 1.")))


@implementation("14.2")
def _rms_norm() -> Implementation:
    """RMSNorm over a token's coordinates, with gains."""
    x, g = _f64(2, 5, 8, seed=2, scale=3.0), 1 + _f64(8, seed=3, scale=0.3)
    small = _f64(2, 3, 8, seed=4, scale=0.05)  # mean(x^2) near eps: where eps matters
    return Implementation(
        "a function rms_norm(x, g, eps)", _ref.rms_norm,
        [function_case("x (2, 5, 8)", {"x": x, "g": g}, eps=1e-6),
         function_case("x (2, 3, 8) of size 0.05, eps 1e-2", {"x": small, "g": g}, eps=1e-2)],
        (Mistake(lambda x, g, eps: x / x.norm(dim=-1, keepdim=True) * g,
                 "RMSNorm divides by the root mean square, not by the length |x| (a factor "
                 "sqrt(d) apart)."),
         Mistake(lambda x, g, eps: _ref.rms_norm(x - x.mean(-1, keepdim=True), g, eps),
                 "RMSNorm does not subtract the mean; that is LayerNorm."),
         Mistake(lambda x, g, eps: _ref.rms_norm(x, torch.ones_like(g), eps),
                 "multiply by the trained gains g after normalising."),
         Mistake(lambda x, g, eps: x / ((x * x).mean(-1, keepdim=True).sqrt() + eps) * g,
                 "eps goes inside the square root, sqrt(mean(x^2) + eps): added outside it, "
                 "it is a different number, and Hugging Face's Llama puts it inside."),
         Mistake(lambda x, g, eps: _ref.rms_norm(x, g, 0.0),
                 "use eps: it keeps the division finite for a vector near zero, and it "
                 "changes the result wherever mean(x^2) is not much larger than eps.")))


def _interleaved(X, positions, base):
    d = X.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=X.dtype) / d)
    a = positions.to(X.dtype)[:, None] * theta  # (N, d/2)
    x, y = X[..., 0::2], X[..., 1::2]
    out = torch.stack((x * a.cos() - y * a.sin(), x * a.sin() + y * a.cos()), dim=-1)
    return out.flatten(-2)


@implementation("14.3")
def _rope() -> Implementation:
    """RoPE with half-split pairs (i, i + d/2), Hugging Face Llama's rotate_half."""
    X = _f64(2, 3, 6, 8, seed=4)
    pos = torch.arange(2, 8)
    return Implementation(
        "a function rope(X, positions, base)", _ref.rope,
        [function_case("X (2, 3, 6, 8), positions 2..7", {"X": X, "positions": pos},
                       base=10000.0)],
        (Mistake(_interleaved, "the book's model (and Hugging Face's Llama) pairs coordinate i "
                               "with i + d/2 (rotate_half), not 2i with 2i + 1 (interleaved)."),
         Mistake(lambda X, positions, base: _ref.rope(X, positions + 1, base),
                 "positions count from 0: the first token is not rotated."),
         Mistake(lambda X, positions, base: _ref.rope(X, -positions, base),
                 "each pair turns counter-clockwise, (x, y) -> (x cos a - y sin a, "
                 "x sin a + y cos a): the sign of sin is flipped.")))


@implementation("14.4")
def _repeat_kv() -> Implementation:
    """G key/value heads to H query heads: head h reads KV head h // (H / G)."""
    K = _f64(2, 2, 5, 4, seed=5)
    return Implementation(
        "a function repeat_kv(K, H) returning (..., H, N, d)", _ref.repeat_kv,
        [function_case("K (2, 2, 5, 4), H = 6", {"K": K, "H": 6})],
        (Mistake(lambda K, n_heads: K.repeat(1, n_heads // K.shape[-3], 1, 1),
                 "the heads of one group are neighbours: head h reads KV head h // (H / G), so "
                 "use repeat_interleave; repeat tiles the groups (h % G)."),
         Mistake(lambda K, n_heads: K[..., :1, :, :].expand(*K.shape[:-3], n_heads,
                                                             *K.shape[-2:]),
                 "each group of H / G query heads reads its own KV head, not all of them "
                 "KV head 0."),
         Mistake(lambda K, n_heads: K.repeat_interleave(n_heads // K.shape[-3], dim=0),
                 "the heads are the axis -3 of (..., G, N, d): repeat along dim=-3, not the "
                 "batch.")))


def _attend_mistake(scale=True, diagonal=1):
    def attend(Q, K, V):
        S = Q @ K.mT / (Q.shape[-1] ** 0.5 if scale else 1.0)
        n_q, n_kv = S.shape[-2], S.shape[-1]
        hide = torch.ones(n_q, n_kv, dtype=torch.bool).triu(diagonal + n_kv - n_q)
        return torch.softmax(S.masked_fill(hide, float("-inf")), dim=-1) @ V
    return attend


@implementation("14.5")
def _attend() -> Implementation:
    """Causal softmax attention with 1/sqrt(d), bottom-right aligned for a cached step."""
    Q, K, V = _f64(2, 3, 5, 8, seed=6, scale=2.0), _f64(2, 3, 5, 8, seed=7, scale=2.0), \
        _f64(2, 3, 5, 8, seed=8)
    Q1 = _f64(2, 3, 2, 8, seed=9, scale=2.0)  # two new queries over five keys
    return Implementation(
        "a function attend(Q, K, V) returning (..., H, N_Q, d)", _ref.attend,
        [function_case("prompt: Q, K, V (2, 3, 5, 8)", {"Q": Q, "K": K, "V": V}),
         function_case("two new queries over five held keys", {"Q": Q1, "K": K, "V": V})],
        (Mistake(_attend_mistake(scale=False),
                 "divide the logits by sqrt(d_head) before the softmax (the 1/sqrt(d) scale)."),
         Mistake(_attend_mistake(diagonal=0),
                 "the causal mask is off by one: a token attends to itself (hide only the "
                 "keys after it, triu with diagonal=1)."),
         Mistake(_attend_mistake(diagonal=2),
                 "the causal mask is off by one: a token must not see the token after it."),
         Mistake(lambda Q, K, V: _attend_mistake()(Q, K, V) if Q.shape[-2] == K.shape[-2]
                 else torch.softmax((Q @ K.mT / Q.shape[-1] ** 0.5).masked_fill(
                     torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool).triu(1),
                     float("-inf")), dim=-1) @ V,
                 "with a cache the new queries are the last ones: align the causal mask to "
                 "the bottom right (query i sees keys up to N_KV - N_Q + i).")))


@implementation("14.6")
def _feed_forward() -> Implementation:
    """SwiGLU: (silu(x W_gate) * x W_up) W_down."""
    x = _f64(2, 4, 6, seed=10)
    W = {"W_gate": _f64(6, 10, seed=11), "W_up": _f64(6, 10, seed=12),
         "W_down": _f64(10, 6, seed=13)}
    silu = torch.nn.functional.silu
    return Implementation(
        "a function feed_forward(x, W_gate, W_up, W_down)", _ref.feed_forward,
        [function_case("x (2, 4, 6), d_ff = 10", {"x": x, **W})],
        (Mistake(lambda x, W_gate, W_up, W_down: (x @ W_gate * silu(x @ W_up)) @ W_down,
                 "silu goes on the gate projection x W_gate, not on x W_up."),
         Mistake(lambda x, W_gate, W_up, W_down: silu(x @ W_gate) @ W_down,
                 "SwiGLU multiplies the gate by the up projection x W_up elementwise."),
         Mistake(lambda x, W_gate, W_up, W_down: (torch.relu(x @ W_gate) * (x @ W_up)) @ W_down,
                 "the book's model uses silu(z) = z sigmoid(z), not ReLU.")))


def _n_tokens(cache) -> torch.Tensor:
    n = cache.n_tokens
    if callable(n):
        raise CheckFailedError("n_tokens is a method here: the decoder reads cache.n_tokens "
                               "without calling it, so make it a property (@property on the "
                               "line above def n_tokens) or an attribute")
    return torch.tensor(n)


def _cache_case(name, pieces):
    def run(cls):
        cache, outs = cls(), []
        for K, V in pieces:
            outs.extend(cache.append(K.clone(), V.clone()))
        outs.append(_n_tokens(cache))
        return tuple(outs)
    return Case(name, run, "appends of 3, 1 and 1 tokens, (2, 2, n, 4) each")


def _two_caches_case(name, pieces):
    """Two caches filled in turn, as a two-layer decoder fills its caches."""
    def run(cls):
        first, second, outs, held = cls(), cls(), [], 0
        for K, V in pieces:
            held += K.shape[-2]
            for cache, sign in ((first, 1), (second, -1)):
                K_all, V_all = cache.append(sign * K.clone(), sign * V.clone())
                if isinstance(K_all, torch.Tensor) and K_all.shape[-2] > held:
                    raise CheckFailedError(
                        f"two caches share their tensors: after {held} tokens each, one "
                        f"returned {K_all.shape[-2]}. Keep the tensors on the instance "
                        "(self.K = None in __init__), not on the class, where every "
                        "layer's cache would see every other's")
                outs.extend((K_all, V_all))
        outs.extend((_n_tokens(first), _n_tokens(second)))
        return tuple(outs)
    return Case(name, run, "two caches, each given appends of 3, 1 and 1 tokens in turn")


class _Overwrite(_assemble.ReaderCache):
    def append(self, K, V):
        self.K, self.V = K, V
        return K, V


class _FirstAxis(_assemble.ReaderCache):
    def append(self, K, V):
        self.K = K if self.K is None else torch.cat((self.K, K), dim=0)
        self.V = V if self.V is None else torch.cat((self.V, V), dim=0)
        return self.K, self.V

    @property
    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[-2]


class _CountsCalls(_assemble.ReaderCache):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def append(self, K, V):
        self.calls += 1
        return super().append(K, V)

    @property
    def n_tokens(self):
        return self.calls


@implementation("14.7")
def _cache() -> Implementation:
    """A KV cache class: append(K, V) returns every token so far; n_tokens counts them."""
    parts = [(_f64(2, 2, n, 4, seed=20 + n), _f64(2, 2, n, 4, seed=30 + n)) for n in (3, 1, 1)]
    return Implementation(
        "a class Cache with append(K, V) -> (K_all, V_all) and n_tokens", _assemble.ReaderCache,
        [_cache_case("prompt of 3, then two steps", parts),
         _two_caches_case("two caches, as two layers have", parts)],
        (Mistake(_Overwrite, "append must keep what the cache held and add the new tokens "
                             "after it: it returned only the new ones."),
         Mistake(_FirstAxis, "the tokens are the next-to-last axis (..., G, N, d): "
                             "concatenate along dim=-2, not the batch."),
         Mistake(_CountsCalls, "n_tokens counts tokens (the length of axis -2), not calls "
                               "to append: a prompt appends many tokens at once.")))


@implementation("14.8")
def _sample() -> Implementation:
    """Temperature sampling: softmax(logits / T), one draw per row; T = 0 the argmax."""
    logits = _randn(32, 9, seed=40, dtype=torch.float32, scale=0.5)

    def case(name, T):
        def run(fn):
            draws = []
            with torch.random.fork_rng(devices=[]):
                for global_seed in (1, 2):  # the global generator changes, the given one not
                    torch.manual_seed(global_seed)
                    draws.append(fn(logits.clone(), T, torch.Generator().manual_seed(0)))
            a, b = draws
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
                    a.shape == b.shape and not torch.equal(a, b):
                raise CheckFailedError("the draws change with torch's global generator, not "
                                       "with the one given: pass generator=generator to "
                                       "torch.multinomial, so that a seeded run repeats")
            return a
        return Case(name, run, "logits (32, 9)")

    return Implementation(
        "a function sample(logits, temperature, generator) returning (..., 1) ids",
        _ref.sample,
        [case("temperature 0 (greedy)", 0.0), case("temperature 1", 1.0),
         case("temperature 0.5", 0.5)],
        (Mistake(lambda logits, T, g: logits.argmax(-1, keepdim=True),
                 "only temperature 0 is greedy: otherwise draw from softmax(logits / T) with "
                 "torch.multinomial and the generator."),
         Mistake(lambda logits, T, g: logits.argmax(-1, keepdim=True) if T == 0 else
                 torch.multinomial(torch.softmax(logits.float() * T, -1), 1, generator=g),
                 "divide the logits by the temperature, do not multiply."),
         Mistake(lambda logits, T, g: logits.argmax(-1, keepdim=True) if T == 0 else
                 torch.multinomial(torch.softmax(logits.float() / T, 0), 1, generator=g),
                 "the softmax runs over the vocabulary, the last axis (dim=-1), one "
                 "distribution per row.")))
