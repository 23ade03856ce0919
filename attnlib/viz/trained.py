"""The trained-model dials of lessons 06 and 07: what a conversion saves and what it costs.

Both lessons convert a small trained model that :mod:`attnlib.models.pretrained` ships, lesson 06
by mean pooling its key/value heads to ``G`` (:func:`attnlib.viz.gqa.trained_figure`),
lesson 07 by factoring its keys and values through a latent of width ``d_L``
(:func:`attnlib.viz.mla.trained_figure`), and then fine-tune the attention of each
conversion for a budget of 0, 100 or 400 steps. A dial is read against three references,
all scored on the one evaluation set :func:`attnlib.models.train.eval_set`:

- the *control*: the same fine-tune applied to a conversion that changes nothing (``G = H``,
  or the full-rank latent), which measures what the recipe alone does to the loss;
- the *noise*: the same training recipe at five initial seeds (``book``, ``book-seed1`` to
  ``book-seed4``, :data:`SEEDS`), whose spread :func:`seed_noise` measures;
- the *from-scratch* points: the cheaper layout trained as such with the source's recipe.

:func:`dial_table` holds one row per setting and one column per budget, :func:`dial_figure`
draws it, and :func:`scratch_table` lists the models trained from scratch. The losses of
shipped models are read from their cards, which record them on :func:`attnlib.models.train.eval_set`
(``tests/test_pretrained.py`` re-measures every card from the weights); a conversion that
ships no card is measured here with :func:`attnlib.models.train.eval_loss`.

Lesson: 06_gqa, 07_mla.
"""

from __future__ import annotations

import math
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_choice
from attnlib.analysis.intervals import Interval, gap_interval, seed_interval
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = [
    "BUDGETS",
    "CACHE",
    "CONVERSIONS",
    "SCRATCH",
    "SCRATCH_MLA",
    "SEEDS",
    "run_to_run",
    "seed_noise",
    "dial_figure",
    "dial_table",
    "scratch_table",
]

CONVERSIONS = ("n_kv_heads", "d_latent")
"""The settings a dial turns: :func:`attnlib.models.pretrained.to_gqa`'s ``n_kv_heads`` and
:func:`attnlib.models.pretrained.to_mla`'s ``d_latent``."""

BUDGETS: tuple[int, ...] = (0, 100, 400)
"""The uptraining budgets of a dial, in steps (0: the conversion alone)."""

CACHE = "cache bytes per token"
"""Column of a dial table: cache bytes per token over all layers, at the model's precision."""

SEEDS: tuple[str, ...] = ("book", "book-seed1", "book-seed2", "book-seed3", "book-seed4")
"""The ``book`` recipe at initial seeds 0 to 4 (the same data, batches and steps): how far
apart its runs land is the noise of one training run (:func:`seed_noise`)."""

SCRATCH: dict[str, str] = {
    **{name: f"MHA, G = 4 (seed {k})" for k, name in enumerate(SEEDS)},
    "book-scratch-gqa2": "GQA, G = 2",
    "book-scratch-gqa1": "MQA, G = 1",
}
"""The models trained from scratch with the ``book`` recipe (RoPE, same data and steps), by
name, with the layout of their attention."""

SCRATCH_MLA: dict[str, str] = {
    "book-scratch-mla56": "MLA, d_L = 56, d_R = 8",
    "book-scratch-mla24": "MLA, d_L = 24, d_R = 8",
}
"""MLA trained from scratch with the same recipe and positions (decoupled RoPE, ``d_R = 8``),
at the caches of ``G = 2`` (``d_L + d_R = 64``) and of MQA (32)."""


def _budget_column(steps: int) -> str:
    """The dial table's column of the loss after ``steps`` steps: ``"loss, 100 steps"``."""
    return f"loss, {steps} steps"


def _cache_bytes(model) -> int:
    """Bytes one token adds to ``model``'s caches, measured by running one token through them."""
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.zeros(1, 1, dtype=torch.long, device=model.E.device), caches=caches)
    return sum(cache.nbytes for cache in caches)


def _card_loss(name: str, **variant) -> float:
    from attnlib.models import pretrained

    return pretrained.card(name, **variant)["held_out"]["loss"]


