"""Lesson 14's pieces as a reader writes them (the lesson's hidden solutions): each passes
its check, and the stubs the lesson commits are not implemented yet."""

from __future__ import annotations

import pytest
import torch

from attnlib.core.heads import merge_heads, split_heads
from attnlib.exercises import check
from attnlib.models.assemble import Layer, Weights


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


def block(x, layer, pieces, cache, start):
    h = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)  # pre-norm
    Q = split_heads(h @ layer.W_Q, layer.H)
    K = split_heads(h @ layer.W_K, layer.G)
    V = split_heads(h @ layer.W_V, layer.G)
    if layer.rope_base is not None:  # turn the queries and keys, never the values
        positions = torch.arange(start, start + x.shape[-2], device=x.device)
        Q = pieces.rope(Q, positions, layer.rope_base)
        K = pieces.rope(K, positions, layer.rope_base)
    if cache is not None:
        K, V = cache.append(K, V)  # the cache keeps G heads
    K, V = pieces.repeat_kv(K, layer.H), pieces.repeat_kv(V, layer.H)
    x = x + merge_heads(pieces.attend(Q, K, V)) @ layer.W_O
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def forward(ids, weights, pieces, caches):
    start = 0 if caches is None else caches[0].n_tokens
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    x = pieces.rms_norm(x, weights.final_g, weights.final_eps)
    return x @ (weights.E.mT if weights.W_out is None else weights.W_out)


def load_llama(state_dict, config):
    H, G = config.num_attention_heads, config.num_key_value_heads
    d, d_ff = config.hidden_size, config.intermediate_size
    d_head = getattr(config, "head_dim", None) or d // H
    eps, base = config.rms_norm_eps, config.rope_parameters["rope_theta"]
    tied = config.tie_word_embeddings

    def get(key, *shape):
        if key not in state_dict:
            raise KeyError(f"{key} is missing from the state dict")
        if tuple(state_dict[key].shape) != shape:
            raise ValueError(f"{key} has shape {tuple(state_dict[key].shape)}; the config "
                             f"gives {shape}")
        return state_dict[key]

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append(Layer(
            attn_g=get(p + "input_layernorm.weight", d), attn_eps=eps,
            W_Q=get(p + "self_attn.q_proj.weight", H * d_head, d).T,
            W_K=get(p + "self_attn.k_proj.weight", G * d_head, d).T,
            W_V=get(p + "self_attn.v_proj.weight", G * d_head, d).T,
            W_O=get(p + "self_attn.o_proj.weight", d, H * d_head).T,
            H=H, G=G, rope_base=base,
            ffn_g=get(p + "post_attention_layernorm.weight", d), ffn_eps=eps,
            W_gate=get(p + "mlp.gate_proj.weight", d_ff, d).T,
            W_up=get(p + "mlp.up_proj.weight", d_ff, d).T,
            W_down=get(p + "mlp.down_proj.weight", d, d_ff).T))
    E = get("model.embed_tokens.weight", config.vocab_size, d)
    W_out = None if tied else get("lm_head.weight", config.vocab_size, d).T
    return Weights(E, tuple(layers), get("model.norm.weight", d), eps, W_out)


SOLUTIONS = {"14.1": embed, "14.2": rms_norm, "14.3": rope, "14.4": repeat_kv,
             "14.5": attend, "14.6": feed_forward, "14.7": Cache, "14.8": sample,
             "14.9": block, "14.10": forward, "14.11": load_llama}


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


# ---------------------------------------------------------------------------------------
# The holes a reader's first answers found: each now gets a message that names it
# ---------------------------------------------------------------------------------------


def _message(label, answer):
    result = check(label, answer)
    assert result.status == "incorrect", result.message
    return result.message


def test_a_cache_with_class_level_lists_is_told_its_caches_share():
    class Shared:
        Ks: list = []  # noqa: RUF012 (the mistake under test)
        Vs: list = []  # noqa: RUF012

        def append(self, K, V):
            Shared.Ks.append(K)
            Shared.Vs.append(V)
            return torch.cat(Shared.Ks, -2), torch.cat(Shared.Vs, -2)

        @property
        def n_tokens(self):
            return sum(k.shape[-2] for k in Shared.Ks)

    for _ in range(2):  # the lists grow from one run of the check to the next: refused both
        assert "two caches share their tensors" in _message("14.7", Shared)


def test_n_tokens_written_as_a_method_is_told_so():
    from attnlib.models.assemble import ReaderCache

    class Method(ReaderCache):
        def n_tokens(self):
            return 0 if self.K is None else self.K.shape[-2]

    assert "n_tokens is a method here" in _message("14.7", Method)


def test_eps_slips_are_named():
    outside = _message("14.2", lambda x, g, eps: x / ((x * x).mean(-1, keepdim=True).sqrt()
                                                        + eps) * g)
    assert "eps goes inside the square root" in outside
    ignored = _message("14.2", lambda x, g, eps: x * torch.rsqrt((x * x).mean(-1, keepdim=True))
                       * g)
    assert "use eps" in ignored


def test_float32_work_inside_a_float64_piece_is_told_to_keep_the_dtype():
    def via_float32(x, g, eps):
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * g.float()).double()

    assert "compute in the input's dtype, float64 here" in _message("14.2", via_float32)
    returned = _message("14.2", lambda x, g, eps: via_float32(x, g, eps).float())
    assert "expected torch.float64: compute in the inputs' dtype" in returned


