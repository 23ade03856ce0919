"""Planted wrong answers for lesson 14's wiring and loader, exercises 14.9 to 14.11.

Each is written from the lesson's text (the block's formula, the forward's steps, the
loader's table of keys) as a reader would write it, wrong in one way.
"""

from __future__ import annotations

import torch

from attnlib.core.heads import merge_heads, split_heads
from attnlib.models.assemble import Layer, Weights
from planted import Planted

# ---------------------------------------------------------------------------------------
# 14.9: one block
# ---------------------------------------------------------------------------------------


def _attention_part(x, layer, pieces, cache, start, h):
    """The attention sublayer's output for the normed input ``h`` (right)."""
    Q = split_heads(h @ layer.W_Q, layer.H)
    K = split_heads(h @ layer.W_K, layer.G)
    V = split_heads(h @ layer.W_V, layer.G)
    if layer.rope_base is not None:
        pos = torch.arange(start, start + x.shape[-2])
        Q, K = pieces.rope(Q, pos, layer.rope_base), pieces.rope(K, pos, layer.rope_base)
    if cache is not None:
        K, V = cache.append(K, V)
    K, V = pieces.repeat_kv(K, layer.H), pieces.repeat_kv(V, layer.H)
    return merge_heads(pieces.attend(Q, K, V)) @ layer.W_O


def _block_llama_eps(x, layer, pieces, cache, start):
    """Both norms with Llama's eps, 1e-6, typed in."""
    x = x + _attention_part(x, layer, pieces, cache, start,
                            pieces.rms_norm(x, layer.attn_g, 1e-6))
    h = pieces.rms_norm(x, layer.ffn_g, 1e-6)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _block_attention_eps_twice(x, layer, pieces, cache, start):
    """The feed-forward's norm reads the attention norm's eps."""
    x = x + _attention_part(x, layer, pieces, cache, start,
                            pieces.rms_norm(x, layer.attn_g, layer.attn_eps))
    h = pieces.rms_norm(x, layer.ffn_g, layer.attn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _block_base_typed_in(x, layer, pieces, cache, start):
    """RoPE with base 10,000 typed in, whatever the layer's base."""
    h = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)
    Q = split_heads(h @ layer.W_Q, layer.H)
    K = split_heads(h @ layer.W_K, layer.G)
    V = split_heads(h @ layer.W_V, layer.G)
    if layer.rope_base is not None:
        pos = torch.arange(start, start + x.shape[-2])
        Q, K = pieces.rope(Q, pos, 10000.0), pieces.rope(K, pos, 10000.0)
    if cache is not None:
        K, V = cache.append(K, V)
    K, V = pieces.repeat_kv(K, layer.H), pieces.repeat_kv(V, layer.H)
    x = x + merge_heads(pieces.attend(Q, K, V)) @ layer.W_O
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _block_head_width_from_d(x, layer, pieces, cache, start):
    """The heads reshaped with a width of d / H, not the projection's."""
    B, n, d = x.shape
    w = d // layer.H
    h = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)
    Q = (h @ layer.W_Q).view(B, n, layer.H, w).transpose(1, 2)
    K = (h @ layer.W_K).view(B, n, layer.G, w).transpose(1, 2)
    V = (h @ layer.W_V).view(B, n, layer.G, w).transpose(1, 2)
    if layer.rope_base is not None:
        pos = torch.arange(start, start + n)
        Q, K = pieces.rope(Q, pos, layer.rope_base), pieces.rope(K, pos, layer.rope_base)
    if cache is not None:
        K, V = cache.append(K, V)
    K, V = pieces.repeat_kv(K, layer.H), pieces.repeat_kv(V, layer.H)
    Y = pieces.attend(Q, K, V).transpose(1, 2).reshape(B, n, layer.H * w)
    x = x + Y @ layer.W_O
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _block_positions_restart(x, layer, pieces, cache, start):
    """Every call rotates its tokens from position 0."""
    x = x + _attention_part(x, layer, pieces, cache, 0,
                            pieces.rms_norm(x, layer.attn_g, layer.attn_eps))
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _block_cache_after_repeat(x, layer, pieces, cache, start):
    """The keys and values widened to H heads, then cached."""
    h = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)
    Q = split_heads(h @ layer.W_Q, layer.H)
    K = pieces.repeat_kv(split_heads(h @ layer.W_K, layer.G), layer.H)
    V = pieces.repeat_kv(split_heads(h @ layer.W_V, layer.G), layer.H)
    if layer.rope_base is not None:
        pos = torch.arange(start, start + x.shape[-2])
        Q, K = pieces.rope(Q, pos, layer.rope_base), pieces.rope(K, pos, layer.rope_base)
    if cache is not None:
        K, V = cache.append(K, V)
    x = x + merge_heads(pieces.attend(Q, K, V)) @ layer.W_O
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _block_ffn_reads_the_input(x, layer, pieces, cache, start):
    """The feed-forward normalises the block's input, not the stream after attention."""
    a = _attention_part(x, layer, pieces, cache, start,
                        pieces.rms_norm(x, layer.attn_g, layer.attn_eps))
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + a + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