def seed_noise(level: float = 0.95) -> Interval:
    """The held-out losses of the ``book`` recipe's seeds (:data:`SEEDS`, from their cards):
    their mean with its Student-t interval, and ``sd``, the standard deviation of one run.

    >>> noise = seed_noise()
    >>> noise.n, round(noise.estimate, 3), round(noise.sd, 4)
    (5, 1.317, 0.0067)
    """
    return seed_interval([_card_loss(name) for name in SEEDS], level=level)


def run_to_run(level: float = 0.95) -> float:
    """How far apart two single runs of the ``book`` recipe land at ``level``: the half-width
    ``t_{n-1} s sqrt(2)`` of :func:`attnlib.analysis.intervals.gap_interval` with one run on
    each side, ``s`` from :func:`seed_noise`. A difference between two models trained once
    each that lies inside it is what a second seed could produce alone.
    """
    return gap_interval(0.0, seed_noise(level), runs=(1, 1)).half_width


@lru_cache(maxsize=8)
def _dial_table(name: str, conversion: str, values: tuple) -> pd.DataFrame:
    from attnlib.models import pretrained, train

    source = pretrained.load(name)
    convert = pretrained.to_gqa if conversion == "n_kv_heads" else pretrained.to_mla
    shipped = {(v[conversion], v["steps"]) for v in pretrained.variants(name)
               if conversion in v}
    rows = {}
    for value in values:
        converted = convert(source, value)
        row = {CACHE: _cache_bytes(converted)}
        for steps in BUDGETS:
            if steps == 0:
                tuned = [s for v, s in shipped if v == value]
                loss = (pretrained.card(name, **{conversion: value, "steps": tuned[0]})
                        ["held_out_converted"]["loss"] if tuned
                        else train.eval_loss(converted))
            elif (value, steps) in shipped:
                loss = _card_loss(name, **{conversion: value, "steps": steps})
            else:
                loss = math.nan
            row[_budget_column(steps)] = round(loss, 3)
        rows[value] = row
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis(conversion)
    table.attrs = {"source loss": round(_card_loss(name), 3),
                   "source cache": _cache_bytes(source),
                   "uniform loss": round(math.log(source.vocab_size), 3),
                   "seed sd": round(seed_noise().sd, 4), "seeds": len(SEEDS),
                   "run to run": round(run_to_run(), 3)}
    return table


def dial_table(name: str, conversion: str, values: tuple[int, ...]) -> pd.DataFrame:
    """Held-out loss and cache of shipped model ``name`` converted at each of ``values``.

    Each row converts the model (:func:`attnlib.models.pretrained.to_gqa` for ``conversion =
    "n_kv_heads"``, :func:`attnlib.models.pretrained.to_mla` for ``"d_latent"``), measures the
    bytes one token adds to its caches (by running a token through them), and gives the
    held-out loss on :func:`attnlib.models.train.eval_set` (3 decimals) after each budget of
    :data:`BUDGETS`: right after the conversion (``"loss, 0 steps"``), and after the 100-
    and 400-step fine-tunes that ship with the model (``attnlib.models.pretrained.load(name,
    **{conversion: value}, steps=...)``), NaN where none ships. The value that changes
    nothing (``G = H``, the full-rank latent) is the control row. ``table.attrs`` holds
    the source's loss and cache bytes, ``ln(vocab_size)``, the seed noise of the ``book``
    recipe (``"seed sd"`` over ``"seeds"`` runs, :func:`seed_noise`) and ``"run to run"``,
    the 95% half-width within which two single runs of it land (:func:`run_to_run`).
    Computed once per argument set; a copy is returned.

    Args:
        name: a shipped model, e.g. ``"book"`` or ``"book-nope"``.
        conversion: one of :data:`CONVERSIONS`.
        values: the settings, in the order of the rows.

    Returns:
        pd.DataFrame indexed by the setting, with columns :data:`CACHE` and one per budget,
        ``"loss, 100 steps"``.
    """
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {list(CONVERSIONS)}; got {conversion!r}")
    table = _dial_table(name, conversion, tuple(values))
    copy = table.copy()
    copy.attrs = dict(table.attrs)
    return copy