def test_a_sampler_that_ignores_the_generator_is_told_to_pass_it():
    def unseeded(logits, T, generator):
        if T == 0:
            return logits.argmax(-1, keepdim=True)
        return torch.multinomial(torch.softmax(logits / T, -1), 1)

    assert "pass generator=generator to torch.multinomial" in _message("14.8", unseeded)


# ---------------------------------------------------------------------------------------
# The wiring and the loader: the mistakes of real conversions, each named
# ---------------------------------------------------------------------------------------


def test_the_seven_conversion_mistakes_are_named():
    """RoPE on V, a residual left out, post-norm, an untied head where the model ties it, a
    forgotten transpose, q and k swapped, the position offset not advanced: each named by
    the check of the part where a reader makes it (the full catalogues are run by
    tests/test_exercises_implement.py)."""
    def named(label, fn, words):
        assert words in _message(label, fn)

    def block_with(rope_v=False, residual=True, post=False, offset=True):
        def wrong(x, layer, pieces, cache, start):
            h = x if post else pieces.rms_norm(x, layer.attn_g, layer.attn_eps)
            Q, K, V = (split_heads(h @ W, n) for W, n in
                       ((layer.W_Q, layer.H), (layer.W_K, layer.G), (layer.W_V, layer.G)))
            if layer.rope_base is not None:
                s = start if offset else 0
                pos = torch.arange(s, s + x.shape[-2])
                Q, K = pieces.rope(Q, pos, layer.rope_base), pieces.rope(K, pos, layer.rope_base)
                V = pieces.rope(V, pos, layer.rope_base) if rope_v else V
            if cache is not None:
                K, V = cache.append(K, V)
            a = merge_heads(pieces.attend(Q, pieces.repeat_kv(K, layer.H),
                                          pieces.repeat_kv(V, layer.H))) @ layer.W_O
            x = x + a if residual else a
            if post:
                x = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)
            h = x if post else pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
            x = x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)
            return pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps) if post else x
        return wrong

    named("14.9", block_with(rope_v=True), "RoPE turns the queries and the keys only")
    named("14.9", block_with(residual=False), "adds to the residual stream")
    named("14.9", block_with(post=True), "this is post-norm")
    named("14.9", block_with(offset=False), "torch.arange(start, start + n)")

    def forward_from_zero(ids, weights, pieces, caches):
        x = pieces.embed(weights.E, ids)
        for i, layer in enumerate(weights.layers):
            x = pieces.block(x, layer, pieces, None if caches is None else caches[i], 0)
        x = pieces.rms_norm(x, weights.final_g, weights.final_eps)
        return x @ (weights.E.mT if weights.W_out is None else weights.W_out)

    named("14.10", forward_from_zero, "the position offset must advance through the cache")

    def loader(transpose=True, swap_qk=False, untie=False):
        def wrong(state_dict, config):
            w = load_llama(state_dict, config)
            sd = state_dict
            layers = []
            for i, layer in enumerate(w.layers):
                p = f"model.layers.{i}.self_attn."
                q, k = sd[p + "q_proj.weight"], sd[p + "k_proj.weight"]
                if swap_qk:
                    q, k = k, q
                if not transpose:
                    layer = layer._replace(W_V=layer.W_V.T, W_O=layer.W_O.T,
                                           W_gate=layer.W_gate.T, W_up=layer.W_up.T,
                                           W_down=layer.W_down.T)
                layers.append(layer._replace(W_Q=q.T if transpose else q,
                                             W_K=k.T if transpose else k))
            W_out = sd["lm_head.weight"].T if untie else w.W_out
            return w._replace(layers=tuple(layers), W_out=W_out)
        return wrong

    named("14.11", loader(transpose=False), "so every projection is transposed")
    named("14.11", loader(swap_qk=True), "q_proj is W_Q and k_proj is W_K")
    named("14.11", loader(untie=True), "the config ties the head")


def test_a_cache_given_h_heads_is_told_to_append_before_repeat_kv():
    def late_cache(x, layer, pieces, cache, start):
        h = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)
        Q, K, V = (split_heads(h @ W, n) for W, n in
                   ((layer.W_Q, layer.H), (layer.W_K, layer.G), (layer.W_V, layer.G)))
        if layer.rope_base is not None:
            pos = torch.arange(start, start + x.shape[-2])
            Q, K = pieces.rope(Q, pos, layer.rope_base), pieces.rope(K, pos, layer.rope_base)
        K, V = pieces.repeat_kv(K, layer.H), pieces.repeat_kv(V, layer.H)
        if cache is not None:  # H heads cached: what GQA was meant to save
            K, V = cache.append(K, V)
        x = x + merge_heads(pieces.attend(Q, K, V)) @ layer.W_O
        h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
        return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)

    assert "append K and V before repeat_kv" in _message("14.9", late_cache)


def test_a_loader_that_accepts_a_state_dict_that_does_not_fit_is_told_so():
    def trusting(state_dict, config):  # right on a good checkpoint, checks nothing
        from attnlib.exercises.lesson_14 import _loader_mistake
        return _loader_mistake(validate=False)(state_dict, config)

    message = _message("14.11", trusting)
    assert "load_llama accepted it" in message
    assert "model.layers.1.self_attn.k_proj.weight" in message

    def vague(state_dict, config):
        if "model.layers.1.post_attention_layernorm.weight" not in state_dict:
            raise KeyError("a weight is missing")
        return load_llama(state_dict, config)

    assert "does not name the key" in _message("14.11", vague)
