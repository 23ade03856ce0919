"""Everything around attention in a transformer layer: feed-forward, blocks, a decoder.

Read top to bottom, like a model file: the feed-forward network, the block (one attention
sublayer, an optional cross-attention sublayer and a feed-forward sublayer, each wrapped in
a skip connection, with the norms of :mod:`attnlib.layers.norms`), and :class:`TinyDecoder`, a
complete decoder-only language model small enough to run on a laptop. Math lives in plain
functions (:func:`feed_forward`, :func:`swiglu`); the modules hold parameters and call
them. Weights multiply from the right (``H = X @ W_1``), as in the rest of attnlib.

A block's attention sublayer comes from :mod:`attnlib.layers.variants`, a registry by name
(``"gqa"``, ``"mla"``, ``"gated"``, ``"sliding"``, and any variant registered there), built
with the options the caller gave for it. Every module's ``forward`` checks its own
arguments; a block and a decoder call their sublayers through ``__call__``, so forward hooks
registered on any sublayer fire, in ``forward`` and in ``generate`` alike.

Where the norm goes is the one design choice a block makes, and three placements are in use:

* ``"post"`` (the original Transformer, BERT): ``x = Norm(x + Sublayer(x))``;
* ``"pre"`` (GPT-2, Llama, DeepSeek): ``x = x + Sublayer(Norm(x))``: the skip path is never
  normalised, so gradients pass through it untouched;
* ``"peri"`` (Kim et al. 2025; Gemma 2 and 3, OLMo 2): ``x = x + Norm_out(Sublayer(Norm_in(x)))``,
  a norm on both sides of the sublayer and still a clean skip path.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

# The shipped variants register themselves when imported: "gqa" (attnlib.layers.gqa), "mla",
# "gated" and "sliding"; a block can build any of them by name.
import attnlib.layers.gates
import attnlib.layers.mla
import attnlib.layers.sliding  # noqa: F401
from attnlib._checks import (
    check_bool,
    check_choice,
    check_divisible,
    check_last_dim,
    check_nonnegative_int,
    check_padding_mask,
    check_positions,
    check_positive_int,
    check_tensor,
    checked_call,
    in_checked_call,
)
from attnlib._params import init_weight
from attnlib.core.masks import position_ids
from attnlib.core.rope import RopeTables
from attnlib.device import seeded
from attnlib.layers.base import AttendFn, RopeFn
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.norms import LayerNorm, RMSNorm
from attnlib.layers.variants import ATTENTION
from attnlib.serving.cache import Cache

__all__ = [
    "FFN_KINDS",
    "NORM_KINDS",
    "NORM_PLACEMENTS",
    "FeedForward",
    "TinyDecoder",
    "TransformerBlock",
    "feed_forward",
    "swiglu",
]

NORM_PLACEMENTS = ("pre", "post", "peri")
"""Where a block puts its norms; see :class:`TransformerBlock`."""

NORM_KINDS = ("rms", "layer")
"""``"rms"`` is :class:`RMSNorm`, ``"layer"`` is :class:`LayerNorm`."""

FFN_KINDS = ("swiglu", "gelu", "relu")
"""The feed-forward networks of :class:`FeedForward`."""




def _make_norm(kind: str, d: int, **kw) -> nn.Module:
    return RMSNorm(d, **kw) if kind == "rms" else LayerNorm(d, **kw)


# ---------------------------------------------------------------------------------------
# Feed-forward
# ---------------------------------------------------------------------------------------

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,  # the original Transformer
    "gelu": F.gelu,  # BERT, GPT-2; the exact erf form (GPT-2's code uses a tanh approximation)
}


def feed_forward(
    x: torch.Tensor,
    W_1: torch.Tensor,
    W_2: torch.Tensor,
    *,
    activation: str = "relu",
    b_1: torch.Tensor | None = None,
    b_2: torch.Tensor | None = None,
) -> torch.Tensor:
    """The position-wise feed-forward network ``y = f(x W_1 + b_1) W_2 + b_2``.

    Every token goes through the same two-layer network on its own; nothing mixes tokens
    here (that is attention's job).

    Args:
        x: ``(..., N, d)``.
        W_1: ``(d, d_ff)``.
        W_2: ``(d_ff, d_out)``.
        activation: ``"relu"`` or ``"gelu"`` (the exact, erf-based GELU).
        b_1: ``(d_ff,)`` or None.
        b_2: ``(d_out,)`` or None.

    Returns:
        ``(..., N, d_out)``.

    Equivalent to ``nn.Linear(d, d_ff) -> ReLU/GELU -> nn.Linear(d_ff, d_out)`` with
    ``W_1 = linear1.weight.T``.

    Lesson: 04_masks_and_layers.
    """
    _check_ffn_call(x, activation)
    f = _ACTIVATIONS[activation]
    H = x @ W_1  # (..., N, d_ff)
    if b_1 is not None:
        H = H + b_1
    y = f(H) @ W_2  # (..., N, d_out)
    return y if b_2 is None else y + b_2


def _check_ffn_call(x: object, activation: object) -> None:
    check_tensor("x", x)
    check_choice("activation", activation, list(_ACTIVATIONS))


def swiglu(
    x: torch.Tensor,
    W_gate: torch.Tensor,
    W_up: torch.Tensor,
    W_down: torch.Tensor,
    *,
    b_gate: torch.Tensor | None = None,
    b_up: torch.Tensor | None = None,
    b_down: torch.Tensor | None = None,
) -> torch.Tensor:
    """The gated feed-forward network ``y = (silu(x W_gate) * (x W_up)) W_down`` (Shazeer 2020).

    A gated linear unit: one projection, passed through ``silu(z) = z * sigmoid(z)``,
    multiplies another elementwise. Llama, Gemma (with GELU instead of SiLU), Qwen and
    DeepSeek use this form; Shazeer's paper has no biases.

    Args:
        x: ``(..., N, d)``.
        W_gate: ``(d, d_ff)``.
        W_up: ``(d, d_ff)``.
        W_down: ``(d_ff, d_out)``.
        b_gate: ``(d_ff,)`` or None.
        b_up: ``(d_ff,)`` or None.
        b_down: ``(d_out,)`` or None.

    Returns:
        ``(..., N, d_out)``.

    Equivalent to Hugging Face's ``LlamaMLP``: ``down_proj(act(gate_proj(x)) * up_proj(x))``.

    Lesson: 04_masks_and_layers.
    """
    check_tensor("x", x)
    gate = x @ W_gate  # (..., N, d_ff)
    up = x @ W_up  # (..., N, d_ff)
    if b_gate is not None:
        gate = gate + b_gate
    if b_up is not None:
        up = up + b_up
    y = (F.silu(gate) * up) @ W_down  # (..., N, d_out)
    return y if b_down is None else y + b_down


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``"relu"``/``"gelu"`` MLP or ``"swiglu"``.

    Parameters: ``W_1 (d, d_ff)`` and ``W_2 (d_ff, d)`` for ``"relu"`` and ``"gelu"``;
    ``W_gate``, ``W_up (d, d_ff)`` and ``W_down (d_ff, d)`` for ``"swiglu"``. With
    ``bias=True`` each projection gets a bias (``b_1``, ``b_2`` or ``b_gate``, ``b_up``,
    ``b_down``), initialised to zero. A SwiGLU network has three matrices instead of two;
    to keep the parameter count of a ``4 d`` MLP, Shazeer shrinks ``d_ff`` to about
    ``8 d / 3``.

    Args:
        d: input and output width.
        d_ff: hidden width.
        kind: one of :data:`FFN_KINDS`.
        bias: add biases (the original Transformer had them; modern LLMs drop them).
        device: where the parameters live.
        dtype: their dtype.

    Example:
        >>> FeedForward(16, 64, kind="gelu")(torch.zeros(2, 5, 16)).shape
        torch.Size([2, 5, 16])

    Lesson: 04_masks_and_layers.
    """

    def __init__(
        self,
        d: int,
        d_ff: int,
        kind: str = "swiglu",
        *,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d, self.d_ff = check_positive_int("d", d), check_positive_int("d_ff", d_ff)
        self.kind, self.bias = check_choice("kind", kind, FFN_KINDS), check_bool("bias", bias)
        kw = {"device": device, "dtype": dtype}
        if kind == "swiglu":
            self.W_gate = init_weight(d, d_ff, **kw)
            self.W_up = init_weight(d, d_ff, **kw)
            self.W_down = init_weight(d_ff, d, **kw)
            names = {"b_gate": d_ff, "b_up": d_ff, "b_down": d}
        else:
            self.W_1 = init_weight(d, d_ff, **kw)
            self.W_2 = init_weight(d_ff, d, **kw)
            names = {"b_1": d_ff, "b_2": d}
        for name, width in names.items():
            b = nn.Parameter(torch.zeros(width, **kw)) if bias else None
            self.register_parameter(name, b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., N, d) -> (..., N, d)``; see :func:`feed_forward` and :func:`swiglu`."""
        if not in_checked_call():
            check_last_dim("x", check_tensor("x", x), self.d, "d of this feed-forward network")
        if self.kind == "swiglu":
            return swiglu(x, self.W_gate, self.W_up, self.W_down, b_gate=self.b_gate,
                          b_up=self.b_up, b_down=self.b_down)
        return feed_forward(x, self.W_1, self.W_2, activation=self.kind, b_1=self.b_1,
                            b_2=self.b_2)

    def extra_repr(self) -> str:
        return f"d={self.d}, d_ff={self.d_ff}, kind={self.kind!r}"


# ---------------------------------------------------------------------------------------
# Transformer block
# ---------------------------------------------------------------------------------------


class TransformerBlock(nn.Module):
    """One transformer layer: self-attention, optional cross-attention, feed-forward.

    With ``A`` the attention sublayer, ``C`` cross-attention over ``memory`` and ``F`` the
    feed-forward network, the three norm placements compute (``C`` only when
    ``cross_attention=True``):

    * ``norm="pre"``:  ``x = x + A(N1(x))``; ``x = x + C(N2(x), memory)``; ``x = x + F(N3(x))``
    * ``norm="post"``: ``x = N1(x + A(x))``; ``x = N2(x + C(x, memory))``; ``x = N3(x + F(x))``
    * ``norm="peri"``: ``x = x + N1o(A(N1(x)))``, and the same around ``C`` and ``F``.

    Here ``N1, N2, N3`` are the submodules ``attn_norm, cross_norm, ffn_norm`` and
    ``N1o, N2o, N3o`` (peri only) are ``attn_out_norm, cross_out_norm, ffn_out_norm``.

    As an encoder layer call it with ``causal=False`` (every token sees every token, up to
    ``mask``); as a decoder layer with ``causal=True``, plus ``memory`` (the encoder's
    output) when it was built with ``cross_attention=True``. A decoder-only model (GPT,
    Llama) is a stack of decoder layers without cross-attention.

    Submodules: ``attn`` (built by the variant ``attention`` names in
    :data:`attnlib.layers.variants.ATTENTION`: :class:`~attnlib.layers.gqa.GroupedQueryAttention` or
    :class:`~attnlib.layers.mla.MultiHeadLatentAttention`), ``cross_attn`` (a
    :class:`~attnlib.layers.gqa.GroupedQueryAttention` without RoPE, with ``G`` KV heads for
    ``"gqa"`` and ``G = H`` for ``"mla"``; None without cross-attention), ``ffn``
    (:class:`FeedForward`), and the norms above (``cross_norm`` and ``cross_out_norm``
    are None without cross-attention).

    Args:
        d_model: width of the residual stream.
        n_heads: ``H`` query heads.
        d_head: width of each head; ``None`` means ``d_model // n_heads``.
        d_ff: hidden width of the feed-forward network; ``None`` means ``4 * d_model``.
        ffn: one of :data:`FFN_KINDS`.
        norm: placement, one of :data:`NORM_PLACEMENTS`.
        norm_kind: ``"rms"`` (:class:`RMSNorm`) or ``"layer"`` (:class:`LayerNorm`).
        attention: ``"gqa"``, ``"mla"``, ``"gated"``, ``"sliding"`` or another name in
            :data:`attnlib.layers.variants.ATTENTION`.
        rope_base: RoPE base, handed to the variant's builder. For ``"gqa"``, ``None``
            means no RoPE; for ``"mla"`` it is the base of the decoupled RoPE (``None``
            means 10,000) and matters only when ``d_rope > 0``.
        **attention_options: the variant's own options, handed to its builder as they are
            (an option it has no parameter for is refused by name): ``n_kv_heads`` (``G``;
            ``None`` means ``H``) for ``"gqa"`` and ``"gated"``; ``d_latent``,
            ``d_latent_q``, ``d_rope`` for ``"mla"``; ``window`` for ``"sliding"``.
        cross_attention: add a cross-attention sublayer between self-attention and FFN.
        device: where the parameters live.
        dtype: their dtype.

    Example:
        >>> block = TransformerBlock(32, 4, n_kv_heads=2, norm="pre")
        >>> block(torch.randn(2, 7, 32), causal=True).shape
        torch.Size([2, 7, 32])

    Lesson: 04_masks_and_layers.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        d_head: int | None = None,
        d_ff: int | None = None,
        ffn: str = "swiglu",
        norm: str = "pre",
        norm_kind: str = "rms",
        attention: str = "gqa",
        rope_base: float | None = None,
        cross_attention: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **attention_options: object,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        self.norm = check_choice("norm", norm, NORM_PLACEMENTS)
        self.norm_kind = check_choice("norm_kind", norm_kind, NORM_KINDS)
        self.attention = check_choice("attention", attention, list(ATTENTION))
        check_choice("ffn", ffn, FFN_KINDS)
        if not isinstance(cross_attention, bool):
            raise TypeError(f"cross_attention must be a bool; got {cross_attention!r}")
        if d_head is None:
            check_divisible("d_model", d_model, "n_heads (give d_head to choose freely)", n_heads)
            d_head = d_model // n_heads
        d_ff = 4 * d_model if d_ff is None else check_positive_int("d_ff", d_ff)
        kw = {"device": device, "dtype": dtype}

        self.attn = _build_attention(attention, d_model, n_heads, d_head,
                                     {"rope_base": rope_base, **attention_options}, kw)
        self.attn_norm = _make_norm(norm_kind, d_model, **kw)
        # Cross-attention: queries from the decoder, keys and values from `memory`. Its
        # positions live in another sequence, so it gets no RoPE. It keeps the sublayer's
        # KV heads (G for "gqa"; H for a variant without KV heads, such as "mla").
        G = getattr(self.attn, "n_kv_heads", n_heads)
        self.cross_attn = (
            GroupedQueryAttention(d_model, n_heads, G, d_head, **kw) if cross_attention else None
        )
        self.cross_norm = _make_norm(norm_kind, d_model, **kw) if cross_attention else None
        self.ffn = FeedForward(d_model, d_ff, ffn, **kw)
        self.ffn_norm = _make_norm(norm_kind, d_model, **kw)
        if norm == "peri":
            self.attn_out_norm = _make_norm(norm_kind, d_model, **kw)
            self.cross_out_norm = _make_norm(norm_kind, d_model, **kw) if cross_attention else None
            self.ffn_out_norm = _make_norm(norm_kind, d_model, **kw)

    def forward(
        self,
        x: torch.Tensor,
        *,
        causal: bool = False,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: Cache | None = None,
        rope: RopeTables | None = None,
    ) -> torch.Tensor:
        """Apply the layer; the three branches below are the three residual equations.

        Args:
            x: ``(..., N, d_model)`` the residual stream.
            causal: decoder self-attention (bottom-right aligned causal mask).
            mask: bool ``(..., N, N_KV)`` for self-attention; True = may attend.
            memory: ``(..., N_mem, d_model)`` encoder output, the keys and values of
                cross-attention; required exactly when the block has ``cross_attn``.
            memory_mask: bool ``(..., N, N_mem)`` for cross-attention, e.g.
                :func:`attnlib.core.masks.key_padding_mask` of the source lengths.
            positions: RoPE positions for self-attention (see the attention module).
            cache: a :class:`~attnlib.serving.cache.KVCache` (``"gqa"``),
                :class:`~attnlib.serving.cache.LatentCache` (``"mla"``), or what the variant's
                ``new_cache`` makes, for self-attention. Cross-attention is recomputed from
                ``memory`` on every call.
            rope: the rotation of the new tokens, when a decoder made it once for all its
                layers (:meth:`attnlib.layers.base.AttentionLayer.rope_tables`).

        Returns:
            ``(..., N, d_model)``.

        Every sublayer is called through ``__call__`` (forward hooks fire) and checks what
        it receives (inside a decoder's call, the decoder checked it).
        """
        if not in_checked_call():
            self.check(memory, memory_mask)  # the sublayers check the rest
        A, C, F = self.attn, self.cross_attn, self.ffn
        attend = {"causal": causal, "mask": mask, "positions": positions, "cache": cache,
                  "rope": rope}  # self-attention's arguments
        if self.norm == "pre":
            x = x + A(self.attn_norm(x), **attend)
            if C is not None:
                x = x + C(self.cross_norm(x), memory, mask=memory_mask)
            x = x + F(self.ffn_norm(x))
        elif self.norm == "post":
            x = self.attn_norm(x + A(x, **attend))
            if C is not None:
                x = self.cross_norm(x + C(x, memory, mask=memory_mask))
            x = self.ffn_norm(x + F(x))
        else:  # peri
            x = x + self.attn_out_norm(A(self.attn_norm(x), **attend))
            if C is not None:
                x = x + self.cross_out_norm(C(self.cross_norm(x), memory, mask=memory_mask))
            x = x + self.ffn_out_norm(F(self.ffn_norm(x)))
        return x  # (..., N, d_model)

    def check(self, memory: object = None, memory_mask: object = None) -> None:
        """``memory`` (and ``memory_mask``) exactly when the block has cross-attention; the
        sublayers check the rest of :meth:`forward`'s arguments."""
        if self.cross_attn is None and (memory is not None or memory_mask is not None):
            raise ValueError(
                "memory (and memory_mask) need a block built with cross_attention=True; "
                f"got memory of shape {None if memory is None else tuple(memory.shape)}"
            )
        if self.cross_attn is not None and memory is None:
            raise ValueError(
                "memory must be given: this block has a cross-attention sublayer "
                "(cross_attention=True); got None"
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, norm={self.norm!r}, norm_kind={self.norm_kind!r}"


def _rope_rows(table: RopeTables, start: int, n: int,
               positions: torch.Tensor | None) -> RopeTables:
    """The rows of ``table`` (made for positions ``0, 1, ...``) that ``n`` new tokens rotate
    by: the next ``n`` after ``start`` held ones, or those at ``positions`` ``(B, n)``."""
    if positions is None:  # views, nothing computed
        end = start + n
        return RopeTables(table.positions[start:end], table.cos[start:end], table.sin[start:end])
    pos = positions if positions.dim() == 1 else positions[:, None, :]  # (B, 1, n): a head axis
    return RopeTables(pos, table.cos[pos], table.sin[pos])


def _build_attention(
    name: str, d_model: int, n_heads: int, d_head: int, options: dict, kw: dict
) -> nn.Module:
    """The registered variant ``name``, its builder handed the options it takes.

    An option the builder has no parameter for is refused by name, unless it belongs to
    other variants and is at their default (``d_rope=0`` with ``attention="gqa"``).
    """
    build = ATTENTION[name]
    takes = inspect.signature(build).parameters
    given = {}
    for option, value in options.items():
        if option in takes:
            given[option] = value
            continue
        owners = {n: inspect.signature(b).parameters[option] for n, b in ATTENTION.items()
                  if option in inspect.signature(b).parameters}
        if owners and all(p.default == value for p in owners.values()):
            continue  # another variant's option, left at its default
        if not owners:
            raise ValueError(f"{option} is not an option of any attention variant "
                             f"{sorted(ATTENTION)}; got {option}={value!r}")
        where = repr(next(iter(owners))) if len(owners) == 1 else f"in {list(owners)}"
        raise ValueError(f"{option} applies to attention={where} only; got {value!r}")
    return build(d_model, n_heads, d_head, **given, **kw)


# ---------------------------------------------------------------------------------------
# A tiny decoder-only language model
# ---------------------------------------------------------------------------------------


class TinyDecoder(nn.Module):
    """A decoder-only language model: ``logits = Norm(Blocks(E[ids])) E^T``.

    Token embedding ``E`` (``vocab_size x d_model``, drawn from ``N(0, 0.02^2)``, that is
    standard deviation 0.02 as in GPT-2, not ``nn.Embedding``'s ``N(0, 1)``: with tied
    weights ``E^T`` is also the output head, and unit-variance rows would give logits of
    size ``sqrt(d_model)`` at initialisation), ``n_layers`` causal
    :class:`TransformerBlock` s, a final norm,
    and an output head: ``E^T`` itself when ``tie_weights=True`` (GPT-2's weight tying),
    otherwise a separate ``W_out (d_model, vocab_size)``. With ``norm="post"`` the last
    block already ends in a norm, so there is no final norm; with ``norm="peri"`` the
    embeddings are normalised on the way in too, as Kim et al. do.

    Position information comes from RoPE inside attention: for ``"gqa"`` with base
    ``rope_base`` (``None`` turns it off); for ``"mla"`` only through decoupled RoPE, so
    ``d_rope > 0`` is needed for it. With ``attention="mla"`` and ``d_rope=0`` the model
    has no positional encoding at all: the causal mask is then its only source of order
    (a "NoPE" model). This is allowed, since it is what chapter 08 contrasts against.

    A batch of prompts of different lengths, padded on the left, runs with an
    ``attention_mask`` (Hugging Face's convention: True/1 = a real token): every layer hides
    the pads from every query, cached tokens included, and RoPE counts the real tokens only
    (:func:`attnlib.core.masks.position_ids`), so each row computes what its prompt computes alone.

    Args:
        vocab_size: number of token ids.
        d_model: width of the residual stream.
        n_layers: number of blocks.
        n_heads: ``H`` query heads.
        d_head: head width; ``None`` means ``d_model // n_heads``.
        d_ff: feed-forward width; ``None`` means ``4 * d_model``.
        attention: ``"gqa"``, ``"mla"``, ``"gated"``, ``"sliding"`` or another name in
            :data:`attnlib.layers.variants.ATTENTION`.
        rope_base: RoPE base.
        norm: one of :data:`NORM_PLACEMENTS`.
        norm_kind: one of :data:`NORM_KINDS`.
        ffn: one of :data:`FFN_KINDS`.
        tie_weights: use ``E^T`` as the output head.
        seed: when set, the weights are drawn from ``torch.manual_seed(seed)`` and the
            global random state is restored afterwards (the same seed gives the same
            weights on the same kind of device).
        device: where the parameters live.
        dtype: their dtype.
        **attention_options: the variant's own options, handed to every block's builder
            (see :class:`TransformerBlock`): ``n_kv_heads`` for ``"gqa"``; ``d_latent``
            (required), ``d_latent_q`` and ``d_rope`` for ``"mla"``; ``window`` for
            ``"sliding"``.

    Example:
        >>> model = TinyDecoder(vocab_size=50, d_model=32, n_layers=2, n_heads=4, seed=0)
        >>> model.generate(torch.tensor([[1, 2, 3]]), 5).shape
        torch.Size([1, 8])

    Lesson: 04_masks_and_layers (the decoder stack), 05_kv_cache (generation, batched
    generation with left padding).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        *,
        d_head: int | None = None,
        d_ff: int | None = None,
        attention: str = "gqa",
        rope_base: float | None = 10000.0,
        norm: str = "pre",
        norm_kind: str = "rms",
        ffn: str = "swiglu",
        tie_weights: bool = True,
        seed: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **attention_options: object,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.d_model = check_positive_int("d_model", d_model)
        self.n_layers = check_positive_int("n_layers", n_layers)
        if not isinstance(tie_weights, bool):
            raise TypeError(f"tie_weights must be a bool; got {tie_weights!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None; got {seed!r}")
        self.attention = attention
        self.norm = norm
        kw = {"device": device, "dtype": dtype}
        block_kw = {"d_head": d_head, "d_ff": d_ff, "ffn": ffn, "norm": norm,
                    "norm_kind": norm_kind, "attention": attention, "rope_base": rope_base,
                    **attention_options}
        with seeded(seed, device):
            self.E = nn.Parameter(torch.randn(vocab_size, d_model, **kw) * 0.02)
            self.blocks = nn.ModuleList(
                TransformerBlock(d_model, n_heads, **block_kw, **kw) for _ in range(n_layers)
            )
            self.W_out = None if tie_weights else init_weight(d_model, vocab_size, **kw)
        self.emb_norm = _make_norm(norm_kind, d_model, **kw) if norm == "peri" else nn.Identity()
        self.final_norm = nn.Identity() if norm == "post" else _make_norm(norm_kind, d_model, **kw)

    def with_attention(self, *, attend: AttendFn | None = None,
                       rope: RopeFn | None = None) -> TinyDecoder:
        """A copy of this model whose every attention layer runs ``attend`` and ``rope``.

        The copy holds copies of the weights and runs, caches and generates like this
        model, with the attend step (and the rotation) of every layer replaced; see
        :meth:`attnlib.layers.base.AttentionLayer.use` for what each function receives.
        This model is not changed. With attnlib's own
        :func:`~attnlib.layers.gqa.grouped_query_attention` as ``attend``, the logits are the
        original's, bit for bit.

        Args:
            attend: ``attend(Q, K, V, *, mask=None, causal=False) -> Y`` per head, or None
                to keep the layers' own.
            rope: ``rope(X, positions, *, base) -> X``, or None to keep the layers' own.

        Returns:
            A new :class:`TinyDecoder`.

        Example:
            >>> from attnlib.layers.gqa import grouped_query_attention
            >>> model = TinyDecoder(vocab_size=20, d_model=16, n_layers=2, n_heads=2, seed=0)
            >>> ids = torch.tensor([[1, 2, 3]])
            >>> twin = model.with_attention(attend=grouped_query_attention)
            >>> torch.equal(twin(ids), model(ids))
            True

        Lesson: 02_softmax_attention, 05_kv_cache, 06_gqa, 08_rope (your code in a trained
        model).
        """
        twin = copy.deepcopy(self)
        for block in twin.blocks:
            block.attn.use(attend=attend, rope=rope)
        return twin

    def output_weights(self) -> torch.Tensor:
        """The output head ``(d_model, vocab_size)``: ``E^T`` (a view of ``E``) when tied."""
        return self.E.mT if self.W_out is None else self.W_out

    def new_caches(self, max_tokens: int | None = None) -> list[Cache]:
        """One empty cache per layer, from its attention's ``new_cache``: a growing
        :class:`KVCache` (``"gqa"``) or :class:`LatentCache` (``"mla"``), or, with
        ``max_tokens``, one preallocated for that many tokens, which copies nothing as it
        fills. Pass the list as ``caches=`` to :meth:`forward`."""
        if max_tokens is not None:
            check_positive_int("max_tokens", max_tokens)
        return [block.attn.new_cache(max_tokens) for block in self.blocks]

    def forward(
        self,
        ids: torch.Tensor,
        *,
        caches: Sequence[Cache] | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        rope: RopeTables | None = None,
    ) -> torch.Tensor:
        """Next-token logits for every position: ``logits = Norm(Blocks(E[ids])) W_out``.

        Args:
            ids: ``(..., N)`` integer token ids in ``[0, vocab_size)``.
            caches: one cache per layer (see :meth:`new_caches`); the new tokens continue
                the sequence the caches hold, and the caches grow by ``N``.
            attention_mask: ``(B, N_KV)`` or ``(N_KV,)``, bools or 0/1, True/1 = a real
                token and False/0 = a pad: one column per token the caches hold, then one
                per token of ``ids`` (``N_KV = N`` without caches). Each query then sees
                the real keys at or before it (causal AND the key is real), and the
                positions count real tokens only (``cumsum - 1``, pads at 0: see
                :func:`attnlib.core.masks.position_ids`). The logits at a pad mean nothing.
                Without caches every row needs a real token (with caches, a piece of a
                padded prompt may hold only pads). ``None``: every token is real. Give it
                on every call that continues a padded batch: the caches keep the pads'
                keys and values, and only the mask keeps later queries from reading them.
            positions: the RoPE positions of the new tokens, ``(N,)`` or ``(B, N)``;
                ``None`` means the ones ``attention_mask`` gives, or without it
                ``0 .. N - 1`` continuing from the caches.
            rope: the rotation of the new tokens at those positions, when the caller made
                it already (:meth:`generate` makes the tables of every position it will
                reach once, and hands each step its rows); ``None`` makes it here, once for
                all the layers (:meth:`attnlib.layers.base.AttentionLayer.rope_tables`).

        Returns:
            ``(..., N, vocab_size)`` logits; row ``i`` scores the token after ``ids[..., i]``.

        Equivalent to one causal call over the whole sequence when the tokens are fed
        through the same ``caches`` in pieces; with ``attention_mask``, row ``b``'s logits
        at its real tokens are those of its real tokens run alone, unpadded.
        """
        if not in_checked_call():  # generate checked its own arguments once
            self.check(ids, caches, attention_mask=attention_mask, positions=positions,
                       rope=rope)
        real = None if attention_mask is None else attention_mask.bool()
        n, start = ids.shape[-1], 0 if caches is None else caches[0].n_tokens
        mask = None
        if real is not None:  # padding: hide the pads' keys, count the real tokens only
            mask = real[..., None, :]  # (B, 1, N_KV): the key is real; each block adds causal
            if positions is None:
                positions = position_ids(real)[..., -n:]  # (B, N): the new tokens
        x = self.E[ids]  # (..., N, d_model)
        if rope is None:  # every block's attention rotates by the same angles: one rotation
            rope = self.blocks[0].attn.rope_tables(positions, n, start, x.dtype, x.device)
        with checked_call():  # the layers take what this call checked
            if self.norm == "peri":
                x = self.emb_norm(x)
            for i, block in enumerate(self.blocks):
                x = block(x, causal=True, mask=mask, positions=positions,
                          cache=None if caches is None else caches[i], rope=rope)
            if self.norm != "post":
                x = self.final_norm(x)  # (..., N, d_model)
        return x @ self.output_weights()  # (..., N, vocab_size)

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        *,
        use_cache: bool = True,
        attention_mask: torch.Tensor | None = None,
        caches: Sequence[Cache] | None = None,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Greedy decoding: append ``argmax`` of the last logits, ``max_new_tokens`` times.

        With ``do_sample=True`` each step draws the next token from the warped logits
        instead (:func:`attnlib.serving.sampling.sample`: ``temperature``, ``top_k``, ``top_p``,
        ``min_p``, in Hugging Face's order), with ``generator`` for a reproducible draw.

        ``use_cache=True`` runs the prompt once (prefill), then feeds one token per step
        through per-layer caches, preallocated for the whole generation
        (``new_caches(max_tokens=N + max_new_tokens)``, so no step copies what they hold):
        each step costs ``O(N)`` attention work. ``use_cache=False``
        recomputes the whole sequence at every step, ``O(N^2)`` per step. Both produce the
        same tokens (up to ties between logits that rounding could split differently).

        Args:
            ids: ``(..., N)`` prompt token ids (``N >= 1``).
            max_new_tokens: how many tokens to append (>= 0).
            use_cache: decode with KV (or latent) caches.
            attention_mask: ``(B, N)`` or ``(N,)`` for a batch of prompts padded on the
                left: bools or 0/1, True/1 = a real token (see :meth:`forward`). Every row
                must end in a real token; each generated token extends the mask by one
                real column. Row ``b`` then generates what its real tokens generate alone.
            caches: empty caches, one per layer, to decode with instead of the
                preallocated ones (``use_cache=True`` only): a cache class of one's own,
                for example, subclassing :class:`attnlib.serving.cache.Cache`.
            do_sample: draw each token (True) instead of taking the argmax (the default).
            temperature, top_k, top_p, min_p: the warpers of :func:`attnlib.serving.sampling.warp`
                (``do_sample=True`` only; None is off).
            generator: a ``torch.Generator`` for the draws (None: the global one).

        Returns:
            ``(..., N + max_new_tokens)`` the prompt (with its pads) followed by the
            generated ids.
        """
        self.check(ids, caches, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
                   use_cache=use_cache)
        check_bool("do_sample", do_sample)
        if do_sample:
            from attnlib.serving.sampling import check_options, sample
            check_options(temperature, top_k, top_p, min_p, generator)  # once, for every step
        if caches is None and use_cache:
            caches = self.new_caches(ids.shape[-1] + max_new_tokens)
        real = None if attention_mask is None else attention_mask.bool()
        # The rotation of every position this generation reaches, made once (None without
        # RoPE); each step takes the rows of its tokens' positions.
        held = 0 if caches is None else caches[0].n_tokens
        table = self.blocks[0].attn.rope_tables(
            None, held + ids.shape[-1] + max_new_tokens, 0, self.E.dtype, self.E.device)
        new, step = [], ids  # the generated ids, (..., 1) each
        with checked_call():  # every step's arguments are this call's, checked above
            for _ in range(max_new_tokens):
                n, start = step.shape[-1], 0 if caches is None else caches[0].n_tokens
                positions = None if real is None else position_ids(real)[..., -n:]
                rope = None if table is None else _rope_rows(table, start, n, positions)
                logits = self(step, caches=caches, attention_mask=real, positions=positions,
                              rope=rope)  # (..., N_step, V)
                if do_sample:
                    next_id = sample(logits[..., -1, :], temperature=temperature, top_k=top_k,
                                     top_p=top_p, min_p=min_p, generator=generator)
                else:
                    next_id = logits[..., -1, :].argmax(dim=-1, keepdim=True)  # (..., 1)
                new.append(next_id)
                if real is not None:  # the new token is real
                    real = torch.cat((real, torch.ones_like(next_id, dtype=torch.bool)), dim=-1)
                step = next_id if use_cache else torch.cat((ids, *new), dim=-1)  # cache: the new
        return torch.cat((ids, *new), dim=-1)

    def check(
        self, ids: object, caches: object = None, *, attention_mask: object = None,
        positions: object = None, rope: object = None, **generate_args: object,
    ) -> None:
        """Token ids in ``[0, vocab_size)`` on the model's device; caches; the attention
        mask and positions; generate's options."""
        if generate_args:
            self._check_generate(caches, **generate_args)
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"ids must be a torch.Tensor of token ids; got {type(ids).__name__}")
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"ids must have an integer dtype (token ids); got {ids.dtype}")
        if ids.dim() < 1 or ids.shape[-1] < 1:
            raise ValueError(f"ids must have shape (..., N) with N >= 1; got {tuple(ids.shape)}")
        if ids.device != self.E.device:
            raise ValueError(
                f"ids must live on the model's device {self.E.device}; got {ids.device}"
            )
        lo, hi = (bound.tolist() for bound in ids.aminmax())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(
                f"ids must lie in [0, vocab_size={self.vocab_size}); got values from {lo} to {hi}"
            )
        if caches is not None:
            self._check_caches(caches)
        if positions is not None:
            check_positions(positions, ids.shape[-1], ids.device)
        if rope is not None:
            self._check_rope(rope, ids)
        if attention_mask is not None:
            n_cached = 0 if caches is None else caches[0].n_tokens
            whole = caches is None  # a whole sequence, not a piece fed through caches
            generating = "max_new_tokens" in generate_args
            self._check_attention_mask(attention_mask, ids, n_cached, whole, generating)

    @staticmethod
    def _check_generate(caches: object, *, max_new_tokens: object, use_cache: object) -> None:
        check_nonnegative_int("max_new_tokens", max_new_tokens)
        check_bool("use_cache", use_cache)
        if caches is not None and not use_cache:
            raise ValueError("caches must be None with use_cache=False; got "
                             f"{len(caches) if isinstance(caches, (list, tuple)) else caches}")

    @staticmethod
    def _check_attention_mask(
        attention_mask: object, ids: torch.Tensor, n_cached: int, whole: bool, generating: bool
    ) -> None:
        """One column per token held or new, on ids' device; a real token in every row of a
        whole sequence (a piece fed through caches may hold only pads: a padded prompt cut
        into pieces); for generate, a real token last in every row (left padding)."""
        real = check_padding_mask("attention_mask", attention_mask)
        if ids.dim() > 2:
            raise ValueError(
                f"attention_mask needs ids of shape (N,) or (B, N); got ids of shape "
                f"{tuple(ids.shape)}"
            )
        n = ids.shape[-1]
        want = (*ids.shape[:-1], n_cached + n)
        if tuple(real.shape) != want:
            raise ValueError(
                f"attention_mask must have shape {want}: ids' batch, then one column per token, "
                f"the {n_cached} the caches hold and the {n} of ids; got {tuple(real.shape)}"
            )
        if real.device != ids.device:
            raise ValueError(f"attention_mask must live on ids' device {ids.device}; "
                             f"got {real.device}")
        rows = real.reshape(-1, real.shape[-1])  # (B, N_KV)
        if whole and not rows.any(dim=-1).all():
            row = int((~rows.any(dim=-1)).nonzero()[0])
            raise ValueError(
                f"attention_mask must mark at least one real token (True or 1) in every row; "
                f"row {row} has none"
            )
        if generating and not rows[:, -1].all():
            row = int((~rows[:, -1]).nonzero()[0])
            raise ValueError(
                "attention_mask must end in a real token in every row for generate (left "
                "padding: the pads come first, so that the next token follows the last real "
                f"one); row {row} ends in a pad: {rows[row].int().tolist()}"
            )

    def _check_rope(self, rope: object, ids: torch.Tensor) -> None:
        """A :class:`~attnlib.core.rope.RopeTables` of one row per new token, as wide as the
        rotation of this model's attention (which must have one)."""
        width = self.blocks[0].attn.rope_dim
        if not width:
            raise ValueError("rope must be None: this model's attention has no RoPE; got "
                             f"{type(rope).__name__}")
        if not isinstance(rope, RopeTables):
            raise TypeError("rope must be an attnlib.core.rope.RopeTables (see "
                            f"AttentionLayer.rope_tables) or None; got {type(rope).__name__}")
        want = (ids.shape[-1], width)
        if tuple(rope.cos.shape[-2:]) != want or rope.sin.shape != rope.cos.shape:
            raise ValueError(
                f"rope's cos and sin must end in (N, rope width) = {want}, one row per token "
                f"of ids; got cos {tuple(rope.cos.shape)} and sin {tuple(rope.sin.shape)}")

    def _check_caches(self, caches: object) -> None:
        """One cache per layer, each of its attention's kind (or a cache of one's own)."""
        if not isinstance(caches, (list, tuple)) or len(caches) != self.n_layers:
            got = len(caches) if isinstance(caches, (list, tuple)) else type(caches).__name__
            raise ValueError(
                f"caches must be a list of {self.n_layers} caches, one per layer "
                f"(see new_caches()); got {got}"
            )
        for i, (cache, block) in enumerate(zip(caches, self.blocks, strict=True)):
            block.attn.check_cache(cache, name=f"caches[{i}]")

    def extra_repr(self) -> str:
        tied = self.W_out is None
        return (
            f"vocab_size={self.vocab_size}, d_model={self.d_model}, n_layers={self.n_layers}, "
            f"attention={self.attention!r}, tie_weights={tied}"
        )
