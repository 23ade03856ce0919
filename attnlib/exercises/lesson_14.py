"""Checked exercises of lesson 14: the pieces of a whole decoder, its wiring and its weight
loader, written by the reader."""

from __future__ import annotations

import torch

from attnlib.core import heads as _heads
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
         Mistake(lambda x, g, eps: x * torch.rsqrt((x * x).mean(-1, keepdim=True)) * g,
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


# ---------------------------------------------------------------------------------------
# The wiring: one block, the forward pass, the loader
# ---------------------------------------------------------------------------------------

_split, _merge = _heads.split_heads, _heads.merge_heads


def _layer(seed, *, d=16, H=4, G=2, d_head=4, d_ff=24, rope_base=10000.0, attn_eps=1e-6,
           ffn_eps=1e-6):
    """A block's weights, seeded, with gains away from 1 so that a missing gain shows."""
    W = [_f64(*shape, seed=seed + k, scale=shape[0] ** -0.5) for k, shape in enumerate(
        [(d, H * d_head), (d, G * d_head), (d, G * d_head), (H * d_head, d),
         (d, d_ff), (d, d_ff), (d_ff, d)])]
    g1, g2 = (1 + _f64(d, seed=seed + k, scale=0.3) for k in (10, 11))
    return _assemble.Layer(g1, attn_eps, W[0], W[1], W[2], W[3], H, G, rope_base, g2, ffn_eps,
                           W[4], W[5], W[6])


def _layer_text(layer) -> str:
    d_head = layer.W_Q.shape[1] // layer.H
    base = "no RoPE" if layer.rope_base is None else f"RoPE base {layer.rope_base:g}"
    return (f"H = {layer.H}, G = {layer.G}, d_head = {d_head} (d / H = "
            f"{layer.W_Q.shape[0] // layer.H}), {base}, eps {layer.attn_eps:g} and "
            f"{layer.ffn_eps:g}")


def _wrong_block(rope_v=False, attn_residual=True, ffn_residual=True, post_norm=False,
                 offset=True, rope_k=True, one_gain=False, eps=None, one_eps=False, base=None):
    def block(x, layer, pieces, cache, start):
        L = layer._replace(
            attn_eps=eps if eps is not None else layer.attn_eps,
            ffn_eps=eps if eps is not None else layer.attn_eps if one_eps else layer.ffn_eps,
            rope_base=base if base is not None and layer.rope_base is not None
            else layer.rope_base)
        h = x if post_norm else pieces.rms_norm(x, L.attn_g, L.attn_eps)
        Q, K, V = (_split(h @ W, n) for W, n in
                   ((L.W_Q, L.H), (L.W_K, L.G), (L.W_V, L.G)))
        if L.rope_base is not None:
            first = start if offset else 0
            pos = torch.arange(first, first + x.shape[-2])
            Q = pieces.rope(Q, pos, L.rope_base)
            K = pieces.rope(K, pos, L.rope_base) if rope_k else K
            V = pieces.rope(V, pos, L.rope_base) if rope_v else V
        if cache is not None:
            K, V = cache.append(K, V)
        if L.G != L.H:
            K, V = pieces.repeat_kv(K, L.H), pieces.repeat_kv(V, L.H)
        a = _merge(pieces.attend(Q, K, V)) @ L.W_O
        x = x + a if attn_residual else a
        if post_norm:
            x = pieces.rms_norm(x, L.attn_g, L.attn_eps)
        g = L.attn_g if one_gain else L.ffn_g
        h = x if post_norm else pieces.rms_norm(x, g, L.ffn_eps)
        f = pieces.feed_forward(h, L.W_gate, L.W_up, L.W_down)
        x = x + f if ffn_residual else f
        return pieces.rms_norm(x, L.ffn_g, L.ffn_eps) if post_norm else x
    return block


class _GroupsCache(_assemble.ReaderCache):
    """attnlib's cache, which also checks that what it is given has the layer's G heads."""

    G = 0

    def append(self, K, V):
        if K.shape[-3] != self.G:
            raise CheckFailedError(
                f"the cache was given {K.shape[-3]} key heads, where the layer has G = "
                f"{self.G}: append K and V before repeat_kv, so that the cache holds G heads, "
                "not H (the memory grouped-query attention saves)")
        return super().append(K, V)


def _block_case(name, layer, x, chunks):
    """The block on ``x`` read in ``chunks`` (token counts) through one cache; without a
    cache when ``chunks`` is None."""

    def run(fn):
        pieces = _assemble.Pieces()
        if chunks is None:
            return fn(x.clone(), layer, pieces, None, 0)
        cache_cls = type("Cache", (_GroupsCache,), {"G": layer.G})
        cache, outs, start = cache_cls(), [], 0
        for n in chunks:
            outs.append(fn(x[..., start:start + n, :].clone(), layer, pieces, cache, start))
            start += n
        return tuple(outs)

    return Case(name, run, f"x {tuple(x.shape)}, {_layer_text(layer)}"
                + ("" if chunks is None else f", read as {list(chunks)} tokens"))


@implementation("14.9")
def _block() -> Implementation:
    """One pre-norm block: attention sublayer, then feed-forward, each with its residual."""
    # d_head = 6 while d / H = 4; eps and the RoPE base away from Llama's, each norm its own
    gqa = _layer(50, d_head=6, rope_base=500.0, attn_eps=1e-5, ffn_eps=1e-3)
    plain = _layer(70, G=4, rope_base=None, attn_eps=1e-2, ffn_eps=1e-4)
    x = _f64(2, 5, 16, seed=60)
    return Implementation(
        "a function block(x, layer, pieces, cache, start) returning the new x",
        _assemble.Pieces().block,
        [_block_case("a prompt of 5, no cache", gqa, x, None),
         _block_case("3 tokens, then 1 and 1 through the cache", gqa, x, (3, 1, 1)),
         _block_case("a layer without RoPE, G = H", plain, x, (4, 1))],
        (Mistake(_wrong_block(rope_v=True),
                 "RoPE turns the queries and the keys only: a score q_m . k_n then depends on "
                 "m - n. Rotating V as well turns each value by its own position, and the "
                 "output is no longer what the head was trained on."),
         Mistake(_wrong_block(rope_k=False),
                 "rotate the keys as well as the queries: with only Q turned, the score "
                 "depends on the query's position, not on the distance m - n."),
         Mistake(_wrong_block(attn_residual=False),
                 "the attention sublayer adds to the residual stream, x = x + attention(...): "
                 "without the + x the block forgets the token it is on."),
         Mistake(_wrong_block(ffn_residual=False),
                 "the feed-forward sublayer adds to the residual stream too, "
                 "x = x + feed_forward(rms_norm(x))."),
         Mistake(_wrong_block(post_norm=True),
                 "this is post-norm (the original Transformer's norm(x + sublayer(x))); "
                 "Llama and the book's model are pre-norm: x + sublayer(rms_norm(x)), and "
                 "the residual stream itself is never normalised inside a block."),
         Mistake(_wrong_block(offset=False),
                 "the new tokens sit at positions start, start + 1, ...: with a cache, rotate "
                 "them by torch.arange(start, start + n), not from 0."),
         Mistake(_wrong_block(one_gain=True),
                 "each sublayer has its own norm: the feed-forward reads "
                 "rms_norm(x, layer.ffn_g, layer.ffn_eps), not the attention's gains."),
         Mistake(_wrong_block(eps=1e-6),
                 "read each norm's eps from the layer, layer.attn_eps and layer.ffn_eps: the "
                 "check's layers do not use 1e-6, and their two norms differ."),
         Mistake(_wrong_block(one_eps=True),
                 "each sublayer's norm has its own eps: the feed-forward's is layer.ffn_eps, "
                 "not the attention's layer.attn_eps."),
         Mistake(_wrong_block(base=10000.0),
                 "rotate by the layer's own base, layer.rope_base: the check's is not 10,000 "
                 "(Llama 3's is 500,000).")))


def _weights(seed, *, tied, layers, final_eps, V=13, d=16):
    """A model's weights: ``layers`` gives each layer's options to :func:`_layer`."""
    E = _f64(V, d, seed=seed)
    blocks = tuple(_layer(seed + 100 * (i + 1), **kw) for i, kw in enumerate(layers))
    W_out = None if tied else _f64(d, V, seed=seed + 1, scale=0.25)
    return _assemble.Weights(E, blocks, 1 + _f64(d, seed=seed + 2, scale=0.3), final_eps, W_out)


def _forward_case(name, weights, ids, chunks):
    def run(fn):
        pieces = _assemble.Pieces()
        if chunks is None:
            return fn(ids.clone(), weights, pieces, None)
        caches, outs, start = [pieces.cache() for _ in weights.layers], [], 0
        for n in chunks:
            outs.append(fn(ids[..., start:start + n].clone(), weights, pieces, caches))
            start += n
        return tuple(outs)

    layers = "; ".join(f"layer {i}: {_layer_text(L)}" for i, L in enumerate(weights.layers))
    return Case(name, run, f"ids {tuple(ids.shape)}, {len(weights.layers)} layers ({layers}), "
                f"final eps {weights.final_eps:g}, "
                f"{'tied' if weights.W_out is None else 'untied'} head"
                + ("" if chunks is None else f", read as {list(chunks)} tokens"))


def _wrong_forward(final_norm=True, head="right", offset=True, caches_used="each",
                   final_eps=None):
    def forward(ids, weights, pieces, caches):
        start = 0 if caches is None or not offset else caches[0].n_tokens
        x = pieces.embed(weights.E, ids)
        for i, layer in enumerate(weights.layers):
            cache = None if caches is None or caches_used == "none" else \
                caches[0] if caches_used == "first" else caches[i]
            x = pieces.block(x, layer, pieces, cache, start)
        if final_norm:
            x = pieces.rms_norm(x, weights.final_g,
                                weights.final_eps if final_eps is None else final_eps)
        W_out = {"right": weights.E.mT if weights.W_out is None else weights.W_out,
                 "always E": weights.E.mT, "always W_out": weights.W_out}[head]
        return x @ W_out
    return forward


@implementation("14.10")
def _forward() -> Implementation:
    """The decoder's forward: embed, the blocks, the final norm and the head."""
    # three layers, each with its own eps and RoPE base, and a final eps of its own
    untied = _weights(200, tied=False, final_eps=1e-3, layers=[
        dict(rope_base=500.0, attn_eps=1e-5, ffn_eps=1e-3),
        dict(rope_base=10000.0, attn_eps=1e-4, ffn_eps=1e-6),
        dict(rope_base=2e5, d_head=6, attn_eps=1e-2, ffn_eps=1e-5)])
    tied = _weights(300, tied=True, final_eps=1e-4, layers=[
        dict(rope_base=1e6, attn_eps=1e-6, ffn_eps=1e-2), dict(G=4, rope_base=None)])
    ids = torch.tensor([[3, 0, 12, 7, 7], [1, 5, 2, 9, 4]])
    return Implementation(
        "a function forward(ids, weights, pieces, caches) returning (B, N, V) logits",
        _assemble.Pieces().forward,
        [_forward_case("untied head, no caches", untied, ids, None),
         _forward_case("untied head, 3 tokens then 1 and 1 through the caches", untied, ids,
                       (3, 1, 1)),
         _forward_case("tied head, 4 tokens then 1", tied, ids, (4, 1))],
        (Mistake(_wrong_forward(final_norm=False),
                 "a pre-norm decoder normalises once more after the last block: the head "
                 "reads rms_norm(x, weights.final_g, weights.final_eps)."),
         Mistake(_wrong_forward(head="always E"),
                 "this model has its own head: use weights.W_out, and E^T only when W_out is "
                 "None (a tied head)."),
         Mistake(_wrong_forward(head="always W_out"),
                 "W_out is None when the model ties its head to the embedding: the logits "
                 "are then x E^T (weights.E.mT)."),
         Mistake(_wrong_forward(offset=False),
                 "the position offset must advance through the cache: the new tokens start "
                 "at caches[0].n_tokens, the number of tokens already read, not at 0."),
         Mistake(_wrong_forward(caches_used="none"),
                 "give each block its cache, caches[i]: without it the new token attends to "
                 "itself alone."),
         Mistake(_wrong_forward(caches_used="first"),
                 "each layer has its own keys and values: block i takes caches[i], not "
                 "caches[0]."),
         Mistake(_wrong_forward(final_eps=1e-6),
                 "the final norm reads its eps from the weights, weights.final_eps: the "
                 "check's is not 1e-6.")))


class _Config:
    """A Llama config as the loader reads it: the attributes of transformers' LlamaConfig
    (from 5.0 on, the RoPE base is ``rope_parameters["rope_theta"]``)."""

    def __init__(self, **kw):
        base = dict(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                    rms_norm_eps=1e-6, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        self.__dict__.update(base | kw)

    def __repr__(self):
        return "LlamaConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


def _state_dict(config, seed):
    return {key: _f64(*shape, seed=seed + k, scale=0.5)
            for k, (key, shape) in enumerate(_assemble.llama_keys(config).items())}


_LAYER_FIELDS = ("attn_g", "attn_eps", "W_Q", "W_K", "W_V", "W_O", "H", "G", "rope_base",
                 "ffn_g", "ffn_eps", "W_gate", "W_up", "W_down")
_OUTPUT_NAMES = ("E", "final_g", "final_eps", "the head (W_out, or E^T when W_out is None)",
                 "whether W_out is None (a tied head)",
                 *(f"layers[{i}].{f}" for i in range(3) for f in _LAYER_FIELDS))


def _flat(weights, config):
    if not isinstance(weights, _assemble.Weights):
        raise CheckFailedError(f"load_llama returned a {type(weights).__name__}: return "
                               "attnlib.models.assemble.Weights(E, layers, final_g, final_eps, "
                               "W_out)")
    n = config.num_hidden_layers
    if len(weights.layers) != n:
        raise CheckFailedError(f"the config has {n} layers (config.num_hidden_layers); the "
                               f"weights hold {len(weights.layers)}")

    def t(v):
        return v if isinstance(v, torch.Tensor) else torch.tensor(
            float("nan") if v is None else float(v), dtype=torch.float64)

    head = weights.E.mT if weights.W_out is None else weights.W_out
    out = [weights.E, weights.final_g, t(weights.final_eps), head,
           torch.tensor(weights.W_out is None)]
    for layer in weights.layers:
        out += [t(getattr(layer, f)) for f in _LAYER_FIELDS]
    return tuple(out)


_HF_NAMES = {"W_Q": "self_attn.q_proj", "W_K": "self_attn.k_proj", "W_V": "self_attn.v_proj",
             "W_O": "self_attn.o_proj", "W_gate": "mlp.gate_proj", "W_up": "mlp.up_proj",
             "W_down": "mlp.down_proj"}


def _as_stored(weights, state_dict):
    """A projection handed over as nn.Linear stores it, (out, in), without the transpose."""
    pairs = [(f"layers[{i}].{field}", getattr(layer, field),
              f"model.layers.{i}.{hf}.weight")
             for i, layer in enumerate(weights.layers) for field, hf in _HF_NAMES.items()]
    pairs.append(("W_out", weights.W_out, "lm_head.weight"))
    for name, got, key in pairs:
        stored = state_dict.get(key)
        if isinstance(got, torch.Tensor) and stored is not None and \
                got.shape == stored.shape and torch.equal(got, stored):
            raise CheckFailedError(
                f"{name} is {key} as nn.Linear stores it, (out, in) = "
                f"{tuple(stored.shape)}; nn.Linear computes x W^T and attnlib multiplies "
                f"from the right, x @ W, so transpose it: {key}.T")


def _config_text(config) -> str:
    H, d = config.num_attention_heads, config.hidden_size
    return (f"{config.num_hidden_layers} layers, H = {H}, G = {config.num_key_value_heads}, "
            f"head_dim = {config.head_dim} (hidden_size / H = {d // H}), rms_norm_eps = "
            f"{config.rms_norm_eps:g}, rope_theta = "
            f"{config.rope_parameters['rope_theta']:g}, tie_word_embeddings = "
            f"{config.tie_word_embeddings}")


def _load_case(name, config, state_dict):
    def run(fn):
        weights = fn({k: v.clone() for k, v in state_dict.items()}, config)
        flat = _flat(weights, config)
        _as_stored(weights, state_dict)
        return flat
    keys = "with lm_head.weight" if "lm_head.weight" in state_dict else \
        "without lm_head.weight"
    return Case(name, run, f"{_config_text(config)}; the state dict {keys}")


def _refuse_case(name, config, state_dict, key):
    def run(fn):
        try:
            fn({k: v.clone() for k, v in state_dict.items()}, config)
        except CheckFailedError:
            raise
        except Exception as exc:  # any type, if it names the key
            if key not in str(exc):
                raise CheckFailedError(f"the error raised does not name the key {key!r}: "
                                       f"{type(exc).__name__}: {exc}") from None
            return torch.tensor(True)
        raise CheckFailedError(f"the state dict does not fit the config ({name}), and "
                               f"load_llama accepted it: check every key the config asks for, "
                               f"and its shape, and raise an error naming {key!r}")
    return Case(name, run, _config_text(config))


def _loader_mistake(transpose=True, swap_qk=False, swap_gate_up=False, swap_norms=False,
                    G_from="num_key_value_heads", eps=None, head="right", validate=True,
                    base=None):
    def load(sd, config):
        if validate:  # the same refusals as attnlib's, then the mistaken mapping
            _assemble.load_llama(sd, config)
        T = (lambda W: W.T) if transpose else (lambda W: W)
        H, G = config.num_attention_heads, getattr(config, G_from)
        e = config.rms_norm_eps if eps is None else eps
        layers = []
        for i in range(config.num_hidden_layers):
            p = f"model.layers.{i}."
            q, k = p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight"
            gate, up = p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"
            n1, n2 = p + "input_layernorm.weight", p + "post_attention_layernorm.weight"
            if swap_qk:
                q, k = k, q
            if swap_gate_up:
                gate, up = up, gate
            if swap_norms:
                n1, n2 = n2, n1
            layers.append(_assemble.Layer(
                sd[n1], e, T(sd[q]), T(sd[k]), T(sd[p + "self_attn.v_proj.weight"]),
                T(sd[p + "self_attn.o_proj.weight"]), H, G,
                config.rope_parameters["rope_theta"] if base is None else base,
                sd[n2], e,
                T(sd[gate]), T(sd[up]), T(sd[p + "mlp.down_proj.weight"])))
        E = sd["model.embed_tokens.weight"]
        tied = config.tie_word_embeddings
        W_out = {"right": lambda: None if tied else T(sd["lm_head.weight"]),
                 "always lm_head": lambda: T(sd["lm_head.weight"]),
                 "always tied": lambda: None,
                 "lm_head when present": lambda: T(sd["lm_head.weight"])
                 if "lm_head.weight" in sd else None,
                 "E^T when tied": lambda: E.T if tied else T(sd["lm_head.weight"])}[head]()
        return _assemble.Weights(E, tuple(layers), sd["model.norm.weight"], e, W_out)
    return load


_LOADER_MISTAKES = (
    (dict(transpose=False),
     "nn.Linear keeps its weight as (out, in) and computes x W^T; attnlib "
     "multiplies from the right, x @ W, so every projection is transposed: "
     "W_Q = sd[...q_proj.weight].T."),
    (dict(swap_qk=True),
     "q_proj is W_Q and k_proj is W_K: swapped, the scores become k . q of the "
     "wrong projections (and the shapes differ as soon as G < H)."),
    (dict(swap_gate_up=True),
     "gate_proj is W_gate, the one silu acts on; up_proj is W_up."),
    (dict(swap_norms=True),
     "input_layernorm is the norm before attention (attn_g); "
     "post_attention_layernorm is the one before the feed-forward (ffn_g), "
     "despite its name."),
    (dict(G_from="num_attention_heads"),
     "G is config.num_key_value_heads: k_proj and v_proj have G d_head rows, "
     "fewer than q_proj's H d_head."),
    (dict(eps=1e-6),
     "read eps from config.rms_norm_eps: Llama checkpoints use 1e-5 or 1e-6, and "
     "the logits move when it is wrong."),
    (dict(head="always lm_head"),
     "the config ties the head (tie_word_embeddings): the checkpoint need not "
     "hold lm_head.weight, and W_out is None, the head being E^T."),
    (dict(head="E^T when tied"),
     "a tied head is W_out = None (the decoder uses E^T): a copy of E^T would "
     "no longer follow E when E is trained."),
    (dict(head="always tied"),
     "this config does not tie the head: W_out is lm_head.weight transposed."),
    (dict(head="lm_head when present"),
     "the config ties the head (tie_word_embeddings): W_out is None even when the "
     "checkpoint holds lm_head.weight too, as a tied model's state_dict() does (the same "
     "tensor as the embedding); the config decides, not the keys."),
    (dict(base=10000.0),
     "read the RoPE base from the config, config.rope_parameters['rope_theta']: the check's "
     "is not 10,000 (Llama 3's is 500,000)."),
)
"""The loader's catalogue: each mistake both with attnlib's refusals of a state dict that
does not fit and without, so that a loader that checks nothing still gets the hint."""


@implementation("14.11")
def _loader() -> Implementation:
    """A Hugging Face LlamaForCausalLM state dict into the decoder's Weights."""
    # head_dim 6 where hidden_size / H = 4, three layers, eps and the RoPE base away from
    # their defaults; then a tied head, without lm_head.weight and with it; an untied head
    # whose lm_head.weight is missing must be refused, not tied in its place
    untied = _Config(num_hidden_layers=3, head_dim=6, rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    tied = _Config(tie_word_embeddings=True, rms_norm_eps=1e-4)
    sd_untied, sd_tied = _state_dict(untied, 400), _state_dict(tied, 500)
    sd_tied_head = dict(sd_tied, **{"lm_head.weight": sd_tied["model.embed_tokens.weight"]})
    wrong_k = dict(sd_untied)
    key_k = "model.layers.1.self_attn.k_proj.weight"
    wrong_k[key_k] = _f64(24, 16, seed=9)  # as if G were 4: the config says 2
    missing = {k: v for k, v in sd_untied.items()
               if k != "model.layers.1.post_attention_layernorm.weight"}
    two_layers = {k: v for k, v in sd_untied.items() if not k.startswith("model.layers.2.")}
    no_head = {k: v for k, v in sd_untied.items() if k != "lm_head.weight"}
    return Implementation(
        "a function load_llama(state_dict, config) returning attnlib.models.assemble.Weights",
        _assemble.load_llama,
        [_load_case("an untied head, head_dim not hidden_size / H", untied, sd_untied),
         _load_case("a tied head, the checkpoint without lm_head.weight", tied, sd_tied),
         _load_case("a tied head, the checkpoint with lm_head.weight too (the embedding)",
                    tied, sd_tied_head),
         _refuse_case("k_proj with 4 heads where the config says 2", untied, wrong_k, key_k),
         _refuse_case("post_attention_layernorm of layer 1 missing", untied, missing,
                      "model.layers.1.post_attention_layernorm.weight"),
         _refuse_case("layer 2 missing: the config has 3 layers, the checkpoint 2", untied,
                      two_layers, "model.layers.2."),
         _refuse_case("an untied head whose checkpoint lacks lm_head.weight", untied,
                      no_head, "lm_head.weight")],
        tuple(Mistake(_loader_mistake(**kw, validate=validate), hint)
              for kw, hint in _LOADER_MISTAKES for validate in (True, False)),
        outputs=_OUTPUT_NAMES)


def planted() -> dict[str, tuple[str, object]]:
    """Wrong wiring from the checks' catalogues, for locating with ``first_divergence``:
    name -> (the piece it replaces, the wrong function). The loader's take
    ``(state_dict, config)``; the others are ``block`` and ``forward`` pieces."""
    return {
        "RoPE on V too": ("block", _wrong_block(rope_v=True)),
        "attention residual left out": ("block", _wrong_block(attn_residual=False)),
        "feed-forward residual left out": ("block", _wrong_block(ffn_residual=False)),
        "post-norm": ("block", _wrong_block(post_norm=True)),
        "block ignores start": ("block", _wrong_block(offset=False)),
        "offset not advanced": ("forward", _wrong_forward(offset=False)),
        "no final norm": ("forward", _wrong_forward(final_norm=False)),
        "gate and up swapped": ("load_llama", _loader_mistake(swap_gate_up=True)),
        "the two norms swapped": ("load_llama", _loader_mistake(swap_norms=True)),
    }
