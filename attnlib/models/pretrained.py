"""Small models trained by the book, shipped inside the package, and their conversions.

``load(name)`` returns a trained :class:`attnlib.TinyDecoder` in eval mode, with a ``card``
dict: what it was trained on (``"task"``), ``"config"`` (the keyword arguments that
rebuild the same architecture untrained, with the seed of its initial weights:
``type(model)(**model.card["config"])`` is the model before training), the training
``"steps"`` and ``"seed"``, and the ``"held_out"`` metrics measured when it was saved
(``"loss"`` in nats per token, ``"accuracy"``). :func:`names` lists the models; each
was made by ``python -m attnlib.models.train NAME`` (:mod:`attnlib.models.train` holds the recipes).

Two conversions turn a trained multi-head decoder into the cheaper layouts of chapters 06
and 07, layer by layer: :func:`to_gqa` mean-pools its key and value heads
(:func:`attnlib.layers.gqa.gqa_from_mha`), :func:`to_mla` factors ``[W_K | W_V]`` by a truncated
SVD (:func:`attnlib.layers.mla.mla_from_mha`, which needs a model without RoPE). Both return new
models and change nothing else. Converted models that were then trained a little more
(the uptraining of Ainslie et al., 2023) ship too: ``load("book", n_kv_heads=2)``,
``load("book-nope", d_latent=32)``, after 100 steps, and ``load("book", n_kv_heads=2,
steps=400)`` after 400; :func:`variants` lists them. The *controls* are the same fine-tune
applied to conversions that change nothing (``load("book", n_kv_heads=4)``,
``load("book-nope", d_latent=128)``): what the recipe alone does to the loss.

The weights are ``torch.save`` files of state dicts under ``attnlib/weights/``, read with
``weights_only=True``; the cards are JSON files beside them.

Lesson: 01_attention_as_lookup, 03_multi_head_attention, 05_kv_cache to 09_frontier.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import torch

from attnlib._checks import check_positive_int
from attnlib.layers.blocks import TinyDecoder
from attnlib.layers.gqa import gqa_from_mha
from attnlib.layers.mla import mla_from_mha

__all__ = [
    "DEFAULT_STEPS",
    "WEIGHTS",
    "card",
    "decoder_config",
    "load",
    "names",
    "to_gqa",
    "to_mla",
    "variants",
]

WEIGHTS = Path(__file__).parent / "weights"
"""The folder that holds the shipped weights (``NAME.pt``) and cards (``NAME.json``):
``attnlib/weights`` inside the installed package.

