"""Figures of lesson 01: the lookup, its kernels, its convex hull, its cost.

The explorer (:func:`lookup_figure`) draws a query against the toy database of
:mod:`attnlib.analysis.experiments.lookup` (:data:`attnlib.examples.KEYS`,
:data:`attnlib.examples.VALUES`) in three pieces side by side: keys and query, weight row,
values with their convex hull and the output point. The lesson's table is
:func:`attnlib.analysis.experiments.lookup.kernel_table`.

Every figure function takes keyword parameters, returns a ``go.Figure`` with rounded data
and never shows it.

Lesson: 01_attention_as_lookup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from attnlib.analysis.costs import fit_exponent
from attnlib.analysis.experiments.lookup import convex_hull, query_at, weights_and_output
from attnlib.core.functional import KERNELS
from attnlib.examples import KEYS, VALUES
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style

__all__ = ["ANGLES", "KERNEL_NAMES", "cost_figure", "lookup_figure", "recall_weights_figure"]

KERNEL_NAMES: tuple[str, ...] = tuple(KERNELS)
"""The named kernels the explorer offers: those of :data:`attnlib.KERNELS`."""

ANGLES: tuple[int, ...] = tuple(range(0, 360, 15))
"""The query directions (degrees) the live explorer offers."""


def _inside(point: Sequence[float], polygon: Sequence[Sequence[float]]) -> bool:
    """Whether ``point`` lies in the counter-clockwise convex ``polygon`` (edges included)."""
    n = len(polygon)
    for k in range(n):
        (ax, ay), (bx, by) = polygon[k], polygon[(k + 1) % n]
        if (bx - ax) * (point[1] - ay) - (by - ay) * (point[0] - ax) < -1e-9:
            return False
    return True


def lookup_figure(
    kernel: str = "softmax",
    angle: float = 90.0,
    *,
    length: float = 2.0,
    K: torch.Tensor | None = None,
    V: torch.Tensor | None = None,
    scale: float | None = None,
) -> go.Figure:
    """One soft lookup, drawn: keys and query, the weight row, the output among the values.

    The query ``q = length (cos angle, sin angle)`` is scored against every key with the
    kernel, ``A[0, j] = f(scale <q, k_j>)``; the weights are ``P[0, j] = A[0, j] / Z[0, 0]``
    and the output is ``y = sum_j P[0, j] v_j``. Marker sizes of keys and values grow with
    their weight. The right panel shades the convex hull of the values, inside which ``y``
    must lie whenever ``Z[0, 0] > 0``.

    Args:
        kernel: a name in :data:`attnlib.KERNELS` (the explorer's dropdown).
        angle: the query's direction in degrees.
        length: the query's norm.
        K: ``(N_KV, 2)`` keys; :data:`attnlib.examples.KEYS` when ``None``. (Named after the
            paper, and so that :func:`attnlib.viz.twin`'s own ``values`` argument stays free.)
        V: ``(N_KV, 2)`` values; :data:`attnlib.examples.VALUES` when ``None``.
        scale: multiplies the dot products; ``1/sqrt(2)`` (``1/sqrt(d_QK)``) when ``None``.

    Returns:
        go.Figure: three panels; the title gives the largest weight and the number of zero
        weights, an annotation gives ``y`` and whether it lies in the hull.
    """
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}; got {kernel!r}")
    K = KEYS if K is None else K
    V = VALUES if V is None else V
    for name, T in (("K", K), ("V", V)):
        if not isinstance(T, torch.Tensor) or T.dim() != 2 or T.shape[1] != 2:
            got = tuple(T.shape) if isinstance(T, torch.Tensor) else type(T).__name__
            raise ValueError(f"{name} must have shape (N_KV, 2) to be drawn; got {got}")
    if K.shape[0] != V.shape[0]:
        raise ValueError(f"K and V must have the same N_KV; got {K.shape[0]} keys and "
                         f"{V.shape[0]} values")
    q = query_at(angle, length)  # (1, 2)
    P, y = weights_and_output(q, K, V, kernel, scale)
    K64, V64 = K.detach().to("cpu", torch.float64), V.detach().to("cpu", torch.float64)
    n_kv = K64.shape[0]
    names = [str(j) for j in range(n_kv)]  # from 0, as in the prose and the code
    sizes = rounded(8 + 26 * P, 3)
    hull = convex_hull(V64)
    polygon = [V64[j].tolist() for j in hull]
    inside = bool(P.sum() > 0) and _inside(y.tolist(), polygon)

    reach = 1.25 * max(float(K64.abs().max()), length)
    lo, hi = V64.min(dim=0).values, V64.max(dim=0).values
    pad = 0.15 * float((hi - lo).max())
    span = float((hi - lo).max()) + 2 * pad  # the values panel's range
    # Data units per px in the two square panels (about 260 px across on any screen), for
    # placing the labels of q and y clear of the others (_label_spot).
    per_px_k, per_px_v = 2 * reach / 260, span / 260
    keys_at = [[*k, s * per_px_k] for k, s in zip(K64.tolist(), sizes, strict=True)]
    values_at = [[*v, s * per_px_v] for v, s in zip(V64.tolist(), sizes, strict=True)]
    closed = [*hull, hull[0]]
    traces = [
        go.Scatter(
            x=rounded(K64[:, 0]), y=rounded(K64[:, 1]), mode="markers+text",
            text=[f"k{n}" for n in names], textposition="top right", name="keys", cliponaxis=False,
            marker={"color": COLORS["main"], "size": sizes, "symbol": "circle"},
            hovertemplate="key %{text}: (%{x}, %{y})<extra></extra>",
        ),
        go.Scatter(
            x=[0.0, rounded(float(q[0, 0]))], y=[0.0, rounded(float(q[0, 1]))],
            mode="lines+markers+text", text=["", "q"], name="query",
            textposition=["top left", _label_spot(
                [*q[0].tolist(), 12 * per_px_k], keys_at, "top right",
                (18 * per_px_k, 16 * per_px_k))],
            line={"color": COLORS["reference"], "width": 3},
            marker={"color": COLORS["reference"], "size": [0, 12], "symbol": "diamond"},
            hovertemplate="query (%{x:.3f}, %{y:.3f})<extra></extra>",
        ),
        go.Bar(
            x=names, y=rounded(P), text=[f"{w:.3f}" for w in P.tolist()],
            textposition="outside", marker={"color": COLORS["main"]}, name="weights",
            showlegend=False, xaxis="x2", yaxis="y2",
            hovertemplate="P[0, %{x}] = %{y:.4f}<extra></extra>",
        ),
        go.Scatter(
            x=rounded(V64[closed, 0]), y=rounded(V64[closed, 1]), mode="lines", fill="toself",
            fillcolor="rgba(86, 180, 233, 0.18)",
            line={"color": OKABE_ITO["sky blue"], "width": 1},
            name="convex hull of the values", hoverinfo="skip", xaxis="x3", yaxis="y3",
        ),
        go.Scatter(
            x=rounded(V64[:, 0]), y=rounded(V64[:, 1]), mode="markers+text",
            text=[f"v{n}" for n in names], textposition="bottom right", name="values",
            cliponaxis=False,
            marker={"color": COLORS["main"], "size": sizes, "symbol": "square"},
            xaxis="x3", yaxis="y3", hovertemplate="value %{text}: (%{x}, %{y})<extra></extra>",
        ),
        go.Scatter(
            x=[rounded(float(y[0]))], y=[rounded(float(y[1]))], mode="markers+text",
            text=["y"], textposition=_label_spot(
                [*y.tolist(), 16 * per_px_v], values_at, "bottom right",
                (18 * per_px_v, 16 * per_px_v)),
            name="output y",
            marker={"color": COLORS["reference"], "size": 16, "symbol": "star",
                    "line": {"color": COLORS["marker"], "width": 1}},
            xaxis="x3", yaxis="y3", hovertemplate="y = (%{x:.3f}, %{y:.3f})<extra></extra>",
        ),
    ]
    # Two square panels side by side (keys, values), the weight row across the bottom, so
    # the figure stays legible in a narrow page column. Every marker is labelled, so the
    # figure needs no legend.
    x_dom = {"keys": [0.0, 0.44], "values": [0.56, 1.0], "weights": [0.0, 1.0]}
    y_dom = {"keys": [0.42, 1.0], "values": [0.42, 1.0], "weights": [0.0, 0.24]}
    panel_titles = {"keys": "keys k_j and the query q",
                    "values": "values v_j, their hull (shaded), the output y",
                    "weights": "weights P[0, j] = A[0, j] / Z[0, 0]"}
    where = "inside" if inside else "outside"
    annotations = [
        {"text": panel_titles[k], "xref": "paper", "yref": "paper",
         "x": sum(x_dom[k]) / 2, "y": y_dom[k][1] + 0.01, "xanchor": "center",
         "yanchor": "bottom", "showarrow": False, "font": {"size": 13}}
        for k in ("keys", "values", "weights")
    ]
    # Where y lies, in the values panel's title, above the panel: never over the markers.
    annotations[1]["yshift"] = 18
    annotations.append({
        "text": f"y = ({float(y[0]):.2f}, {float(y[1]):.2f}), {where} the hull",
        "xref": "paper", "yref": "paper", "x": sum(x_dom["values"]) / 2,
        "y": y_dom["values"][1] + 0.01, "xanchor": "center", "yanchor": "bottom",
        "showarrow": False, "font": {"size": 12},
    })
    square = {"constrain": "domain"}  # equal scales shrink the panel, never cut the range
    layout = {
        "xaxis": {"domain": x_dom["keys"], "range": rounded([-reach, reach], 4),
                  "anchor": "y", **square},
        "yaxis": {"domain": y_dom["keys"], "range": rounded([-reach, reach], 4),
                  "anchor": "x", "scaleanchor": "x", **square},
        "xaxis2": {"domain": x_dom["weights"], "anchor": "y2", "type": "category",
                   "title": {"text": "key j", "standoff": 4}},
        "yaxis2": {"domain": y_dom["weights"], "range": [0.0, 1.18], "anchor": "x2",
                   "tickvals": [0.0, 0.5, 1.0]},
        "xaxis3": {"domain": x_dom["values"], "anchor": "y3", **square,
                   "range": rounded([float(lo[0]) - pad, float(hi[0]) + pad], 4)},
        "yaxis3": {"domain": y_dom["values"], "anchor": "x3", "scaleanchor": "x3", **square,
                   "range": rounded([float(lo[1]) - pad, float(hi[1]) + pad], 4)},
        "annotations": annotations,
        "showlegend": False,
    }
    fig = go.Figure(data=traces, layout=layout)
    n_zero = int((P == 0).sum())
    title = (f"Kernel {kernel}, query at {angle:g}°: largest weight {float(P.max()):.3f}, "
             f"{n_zero} of {n_kv} weights zero")
    style(fig, title, height=HEIGHT + 255)
    fig.update_layout(margin={"l": 40, "r": 20, "t": 105, "b": 50})
    return fig


def _label_spot(
    point: Sequence[float],
    others: Sequence[Sequence[float]],
    their_labels: str,
    size: Sequence[float],
) -> str:
    """Where to write ``point``'s text label (a plotly ``textposition``) so that it clears
    the markers of ``others`` and their labels, written at ``their_labels`` of each.

    ``point`` and each of ``others`` are ``(x, y, r)``: a marker's centre and radius. A label
    is a box of ``size`` (width, height), beside its marker; all in data units. The first
    of top left, top right, bottom left, bottom right that meets the fewest of the other
    boxes wins.

    Example:
        >>> _label_spot([1.0, 1.0, 0.0], [[5.0, 5.0, 0.1]], "top right", (0.3, 0.2))
        'top left'
        >>> _label_spot([1.0, 1.0, 0.05], [[0.8, 1.1, 0.1]], "bottom right", (0.3, 0.2))
        'top right'
    """
    w, h = float(size[0]), float(size[1])

    def box(x: float, y: float, r: float, where: str) -> tuple[float, float, float, float]:
        left = x - r / 2 - w if where.endswith("left") else x + r / 2
        bottom = y + r / 2 if where.startswith("top") else y - r / 2 - h
        return left, bottom, left + w, bottom + h

    def meets(a: tuple, b: tuple) -> bool:
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    taken = []
    for ox, oy, r in ((float(o[0]), float(o[1]), float(o[2])) for o in others):
        taken.append(box(ox, oy, r, their_labels))
        taken.append((ox - r, oy - r, ox + r, oy + r))  # the marker
    spots = ("top left", "top right", "bottom left", "bottom right")
    px, py, pr = (float(v) for v in point[:3])
    return min(spots, key=lambda s: sum(meets(box(px, py, pr, s), t) for t in taken))


def cost_figure(
    n: Sequence[int], seconds: Sequence[float], counts: Sequence[int]
) -> go.Figure:
    """Measured time of one attention call against ``N``, log-log, with the fitted slope.

    Args:
        n: the sizes ``N = N_Q = N_KV``.
        seconds: the measured time at each size (a median of repeats).
        counts: the multiply-add count at each size, drawn scaled to meet the largest
            measurement, as the reference of slope 2.

    Returns:
        go.Figure: measured times (ms), the fitted power law and the scaled count; the
        annotation gives the fitted slope, and each measured point's hover text the local
        slope ``log(t_{k+1} / t_k) / log(N_{k+1} / N_k)`` from its left neighbour.
    """
    n, seconds, counts = list(n), list(seconds), list(counts)
    if not len(n) == len(seconds) == len(counts) or len(n) < 2:
        raise ValueError(f"n, seconds and counts must have the same length >= 2; got "
                         f"{len(n)}, {len(seconds)} and {len(counts)}")
    slope = fit_exponent(n, seconds)
    ms = [1e3 * s for s in seconds]
    log_mean = sum(math.log(t) for t in ms) / len(ms) - slope * sum(
        math.log(x) for x in n) / len(n)
    fitted = [math.exp(log_mean) * x**slope for x in n]
    reference = [c * ms[-1] / counts[-1] for c in counts]
    local = [math.log(seconds[k + 1] / seconds[k]) / math.log(n[k + 1] / n[k])
             for k in range(len(n) - 1)]
    since = ["first size"] + [f"local slope {s:.2f} from N = {n[k]}" for k, s in enumerate(local)]
    fig = go.Figure([
        go.Scatter(x=n, y=rounded(ms, 4), mode="markers", name="measured (median)",
                   marker={"color": COLORS["main"], "size": 10, "symbol": "circle"},
                   customdata=since,  # hovering a point gives the slope from its left neighbour
                   hovertemplate="N = %{x}<br>%{y:.3g} ms<br>%{customdata}<extra></extra>"),
        go.Scatter(x=n, y=rounded(fitted, 4), mode="lines", name=f"fit: slope {slope:.2f}",
                   line={"color": COLORS["main"], "dash": DASHES["marker"]}),
        go.Scatter(x=n, y=rounded(reference, 4), mode="lines",
                   name="multiply-adds N²(d_QK + d_V), scaled",
                   line={"color": COLORS["reference"], "dash": DASHES["reference"]}),
    ])
    fig.add_annotation(text=f"fitted slope = {slope:.2f}", xref="paper", yref="paper",
                       x=0.02, y=0.98, xanchor="left", yanchor="top", showarrow=False,
                       bgcolor="rgba(255,255,255,0.85)")
    fig.update_xaxes(type="log", title_text="N = N_Q = N_KV (tokens)", tickvals=n,
                     ticktext=[str(x) for x in n])
    fig.update_yaxes(type="log", title_text="time of one call (ms)")
    # the lines rise to the right, so the upper left corner is free for the legend
    fig.update_layout(legend={"x": 0.02, "xanchor": "left", "y": 0.80, "yanchor": "top"})
    return style(fig, "The cost of a lookup grows like N²: time against N, log-log")


def recall_weights_figure(
    ids: Sequence[int], weights: Mapping[str, Sequence[float]], *, answer: int,
    n_keys: int = 16,
) -> go.Figure:
    """One query's row of attention weights over a recall prompt, for several models.

    The prompt is a row of :func:`attnlib.models.tasks.associative_recall`: keys are ids
    ``0 .. n_keys - 1`` (labelled ``k0``, ``k1``, ...), values the ids from ``n_keys`` on
    (labelled ``v0``, ``v1``, ...). Each entry of ``weights`` is one bar trace over the
    positions of the prompt (rounded to 4 decimals); the position ``answer`` (the value
    stored under the queried key) is marked.

    Args:
        ids: the prompt's token ids, ``N`` of them.
        weights: a name -> the query's ``N`` weights (a row of ``P``), for each model.
        answer: the position of the value the query should read.
        n_keys: ids below it are keys.

    Returns:
        go.Figure: one bar trace per model, the answer's position annotated.
    """
    ids = [int(t) for t in ids]
    if not 0 <= answer < len(ids):
        raise ValueError(f"answer must be a position of the prompt, 0 <= answer < {len(ids)}; "
                         f"got {answer}")
    labels = [f"{n}: {'k' if t < n_keys else 'v'}{t if t < n_keys else t - n_keys}"
              for n, t in enumerate(ids)]
    colors = (COLORS["main"], COLORS["reference"], COLORS["marker"])
    fig = go.Figure()
    for (name, row), color in zip(weights.items(), colors, strict=False):
        row = [float(w) for w in row]
        if len(row) != len(ids):
            raise ValueError(f"weights[{name!r}] must have one weight per token ({len(ids)}); "
                             f"got {len(row)}")
        fig.add_trace(go.Bar(x=labels, y=rounded(row, 4), name=name, marker={"color": color},
                             hovertemplate=f"{name}<br>%{{x}}<br>weight %{{y:.3f}}<extra></extra>"))
    top = max(max(float(w) for w in row) for row in weights.values())
    fig.add_trace(go.Scatter(  # a marker above the answer, named in the legend below the plot
        x=[labels[answer]], y=[round(1.07 * top, 4)], mode="markers",
        name="the value stored under the queried key",
        marker={"symbol": "triangle-down", "size": 12, "color": COLORS["marker"]},
        hovertemplate="%{x}: the answer<extra></extra>"))
    fig.update_xaxes(title_text="position: token", tickangle=-60)
    fig.update_yaxes(title_text="weight of the query", range=[0, round(1.15 * top, 4)])
    style(fig, "One query's weights, trained and at initialisation", height=HEIGHT + 60)
    # legend below the plot, so the plot keeps its width on a narrow page
    fig.update_layout(barmode="group", legend={"orientation": "h", "x": 0, "y": -0.35,
                                               "yanchor": "top"}, margin={"b": 150})
    return fig