@lru_cache(maxsize=4)
def _scratch_table(names: tuple[str, ...]) -> pd.DataFrame:
    from attnlib.models import pretrained

    layouts = {**SCRATCH, **SCRATCH_MLA}
    rows = {}
    base = _card_loss("book")
    for name in names:
        card = pretrained.card(name)
        model = pretrained.load(name)
        cache_bytes = _cache_bytes(model)  # measured: 2 G d_head, or MLA's d_L + d_R, a layer
        cached = cache_bytes // (len(model.blocks) * model.E.element_size())
        rows[name] = {"attention": layouts[name], "numbers cached per token and layer": cached,
                      CACHE: cache_bytes, "parameters": card["parameters"],
                      "loss": round(card["held_out"]["loss"], 3),
                      "above 'book'": round(card["held_out"]["loss"] - base, 3)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")


def scratch_table(names: tuple[str, ...] | list[str] | None = None) -> pd.DataFrame:
    """The models trained from scratch with the ``book`` recipe.

    ``names`` are keys of :data:`SCRATCH` and :data:`SCRATCH_MLA`; the default is
    :data:`SCRATCH` (the grouped layouts of lesson 06). One row per model: its attention
    layout, the numbers it caches per token and layer (``2 G d_head``, or ``d_L + d_R``), the
    cache bytes per token (measured), its parameters, its held-out loss on
    :func:`attnlib.models.train.eval_set` (from its card, 3 decimals) and that loss minus the
    ``book`` model's. All were trained with the same data, steps and optimiser, with RoPE;
    ``book`` and ``book-seed1`` to ``book-seed4`` differ only in the initial seed. A copy
    is returned.

    >>> list(scratch_table(["book", "book-scratch-mla24"])["numbers cached per token and layer"])
    [128, 32]
    """
    names = tuple(SCRATCH if names is None else names)
    for name in names:
        check_choice("names", name, [*SCRATCH, *SCRATCH_MLA])
    return _scratch_table(names).copy()


def _label(setting: str, value: object) -> str:
    return f"{setting} = {value}"


def dial_figure(table: pd.DataFrame, current: object, steps: int, *, setting: str,
                control: object, scratch: dict | None = None, model: str,
                conversion: str) -> go.Figure:
    """Held-out loss against the uptraining budget, one line per setting; cache bytes.

    Left: the loss of every setting of ``table`` after each budget of :data:`BUDGETS`
    (solid lines; the ``control`` setting, the conversion that changes nothing, dashed), the
    from-scratch losses ``scratch`` (squares, in a column of their own), the source's loss
    as a line and around it a band of ``± table.attrs["run to run"]``: a model trained
    once from scratch that lands inside it is within what a second seed of the source's
    recipe could do alone. The current setting and budget are ringed. Right: the cache
    bytes per token of every setting, the current one in the main colour. The title gives
    the current loss, its distance to the control at the same budget, and the band.

    Args:
        table: a :func:`dial_table`.
        current: the setting to mark, a value of ``table.index``.
        steps: the budget to mark, one of :data:`BUDGETS` with a loss at ``current``.
        setting: its name, e.g. ``"G"`` or ``"d_L"``.
        control: the setting that changes nothing (``G = H``, full-rank ``d_L``).
        scratch: from-scratch losses by setting, or ``None``.
        model: the model's name, for the title.
        conversion: what the conversion does, for the title (e.g. ``"mean pooling"``).

    Returns:
        go.Figure: one scatter trace per setting, the from-scratch and ringed markers, and
        a bar trace.
    """
    if current not in table.index:
        raise ValueError(f"{setting} must be one of {list(table.index)}; got {current!r}")
    if steps not in BUDGETS:
        raise ValueError(f"steps must be one of {list(BUDGETS)}; got {steps!r}")
    now, asked = table.loc[current, _budget_column(steps)], steps
    if math.isnan(now):  # no fine-tune ships here: the largest budget that does, and a note
        steps = max(b for b in BUDGETS
                    if b <= asked and not math.isnan(table.loc[current, _budget_column(b)]))
        now = table.loc[current, _budget_column(steps)]
    scratch = scratch or {}
    x_of = {b: str(b) for b in BUDGETS}  # short categories: the figure fits a phone
    fig = make_subplots(rows=1, cols=2, column_widths=[0.64, 0.36], horizontal_spacing=0.12,
                        subplot_titles=("held-out loss, nats per character",
                                        "cache, bytes per token"))
    palette = [COLORS["main"], OKABE_ITO["orange"], OKABE_ITO["bluish green"],
               OKABE_ITO["reddish purple"], OKABE_ITO["vermillion"], OKABE_ITO["sky blue"]]
    colors = {}
    for k, value in enumerate(table.index):
        is_control = value == control
        colors[value] = COLORS["marker"] if is_control else palette[k % len(palette)]
        xs, ys = [], []
        for b in BUDGETS:
            loss = table.loc[value, _budget_column(b)]
            if not math.isnan(loss):
                xs.append(x_of[b])
                ys.append(loss)
        if len(xs) < 2 and not is_control:
            continue  # only the conversion: no budget line to draw
        name = (f"{_label(setting, value)} (control)" if is_control
                else _label(setting, value))
        fig.add_trace(go.Scatter(
            x=xs, y=rounded(ys, 3), mode="lines+markers", name=name,
            line={"color": colors[value], "dash": "dash" if is_control else "solid",
                  "width": 2}, marker={"size": 8},
            hovertemplate=f"{_label(setting, value)}, %{{x}}: %{{y:.3f}}<extra></extra>",
        ), row=1, col=1)
    if scratch:
        keys = [v for v in table.index if v in scratch]
        fig.add_trace(go.Scatter(
            x=["scratch"] * len(keys), y=rounded([scratch[v] for v in keys], 3),
            mode="markers", name="from scratch",
            marker={"symbol": "square", "size": 10, "color": [colors[v] for v in keys],
                    "line": {"color": COLORS["marker"], "width": 1}},
            text=[_label(setting, v) for v in keys],
            hovertemplate="%{text}, from scratch: %{y:.3f}<extra></extra>",
        ), row=1, col=1)
    fig.add_trace(go.Scatter(
        x=[x_of[steps]], y=rounded([now], 3), mode="markers", showlegend=False,
        marker={"color": colors[current], "size": 18, "symbol": "circle-open",
                "line": {"color": colors[current], "width": 3}},
        hovertemplate=f"{_label(setting, current)}, {steps} steps: %{{y:.3f}}<extra></extra>",
    ), row=1, col=1)
    band, source = table.attrs["run to run"], table.attrs["source loss"]
    fig.add_hrect(y0=rounded(source - band, 3), y1=rounded(source + band, 3), line_width=0,
                  fillcolor=OKABE_ITO["sky blue"], opacity=0.35, row=1, col=1)
    fig.add_hline(y=rounded(source, 3), line={"color": COLORS["marker"],
                                              "dash": DASHES["held-out"], "width": 1},
                  row=1, col=1)  # the source's loss, named in the title
    fig.add_trace(go.Bar(
        x=[str(v) for v in table.index], y=[int(v) for v in table[CACHE]],
        text=[f"{int(v):,}" for v in table[CACHE]], textposition="outside", showlegend=False,
        marker={"color": [COLORS["main"] if v == current else OKABE_ITO["sky blue"]
                          for v in table.index]},
        hovertemplate=f"{setting} = %{{x}}: %{{y:,}} bytes per token<extra></extra>",
    ), row=1, col=2)
    losses = [v for c in BUDGETS for v in table[_budget_column(c)] if not math.isnan(v)]
    fig.update_yaxes(range=[rounded(min(losses + list(scratch.values())) - 0.1, 3),
                            rounded(max(losses) * 1.05, 3)], row=1, col=1)
    fig.update_yaxes(range=[0, int(table[CACHE].max() * 1.2)], row=1, col=2)
    fig.update_xaxes(title_text="uptraining steps", type="category",
                     categoryorder="array",
                     categoryarray=[x_of[b] for b in BUDGETS] + ["scratch"],
                     row=1, col=1)
    fig.update_xaxes(title_text=setting, type="category", row=1, col=2)
    ctrl = table.loc[control, _budget_column(steps)]
    versus = (f"{now - ctrl:+.3f} against the control at the same budget ({ctrl:.3f})"
              if current != control else f"{now - source:+.3f} against the source")
    style(fig, (f"{model}, {conversion} to {_label(setting, current)}, {steps} steps of "
                f"uptraining: loss {now:.3f}, {versus}<br><sup>cache "
                f"{int(table.loc[current, CACHE]):,} bytes per token; dashed: the source, "
                f"{source:.3f}; shaded: ±{band:.3f}, two runs of the book recipe "
                f"(95%, {table.attrs['seeds']} seeds)"
                + ("" if steps == asked else f"; no fine-tune ships at {_label(setting, current)}"
                   f" after {asked} steps")
                + "</sup>"),
          height=HEIGHT + 60)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
                      margin={"t": 110, "b": 140})
    return fig
