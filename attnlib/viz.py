"""Plotly figures for the lessons: every function returns a ``go.Figure`` and never shows it.

Each interactive idea comes in two forms that share one function:

- ``<name>_figure(...)`` draws one setting. The live ipywidgets explorer in
  :mod:`attnlib.widgets` calls it from its callback.
- ``<name>_slider_figure(...)`` is its static twin: the same traces, precomputed for every
  slider value and switched by a plotly slider, so it works on the static site with no
  kernel.

All figures share one look (:func:`style`): template ``plotly_white``, height 420 px,
a title stating the setting, and axis titles with units. Random data comes from a
seeded ``torch.Generator`` in float64, so a figure is the same on every machine.

Lesson: 00_tokens_and_embeddings (and every later lesson's explorer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_positive_int
from attnlib.tokens import (
    CORPUS,
    HELD_OUT,
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    embed,
    row_cosines,
)

__all__ = [
    "COLORS",
    "HEIGHT",
    "TEMPLATE",
    "embedding_dimension_figure",
    "embedding_dimension_slider_figure",
    "lookup_figure",
    "style",
    "tokenizer_tension_figure",
]

TEMPLATE = "plotly_white"
"""The plotly template of every figure in the book."""

HEIGHT = 420
"""Figure height in pixels, shared by every figure so pages keep a steady rhythm."""

COLORS = {
    "main": "#1f77b4",  # the quantity a figure is about
    "reference": "#d62728",  # closed forms and theory curves
    "char": "#7f7f7f",
    "word": "#ff7f0e",
    "bpe": "#1f77b4",
}
"""Named colours, so that one idea keeps one colour across lessons."""

EMBEDDING_DIMS: tuple[int, ...] = tuple(2**k for k in range(1, 11))
"""The embedding widths the dimension explorer offers: 2, 4, ..., 1024."""

_DECIMALS = 6  # figure data are rounded so that every CPU writes the same JSON


def style(fig: go.Figure, title: str, *, height: int = HEIGHT) -> go.Figure:
    """Apply the book's shared look to ``fig`` and return it.

    Args:
        fig: the figure to style (changed in place).
        title: the figure title; say what is shown and for which setting.
        height: height in pixels.

    Returns:
        go.Figure: ``fig`` itself.

    Lesson: 00_tokens_and_embeddings.
    """
    fig.update_layout(
        template=TEMPLATE,
        height=height,
        title={"text": title, "x": 0.01, "xanchor": "left"},
        margin={"l": 70, "r": 30, "t": 70, "b": 60},
        font={"size": 13},
    )
    return fig


def lookup_figure(
    ids: torch.Tensor, E: torch.Tensor, vocab: Sequence[str] | None = None
) -> go.Figure:
    """The embedding as a matrix product: ``one_hot(ids) @ E = E[ids]``, as three heatmaps.

    Args:
        ids: token ids, shape ``(N,)``.
        E: embedding matrix, shape ``(N_T, d)``.
        vocab: the ``N_T`` token strings, used to label rows; ids when ``None``.

    Returns:
        go.Figure: one-hot matrix ``(N, N_T)``, ``E`` ``(N_T, d)`` and ``X`` ``(N, d)``
        side by side, values rounded to 3 decimals.

    Lesson: 00_tokens_and_embeddings.
    """
    X = embed(ids, E).detach().to("cpu", torch.float64)  # (N, d); also checks the inputs
    if ids.dim() != 1:
        raise ValueError(f"ids must have shape (N,); got shape {tuple(ids.shape)}")
    n_vocab, d = E.shape
    if vocab is None:
        vocab = [str(i) for i in range(n_vocab)]
    if len(vocab) != n_vocab:
        raise ValueError(f"vocab must have N_T = {n_vocab} entries; got {len(vocab)}")
    ids_cpu = ids.detach().cpu()
    one_hot = torch.nn.functional.one_hot(ids_cpu, n_vocab).to(torch.float64)  # (N, N_T)
    E64 = E.detach().to("cpu", torch.float64)
    rows = [f"{n}: {vocab[i]}" for n, i in enumerate(ids_cpu.tolist())]
    vocab_rows = [f"{i}: {t}" for i, t in enumerate(vocab)]
    cols_vocab = [str(i) for i in range(n_vocab)]
    cols_d = [str(j) for j in range(d)]
    zmin, zmax = round(float(E64.min()), 3), round(float(E64.max()), 3)
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            f"one-hot(ids): {len(rows)} × {n_vocab}",
            f"E: {n_vocab} × {d}",
            f"X = E[ids]: {len(rows)} × {d}",
        ),
    )
    fig.add_trace(
        go.Heatmap(
            z=one_hot.tolist(), x=cols_vocab, y=rows, colorscale="Greys", zmin=0, zmax=1,
            showscale=False, name="one-hot",
            hovertemplate="position %{y}<br>column %{x}<br>value %{z}<extra></extra>",
        ),
        row=1, col=1,
    )
    for col, (Z, y, name) in enumerate(((E64, vocab_rows, "E"), (X, rows, "X")), start=2):
        fig.add_trace(
            go.Heatmap(
                z=_rounded(Z, 3), x=cols_d, y=y, colorscale="Viridis", zmin=zmin, zmax=zmax,
                showscale=col == 3, name=name, colorbar={"title": {"text": "value"}},
                hovertemplate="row %{y}<br>column %{x}<br>value %{z}<extra></extra>",
            ),
            row=1, col=col,
        )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", title_text="column")
    # Panel widths follow the matrices' widths; the first gap holds E's row labels. X's
    # rows line up with the one-hot rows on the left, so X needs no labels of its own.
    gaps = (0.14, 0.03)
    widths = [w * (1 - sum(gaps)) / (n_vocab + 2 * d) for w in (n_vocab, d, d)]
    left = 0.0
    for k, (width, gap) in enumerate(zip(widths, (*gaps, 0.0), strict=True), start=1):
        fig.update_xaxes(domain=[left, left + width], row=1, col=k)
        fig.layout.annotations[k - 1].update(x=left + width / 2, font={"size": 13})
        left += width + gap
    fig.update_yaxes(showticklabels=False, row=1, col=3)
    return style(fig, "An embedding is a lookup: picking rows of E = one-hot rows times E")


def tokenizer_tension_figure(
    corpus: str = CORPUS,
    held_out: str = HELD_OUT,
    *,
    max_merges: int = 500,
    step: int = 10,
) -> go.Figure:
    """The tokenizer tension: BPE merges against vocabulary size and against tokens per word.

    A BPE tokenizer is trained once on ``corpus``; the tokenizer after ``k`` merges is
    the prefix of that training. Tokens per word is ``len(encode(text)) / #words`` with
    ``#words`` the count of ``\\w+`` runs. Character and word tokenizers fitted on the same
    corpus appear as flat reference lines (they have no merges). Colour marks the
    tokenizer; solid lines measure the corpus, dotted lines the held-out text.

    Args:
        corpus: the training text.
        held_out: a text unseen in training.
        max_merges: the largest number of merges shown (fewer if training stops early).
        step: the spacing of the merge counts on the x-axis.

    Returns:
        go.Figure: left, ``N_T`` against merges (3 traces: BPE, characters, words);
        right, tokens per word on ``corpus`` and ``held_out`` against merges (6 traces).

    Lesson: 00_tokens_and_embeddings.
    """
    check_positive_int("max_merges", max_merges)
    check_positive_int("step", step)
    bpe = BPETokenizer.train(corpus, max_merges)
    merges = list(range(0, len(bpe.merges) + 1, step))
    tokenizers = [bpe.with_merges(k) for k in merges]
    texts = {"corpus": corpus, "held-out text": held_out}
    n_words = {name: len(re.findall(r"\w+", text)) for name, text in texts.items()}
    for name, n in n_words.items():
        if n == 0:
            raise ValueError(f"{name} must contain at least one word; got {texts[name]!r}")
    fixed = {"characters": CharTokenizer.fit(corpus), "words": WordTokenizer.fit(corpus)}
    fixed_colors = {"characters": COLORS["char"], "words": COLORS["word"]}

    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=("Vocabulary grows", "Sequences shrink"),
    )
    # colour = tokenizer; solid = the training corpus, dotted = the held-out text
    curves = {"BPE": (COLORS["bpe"], merges, tokenizers)}
    for name, tok in fixed.items():
        curves[name] = (fixed_colors[name], [merges[0], merges[-1]], [tok, tok])
    for name, (color, x, toks) in curves.items():
        fig.add_trace(
            go.Scatter(
                x=x, y=[t.vocab_size for t in toks], mode="lines", name=name,
                line={"color": color}, legendgroup=name, showlegend=False,
                hovertemplate=f"{name}<br>merges %{{x}}<br>N_T = %{{y}}<extra></extra>",
            ),
            row=1, col=1,
        )
        for label, dash in (("corpus", "solid"), ("held-out text", "dot")):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[round(len(t.encode(texts[label])) / n_words[label], 4) for t in toks],
                    mode="lines", name=f"{name}, {label}", legendgroup=name,
                    line={"color": color, "dash": dash},
                    hovertemplate=(
                        f"{name}, {label}<br>merges %{{x}}<br>%{{y:.2f}} tokens per word"
                        "<extra></extra>"
                    ),
                ),
                row=1, col=2,
            )
    fig.update_xaxes(title_text="BPE merges learned")
    fig.update_yaxes(title_text="vocabulary size N_T (tokens)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="tokens per word", rangemode="tozero", row=1, col=2)
    style(fig, "The tokenizer tension: a bigger vocabulary buys shorter sequences",
          height=HEIGHT + 80)
    # legend below the panels, so both keep their width on a narrow page
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -0.2, "yanchor": "top"},
        margin={"b": 130},
    )
    return fig


def embedding_dimension_figure(
    d: int, *, vocab_size: int = 256, seed: int = 0, bins: int = 200
) -> go.Figure:
    """Cosine similarity between distinct rows of a random ``E``: spread ``1/sqrt(d)``.

    ``E`` has ``vocab_size`` rows of width ``d`` with i.i.d. standard normal entries
    (``torch.randn(vocab_size, d, generator=torch.Generator().manual_seed(seed),
    dtype=torch.float64)``). The bars are the histogram of the cosines of all
    ``N_T (N_T - 1) / 2`` pairs, as a density; the line is the exact density of the
    cosine of two independent Gaussian vectors in ``R^d``,

        f_d(t) = Γ(d/2) / (√π Γ((d-1)/2)) · (1 - t²)^((d-3)/2),   -1 < t < 1,

    whose mean is 0 and variance exactly ``1/d``.

    Args:
        d: the embedding width.
        vocab_size: ``N_T``, the number of rows (at least 2).
        seed: seed of the generator that draws ``E``.
        bins: number of histogram bins on ``[-1, 1]``.

    Returns:
        go.Figure: two traces, the histogram (``go.Bar``) and the exact density
        (``go.Scatter``), with the measured standard deviation in an annotation.

    Lesson: 00_tokens_and_embeddings.
    """
    traces, layout = _embedding_dimension_parts(d, vocab_size, seed, bins)
    fig = go.Figure(traces)
    fig.update_layout(
        yaxis={"range": layout["yaxis.range"]}, annotations=layout["annotations"]
    )
    _embedding_axes(fig)
    return style(fig, layout["title.text"])


def embedding_dimension_slider_figure(
    dims: Sequence[int] = EMBEDDING_DIMS,
    *,
    vocab_size: int = 256,
    seed: int = 0,
    bins: int = 200,
    active: int | None = None,
) -> go.Figure:
    """Static twin of :func:`embedding_dimension_figure`: one slider step per width ``d``.

    Every step's traces are those of :func:`embedding_dimension_figure` for that ``d``;
    the slider makes one pair visible and updates the title, annotation and y-range
    (plotly ``"update"`` steps), so the figure needs no kernel.

    Args:
        dims: the widths offered by the slider, in order.
        vocab_size: ``N_T``, the rows of each random ``E``.
        seed: seed of the generator that draws each ``E``.
        bins: number of histogram bins on ``[-1, 1]``.
        active: index in ``dims`` shown first; the middle one when ``None``.

    Returns:
        go.Figure: ``2 · len(dims)`` traces and a slider with ``len(dims)`` steps.

    Lesson: 00_tokens_and_embeddings.
    """
    dims = list(dims)
    if not dims:
        raise ValueError("dims must name at least one embedding width; got an empty sequence")
    if active is None:
        active = len(dims) // 2
    if isinstance(active, bool) or not isinstance(active, int) or not 0 <= active < len(dims):
        raise ValueError(f"active must be an index into dims (0..{len(dims) - 1}); got {active!r}")
    fig = go.Figure()
    steps = []
    for k, d in enumerate(dims):
        traces, layout = _embedding_dimension_parts(d, vocab_size, seed, bins)
        for trace in traces:
            trace.visible = k == active
            fig.add_trace(trace)
        visible = [j // 2 == k for j in range(2 * len(dims))]
        steps.append({"method": "update", "label": str(d), "args": [{"visible": visible}, layout]})
    first = steps[active]["args"][1]
    fig.update_layout(
        yaxis={"range": first["yaxis.range"]},
        annotations=first["annotations"],
        sliders=[{
            "active": active,
            "currentvalue": {"prefix": "embedding width d = "},
            "pad": {"t": 50},
            "steps": steps,
        }],
    )
    _embedding_axes(fig)
    return style(fig, first["title.text"], height=HEIGHT + 60)


def _embedding_dimension_parts(
    d: int, vocab_size: int, seed: int, bins: int
) -> tuple[list[go.BaseTraceType], dict[str, object]]:
    """Traces and layout updates of the dimension explorer for one ``d``."""
    check_positive_int("d", d)
    check_positive_int("vocab_size", vocab_size)
    check_positive_int("bins", bins)
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2 (cosines need pairs of rows); got {vocab_size}")
    if d < 2:
        raise ValueError(f"d must be >= 2 (in R^1 every cosine is ±1); got {d}")
    gen = torch.Generator().manual_seed(seed)
    E = torch.randn(vocab_size, d, generator=gen, dtype=torch.float64)
    cos = row_cosines(E)  # (N_T (N_T - 1) / 2,)
    counts = torch.histc(cos, bins=bins, min=-1.0, max=1.0)
    width = 2.0 / bins
    density = counts / (cos.numel() * width)
    centres = [round(-1.0 + (k + 0.5) * width, 10) for k in range(bins)]
    std = float(cos.std())
    t = [round(-1.0 + 2.0 * k / 400, 10) for k in range(1, 400)]  # open interval (-1, 1)
    exact = [round(_cosine_density(x, d), _DECIMALS) for x in t]
    bar = go.Bar(
        x=centres, y=_rounded(density, _DECIMALS), width=width,
        marker={"color": COLORS["main"], "line": {"width": 0}}, opacity=0.75,
        name=f"measured, d = {d}",
        hovertemplate="cos ≈ %{x:.3f}<br>density %{y:.3f}<extra></extra>",
    )
    curve = go.Scatter(
        x=t, y=exact, mode="lines", line={"color": COLORS["reference"], "width": 2},
        name=f"exact density, d = {d}",
        hovertemplate="cos = %{x:.3f}<br>density %{y:.3f}<extra></extra>",
    )
    top = 1.1 * max(float(density.max()), max(exact))
    note = (
        f"std of cosines = {std:.3f}<br>1/√d = {1 / math.sqrt(d):.3f}"
        f"<br>pairs: {cos.numel():,}"
    )
    layout = {
        "title.text": (
            f"Cosine similarity of distinct rows of a random E (N_T = {vocab_size}, d = {d})"
        ),
        "yaxis.range": [0.0, round(top, 4)],
        "annotations": [{
            "text": note, "xref": "paper", "yref": "paper", "x": 0.99, "y": 0.97,
            "xanchor": "right", "yanchor": "top", "showarrow": False, "align": "right",
            "bgcolor": "rgba(255,255,255,0.8)",
        }],
    }
    return [bar, curve], layout


def _embedding_axes(fig: go.Figure) -> None:
    fig.update_xaxes(title_text="cosine similarity cos(E_i, E_j) (unitless)", range=[-1, 1])
    fig.update_yaxes(title_text="probability density (per unit cosine)")
    fig.update_layout(bargap=0, legend={"x": 0.01, "y": 0.97})


def _cosine_density(t: float, d: int) -> float:
    """Density of ``<u, v> / (|u| |v|)`` for independent standard Gaussian ``u, v`` in R^d."""
    log_c = math.lgamma(d / 2) - math.lgamma((d - 1) / 2) - 0.5 * math.log(math.pi)
    return math.exp(log_c + (d - 3) / 2 * math.log1p(-t * t))


def _rounded(x: torch.Tensor, decimals: int) -> list:
    """``x`` as nested lists of Python floats rounded to ``decimals`` (stable JSON)."""
    return torch.round(x.detach().to("cpu", torch.float64), decimals=decimals).tolist()
