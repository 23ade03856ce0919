"""Two forms of every explorer, built from one figure function.

An explorer is written once, as a *figure function*: keyword parameters in, a
``go.Figure`` out, data rounded, never ``.show()``. This module turns it into

- :func:`twin`, the kernel-free form: the figure precomputed for a list of settings and
  switched by plotly's own slider, so it works on a static page, in Jupyter and in Colab;
- :func:`explorer`, the live form: ipywidgets controls wired with ``interactive_output``
  to the figure function, for Jupyter and Colab.

Several parameters at once. :func:`explorer` gives every parameter its own control. A
twin has one slider, so it offers the valid *combinations*: pass a tuple of parameter
names and a list of tuples of values::

    twin(fn, ("d", "vocab_size"), [(16, 64), (16, 1024), (256, 64), (256, 1024)])

and each slider step is one combination. The list names exactly the settings worth
precomputing, so invalid ones (a head count that does not divide another, say) never
appear.

Colab. A plotly figure displayed inside an ipywidgets ``Output`` stays blank in Colab
("Plotly is not defined", googlecolab/colabtools issue 5889): each Colab cell output is
its own frame, and the plotly.js that the figure expects is not loaded there. Under
Colab the explorer's box therefore writes plotly.js into the cell output where it is
displayed (inline, from the copy bundled with the plotly package; no network request),
each time it is displayed, so a box shown in a later cell draws too; every update is HTML
that reuses it (``include_plotlyjs=False``).

Lesson: every explorer (first used in 00_tokens_and_embeddings).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from numbers import Real

import ipywidgets as widgets
import plotly.graph_objects as go
from IPython.display import HTML, display

from attnlib.viz.style import HEIGHT, rounded

__all__ = ["explorer", "twin"]

FigureFn = Callable[..., go.Figure]

_AXIS_PREFIXES = ("xaxis", "yaxis")


def twin(
    figure_fn: FigureFn,
    param: str | tuple[str, ...],
    values: Sequence,
    *,
    active: int = 0,
    labels: Mapping[str, str] | None = None,
    texts: Mapping[str, Mapping[object, str]] | None = None,
    **fixed,
) -> go.Figure:
    """The kernel-free twin of an explorer: ``figure_fn`` precomputed over ``values``.

    Step ``k`` of the slider shows the traces of ``figure_fn(**fixed, param=values[k])``
    and that figure's whole layout (a plotly ``"update"`` step: titles, annotations, shapes,
    every axis with its domain and range, legend, size), so the twin needs no kernel and a
    step may change the figure's subplots. Every number is rounded
    (:func:`attnlib.viz.style.rounded`), so the JSON is the same on every CPU.

    ``layout.meta["twin"]`` describes the steps for the book's site (see
    :func:`_twin_meta`), which draws one control per parameter instead of plotly's single
    slider; Jupyter and Colab use the slider.

    Args:
        figure_fn: keyword parameters -> ``go.Figure``.
        param: the parameter the slider moves, or a tuple of names for several at once.
        values: the slider's values in order; with a tuple ``param``, one tuple of values
            (same length as ``param``) per step: the combinations worth showing, so invalid
            ones never appear.
        active: index of the step shown first.
        labels: display names of parameters for the slider caption, e.g.
            ``{"vocab_size": "N_T"}``.
        texts: per parameter, the short name each value is shown by (on the slider and the
            site's controls), e.g. ``{"prompt": {"The attention weig": "attention"}}``, for
            values too long to show whole; other values are written as the prose writes
            numbers (``131,072``, ``0.3``, ``1e-09``).
        **fixed: the other parameters of ``figure_fn``, the same for every step.

    Returns:
        go.Figure: all steps' traces (only step ``active`` visible) and one slider with
        ``len(values)`` steps, labelled as the prose writes numbers.

    Raises:
        ValueError: empty ``values``, a value of the wrong length, ``active`` out of
            range, or a parameter ``figure_fn`` does not take.

    Example:
        >>> def line(slope, n=3):
        ...     return go.Figure(go.Scatter(x=list(range(n)), y=[slope * i for i in range(n)]))
        >>> fig = twin(line, "slope", [1, 2], n=4)
        >>> len(fig.data), [s.label for s in fig.layout.sliders[0].steps]
        (2, ['1', '2'])
    """
    names = _param_names(param)
    values = list(values)
    if not values:
        raise ValueError(f"values must list at least one setting of {param!r}; got none")
    if len(names) > 1:
        for k, value in enumerate(values):
            if not isinstance(value, (tuple, list)) or len(value) != len(names):
                raise ValueError(
                    f"values[{k}] must be a tuple of {len(names)} values, one per name in "
                    f"param={names}; got {value!r}"
                )
    if isinstance(active, bool) or not isinstance(active, int) or not 0 <= active < len(values):
        raise ValueError(f"active must be an index into values (0..{len(values) - 1}); "
                         f"got {active!r}")
    clash = sorted(set(names) & set(fixed))
    if clash:
        raise ValueError(f"{clash} appear both in param and as fixed values; give each once")
    _check_parameters(figure_fn, [*names, *fixed])
    texts = {name: dict(given) for name, given in (texts or {}).items()}
    unknown = sorted(set(texts) - set(names))
    if unknown:
        raise ValueError(f"texts names {unknown}, which param does not move; param={names}")

    def text(name: str, value: object) -> str:
        return texts.get(name, {}).get(value) or _format_value(value)

    combos = [tuple(v) if len(names) > 1 else (v,) for v in values]
    figures = [_call(figure_fn, {**fixed, **dict(zip(names, c, strict=True))}) for c in combos]
    layouts = [_own_layout(f) for f in figures]
    keys = list(dict.fromkeys(key for layout in layouts for key in layout))

    fig = go.Figure(layout=copy.deepcopy(layouts[active]))
    fig.update_layout(template=figures[active].layout.template)
    spans = []  # spans[k]: the range of fig.data that step k's traces occupy
    shown = []  # shown[j]: trace j's own visibility inside its figure
    for k, f in enumerate(figures):
        start = len(fig.data)
        for trace in f.data:
            data = rounded(trace.to_plotly_json())
            shown.append(True if data.get("visible") is None else data["visible"])
            data["visible"] = shown[-1] if k == active else False
            fig.add_trace(data)
        spans.append((start, len(fig.data)))

    rooms = [_slider_room(f) for f in figures]
    steps = []
    for k, (lo, hi) in enumerate(spans):
        visible = [shown[j] if lo <= j < hi else False for j in range(len(fig.data))]
        layout = _step_layout(layouts[k], keys, _axes_used(figures[k]))
        layout.update({key: value for key, value in rooms[k].items() if key != "slider"})
        if "margin" in rooms[k]:
            layout["margin"] = {**layouts[k].get("margin", {}), **rooms[k]["margin"]}
        steps.append({
            "method": "update",
            "label": ", ".join(text(n, v) for n, v in zip(names, combos[k], strict=True)),
            "args": [{"visible": visible}, layout],
        })
    caption = ", ".join((labels or {}).get(n, n) for n in names)
    slider = {
        "active": active,
        "currentvalue": {"prefix": f"{caption} = "},
        "pad": {"t": 50},
        "steps": steps,
    }
    room = dict(rooms[active])
    slider.update(room.pop("slider", {}))
    meta = dict(layouts[active].get("meta") or {})
    meta["twin"] = _twin_meta(names, labels or {}, combos, spans, active, layouts, text)
    fig.update_layout(sliders=[slider], meta=meta, **room)
    return fig


def _slider_room(fig: go.Figure) -> dict:
    """Layout (height, and where needed margin) and slider placement that make room for it.

    The slider goes under the plotting area. A legend laid out below the plot (``y < 0``)
    would sit on top of it, so then the slider moves down past the legend (up to two rows
    of it) and the bottom margin and the height grow to hold it.
    """
    height = fig.layout.height or HEIGHT
    legend_y = fig.layout.legend.y
    if legend_y is None or legend_y >= 0:
        return {"height": height + 60}
    top, bottom = fig.layout.margin.t, fig.layout.margin.b
    plot = height - (70 if top is None else top) - (60 if bottom is None else bottom)
    below = -legend_y * plot + 70  # px from the plot's bottom edge to the slider's top
    new_bottom = round(below + 90)  # the slider: current value, rail and step labels
    grow = new_bottom - (60 if bottom is None else bottom)
    return {
        "height": height + grow,
        "margin": {"b": new_bottom},
        "slider": {"y": round(-below / plot, 4), "yanchor": "top", "pad": {"t": 0}},
    }


def _format_value(value: object) -> str:
    """A setting as the book's prose writes it: ``10,000`` for ``10000.0``, ``0.3``, ``bf16``.

    Whole numbers of five digits or more get thousands separators (``131,072``); a float
    that is a whole number loses its ``.0``; other floats keep their shortest form.

    Example:
        >>> [_format_value(v) for v in (131072, 10000.0, 0.3, 3.0, 4096, "fp8", True)]
        ['131,072', '10,000', '0.3', '3', '4096', 'fp8', 'True']
    """
    if isinstance(value, bool) or not _is_number(value):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    whole = int(value)
    return f"{whole:,}" if abs(whole) >= 10_000 else str(whole)


def _own_layout(fig: go.Figure) -> dict:
    """``fig``'s layout as plotly JSON, rounded, without the template (the twin keeps the
    first figure's) and without sliders."""
    layout = fig.layout.to_plotly_json()
    for key in ("template", "sliders"):
        layout.pop(key, None)
    return rounded(layout)


def _axes_used(fig: go.Figure) -> set[str]:
    """The layout keys of the axes ``fig``'s traces draw on (``xaxis``, ``yaxis2``, ...)."""
    used = set()
    for trace in fig.data:
        for letter in ("x", "y"):
            ref = getattr(trace, f"{letter}axis", None) or letter
            used.add(f"{letter}axis{ref[1:]}")
    return used


def _step_layout(layout: dict, keys: Sequence[str], used: set[str]) -> dict:
    """The relayout of one step: every top-level key any step sets, as this step has it.

    plotly replaces a whole container (``xaxis2``, ``legend``) given as one key, so a step
    carries each container in full. An axis this step's traces do not draw on is hidden;
    one they draw on without setting it is plotly's default. Annotations and shapes it
    lacks are emptied; any other container it lacks goes back to plotly's default
    (``None``). An axis without a range autoranges.
    """
    update = {}
    for key in keys:
        if key == "meta":
            continue
        if key in layout or (key.startswith(_AXIS_PREFIXES) and key in used):
            value = copy.deepcopy(layout.get(key, {}))
            if key.startswith(_AXIS_PREFIXES) and "range" not in value:
                value.setdefault("autorange", True)
            update[key] = value
        elif key.startswith(_AXIS_PREFIXES):
            update[key] = {"visible": False}
        elif key in _LIST_KEYS:
            update[key] = []
        else:
            update[key] = None
    return update


_LIST_KEYS = ("annotations", "shapes", "images")


def _distinct(values: Sequence) -> list:
    """The distinct values, numbers ascending, anything else in order of appearance."""
    distinct = list(dict.fromkeys(values))
    return sorted(distinct) if all(_is_number(v) for v in distinct) else distinct


def _twin_meta(
    names: Sequence[str],
    labels: Mapping[str, str],
    combos: Sequence[tuple],
    spans: Sequence[tuple[int, int]],
    active: int,
    layouts: Sequence[dict],
    text: Callable[[str, object], str] = lambda name, value: _format_value(value),
) -> dict:
    """What the site needs to give each parameter its own control.

    ``params``: per parameter, its name, display label, distinct values (numbers ascending,
    others in order of appearance) and their labels as the prose writes them
    (or by the short names twin's ``texts`` gives). ``steps``: per step,
    the index of its value in each parameter's list, so the site can tell which combinations
    exist. ``traces``: the range of ``fig.data`` each step draws. ``size``: each step's own
    height and margin, without the room plotly's slider takes (the site draws its controls
    outside the figure).
    """
    columns = [_distinct([c[i] for c in combos]) for i in range(len(names))]
    params = [
        {
            "name": name,
            "label": labels.get(name, name),
            "values": [v if isinstance(v, (bool, int, float, str)) else str(v) for v in column],
            "text": [text(name, v) for v in column],
        }
        for name, column in zip(names, columns, strict=True)
    ]
    order = [{v: j for j, v in enumerate(column)} for column in columns]
    return {
        "params": params,
        "steps": [[order[i][c[i]] for i in range(len(names))] for c in combos],
        "traces": [list(span) for span in spans],
        "active": active,
        "size": [{"height": layout.get("height"), "margin": layout.get("margin", {})}
                 for layout in layouts],
    }


def explorer(
    figure_fn: FigureFn,
    *,
    start: Mapping[str, object] | None = None,
    labels: Mapping[str, str] | None = None,
    **controls,
) -> widgets.VBox:
    """The live form of an explorer: one control per varying parameter of ``figure_fn``.

    A control given as a list, tuple or range becomes a ``SelectionSlider`` (numbers) or
    a ``Dropdown`` (anything else) over those values; any other value is passed to
    ``figure_fn`` unchanged. The controls drive ``figure_fn`` through
    ``ipywidgets.interactive_output``, which Jupyter and Colab both run without a custom
    widget manager. Under Colab the figure is drawn as HTML, with plotly.js written into
    the cell output where the box is displayed (see the module docstring).

    Args:
        figure_fn: keyword parameters -> ``go.Figure``.
        start: starting value of each control (one of its values); the first value for a
            control not named here.
        labels: display names of the controls, e.g. ``{"vocab_size": "N_T"}``.
        **controls: parameter name -> sequence of values (a control) or a fixed value.

    Returns:
        widgets.VBox: ``[HBox(controls), Output]``; the ``Output`` holds the figure of the
        current setting.

    Raises:
        ValueError: no control with values, an empty control, a parameter ``figure_fn``
            does not take, or a start value that is not among a control's values.
    """
    start = dict(start or {})
    labels = dict(labels or {})
    varying = {k: list(v) for k, v in controls.items() if _is_options(v)}
    fixed = {k: v for k, v in controls.items() if k not in varying}
    if not varying:
        raise ValueError(
            "controls must give at least one parameter a list, tuple or range of values "
            f"(a control); got only fixed values for {sorted(controls)}"
        )
    empty = [k for k, v in varying.items() if not v]
    if empty:
        raise ValueError(f"each control needs at least one value; {empty} got an empty list")
    unknown = sorted(set(start) - set(varying))
    if unknown:
        raise ValueError(f"start names {unknown}, which are not controls; controls: "
                         f"{sorted(varying)}")
    _check_parameters(figure_fn, list(controls))

    sliders = {}
    for name, options in varying.items():
        value = start.get(name, options[0])
        if value not in options:
            raise ValueError(f"start[{name!r}] must be one of {options}; got {value!r}")
        common = {"options": options, "value": value, "description": labels.get(name, name),
                  "style": {"description_width": "initial"},
                  "layout": widgets.Layout(width="360px")}
        if all(_is_number(o) for o in options):
            sliders[name] = widgets.SelectionSlider(continuous_update=False, **common)
        else:
            sliders[name] = widgets.Dropdown(**common)

    colab = _in_colab()

    def show(**setting) -> None:
        fig = _call(figure_fn, {**fixed, **setting})
        if colab:
            display(HTML(fig.to_html(include_plotlyjs=False, full_html=False)))
        else:
            display(fig)

    out = widgets.interactive_output(show, sliders)
    box = _ColabBox if colab else widgets.VBox
    return box([widgets.HBox(list(sliders.values())), out])


class _ColabBox(widgets.VBox):
    """A ``VBox`` that writes plotly.js into the cell output wherever it is displayed.

    Colab gives every cell output a frame of its own, so plotly.js must be in the frame
    that shows the figures: the one where the box is displayed, which need not be the
    cell that built it.
    """

    def _ipython_display_(self, **kwargs) -> None:
        display(HTML(_plotly_loader()))
        parent = getattr(super(), "_ipython_display_", None)
        if parent is not None:  # ipywidgets 7 displays widgets through this hook
            parent(**kwargs)
        else:  # ipywidgets 8: through the mime bundle
            display(self._repr_mimebundle_(**kwargs), raw=True)


def _param_names(param: object) -> tuple[str, ...]:
    names = param if isinstance(param, tuple) else (param,)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"param must be a parameter name or a tuple of names; got {param!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"param must not repeat a name; got {param!r}")
    return names


def _check_parameters(figure_fn: FigureFn, names: Sequence[str]) -> None:
    """Every name must be a keyword parameter of ``figure_fn`` (unless it takes ``**kw``)."""
    if not callable(figure_fn):
        raise TypeError(f"figure_fn must be callable; got {type(figure_fn).__name__}")
    params = inspect.signature(figure_fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [n for n, p in params.items()
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    unknown = [n for n in names if n not in takes]
    if unknown:
        fn = getattr(figure_fn, "__name__", repr(figure_fn))
        raise ValueError(f"{fn} has no parameter {unknown[0]!r}; its parameters are {takes}")


def _call(figure_fn: FigureFn, kwargs: dict) -> go.Figure:
    fig = figure_fn(**kwargs)
    if not isinstance(fig, go.Figure):
        fn = getattr(figure_fn, "__name__", repr(figure_fn))
        raise TypeError(f"{fn} must return a plotly go.Figure; got {type(fig).__name__}")
    return fig


def _is_options(value: object) -> bool:
    return isinstance(value, (list, tuple, range))


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _in_colab() -> bool:
    try:
        import google.colab  # noqa: F401
    except ImportError:
        return False
    return True


def _plotly_loader() -> str:
    """A script tag holding plotly.js itself (from the plotly package, no CDN)."""
    from plotly.offline import get_plotlyjs

    return f'<script type="text/javascript">{get_plotlyjs()}</script>'