# ---------------------------------------------------------------------------------------
# 14.10: the forward pass
# ---------------------------------------------------------------------------------------


def _head(weights):
    return weights.E.mT if weights.W_out is None else weights.W_out


def _forward_llama_final_eps(ids, weights, pieces, caches):
    """The final norm with 1e-6 typed in."""
    start = 0 if caches is None else caches[0].n_tokens
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    return pieces.rms_norm(x, weights.final_g, 1e-6) @ _head(weights)


def _forward_last_layers_eps(ids, weights, pieces, caches):
    """The final norm borrows the last layer's feed-forward eps."""
    start = 0 if caches is None else caches[0].n_tokens
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    return pieces.rms_norm(x, weights.final_g, weights.layers[-1].ffn_eps) @ _head(weights)


def _forward_offset_read_late(ids, weights, pieces, caches):
    """The offset read from caches[0] inside the loop, after layer 0 has appended."""
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        start = 0 if caches is None else caches[0].n_tokens
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    return pieces.rms_norm(x, weights.final_g, weights.final_eps) @ _head(weights)


def _forward_two_caches_in_turn(ids, weights, pieces, caches):
    """Layer i takes caches[i % 2], as if a model had two layers."""
    start = 0 if caches is None else caches[0].n_tokens
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i % 2], start)
    return pieces.rms_norm(x, weights.final_g, weights.final_eps) @ _head(weights)


def _forward_first_two_layers(ids, weights, pieces, caches):
    """Only the first two layers run."""
    start = 0 if caches is None else caches[0].n_tokens
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers[:2]):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    return pieces.rms_norm(x, weights.final_g, weights.final_eps) @ _head(weights)


def _forward_head_as_stored(ids, weights, pieces, caches):
    """The untied head used as nn.Linear would store it, W_out^T."""
    start = 0 if caches is None else caches[0].n_tokens
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    x = pieces.rms_norm(x, weights.final_g, weights.final_eps)
    return x @ (weights.E.mT if weights.W_out is None else weights.W_out.mT)


# ---------------------------------------------------------------------------------------
# 14.11: the loader
# ---------------------------------------------------------------------------------------


def _loader(*, d_head_from_hidden=False, head="config", base=None, n_layers="config",
            eps=None, tied_copy=False):
    """A loader written from the lesson's table, with one choice made wrong."""

    def load(sd, config):
        H, G = config.num_attention_heads, config.num_key_value_heads
        d, d_ff = config.hidden_size, config.intermediate_size
        d_head = d // H if d_head_from_hidden else config.head_dim
        e = config.rms_norm_eps if eps is None else eps
        theta = config.rope_parameters["rope_theta"] if base is None else base
        if n_layers == "config":
            count = config.num_hidden_layers
        elif n_layers == "keys":
            count = len({k.split(".")[2] for k in sd if k.startswith("model.layers.")})
        else:
            count = n_layers

        def get(key, *shape):
            if key not in sd:
                raise KeyError(f"{key} is missing")
            if tuple(sd[key].shape) != shape:
                raise ValueError(f"{key} has shape {tuple(sd[key].shape)}, expected {shape}")
            return sd[key]

        layers = []
        for i in range(count):
            p = f"model.layers.{i}."
            layers.append(Layer(
                get(p + "input_layernorm.weight", d), e,
                get(p + "self_attn.q_proj.weight", H * d_head, d).T,
                get(p + "self_attn.k_proj.weight", G * d_head, d).T,
                get(p + "self_attn.v_proj.weight", G * d_head, d).T,
                get(p + "self_attn.o_proj.weight", d, H * d_head).T,
                H, G, theta, get(p + "post_attention_layernorm.weight", d), e,
                get(p + "mlp.gate_proj.weight", d_ff, d).T,
                get(p + "mlp.up_proj.weight", d_ff, d).T,
                get(p + "mlp.down_proj.weight", d, d_ff).T))
        E = get("model.embed_tokens.weight", config.vocab_size, d)
        if head == "keys":
            W_out = sd["lm_head.weight"].T if "lm_head.weight" in sd else None
        elif head == "tie when missing" and "lm_head.weight" not in sd:
            W_out = None  # an untied config's missing head silently becomes E^T
        elif config.tie_word_embeddings:
            W_out = E.T.clone() if tied_copy else None
        else:
            W_out = get("lm_head.weight", config.vocab_size, d).T
        return Weights(E, tuple(layers), get("model.norm.weight", d), e, W_out)

    return load


