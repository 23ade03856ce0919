"""Live explorers for Jupyter and Colab: core ipywidgets whose callbacks only call ``viz``.

Every explorer is built the same way: sliders from ``ipywidgets``' core set, wired with
``interactive_output`` (which Colab runs without a custom widget manager) to a callback
that displays one :mod:`attnlib.viz` figure. The explorer returns a ``VBox``: the
controls on top, the figure's ``Output`` below. Its static twin, for pages with no
kernel, is the matching ``viz.<name>_slider_figure``.

Lesson: 00_tokens_and_embeddings (and every later lesson's explorer).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
from IPython.display import display

from attnlib import viz

__all__ = ["embedding_explorer"]


def embedding_explorer(
    dims: Sequence[int] = viz.EMBEDDING_DIMS,
    vocab_sizes: Sequence[int] = (64, 128, 256, 512),
    *,
    d: int = 64,
    vocab_size: int = 256,
    seed: int = 0,
) -> widgets.VBox:
    """Sliders for ``d`` and ``N_T`` over :func:`attnlib.viz.embedding_dimension_figure`.

    Args:
        dims: the embedding widths the ``d`` slider offers.
        vocab_sizes: the row counts the ``N_T`` slider offers.
        d: the starting width (one of ``dims``).
        vocab_size: the starting row count (one of ``vocab_sizes``).
        seed: seed of the generator that draws ``E`` (fixed while sliding).

    Returns:
        widgets.VBox: ``[HBox(d slider, N_T slider), Output]``; the ``Output`` holds the
        figure for the current slider values.

    Static twin: :func:`attnlib.viz.embedding_dimension_slider_figure`.

    Lesson: 00_tokens_and_embeddings.
    """
    dims, vocab_sizes = list(dims), list(vocab_sizes)
    for name, value, options in (("d", d, dims), ("vocab_size", vocab_size, vocab_sizes)):
        if value not in options:
            raise ValueError(f"{name} must be one of the slider's options {options}; got {value!r}")
    d_slider = widgets.SelectionSlider(
        options=dims, value=d, description="d", continuous_update=False,
        layout=widgets.Layout(width="420px"),
    )
    n_slider = widgets.SelectionSlider(
        options=vocab_sizes, value=vocab_size, description="N_T", continuous_update=False,
        layout=widgets.Layout(width="320px"),
    )

    def show(d: int, vocab_size: int) -> None:
        display(viz.embedding_dimension_figure(d, vocab_size=vocab_size, seed=seed))

    out = widgets.interactive_output(show, {"d": d_slider, "vocab_size": n_slider})
    return widgets.VBox([widgets.HBox([d_slider, n_slider]), out])
