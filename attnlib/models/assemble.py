"""A whole decoder run from the reader's own pieces, with a trained model's weights.

Lesson 14 asks the reader to write a Llama-style decoder as short functions: the leaf pieces
(the embedding lookup, RMSNorm, RoPE, the grouped-query ``repeat_kv``, causal attention with
its ``1/sqrt(d_QK)`` scale, the SwiGLU feed-forward sublayer, a KV cache, a sampler), then
the wiring (one block, the decoder's forward pass) and the loader that turns a Hugging Face
``LlamaForCausalLM`` state dict into the decoder's weights. :class:`Pieces` holds one
function per piece, attnlib's own by default; :class:`ReaderDecoder` runs a decoder from
those functions alone, on :class:`Weights`: those of an attnlib
:class:`~attnlib.layers.blocks.TinyDecoder` (:func:`weights_of`: the trained ``book``
model, its grouped and latent conversions) or those the ``load_llama`` piece reads from a
state dict (:meth:`ReaderDecoder.from_llama`). Inside :class:`ReaderDecoder` only the pieces
run: its ``forward`` calls ``pieces.forward``, and every other step is a piece called by
another piece. The only code of attnlib's own on the way is what the default pieces are.

:func:`first_divergence` runs the attnlib model (with forward hooks on every block's
``attn`` and ``ffn`` sublayer) and the reader's decoder side by side, through a prompt and
then token by token through their caches, and names the first step, layer and sublayer
where the two part: where a wrong piece first shows. :func:`piece_table` says, piece by
piece, whose code ran.

The pieces' signatures (``X`` of shape ``(..., heads, N, d)``):

=================  ==========================================================
``load_llama``     ``load_llama(state_dict, config) -> Weights``
``embed``          ``embed(E, ids) -> (..., N, d)``, the rows ``E[ids]``
``rms_norm``       ``rms_norm(x, g, eps) -> x / sqrt(mean(x^2) + eps) * g``
``rope``           ``rope(X, positions, base) -> X`` rotated, half-split pairs
``repeat_kv``      ``repeat_kv(K, H) -> (..., H, N, d)``: head ``h`` gets ``h // (H/G)``
``attend``         ``attend(Q, K, V) -> softmax(Q K^T / sqrt(d) + causal) V``
``feed_forward``   ``feed_forward(x, W_gate, W_up, W_down)``, SwiGLU
``cache``          ``cache()`` -> an object with ``append(K, V) -> (K_all, V_all)``
``block``          ``block(x, layer, pieces, cache, start) -> x``, one pre-norm block
``forward``        ``forward(ids, weights, pieces, caches) -> (..., N, V)`` logits
``sample``         ``sample(logits, temperature, generator) -> (..., 1)`` ids
=================  ==========================================================

Lesson: 14_your_model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

if TYPE_CHECKING:
    import pandas as pd

from attnlib.core.heads import merge_heads, repeat_kv, split_heads
from attnlib.core.rope import apply_rope
from attnlib.layers.blocks import TinyDecoder, swiglu
from attnlib.layers.gqa import grouped_query_attention
from attnlib.layers.mla import MultiHeadLatentAttention
from attnlib.layers.norms import RMSNorm, rms_norm
from attnlib.models.convert import from_hf_llama_attention, rope_settings
from attnlib.serving.sampling import sample

__all__ = [
    "PIECES",
    "Divergence",
    "Layer",
    "Pieces",
    "ReaderCache",
    "ReaderDecoder",
    "Weights",
    "divergence_table",
    "first_divergence",
    "from_hf_llama",
    "llama_keys",
    "load_llama",
    "piece_table",
    "reference_pieces",
    "weights_of",
]

PIECES = ("load_llama", "embed", "rms_norm", "rope", "repeat_kv", "attend", "feed_forward",
          "cache", "block", "forward", "sample")
"""The pieces of :class:`Pieces`: the loader, then in the order a token meets them."""


# ---------------------------------------------------------------------------------------
# The weights a decoder of pieces runs on
# ---------------------------------------------------------------------------------------


class Layer(NamedTuple):
    """One block's weights, each multiplied from the right (``x @ W``).

    ``W_Q (d, H d_head)``, ``W_K`` and ``W_V (d, G d_head)``, ``W_O (H d_head, d)``;
    ``rope_base`` is None for a layer without RoPE; ``attn_g``, ``ffn_g (d,)`` are the two
    RMSNorm gains with their ``eps``; ``W_gate``, ``W_up (d, d_ff)``, ``W_down (d_ff, d)``.
    """

    attn_g: torch.Tensor
    attn_eps: float
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    H: int
    G: int
    rope_base: float | None
    ffn_g: torch.Tensor
    ffn_eps: float
    W_gate: torch.Tensor
    W_up: torch.Tensor
    W_down: torch.Tensor


class Weights(NamedTuple):
    """A whole decoder's weights: ``E (V, d)``, the :class:`Layer` s, the final RMSNorm's
    gain and eps, and the output head ``W_out (d, V)``, None when the head is tied to the
    embedding (the logits are then ``x E^T``)."""

    E: torch.Tensor
    layers: tuple[Layer, ...]
    final_g: torch.Tensor
    final_eps: float
    W_out: torch.Tensor | None


def weights_of(model: TinyDecoder) -> Weights:
    """The :class:`Weights` of an attnlib :class:`~attnlib.layers.blocks.TinyDecoder`: the
    model's own tensors, not copies.

    A latent (MLA) layer without RoPE enters with its key and value projections merged,
    ``W_K = W_L W_LK`` and ``W_V = W_L W_LV`` (products computed once, without gradient), and
    ``G = H``: the decoder of pieces caches per-head keys, not the latent of chapter 07.
    A tied model has ``W_out = None``.
    """
    if not isinstance(model, TinyDecoder):
        raise TypeError(f"model must be an attnlib TinyDecoder; got {type(model).__name__}")
    if model.norm != "pre" or not isinstance(model.final_norm, RMSNorm):
        raise ValueError(f"model must be a pre-norm RMSNorm decoder (Llama's layout); got "
                         f"norm={model.norm!r}, final norm {type(model.final_norm).__name__}")
    layers = []
    for i, block in enumerate(model.blocks):
        a, f = block.attn, block.ffn
        if f.kind != "swiglu" or f.bias or not isinstance(block.attn_norm, RMSNorm):
            raise ValueError(f"model.blocks[{i}] must have RMSNorm and a SwiGLU feed-forward "
                             f"without biases; got ffn kind {f.kind!r}, bias={f.bias}")
        if isinstance(a, MultiHeadLatentAttention):
            if a.d_rope or a.latent_norm or a.W_LQ is not None:
                raise ValueError(f"model.blocks[{i}].attn must be a latent layer without RoPE, "
                                 "latent norm or query latent (mla_from_mha's); got "
                                 f"d_rope={a.d_rope}, latent_norm={a.latent_norm}")
            with torch.no_grad():
                W_K, W_V = a.W_L @ a.W_LK, a.W_L @ a.W_LV
            W_Q, G, base = a.W_LQQ, a.n_heads, None
        else:
            if a.rope_interleaved:
                raise ValueError(f"model.blocks[{i}].attn must rotate half-split pairs "
                                 "(rope_interleaved=False); got rope_interleaved=True")
            W_Q, W_K, W_V, G, base = a.W_Q, a.W_K, a.W_V, a.n_kv_heads, a.rope_base
        layers.append(Layer(block.attn_norm.g, block.attn_norm.eps, W_Q, W_K, W_V, a.W_O,
                            a.n_heads, G, base, block.ffn_norm.g, block.ffn_norm.eps,
                            f.W_gate, f.W_up, f.W_down))
    return Weights(model.E, tuple(layers), model.final_norm.g, model.final_norm.eps,
                   model.W_out)


# ---------------------------------------------------------------------------------------
# Hugging Face's names
# ---------------------------------------------------------------------------------------


def _config_sizes(config: object) -> dict:
    """The sizes a Llama config gives, with Hugging Face's defaults, checked."""
    need = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "rms_norm_eps")
    missing = [n for n in need if getattr(config, n, None) is None]
    if missing:
        raise ValueError(f"config must be a Llama config with {list(need)}; it has no "
                         f"{missing}")
    H, d = int(config.num_attention_heads), int(config.hidden_size)
    G = getattr(config, "num_key_value_heads", None)
    G = H if G is None else int(G)
    d_head = getattr(config, "head_dim", None)
    if d_head is None:
        if d % H:
            raise ValueError(f"config.hidden_size must divide by num_attention_heads when "
                             f"head_dim is not given; got {d} and {H}")
        d_head = d // H
    if H % G:
        raise ValueError(f"config.num_attention_heads must divide by num_key_value_heads "
                         f"(each group of query heads shares one key/value head); got {H} "
                         f"and {G}")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError("config must describe a Llama without biases (attention_bias and "
                         "mlp_bias False)")
    base, scaling = rope_settings(config)
    if base is None:
        raise ValueError("config must give a RoPE base (rope_parameters['rope_theta'] or "
                         "rope_theta); got neither")
    if scaling is not None:
        raise ValueError("config must use RoPE without frequency scaling (rope_type "
                         "'default'); the decoder of pieces rotates by m * base^(-2i/d)")
    return {"V": int(config.vocab_size), "d": d, "d_ff": int(config.intermediate_size),
            "layers": int(config.num_hidden_layers), "H": H, "G": G, "d_head": int(d_head),
            "eps": float(config.rms_norm_eps), "base": float(base),
            "tied": bool(getattr(config, "tie_word_embeddings", False))}


