"""A whole decoder run from the reader's own pieces, with a trained model's weights.

Lesson 14 asks the reader to write each piece of a Llama-style decoder as a short
function: the embedding lookup, RMSNorm, RoPE, the grouped-query ``repeat_kv``, causal
attention with its ``1/sqrt(d)`` scale, the SwiGLU feed-forward sublayer, a KV cache and
a sampler. :class:`Pieces` holds one function per piece, attnlib's own by default;
:class:`ReaderDecoder` runs a decoder from those functions alone, with the weights of an
attnlib :class:`~attnlib.layers.blocks.TinyDecoder` (the trained ``book`` model, its
grouped and latent conversions, or a Hugging Face ``LlamaForCausalLM`` read by
:func:`from_hf_llama`). Nothing of attnlib's forward pass runs inside it: every step is a
call to a piece.

:func:`first_divergence` runs the attnlib model (with forward hooks on every block's
``attn`` and ``ffn`` sublayer) and the reader's decoder side by side, through a prompt and
then token by token through their caches, and names the first step, layer and sublayer
where the two part: where a wrong piece first shows. :func:`piece_table` says, piece by
piece, whose code ran.

The pieces' signatures (``X`` of shape ``(..., heads, N, d)``):

=================  ==========================================================
``embed``          ``embed(E, ids) -> (..., N, d)``, the rows ``E[ids]``
``rms_norm``       ``rms_norm(x, g, eps) -> x / sqrt(mean(x^2) + eps) * g``
``rope``           ``rope(X, positions, base) -> X`` rotated, half-split pairs
``repeat_kv``      ``repeat_kv(K, H) -> (..., H, N, d)``: head ``h`` gets ``h // (H/G)``
``attend``         ``attend(Q, K, V) -> softmax(Q K^T / sqrt(d) + causal) V``
``feed_forward``   ``feed_forward(x, W_gate, W_up, W_down)``, SwiGLU
``cache``          ``cache()`` -> an object with ``append(K, V) -> (K_all, V_all)``
``sample``         ``sample(logits, temperature, generator) -> (..., 1)`` ids
=================  ==========================================================

Lesson: 14_your_model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch
from torch import nn

from attnlib.core.heads import merge_heads, repeat_kv, split_heads
from attnlib.core.rope import apply_rope
from attnlib.layers.blocks import TinyDecoder, swiglu
from attnlib.layers.gqa import grouped_query_attention
from attnlib.layers.mla import MultiHeadLatentAttention
from attnlib.layers.norms import RMSNorm, rms_norm
from attnlib.models.convert import from_hf_llama_attention
from attnlib.serving.sampling import sample

__all__ = [
    "PIECES",
    "Divergence",
    "Pieces",
    "ReaderCache",
    "ReaderDecoder",
    "first_divergence",
    "from_hf_llama",
    "piece_table",
    "reference_pieces",
]

PIECES = ("embed", "rms_norm", "rope", "repeat_kv", "attend", "feed_forward", "cache",
          "sample")
"""The pieces of :class:`Pieces`, in the order a token meets them."""


# ---------------------------------------------------------------------------------------
# attnlib's pieces: the defaults
# ---------------------------------------------------------------------------------------


def _embed(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return E[ids]  # (..., N, d)


def _rms_norm(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm(x, g, eps, check=False)


def _rope(X: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    return apply_rope(X, positions, base=base, check=False)


def _repeat_kv(K: torch.Tensor, n_heads: int) -> torch.Tensor:
    return repeat_kv(K, n_heads, check=False)


def _attend(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    return grouped_query_attention(Q, K, V, causal=True, impl="explicit", check=False)


def _feed_forward(x, W_gate, W_up, W_down) -> torch.Tensor:
    return swiglu(x, W_gate, W_up, W_down, check=False)


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


def _sample(logits: torch.Tensor, temperature: float,
            generator: torch.Generator | None) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    return sample(logits, temperature=temperature, generator=generator, check=False)


@dataclass(frozen=True)
class Pieces:
    """One function per piece of a decoder; attnlib's own where none is given.

    Attributes: the names of :data:`PIECES`, each a callable with the signature of the
    module's table. ``Pieces(attend=my_attend)`` replaces one; :meth:`mine` says which are
    the caller's.
    """

    embed: Callable = _embed
    rms_norm: Callable = _rms_norm
    rope: Callable = _rope
    repeat_kv: Callable = _repeat_kv
    attend: Callable = _attend
    feed_forward: Callable = _feed_forward
    cache: Callable = ReaderCache
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


class _Layer(NamedTuple):
    attn_g: torch.Tensor
    attn_eps: float
    W_Q: torch.Tensor
    W_K: torch.Tensor | None  # None: latent (MLA), through W_L
    W_V: torch.Tensor | None
    W_L: torch.Tensor | None
    W_LK: torch.Tensor | None
    W_LV: torch.Tensor | None
    W_O: torch.Tensor
    H: int
    G: int
    rope_base: float | None
    ffn_g: torch.Tensor
    ffn_eps: float
    W_gate: torch.Tensor
    W_up: torch.Tensor
    W_down: torch.Tensor


def _layers_of(model: TinyDecoder) -> list[_Layer]:
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
        latent = isinstance(a, MultiHeadLatentAttention)
        if latent and (a.d_rope or a.latent_norm or a.W_LQ is not None):
            raise ValueError(f"model.blocks[{i}].attn must be a latent layer without RoPE, "
                             "latent norm or query latent (mla_from_mha's); got "
                             f"d_rope={a.d_rope}, latent_norm={a.latent_norm}")
        if not latent and a.rope_interleaved:
            raise ValueError(f"model.blocks[{i}].attn must rotate half-split pairs "
                             "(rope_interleaved=False); got rope_interleaved=True")
        layers.append(_Layer(
            block.attn_norm.g, block.attn_norm.eps,
            a.W_LQQ if latent else a.W_Q,
            None if latent else a.W_K, None if latent else a.W_V,
            a.W_L if latent else None, a.W_LK if latent else None, a.W_LV if latent else None,
            a.W_O, a.n_heads, a.n_heads if latent else a.n_kv_heads,
            None if latent else a.rope_base,
            block.ffn_norm.g, block.ffn_norm.eps, f.W_gate, f.W_up, f.W_down))
    return layers


class ReaderDecoder(nn.Module):
    """A decoder that runs only :class:`Pieces`, on the weights of ``model``.

    ``logits = rms_norm(Blocks(embed(E, ids))) W_out``, each block
    ``x = x + attention(rms_norm(x))``, ``x = x + feed_forward(rms_norm(x))``, attention
    being ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V`` split into heads, ``rope`` on
    ``Q`` and ``K``, ``cache.append``, ``repeat_kv`` to ``H`` heads, ``attend`` and
    ``W_O``. A latent (MLA) layer without RoPE forms its keys and values from the latent,
    ``K = (X W_L) W_LK``, and caches the per-head keys and values. The weights are
    ``model``'s own tensors (not copies).

    Args:
        model: a pre-norm RMSNorm, SwiGLU :class:`~attnlib.layers.blocks.TinyDecoder`
            (``"gqa"`` attention, or ``"mla"`` without RoPE).
        pieces: the pieces to run; attnlib's by default.

    Attributes:
        record: after each forward pass, what every sublayer returned:
            ``record["embed"]`` and ``record[(layer, "attention")]``,
            ``record[(layer, "feed_forward")]``.

    Example:
        >>> model = TinyDecoder(vocab_size=20, d_model=16, n_layers=2, n_heads=2, seed=0)
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> torch.allclose(ReaderDecoder(model)(ids), model(ids), atol=1e-5)
        True

    Lesson: 14_your_model.
    """

    def __init__(self, model: TinyDecoder, pieces: Pieces | None = None) -> None:
        super().__init__()
        pieces = Pieces() if pieces is None else pieces
        if not isinstance(pieces, Pieces):
            raise TypeError(f"pieces must be an attnlib.models.assemble.Pieces; "
                            f"got {type(pieces).__name__}")
        self.pieces = pieces
        self.layers = _layers_of(model)
        self.E, self.W_out = model.E, model.output_weights()
        self.final_g, self.final_eps = model.final_norm.g, model.final_norm.eps
        self.vocab_size = model.vocab_size
        self.record: dict = {}

    def new_caches(self) -> list:
        """One empty cache per layer, from the ``cache`` piece."""
        return [self.pieces.cache() for _ in self.layers]

    def _attention(self, L: _Layer, X: torch.Tensor, start: int, cache) -> torch.Tensor:
        p = self.pieces
        Q = split_heads(X @ L.W_Q, L.H, check=False)  # (..., H, n, d_head)
        if L.W_L is None:
            K = split_heads(X @ L.W_K, L.G, check=False)  # (..., G, n, d_head)
            V = split_heads(X @ L.W_V, L.G, check=False)
        else:  # a latent layer: keys and values from the latent
            lat = X @ L.W_L  # (..., n, d_L)
            K = split_heads(lat @ L.W_LK, L.H, check=False)
            V = split_heads(lat @ L.W_LV, L.H, check=False)
        if L.rope_base is not None:
            positions = torch.arange(start, start + X.shape[-2], device=X.device)
            Q, K = p.rope(Q, positions, L.rope_base), p.rope(K, positions, L.rope_base)
        if cache is not None:
            K, V = cache.append(K, V)  # every token so far
        if L.G != L.H:
            K, V = p.repeat_kv(K, L.H), p.repeat_kv(V, L.H)
        Y = p.attend(Q, K, V)  # (..., H, n, d_head)
        return merge_heads(Y, check=False) @ L.W_O

    def forward(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """``(..., N)`` ids -> ``(..., N, vocab_size)`` logits; with ``caches`` (one per
        layer, :meth:`new_caches`) the ids continue the tokens the caches hold."""
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dim() < 1:
            raise TypeError(f"ids must be an integer tensor (..., N); got {ids!r}")
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"caches must hold one cache per layer ({len(self.layers)}); "
                             f"got {len(caches)}")
        p, rec = self.pieces, {}
        start = 0 if caches is None else caches[0].n_tokens
        x = p.embed(self.E, ids)
        rec["embed"] = x
        for i, L in enumerate(self.layers):
            a = self._attention(L, p.rms_norm(x, L.attn_g, L.attn_eps), start,
                                None if caches is None else caches[i])
            rec[(i, "attention")] = a
            x = x + a
            f = p.feed_forward(p.rms_norm(x, L.ffn_g, L.ffn_eps), L.W_gate, L.W_up, L.W_down)
            rec[(i, "feed_forward")] = f
            x = x + f
        self.record = rec
        return p.rms_norm(x, self.final_g, self.final_eps) @ self.W_out

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


@torch.no_grad()
def first_divergence(model: TinyDecoder, pieces: Pieces, ids: torch.Tensor, *,
                     steps: int = 0, rtol: float | None = None) -> Divergence | None:
    """The first place where ``pieces`` run on ``model``'s weights part from ``model`` itself.

    Both read the prompt ``ids`` (step 0), then ``steps`` more tokens one at a time through
    their caches (the tokens attnlib's model picks greedily). At each step the sublayers
    are compared in the order they run (the embedding, then per layer the attention and
    the feed-forward sublayer's output, through forward hooks on ``model.blocks[i].attn``
    and ``.ffn``, then the logits); the first one whose largest difference exceeds
    ``rtol`` times the largest entry of attnlib's is returned.

    Args:
        model: an attnlib :class:`~attnlib.layers.blocks.TinyDecoder` (see
            :class:`ReaderDecoder`).
        pieces: the pieces to test.
        ids: ``(B, N)`` prompt ids.
        steps: tokens to feed through the caches after the prompt.
        rtol: the relative tolerance; ``None``: ``1e-9`` in float64, ``1e-4`` otherwise.

    Returns:
        A :class:`Divergence`, or None when every step agrees.

    Lesson: 14_your_model.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0; got {steps!r}")
    if rtol is None:
        rtol = 1e-9 if model.E.dtype == torch.float64 else 1e-4
    reader = ReaderDecoder(model, pieces)
    ours, theirs, step_ids = model.new_caches(), reader.new_caches(), ids
    for step in range(steps + 1):
        rec, logits = _attnlib_record(model, step_ids, ours)
        got = reader(step_ids, theirs)
        order = [("embed", None, "embed")]
        order += [((i, s), i, s) for i in range(len(reader.layers))
                  for s in ("attention", "feed_forward")]
        pairs = [(rec[k], reader.record[k], layer, s) for k, layer, s in order]
        pairs.append((logits, got, None, "logits"))
        for ref, mine, layer, s in pairs:
            if mine.shape != ref.shape:
                return Divergence(step, layer, s, math.inf)
            diff = float((mine - ref).abs().max())
            if not diff <= rtol * float(ref.abs().max()):  # NaN parts too
                return Divergence(step, layer, s, diff)
        step_ids = logits[..., -1:, :].argmax(dim=-1)  # (B, 1): attnlib's next token
    return None


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
