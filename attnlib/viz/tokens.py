"""Figures of lesson 00: the lookup, the tokenizer tension, the embedding width.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it; :func:`attnlib.viz.twin` and :func:`attnlib.viz.explorer` turn
:func:`embedding_dimension_figure` into the lesson's explorer. The lesson's tables are in
:mod:`attnlib.analysis.experiments.tokens`.

Lesson: 00_tokens_and_embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_positive_int
from attnlib.tokens import (
    CORPUS,
    HELD_OUT,
    UNK,
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    embed,
    row_cosines,
    tokens_per_word,
)
from attnlib.viz.style import COLORS, DASHES, HEIGHT, SYMBOLS, rounded, style

__all__ = [
    "EMBEDDING_DIMS", "embedding_dimension_figure", "lookup_figure", "tokenizer_tension_figure",
]

EMBEDDING_DIMS: tuple[int, ...] = tuple(2**k for k in range(1, 11))
"""The embedding widths the dimension explorer offers: 2, 4, ..., 1024."""


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
                z=rounded(Z, 3), x=cols_d, y=y, colorscale="Viridis", zmin=zmin, zmax=zmax,
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
    """The tokenizer tension itself: tokens per word against the vocabulary size ``N_T``.

    A BPE tokenizer is trained once on ``corpus``; the tokenizer after ``k`` merges is the
    prefix of that training, with ``N_T = N_T(0) + k``. Each point of the BPE curves is one
    such tokenizer: its ``N_T`` across, its tokens per word
    (:func:`attnlib.tokens.tokens_per_word`) up. The character and word tokenizers fitted
    on the same corpus are single points. Solid lines and filled markers measure the
    corpus, dotted lines and open markers the held-out text; colour and marker shape both
    name the tokenizer.

    Args:
        corpus: the training text.
        held_out: a text unseen in training.
        max_merges: the largest number of merges shown (fewer if training stops early).
        step: the spacing of the merge counts along the BPE curves.

    Returns:
        go.Figure: 6 traces, ``(BPE, characters, words) x (corpus, held-out text)``; the
        word tokenizer's held-out point is annotated with its count of ``<unk>``.
    """
    check_positive_int("max_merges", max_merges)
    check_positive_int("step", step)
    bpe = BPETokenizer.train(corpus, max_merges)
    merges = list(range(0, len(bpe.merges) + 1, step))
    curves = {
        "BPE": ("bpe", [bpe.with_merges(k) for k in merges]),
        "characters": ("char", [CharTokenizer.fit(corpus)]),
        "words": ("word", [WordTokenizer.fit(corpus)]),
    }
    texts = {"corpus": corpus, "held-out text": held_out}
    fig = go.Figure()
    for name, (role, toks) in curves.items():
        for label, text in texts.items():
            held = label != "corpus"
            fig.add_trace(go.Scatter(
                x=[t.vocab_size for t in toks],
                y=rounded([tokens_per_word(t, text) for t in toks], 4),
                mode="lines" if len(toks) > 1 else "markers",
                name=f"{name}, {label}",
                line={"color": COLORS[role], "dash": DASHES["held-out" if held else "measured"]},
                marker={"color": COLORS[role], "size": 11,
                        "symbol": SYMBOLS[role] + ("-open" if held else "")},
                hovertemplate=(f"{name}, {label}<br>N_T = %{{x}}<br>%{{y:.2f}} tokens per word"
                               "<extra></extra>"),
            ))
    words = curves["words"][1][0]
    n_unk = sum(words.vocab[i] == UNK for i in words.encode(held_out))
    fig.add_annotation(
        x=words.vocab_size, y=round(tokens_per_word(words, held_out), 4), ax=40, ay=-50,
        text=f"words, held-out text:<br>{n_unk} tokens are {UNK}".replace("<unk>", "&lt;unk&gt;"),
        showarrow=True, arrowhead=2, align="left",
    )
    fig.update_xaxes(title_text="vocabulary size N_T (rows of E)", rangemode="tozero")
    fig.update_yaxes(title_text="tokens per word (sequence cost)", rangemode="tozero")
    style(fig, "The tokenizer tension: a bigger vocabulary buys shorter sequences",
          height=HEIGHT + 60)
    # legend below the plot, so the plot keeps its width on a narrow page
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -0.2, "yanchor": "top"},
        margin={"b": 130},
    )
    return fig


def embedding_dimension_figure(
    d: int = 64, vocab_size: int = 256, *, seed: int = 0, bins: int = 80
) -> go.Figure:
    """Cosines between the rows of a random ``E``: a spread of ``1/sqrt(d)``, and the largest.

    ``E`` has ``vocab_size`` rows of width ``d`` with i.i.d. standard normal entries
    (``torch.randn(vocab_size, d, generator=torch.Generator().manual_seed(seed),
    dtype=torch.float64)``). The bars are the histogram of the cosines of all
    ``N_T (N_T - 1) / 2`` pairs of rows, as a density; the line is the exact density of
    the cosine of two independent Gaussian vectors in ``R^d``,

        f_d(t) = Γ(d/2) / (√π Γ((d-1)/2)) · (1 - t²)^((d-3)/2),   -1 < t < 1,

    whose mean is 0 and variance exactly ``1/d``. Dashed vertical lines mark ``±max |cos|``.
    The x-range is ``±min(1, 6/√d)``, six standard deviations, so the shape stays visible
    at every ``d``; the bins cover that range.

    Args:
        d: the embedding width (at least 2).
        vocab_size: ``N_T``, the number of rows (at least 2).
        seed: seed of the generator that draws ``E``.
        bins: number of histogram bins across the x-range.

    Returns:
        go.Figure: the histogram (``go.Bar``) and the exact density (``go.Scatter``); an
        annotation gives the measured standard deviation, ``1/√d``, ``max |cos|`` and
        the number of pairs.
    """
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
    half = min(1.0, 6.0 / math.sqrt(d))  # half-width of the x-range
    counts = torch.histc(cos, bins=bins, min=-half, max=half)
    width = 2.0 * half / bins
    density = counts / (cos.numel() * width)
    centres = [-half + (k + 0.5) * width for k in range(bins)]
    t = [-half + 2.0 * half * k / 200 for k in range(1, 200)]  # open interval
    exact = [_cosine_density(x, d) for x in t]
    std, largest = float(cos.std()), float(cos.abs().max())
    fig = go.Figure([
        go.Bar(
            x=rounded(centres), y=rounded(density), width=round(width, 10),
            marker={"color": COLORS["main"], "line": {"width": 0}}, opacity=0.7,
            name="measured cosines (histogram)",
            hovertemplate="cos ≈ %{x:.3f}<br>density %{y:.3f}<extra></extra>",
        ),
        go.Scatter(
            x=rounded(t), y=rounded(exact), mode="lines",
            line={"color": COLORS["reference"], "width": 2, "dash": DASHES["reference"]},
            name="exact density f_d",
            hovertemplate="cos = %{x:.3f}<br>density %{y:.3f}<extra></extra>",
        ),
    ])
    for sign in (-1, 1):
        fig.add_vline(x=round(sign * largest, 6), line={"color": COLORS["marker"],
                      "dash": DASHES["marker"], "width": 1.5})
    # Above the plot, right-aligned, where it never hides a bar.
    fig.add_annotation(
        text=(f"std of cosines = {std:.3f}, 1/√d = {1 / math.sqrt(d):.3f}"
              f"<br>max |cos| = {largest:.3f} (dashed), pairs: {cos.numel():,}"),
        xref="paper", yref="paper", x=1.0, y=1.02, xanchor="right", yanchor="bottom",
        showarrow=False, align="right",
    )
    top = 1.1 * max(float(density.max()), max(exact))
    fig.update_xaxes(title_text="cosine similarity of two rows of E (unitless)",
                     range=[round(-half, 6), round(half, 6)])
    fig.update_yaxes(title_text="probability density (per unit cosine)",
                     range=[0.0, round(top, 4)])
    # The legend goes under the plot: inside it, it would hide the histogram's edge.
    fig.update_layout(bargap=0, legend={"orientation": "h", "x": 0, "y": -0.22,
                                        "yanchor": "top"})
    style(fig, f"Cosines between the rows of a random E (N_T = {vocab_size}, d = {d})",
          height=HEIGHT + 80)
    fig.update_layout(margin={"t": 115, "b": 110})
    return fig


def _cosine_density(t: float, d: int) -> float:
    """Density of ``<u, v> / (|u| |v|)`` for independent standard Gaussian ``u, v`` in R^d."""
    log_c = math.lgamma(d / 2) - math.lgamma((d - 1) / 2) - 0.5 * math.log(math.pi)
    return math.exp(log_c + (d - 3) / 2 * math.log1p(-t * t))