def llama_keys(config: object) -> dict[str, tuple[int, ...]]:
    """Every key of a ``LlamaForCausalLM`` state dict for ``config``, with its shape.

    ``nn.Linear`` keeps its weight as ``(out, in)``. ``lm_head.weight`` is listed only when
    the config does not tie the head to the embedding (a tied checkpoint may leave it out).
    """
    c = _config_sizes(config)
    d, q, kv = c["d"], c["H"] * c["d_head"], c["G"] * c["d_head"]
    keys = {"model.embed_tokens.weight": (c["V"], d)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        keys |= {p + "input_layernorm.weight": (d,),
                 p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
                 p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
                 p + "post_attention_layernorm.weight": (d,),
                 p + "mlp.gate_proj.weight": (c["d_ff"], d),
                 p + "mlp.up_proj.weight": (c["d_ff"], d),
                 p + "mlp.down_proj.weight": (d, c["d_ff"])}
    keys["model.norm.weight"] = (d,)
    if not c["tied"]:
        keys["lm_head.weight"] = (c["V"], d)
    return keys


# ---------------------------------------------------------------------------------------
# attnlib's pieces: the defaults
# ---------------------------------------------------------------------------------------


def load_llama(state_dict: dict, config: object) -> Weights:
    """The :class:`Weights` of a Hugging Face ``LlamaForCausalLM`` state dict (attnlib's
    ``load_llama`` piece).

    Every ``nn.Linear`` weight is transposed (``(out, in)`` there, ``x @ W`` here): a view,
    not a copy. ``q_proj`` has ``H d_head`` rows and ``k_proj``, ``v_proj`` ``G d_head``,
    with ``H = num_attention_heads`` and ``G = num_key_value_heads``; Hugging Face's
    ``rotate_half`` pairs ``(i, i + d/2)``, the ``rope`` piece's pairing, so no permutation is
    needed. A config with ``tie_word_embeddings`` gives ``W_out = None`` whether or not the
    state dict holds ``lm_head.weight``.

    Raises:
        KeyError: a key the config asks for is missing (the message names it).
        ValueError: a tensor has another shape than the config gives, a key is not part of
            such a Llama, or a tied checkpoint's ``lm_head.weight`` is not the embedding.

    Lesson: 14_your_model.
    """
    if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
        raise TypeError(f"state_dict must be a mapping of names to tensors; got "
                        f"{type(state_dict).__name__}")
    c = _config_sizes(config)
    keys = llama_keys(config)
    for key, shape in keys.items():
        if key not in state_dict:
            raise KeyError(f"{key}: the config asks for it ({c['layers']} layers, "
                           f"{'tied' if c['tied'] else 'untied'} head) and the state dict "
                           "has no such key")
        got = tuple(state_dict[key].shape)
        if got != shape:
            raise ValueError(f"{key} must have shape {shape} for this config (H = {c['H']}, "
                             f"G = {c['G']}, d_head = {c['d_head']}); got {got}")
    extra = sorted(set(state_dict) - set(keys) - {"lm_head.weight"})
    if extra:
        raise ValueError(f"state_dict holds keys that are not part of this Llama: {extra[:3]}"
                         f"{' ...' if len(extra) > 3 else ''}")
    sd = state_dict
    E = sd["model.embed_tokens.weight"]
    if c["tied"] and "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"], E):
        raise ValueError("lm_head.weight must equal model.embed_tokens.weight when the config "
                         "ties them (tie_word_embeddings=True); got another matrix")
    layers = []
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        layers.append(Layer(
            sd[p + "input_layernorm.weight"], c["eps"],
            sd[p + "self_attn.q_proj.weight"].T, sd[p + "self_attn.k_proj.weight"].T,
            sd[p + "self_attn.v_proj.weight"].T, sd[p + "self_attn.o_proj.weight"].T,
            c["H"], c["G"], c["base"], sd[p + "post_attention_layernorm.weight"], c["eps"],
            sd[p + "mlp.gate_proj.weight"].T, sd[p + "mlp.up_proj.weight"].T,
            sd[p + "mlp.down_proj.weight"].T))
    W_out = None if c["tied"] else sd["lm_head.weight"].T
    return Weights(E, tuple(layers), sd["model.norm.weight"], c["eps"], W_out)


