"""Figures and explorers for the lessons: shared style, the two explorer forms, one module
per chapter. The lessons' tables are in :mod:`attnlib.analysis.experiments`.

- :mod:`attnlib.viz.style`: template, height, the Okabe-Ito palette, rounding.
- :func:`twin` and :func:`explorer` (:mod:`attnlib.viz.explore`): an explorer is written
  once, as a figure function (keyword parameters -> ``go.Figure``); ``twin`` precomputes it
  over a slider for pages with no kernel, ``explorer`` wires it to live ipywidgets.
- chapter modules: :mod:`attnlib.viz.tokens` (lesson 00), :mod:`attnlib.viz.lookup`
  (lesson 01), :mod:`attnlib.viz.softmax` (lesson 02), :mod:`attnlib.viz.heads` (lesson 03),
  :mod:`attnlib.viz.masks` (lesson 04), :mod:`attnlib.viz.kvcache` (lesson 05),
  :mod:`attnlib.viz.gqa` (lesson 06), :mod:`attnlib.viz.mla` (lesson 07),
  :mod:`attnlib.viz.rope` (lesson 08), :mod:`attnlib.viz.frontier` (lesson 09),
  :mod:`attnlib.viz.randomised` (lesson 10), :mod:`attnlib.viz.serving` (lesson 11),
  :mod:`attnlib.viz.kernels` (lesson 13), :mod:`attnlib.viz.designs` (lesson 15);
  :mod:`attnlib.viz.trained`, the trained-model dial that lessons 06 and 07 share;
  :mod:`attnlib.viz.walk`, one token through the trained ``book`` model (lesson 12).

Example:
    >>> import attnlib
    >>> fig = attnlib.viz.twin(attnlib.viz.tokens.embedding_dimension_figure, "d", [4, 64],
    ...                        vocab_size=32)
    >>> len(fig.layout.sliders[0].steps)
    2
"""

from attnlib.viz import (
    decoder,
    designs,
    frontier,
    gqa,
    heads,
    kernels,
    kvcache,
    lookup,
    masks,
    mla,
    randomised,
    rope,
    serving,
    softmax,
    tokens,
    trained,
    walk,
)
from attnlib.viz.explore import explorer, twin

__all__ = [
    "decoder", "designs", "explorer", "frontier", "gqa", "heads", "kernels", "kvcache", "lookup",
    "masks", "mla", "randomised", "rope", "serving", "softmax", "tokens", "trained", "twin", "walk",
]