PLANTED = [
    # 14.9
    Planted("14.9", "Llama's eps typed into both norms", _block_llama_eps,
            names=r"layer\.attn_eps and layer\.ffn_eps"),
    Planted("14.9", "the attention's eps in the feed-forward's norm",
            _block_attention_eps_twice, names=r"layer\.ffn_eps"),
    Planted("14.9", "RoPE base 10,000 typed in", _block_base_typed_in,
            names=r"layer\.rope_base"),
    Planted("14.9", "heads reshaped with d / H", _block_head_width_from_d,
            names=r"d_head = 6 \(d / H = 4\)"),
    Planted("14.9", "positions restart at 0 every call", _block_positions_restart,
            names=r"torch\.arange\(start, start \+ n\)"),
    Planted("14.9", "cache given H heads", _block_cache_after_repeat,
            names=r"before repeat_kv"),
    Planted("14.9", "feed-forward reads the block's input", _block_ffn_reads_the_input,
            names=r"fails: the output is off", avoid=r"post-norm|residual"),
    # 14.10
    Planted("14.10", "final eps 1e-6 typed in", _forward_llama_final_eps,
            names=r"weights\.final_eps"),
    Planted("14.10", "final norm with the last layer's eps", _forward_last_layers_eps,
            names=r"fails: the output", avoid=r"not 1e-6"),
    Planted("14.10", "offset read inside the loop", _forward_offset_read_late,
            names=r"fails: output \d", avoid=r"must advance"),
    Planted("14.10", "caches taken in turn, i % 2", _forward_two_caches_in_turn,
            names=r"raised an error on case 'untied head, 3 tokens",
            avoid=r"not caches\[0\]"),
    Planted("14.10", "only the first two layers run", _forward_first_two_layers,
            names=r"fails: the output is off", avoid=r"normalises once more|caches\[i\]"),
    Planted("14.10", "untied head transposed", _forward_head_as_stored,
            names=r"raised an error on case 'untied head",
            avoid=r"ties its head|ties the head|is None when the model"),
    # 14.11
    Planted("14.11", "head width hidden_size / H", _loader(d_head_from_hidden=True),
            names=r"head_dim = 6 \(hidden_size / H = 4\)"),
    Planted("14.11", "lm_head.weight used whenever present", _loader(head="keys"),
            names=r"the config decides|lacks lm_head\.weight.*load_llama accepted it"),
    Planted("14.11", "RoPE base 10,000 typed in", _loader(base=10000.0),
            names=r"rope_theta"),
    Planted("14.11", "layers counted from the keys", _loader(n_layers="keys"),
            names=r"layer 2 missing.*load_llama accepted it"),
    Planted("14.11", "two layers typed in", _loader(n_layers=2),
            names=r"the config has 3 layers"),
    Planted("14.11", "eps 1e-6 typed in", _loader(eps=1e-6), names=r"rms_norm_eps"),
    Planted("14.11", "tied head as a copy of E^T", _loader(tied_copy=True),
            names=r"W_out = None"),
    Planted("14.11", "a missing lm_head.weight tied in its place",
            _loader(head="tie when missing"),
            names=r"lacks lm_head\.weight.*load_llama accepted it"),
]