def _embed(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return E[ids]  # (..., N, d)


def _rms_norm(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm(x, g, eps)


def _rope(X: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    return apply_rope(X, positions, base=base)


def _repeat_kv(K: torch.Tensor, n_heads: int) -> torch.Tensor:
    return repeat_kv(K, n_heads)


def _attend(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    return grouped_query_attention(Q, K, V, causal=True, impl="explicit")


def _feed_forward(x, W_gate, W_up, W_down) -> torch.Tensor:
    return swiglu(x, W_gate, W_up, W_down)


class ReaderCache:
    """attnlib's side of the ``cache`` piece: keys and values of every token so far.

    ``append(K, V)`` takes the new tokens' ``(..., G, n, d)`` and returns everything held,
    the new tokens last; ``n_tokens`` counts them.
    """

    def __init__(self) -> None:
        self.K: torch.Tensor | None = None
        self.V: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        return 0 if self.K is None else self.K.shape[-2]

    def append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.K = K if self.K is None else torch.cat((self.K, K), dim=-2)
        self.V = V if self.V is None else torch.cat((self.V, V), dim=-2)
        return self.K, self.V


def _block(x: torch.Tensor, layer: Layer, pieces, cache, start: int) -> torch.Tensor:
    h = pieces.rms_norm(x, layer.attn_g, layer.attn_eps)  # pre-norm
    Q = split_heads(h @ layer.W_Q, layer.H)  # (..., H, n, d_head)
    K = split_heads(h @ layer.W_K, layer.G)  # (..., G, n, d_head)
    V = split_heads(h @ layer.W_V, layer.G)
    if layer.rope_base is not None:  # queries and keys turn; values do not
        positions = torch.arange(start, start + x.shape[-2], device=x.device)
        Q, K = pieces.rope(Q, positions, layer.rope_base), pieces.rope(K, positions,
                                                                       layer.rope_base)
    if cache is not None:
        K, V = cache.append(K, V)  # every token so far; G heads, before repeat_kv
    if layer.G != layer.H:
        K, V = pieces.repeat_kv(K, layer.H), pieces.repeat_kv(V, layer.H)
    x = x + merge_heads(pieces.attend(Q, K, V)) @ layer.W_O
    h = pieces.rms_norm(x, layer.ffn_g, layer.ffn_eps)
    return x + pieces.feed_forward(h, layer.W_gate, layer.W_up, layer.W_down)


def _forward(ids: torch.Tensor, weights: Weights, pieces, caches) -> torch.Tensor:
    start = 0 if caches is None else caches[0].n_tokens  # the tokens read before these
    x = pieces.embed(weights.E, ids)
    for i, layer in enumerate(weights.layers):
        x = pieces.block(x, layer, pieces, None if caches is None else caches[i], start)
    W_out = weights.E.mT if weights.W_out is None else weights.W_out
    return pieces.rms_norm(x, weights.final_g, weights.final_eps) @ W_out


def _sample(logits: torch.Tensor, temperature: float,
            generator: torch.Generator | None) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    return sample(logits, temperature=temperature, generator=generator)


@dataclass(frozen=True)
class Pieces:
    """One function per piece of a decoder; attnlib's own where none is given.

    Attributes: the names of :data:`PIECES`, each a callable with the signature of the
    module's table. ``Pieces(attend=my_attend)`` replaces one; :meth:`mine` says which are
    the caller's.
    """

    load_llama: Callable = load_llama
    embed: Callable = _embed
    rms_norm: Callable = _rms_norm
    rope: Callable = _rope
    repeat_kv: Callable = _repeat_kv
    attend: Callable = _attend
    feed_forward: Callable = _feed_forward
    cache: Callable = ReaderCache
    block: Callable = _block
    forward: Callable = _forward
    sample: Callable = _sample

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not callable(value):
                raise TypeError(f"{f.name} must be a callable (see attnlib.models.assemble); "
                                f"got {type(value).__name__}")

    def mine(self) -> dict[str, bool]:
        """For each piece, whether it is the caller's (True) or attnlib's (False)."""
        return {f.name: getattr(self, f.name) is not f.default for f in fields(self)}

    def replace(self, **pieces: Callable) -> Pieces:
        """A copy with the named pieces replaced."""
        unknown = sorted(set(pieces) - set(PIECES))
        if unknown:
            raise ValueError(f"pieces must be among {list(PIECES)}; got {unknown}")
        return replace(self, **pieces)


def reference_pieces() -> Pieces:
    """attnlib's implementation of every piece."""
    return Pieces()


# ---------------------------------------------------------------------------------------
# The decoder, from pieces
# ---------------------------------------------------------------------------------------


class _Recorder:
    """The pieces as the ``forward`` and ``block`` pieces see them: the same functions, with
    the embedding, each block's input and output, the stream its feed-forward norm reads and
    its feed-forward output recorded."""

    def __init__(self, pieces: Pieces, weights: Weights, record: dict) -> None:
        self._pieces, self._record = pieces, record
        self._index = {id(layer): i for i, layer in enumerate(weights.layers)}
        self._layer = self._mid = self._ffn = None

    def __getattr__(self, name: str):
        return getattr(self._pieces, name)

    def embed(self, E, ids):
        out = self._pieces.embed(E, ids)
        self._record["embed"] = out
        return out

    def rms_norm(self, x, g, eps):
        if self._layer is not None and g is self._layer.ffn_g and self._ffn is None:
            self._mid = x  # the stream after the attention sublayer
        return self._pieces.rms_norm(x, g, eps)

    def feed_forward(self, *args):
        self._ffn = self._pieces.feed_forward(*args)
        return self._ffn

    def block(self, x, layer, pieces, cache, start):
        self._layer, self._mid, self._ffn = layer, None, None
        try:
            out = self._pieces.block(x, layer, pieces, cache, start)
        finally:
            self._layer = None
        i, mid, f = self._index.get(id(layer)), self._mid, self._ffn
        if i is None or not isinstance(out, torch.Tensor):
            return out
        if out.shape != x.shape:
            self._record[(i, "attention")] = out
        elif isinstance(mid, torch.Tensor) and mid.shape == x.shape:
            # a pre-norm block: x -> mid = x + a -> out = mid + f
            self._record[(i, "attention")] = mid - x
            self._record[(i, "feed_forward")] = out - mid
        elif isinstance(f, torch.Tensor) and f.shape == x.shape:
            # no norm with the feed-forward's gain seen: the attention is what the block
            # added besides the feed-forward's output
            self._record[(i, "attention")] = out - f - x
            self._record[(i, "feed_forward")] = f
        return out


class ReaderDecoder(nn.Module):
    """A decoder that runs only :class:`Pieces`, on :class:`Weights`.

    ``forward(ids, caches)`` is ``pieces.forward(ids, weights, pieces, caches)``; attnlib's
    ``forward`` piece computes ``logits = rms_norm(blocks(embed(E, ids))) W_out`` (``E^T``
    when tied), calling ``pieces.block`` once per layer with that layer's cache and the
    position of the first new token; attnlib's ``block`` piece computes
    ``x = x + attention(rms_norm(x))``, ``x = x + feed_forward(rms_norm(x))``, the attention
    being ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V`` split into heads, ``rope`` on ``Q`` and
    ``K``, ``cache.append``, ``repeat_kv`` to ``H`` heads, ``attend`` and ``W_O``. Each of
    those steps is a piece, so a reader's own ``forward`` or ``block`` replaces the wiring
    as a whole. The weights are the model's own tensors (or the state dict's), not copies.

    Args:
        model: the :class:`Weights` to run, or a pre-norm RMSNorm, SwiGLU
            :class:`~attnlib.layers.blocks.TinyDecoder` (``"gqa"`` attention, or ``"mla"``
            without RoPE) whose weights :func:`weights_of` takes.
        pieces: the pieces to run; attnlib's by default.

    Attributes:
        weights: the :class:`Weights`.
        record: after each forward pass, what it passed through: ``record["embed"]``, and
            per layer ``record[(layer, "attention")]`` and ``record[(layer, "feed_forward")]``,
            what each sublayer added to the residual stream: the stream the feed-forward's
            norm reads (``pieces.rms_norm`` with ``layer.ffn_g``) less the block's input, and
            the block's output less that stream (absent for a block that calls neither
            that norm nor ``pieces.feed_forward``).

    Example:
        >>> model = TinyDecoder(vocab_size=20, d_model=16, n_layers=2, n_heads=2, seed=0)
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> torch.allclose(ReaderDecoder(model)(ids), model(ids), atol=1e-5)
        True

    Lesson: 14_your_model.
    """

    def __init__(self, model: TinyDecoder | Weights, pieces: Pieces | None = None) -> None:
        super().__init__()
        pieces = Pieces() if pieces is None else pieces
        if not isinstance(pieces, Pieces):
            raise TypeError(f"pieces must be an attnlib.models.assemble.Pieces; "
                            f"got {type(pieces).__name__}")
        self.pieces = pieces
        if isinstance(model, Weights):
            if not all(isinstance(layer, Layer) for layer in model.layers):
                raise TypeError("model.layers must hold attnlib.models.assemble.Layer "
                                "tuples, one per block")
            self.weights = model
        else:
            self.weights = weights_of(model)
        self.vocab_size = self.weights.E.shape[0]
        self.record: dict = {}

    @classmethod
    def from_llama(cls, state_dict: dict, config: object,
                   pieces: Pieces | None = None) -> ReaderDecoder:
        """The decoder of ``pieces`` on the weights their ``load_llama`` piece reads from a
        ``LlamaForCausalLM`` state dict and config."""
        pieces = Pieces() if pieces is None else pieces
        weights = pieces.load_llama(state_dict, config) if isinstance(pieces, Pieces) else None
        if isinstance(pieces, Pieces) and not isinstance(weights, Weights):
            raise TypeError("the load_llama piece must return attnlib.models.assemble.Weights; "
                            f"got {type(weights).__name__}")
        return cls(weights, pieces)

    @property
    def n_layers(self) -> int:
        return len(self.weights.layers)

    def new_caches(self) -> list:
        """One empty cache per layer, from the ``cache`` piece."""
        return [self.pieces.cache() for _ in self.weights.layers]

    def forward(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """``(..., N)`` ids -> ``(..., N, vocab_size)`` logits; with ``caches`` (one per
        layer, :meth:`new_caches`) the ids continue the tokens the caches hold."""
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dim() < 1:
            raise TypeError(f"ids must be an integer tensor (..., N); got {ids!r}")
        if caches is not None and len(caches) != self.n_layers:
            raise ValueError(f"caches must hold one cache per layer ({self.n_layers}); "
                             f"got {len(caches)}")
        record: dict = {}
        logits = self.pieces.forward(ids, self.weights,
                                     _Recorder(self.pieces, self.weights, record), caches)
        self.record = record
        return logits

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, *, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """The prompt ``ids (..., N)`` and ``max_new_tokens`` more, through the ``cache``
        piece (the prompt once, then one token a step) and the ``sample`` piece
        (``temperature=0``: the argmax)."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
                or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0; got {max_new_tokens!r}")
        caches, out, step = self.new_caches(), ids, ids
        for _ in range(max_new_tokens):
            logits = self(step, caches)[..., -1, :]
            step = self.pieces.sample(logits, temperature, generator)  # (..., 1)
            out = torch.cat((out, step), dim=-1)
        return out


# ---------------------------------------------------------------------------------------
# Where a wrong piece first shows
# ---------------------------------------------------------------------------------------


class Divergence(NamedTuple):
    """Where the reader's decoder first parts from attnlib's.

    ``step`` is 0 for the prompt and ``s`` for the ``s``-th token fed through the caches;
    ``layer`` is the block (None for the embedding or the logits); ``sublayer`` is
    ``"embed"``, ``"attention"``, ``"feed_forward"`` or ``"logits"``; ``max_diff`` is the
    largest ``|reader - attnlib|`` there.
    """

    step: int
    layer: int | None
    sublayer: str
    max_diff: float


def _attnlib_record(model: TinyDecoder, ids: torch.Tensor, caches) -> tuple[dict, torch.Tensor]:
    rec: dict = {}
    handles = []
    for i, block in enumerate(model.blocks):
        for name, sub in (("attention", block.attn), ("feed_forward", block.ffn)):
            def hook(module, args, out, key=(i, name)):
                rec[key] = out
            handles.append(sub.register_forward_hook(hook))
    try:
        logits = model(ids, caches=caches)
    finally:
        for h in handles:
            h.remove()
    rec["embed"] = model.E[ids]
    return rec, logits


def _check_model(model: object) -> TinyDecoder:
    if not isinstance(model, TinyDecoder):
        raise TypeError(f"model must be an attnlib TinyDecoder; got {type(model).__name__}")
    return model


def _default_rtol(model: object) -> float:
    """The tolerance of a comparison with ``model``: 1e-9 in float64, 1e-4 in float32."""
    return 1e-9 if _check_model(model).E.dtype == torch.float64 else 1e-4


def _comparisons(model: TinyDecoder, pieces: Pieces, ids: torch.Tensor, steps: int,
                 weights: Weights | None):
    """``(step, layer, sublayer, max |reader - attnlib|, max |attnlib|)`` in the order the
    sublayers run, step by step; both decoders are fed attnlib's greedy tokens. A sublayer
    whose output has the wrong shape or type gives ``inf``."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0; got {steps!r}")
    _check_model(model)
    reader = ReaderDecoder(model if weights is None else weights, pieces)
    ours, theirs, step_ids = model.new_caches(), reader.new_caches(), ids
    for step in range(steps + 1):
        rec, logits = _attnlib_record(model, step_ids, ours)
        got = reader(step_ids, theirs)
        order = [("embed", None, "embed")]
        order += [((i, s), i, s) for i in range(reader.n_layers)
                  for s in ("attention", "feed_forward")]
        pairs = [(rec[k], reader.record[k], layer, s) for k, layer, s in order
                 if k in reader.record]
        pairs.append((logits, got, None, "logits"))
        for ref, mine, layer, s in pairs:
            if not isinstance(mine, torch.Tensor) or mine.shape != ref.shape:
                yield step, layer, s, math.inf, float(ref.abs().max())
            else:
                yield step, layer, s, float((mine - ref).abs().max()), float(ref.abs().max())
        step_ids = logits[..., -1:, :].argmax(dim=-1)  # (B, 1): attnlib's next token


@torch.no_grad()
def first_divergence(model: TinyDecoder, pieces: Pieces, ids: torch.Tensor, *,
                     steps: int = 0, rtol: float | None = None,
                     weights: Weights | None = None) -> Divergence | None:
    """The first place where ``pieces`` run on ``model``'s weights part from ``model`` itself.

    Both read the prompt ``ids`` (step 0), then ``steps`` more tokens one at a time through
    their caches (the tokens attnlib's model picks greedily). At each step the sublayers
    are compared in the order they run (the embedding, then per layer the attention and
    the feed-forward sublayer's output, through forward hooks on ``model.blocks[i].attn``
    and ``.ffn``, then the logits; a sublayer the reader's decoder did not record is left
    out); the first one whose largest difference exceeds ``rtol`` times the largest entry
    of attnlib's is returned. :func:`divergence_table` gives every comparison.

    Args:
        model: an attnlib :class:`~attnlib.layers.blocks.TinyDecoder` (see
            :class:`ReaderDecoder`).
        pieces: the pieces to test.
        ids: ``(B, N)`` prompt ids.
        steps: tokens to feed through the caches after the prompt.
        rtol: the relative tolerance; ``None``: ``1e-9`` in float64, ``1e-4`` otherwise.
        weights: the weights the reader's decoder runs on, when not ``model``'s own (those
            the reader's ``load_llama`` read from the checkpoint ``model`` was made of).

    Returns:
        A :class:`Divergence`, or None when every step agrees.

    Lesson: 14_your_model.
    """
    if rtol is None:
        rtol = _default_rtol(model)
    for step, layer, sublayer, diff, top in _comparisons(model, pieces, ids, steps, weights):
        if not diff <= rtol * top:  # NaN parts too
            return Divergence(step, layer, sublayer, diff)
    return None


@torch.no_grad()
def divergence_table(model: TinyDecoder, pieces: Pieces, ids: torch.Tensor, *,
                     steps: int = 0, weights: Weights | None = None) -> pd.DataFrame:
    """Every comparison :func:`first_divergence` makes, not only the first that fails.

    Returns:
        pd.DataFrame: one row per (step, place) in the order the sublayers run, with
        ``"step"``, ``"place"`` (``"embed"``, ``"L0 attention"``, ..., ``"logits"``),
        ``"max |diff|"``, ``"relative"`` (that over the largest entry of attnlib's) and
        ``"rtol"``, :func:`first_divergence`'s default tolerance for the model's dtype.

    Example:
        >>> from attnlib.models.pretrained import load
        >>> book = load("book", dtype=torch.float64)
        >>> t = divergence_table(book, Pieces(), torch.tensor([[5, 6, 7]]), steps=1)
        >>> t["place"].tolist()[:3], float(t["max |diff|"].max()) < 1e-12
        (['embed', 'L0 attention', 'L0 feed-forward'], True)

    Lesson: 14_your_model.
    """
    import pandas as pd  # here, so that the exercises' checks need no pandas

    names = {"attention": "attention", "feed_forward": "feed-forward"}
    rtol = _default_rtol(model)
    rows = [{"step": step,
             "place": sublayer if layer is None else f"L{layer} {names[sublayer]}",
             "max |diff|": diff, "relative": diff / top if top else diff, "rtol": rtol}
            for step, layer, sublayer, diff, top
            in _comparisons(model, pieces, ids, steps, weights)]
    return pd.DataFrame(rows)


def piece_table(pieces: Pieces) -> list[dict[str, str]]:
    """One row per piece: its name and whose code ran (``"yours"`` or ``"attnlib"``)."""
    return [{"piece": name, "ran": "yours" if mine else "attnlib"}
            for name, mine in pieces.mine().items()]


# ---------------------------------------------------------------------------------------
# Hugging Face's Llama, into a TinyDecoder
# ---------------------------------------------------------------------------------------


@torch.no_grad()
def from_hf_llama(hf_model: nn.Module) -> TinyDecoder:
    """A :class:`~attnlib.layers.blocks.TinyDecoder` holding a ``LlamaForCausalLM``'s weights.

    Every ``nn.Linear`` weight is copied transposed (attnlib multiplies from the right);
    the attention layers through :func:`attnlib.models.convert.from_hf_llama_attention`
    (Hugging Face's ``rotate_half`` pairs ``(i, i + d/2)``, attnlib's default, so no
    permutation is needed); the norms' gains and ``rms_norm_eps``; ``lm_head`` as
    ``W_out`` (tied when the config ties it). Nothing here imports ``transformers``.

    Args:
        hf_model: a ``LlamaForCausalLM`` (``model.embed_tokens``, ``model.layers``,
            ``model.norm``, ``lm_head``, ``config``).

    Returns:
        A TinyDecoder on the weights' device and dtype, in eval mode.

    Lesson: 14_your_model.
    """
    missing = [n for n in ("model", "lm_head", "config") if not hasattr(hf_model, n)]
    if missing:
        raise TypeError(f"hf_model must be laid out like transformers' LlamaForCausalLM; got "
                        f"{type(hf_model).__name__} without {missing}")
    c, inner = hf_model.config, hf_model.model
    E = inner.embed_tokens.weight
    tied = hf_model.lm_head.weight is E or bool(getattr(c, "tie_word_embeddings", False))
    attn0 = from_hf_llama_attention(inner.layers[0].self_attn)
    model = TinyDecoder(
        E.shape[0], E.shape[1], len(inner.layers), attn0.n_heads, d_head=attn0.d_head,
        n_kv_heads=attn0.n_kv_heads, d_ff=inner.layers[0].mlp.gate_proj.weight.shape[0],
        rope_base=attn0.rope_base, tie_weights=tied, device=E.device, dtype=E.dtype)
    eps = float(c.rms_norm_eps)
    model.E.copy_(E)
    if not tied:
        model.W_out.copy_(hf_model.lm_head.weight.T)
    model.final_norm.g.copy_(inner.norm.weight)
    model.final_norm.eps = eps
    for block, layer in zip(model.blocks, inner.layers, strict=True):
        block.attn.load_state_dict(from_hf_llama_attention(layer.self_attn).state_dict())
        for norm, hf_norm in ((block.attn_norm, layer.input_layernorm),
                              (block.ffn_norm, layer.post_attention_layernorm)):
            norm.g.copy_(hf_norm.weight)
            norm.eps = eps
        for W, linear in ((block.ffn.W_gate, layer.mlp.gate_proj),
                          (block.ffn.W_up, layer.mlp.up_proj),
                          (block.ffn.W_down, layer.mlp.down_proj)):
            W.copy_(linear.weight.T)
    return model.eval()
