"""The attention variants a transformer block can hold, by name: ``"gqa"``, ``"mla"``, and yours.

:class:`attnlib.layers.blocks.TransformerBlock` (and so :class:`attnlib.layers.blocks.TinyDecoder`)
builds its attention sublayer from this registry: ``attention="gqa"`` looks up the builder
registered under ``"gqa"`` and calls it with the block's width, head count and head width,
``rope_base``, ``device`` and ``dtype``, and the variant's own options as the caller gave
them (``TinyDecoder(..., attention="sliding", window=32)`` hands ``window=32`` to the
``"sliding"`` builder); an option the builder has no parameter for is refused by name. The
shipped variants register themselves: ``"gqa"`` (:mod:`attnlib.layers.gqa`), ``"gated"``
(:mod:`attnlib.layers.gates`), ``"mla"`` (:mod:`attnlib.layers.mla`) and ``"sliding"``
(:mod:`attnlib.layers.sliding`).

A variant is an :class:`attnlib.layers.base.AttentionLayer`: its ``forward`` runs the
steps ``project``, ``rotate``, the cache's ``append``, ``attend`` and ``combine`` in order,
and a variant overrides the steps it changes (gated attention its ``combine``, the sliding
window its ``attend`` and ``new_cache``). Subclassing
:class:`~attnlib.layers.gqa.GroupedQueryAttention` gives every step of grouped-query attention and
a builder, ``for_block``, that a subclass inherits.

Example:
    A variant of one's own, registered in one's own module (here, GQA whose heads all
    read one KV head):

    >>> from attnlib.layers.gqa import GroupedQueryAttention
    >>> @register_attention("one-kv-head")
    ... def _mqa(d_model, n_heads, d_head, *, rope_base=None, device=None, dtype=None):
    ...     return GroupedQueryAttention(d_model, n_heads, 1, d_head, rope_base=rope_base,
    ...                                  device=device, dtype=dtype)
    >>> import attnlib
    >>> attnlib.TransformerBlock(16, 4, attention="one-kv-head").attn.n_kv_heads
    1
    >>> del ATTENTION["one-kv-head"]

Lesson: 04_masks_and_layers (the block), 06_gqa and 07_mla (the variants).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

__all__ = ["ATTENTION", "register_attention"]

Builder = Callable[..., nn.Module]

ATTENTION: dict[str, Builder] = {}
"""Every registered variant: name -> builder ``(d_model, n_heads, d_head, **options) -> module``.

:meta hide-value:
"""


def register_attention(name: str) -> Callable[[Builder], Builder]:
    """Register the decorated builder as attention variant ``name``.

    Args:
        name: what ``TransformerBlock(attention=name)`` asks for.

    Returns:
        A decorator that registers a builder and returns it unchanged.

    Raises:
        ValueError: ``name`` is taken.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str; got {name!r}")

    def add(build: Builder) -> Builder:
        if name in ATTENTION:
            raise ValueError(f"name must be a new attention variant; {name!r} is registered")
        ATTENTION[name] = build
        return build

    return add