:meta hide-value:
"""

_VARIANT_KEYS = ("n_kv_heads", "d_latent")
DEFAULT_STEPS = 100
"""The uptraining budget :func:`load` and :func:`card` pick when none is named."""


@cache
def _cards() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(WEIGHTS.glob("*.json"))}


def names() -> list[str]:
    """The shipped models, by name (converted variants are listed by :func:`variants`)."""
    return [n for n, c in _cards().items() if "base" not in c]


def variants(name: str) -> list[dict[str, int]]:
    """The shipped fine-tuned conversions of model ``name``, as the keywords :func:`load` takes.

    Each holds the conversion and its uptraining budget ``steps``.

    Example:
        >>> [(v["n_kv_heads"], v["steps"]) for v in variants("book")]
        [(1, 100), (1, 400), (2, 100), (2, 400), (4, 100), (4, 400)]
        >>> variants("recall")  # no conversion of it ships
        []
    """
    _check_name(name)
    found = [{**c["variant"], "steps": c["steps"]} for c in _cards().values()
             if c.get("base") == name]
    return sorted(found, key=lambda v: tuple(sorted(v.items())))


def _check_name(name: object) -> None:
    if name not in names():
        raise ValueError(f"name must be one of the shipped models {names()}; got {name!r}")


def _variant_file(name: str, variant: dict[str, int]) -> str:
    variant = {"steps": DEFAULT_STEPS, **variant}
    for file, c in _cards().items():
        if c.get("base") == name and {**c["variant"], "steps": c["steps"]} == variant:
            return file
    raise ValueError(
        f"model {name!r} ships no fine-tuned variant {variant}; it ships {variants(name)}. "
        "Convert it without fine-tuning with attnlib.models.pretrained.to_gqa or to_mla."
    )


def card(name: str, **variant: int) -> dict:
    """The card of model ``name`` (or of one of its :func:`variants`), as a new dict.

    ``card("book", n_kv_heads=2)`` is the card of the 100-step conversion; add
    ``steps=400`` for the longer one.
    """
    _check_name(name)
    file = _variant_file(name, variant) if variant else name
    return json.loads(json.dumps(_cards()[file]))


def load(
    name: str,
    *,
    n_kv_heads: int | None = None,
    d_latent: int | None = None,
    steps: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> TinyDecoder:
    """The trained model ``name`` in eval mode, with its card as ``model.card``.

    Args:
        name: one of :func:`names`.
        n_kv_heads: load the shipped GQA conversion with this many KV heads, uptrained
            after the conversion (see :func:`variants`).
        d_latent: load the shipped MLA conversion with this latent width, fine-tuned.
        steps: the uptraining budget of that conversion (:data:`DEFAULT_STEPS`, 100, when
            ``None``); only with ``n_kv_heads`` or ``d_latent``.
        device: where the parameters go.
        dtype: their dtype (the weights are stored in float32, or float16 where the card
            says ``weights_dtype``, and load as float32; float64 makes every printed digit
            CPU-independent).

    Returns:
        A :class:`attnlib.TinyDecoder` whose forward returns logits ``(B, N, vocab_size)``.

    Example:
        >>> model = load("recall")
        >>> model.card["held_out"]["accuracy"] >= 0.95
        True
    """
    _check_name(name)
    given = {k: v for k, v in (("n_kv_heads", n_kv_heads), ("d_latent", d_latent))
             if v is not None}
    if len(given) > 1:
        raise ValueError(f"give at most one of n_kv_heads and d_latent; got {given}")
    if steps is not None:
        if not given:
            raise ValueError("steps applies to a fine-tuned conversion; give n_kv_heads or "
                             f"d_latent too (got steps={steps!r} alone)")
        given["steps"] = steps
    base_card = card(name)
    model = TinyDecoder(**base_card["config"])
    model.load_state_dict(_state(name))
    info = base_card
    if given:
        info = card(name, **given)
        model = to_gqa(model, n_kv_heads) if n_kv_heads else to_mla(model, d_latent)
        changed = _state(_variant_file(name, given))
        model.load_state_dict({**model.state_dict(), **changed})  # float16 files: cast
    model = model.to(device=device, dtype=dtype).eval()
    model.card = info
    return model


def _state(file: str) -> dict[str, torch.Tensor]:
    return torch.load(WEIGHTS / f"{file}.pt", map_location="cpu", weights_only=True)


def decoder_config(model: TinyDecoder) -> dict:
    """The keyword arguments that rebuild ``model``'s architecture: ``TinyDecoder(**config)``.

    Read from the model's attributes (widths, head counts, RoPE base, norms, feed-forward
    kind, tied head); the seed is not part of an architecture and is left out.
    """
    if not isinstance(model, TinyDecoder):
        raise TypeError(f"model must be an attnlib.TinyDecoder; got {type(model).__name__}")
    block = model.blocks[0]
    attn = block.attn
    config = {
        "vocab_size": model.vocab_size, "d_model": model.d_model, "n_layers": model.n_layers,
        "n_heads": attn.n_heads, "d_head": attn.d_head, "d_ff": block.ffn.d_ff,
        "attention": model.attention, "norm": model.norm, "norm_kind": block.norm_kind,
        "ffn": block.ffn.kind, "tie_weights": model.W_out is None,
    }
    if model.attention == "mla":
        config.update(d_latent=attn.d_latent, d_latent_q=attn.d_latent_q, d_rope=attn.d_rope,
                      rope_base=attn.rope_base)
    else:
        config.update(n_kv_heads=attn.n_kv_heads, rope_base=attn.rope_base)
    return config


def _converted(model: TinyDecoder, config: dict, convert, prefix_keys) -> TinyDecoder:
    """A new decoder with ``config``: ``model``'s weights, each block's attention converted."""
    W = model.E
    out = TinyDecoder(**config, device=W.device, dtype=W.dtype)
    state = {k: v for k, v in model.state_dict().items() if ".attn." not in k}
    for i, block in enumerate(model.blocks):
        new = convert(block.attn)
        state.update({f"blocks.{i}.attn.{k}": v for k, v in new.state_dict().items()})
    out.load_state_dict(state)
    out.card = {"config": config, "converted_from": getattr(model, "card", {}).get("name"),
                **prefix_keys}
    return out.eval()


def to_gqa(model: TinyDecoder, n_kv_heads: int) -> TinyDecoder:
    """``model`` with ``n_kv_heads`` KV heads per layer, by mean-pooling (no training).

    Every layer's attention goes through :func:`attnlib.layers.gqa.gqa_from_mha`; the embedding,
    norms and feed-forward networks are copied. The KV cache shrinks by the factor
    ``G_src / n_kv_heads``; what it costs in loss is what chapter 06 measures.

    Args:
        model: a :class:`attnlib.TinyDecoder` with ``attention="gqa"`` (MHA included).
        n_kv_heads: ``G``; must divide the model's ``n_kv_heads``.

    Returns:
        A new :class:`attnlib.TinyDecoder` in eval mode, with a ``card`` holding its config.

    Lesson: 06_gqa.
    """
    _check_mha_decoder(model)
    check_positive_int("n_kv_heads", n_kv_heads)
    config = {**decoder_config(model), "n_kv_heads": n_kv_heads}
    return _converted(model, config, lambda a: gqa_from_mha(a, n_kv_heads),
                      {"n_kv_heads": n_kv_heads})


def to_mla(model: TinyDecoder, d_latent: int) -> TinyDecoder:
    """``model`` with multi-head latent attention of latent width ``d_latent`` (no training).

    Every layer's ``[W_K | W_V]`` is cut to rank ``d_latent`` by
    :func:`attnlib.layers.mla.mla_from_mha`; the queries, ``W_O``, embedding, norms and
    feed-forward networks are copied. Exact (up to rounding) at
    ``d_latent = min(d_model, 2 G d_head)``. RoPE rotates keys after ``W_K``, so a RoPE
    model cannot be factored this way: convert a model trained without positions
    (``rope_base=None``, such as ``"book-nope"``).

    Args:
        model: a :class:`attnlib.TinyDecoder` with ``attention="gqa"`` and no RoPE.
        d_latent: ``d_L``, in ``[1, min(d_model, 2 G d_head)]``.

    Returns:
        A new :class:`attnlib.TinyDecoder` with ``attention="mla"``, in eval mode.

    Lesson: 07_mla.
    """
    _check_mha_decoder(model)
    source = decoder_config(model)
    config = {k: v for k, v in source.items() if k not in ("n_kv_heads", "rope_base")}
    config.update(attention="mla", d_latent=d_latent, d_rope=0)
    return _converted(model, config, lambda a: mla_from_mha(a, d_latent),
                      {"d_latent": d_latent})


def _check_mha_decoder(model: object) -> None:
    if not isinstance(model, TinyDecoder) or model.attention != "gqa":
        kind = getattr(model, "attention", None)
        raise TypeError("model must be an attnlib.TinyDecoder with attention='gqa'; got "
                        f"{type(model).__name__} with attention={kind!r}")

