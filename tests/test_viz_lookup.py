"""Tests for attnlib.viz.lookup (lesson 01): the convex hull, the lookup figure and its twin,
the kernel table and the cost figure, checked against explicit loops, a brute-force hull
and numpy's least squares."""

from __future__ import annotations

import itertools
import json
import math

import ipywidgets
import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib.viz as viz
from attnlib.analysis.experiments import lookup as el
from attnlib.viz import lookup as vl

KEYS = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 1.0]]
VALUES = [[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [1.0, 4.0], [3.0, 1.0]]
FUNCTIONS = {
    "softmax": math.exp,
    "softplus": lambda s: math.log1p(math.exp(s)),
    "sigmoid": lambda s: 1.0 / (1.0 + math.exp(-s)),
    "relu": lambda s: max(s, 0.0),
}


def _lookup(angle: float, length: float, f, scale: float = 1 / math.sqrt(2)):
    """Weights and output of one query on the toy database, by plain Python loops."""
    # cos and sin rounded to 12 decimals, as query_at does, so that 180° has sin exactly 0
    rad = math.radians(angle)
    q = (length * round(math.cos(rad), 12), length * round(math.sin(rad), 12))
    a = [f(scale * (q[0] * k[0] + q[1] * k[1])) for k in KEYS]
    z = sum(a)
    w = [x / z for x in a]
    y = [sum(wj * v[c] for wj, v in zip(w, VALUES, strict=True)) for c in range(2)]
    return w, y


def _decimals(x: float) -> int:
    text = repr(float(x))
    return 0 if "e" in text or "." not in text else len(text.split(".")[1].rstrip("0"))


def _trace(fig: go.Figure, name: str):
    return next(t for t in fig.data if t.name == name)


# ---------------------------------------------------------------------------------------
# data and helpers


def test_kernel_names_are_the_named_kernels():
    assert vl.KERNEL_NAMES == ("softmax", "softplus", "sigmoid", "relu")


@pytest.mark.parametrize(("angle", "length"), [(0, 2.0), (90, 1.0), (100, 1.0), (225, 3.0)])
def test_query_at_is_polar(angle, length):
    q = vl.query_at(angle, length)
    assert q.shape == (1, 2) and q.dtype == torch.float64
    expected = [length * math.cos(math.radians(angle)), length * math.sin(math.radians(angle))]
    assert q[0].tolist() == pytest.approx(expected, abs=1e-10)  # cos, sin rounded to 1e-12
    assert float(q.norm()) == pytest.approx(length)


def test_query_at_rejects_a_non_positive_length():
    with pytest.raises(ValueError, match="length"):
        vl.query_at(0.0, 0.0)


def _brute_force_vertices(pts: list[list[float]]) -> set[int]:
    """Indices of the extreme points: in no triangle and on no segment of other points."""

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def in_triangle(p, a, b, c):
        d = [cross(a, b, p), cross(b, c, p), cross(c, a, p)]
        return all(x >= -1e-12 for x in d) or all(x <= 1e-12 for x in d)

    vertices = set()
    for i, p in enumerate(pts):
        others = [q for j, q in enumerate(pts) if j != i]
        covered = any(in_triangle(p, a, b, c) for a, b, c in itertools.combinations(others, 3)
                      if abs(cross(a, b, c)) > 1e-12)
        on_segment = any(abs(cross(a, b, p)) < 1e-12
                         and min(a[0], b[0]) - 1e-12 <= p[0] <= max(a[0], b[0]) + 1e-12
                         and min(a[1], b[1]) - 1e-12 <= p[1] <= max(a[1], b[1]) + 1e-12
                         for a, b in itertools.combinations(others, 2))
        if not covered and not on_segment:
            vertices.add(i)
    return vertices


@pytest.mark.parametrize("seed", range(6))
def test_convex_hull_matches_brute_force(seed):
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(9, 2, generator=gen, dtype=torch.float64)
    hull = el.convex_hull(points)
    pts = points.tolist()
    assert set(hull) == _brute_force_vertices(pts)
    # counter-clockwise: positive signed area (shoelace formula)
    ring = [pts[i] for i in hull]
    area = sum(a[0] * b[1] - b[0] * a[1] for a, b in zip(ring, ring[1:] + ring[:1], strict=True))
    assert area > 0


def test_convex_hull_of_the_toy_values_leaves_out_the_inner_one():
    assert sorted(el.convex_hull(torch.tensor(VALUES))) == [0, 1, 2, 3]  # v_4 = (3, 1) is inside


def test_convex_hull_rejects_points_that_are_not_2d():
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        el.convex_hull(torch.zeros(4, 3))


# ---------------------------------------------------------------------------------------
# the lookup figure and its twin


@pytest.mark.parametrize("kernel", vl.KERNEL_NAMES)
@pytest.mark.parametrize("angle", [0, 60, 100, 180, 270])
def test_lookup_figure_shows_the_weights_and_output_of_a_loop(kernel, angle):
    fig = vl.lookup_figure(kernel, angle)
    w, y = _lookup(angle, 2.0, FUNCTIONS[kernel])
    bars = _trace(fig, "weights")
    assert isinstance(bars, go.Bar) and list(bars.x) == ["0", "1", "2", "3", "4"]
    assert list(bars.y) == pytest.approx(w, abs=1e-6)
    out = _trace(fig, "output y")
    assert [out.x[0], out.y[0]] == pytest.approx(y, abs=1e-6)
    # the title names the largest weight and the zeros; the annotation gives y
    n_zero = sum(x == 0.0 for x in w)
    assert fig.layout.title.text == (f"Kernel {kernel}, query at {angle}°: largest weight "
                                     f"{max(w):.3f}, {n_zero} of 5 weights zero")
    assert fig.layout.annotations[-1].text == f"y = ({y[0]:.2f}, {y[1]:.2f}), inside the hull"


def test_lookup_figure_relu_is_exact_when_one_key_faces_the_query():
    fig = vl.lookup_figure("relu", 180)
    assert list(_trace(fig, "weights").y) == [0.0, 0.0, 1.0, 0.0, 0.0]
    out = _trace(fig, "output y")
    assert [out.x[0], out.y[0]] == VALUES[2]
    assert "largest weight 1.000, 4 of 5 weights zero" in fig.layout.title.text


def test_lookup_figure_draws_the_hull_and_keeps_data_rounded():
    fig = vl.lookup_figure("softmax", 37)
    hull = _trace(fig, "convex hull of the values")
    corners = list(zip(hull.x, hull.y, strict=True))
    assert corners[0] == corners[-1]  # a closed polygon
    assert sorted(set(corners)) == sorted(tuple(v) for v in VALUES[:4])
    for trace in fig.data:
        for axis in ("x", "y"):
            for value in getattr(trace, axis) or []:
                if isinstance(value, float):
                    assert _decimals(value) <= viz.style.DECIMALS


def test_lookup_figure_says_outside_for_an_empty_relu_row():
    # keys 2 and 3 only; a query pointing up and right sees neither: Z = 0, y = 0
    K = torch.tensor([KEYS[2], KEYS[3]])
    V = torch.tensor([VALUES[2], VALUES[3]])
    fig = vl.lookup_figure("relu", 45, K=K, V=V)
    assert list(_trace(fig, "weights").y) == [0.0, 0.0]
    assert fig.layout.annotations[-1].text == "y = (0.00, 0.00), outside the hull"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kernel": "exp"}, "kernel must be one of"),
        ({"K": torch.zeros(5, 3)}, r"K must have shape \(N_KV, 2\)"),
        ({"V": torch.zeros(4, 2)}, "same N_KV"),
    ],
)
def test_lookup_figure_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        vl.lookup_figure(**kwargs)


def test_twin_over_kernels_and_angles_is_small_and_complete():
    settings = [(k, a) for k in vl.KERNEL_NAMES for a in range(0, 360, 45)]
    fig = viz.twin(vl.lookup_figure, ("kernel", "angle"), settings)
    steps = fig.layout.sliders[0].steps
    assert len(steps) == 32
    assert steps[9].label == "softplus, 45"
    assert len(json.dumps(fig.to_plotly_json(), default=str)) < 1_000_000
    # step 9's visible weight row is that of the loop
    visible = [t for t, v in zip(fig.data, steps[9].args[0]["visible"], strict=True) if v]
    bars = next(t for t in visible if isinstance(t, go.Bar))
    assert list(bars.y) == pytest.approx(_lookup(45, 2.0, FUNCTIONS["softplus"])[0], abs=1e-6)


def test_live_explorer_has_a_kernel_dropdown_and_an_angle_slider():
    box = viz.explorer(vl.lookup_figure, kernel=list(vl.KERNEL_NAMES), angle=list(vl.ANGLES),
                       start={"angle": 60})
    controls = {c.description: c for c in box.children[0].children}
    assert isinstance(controls["kernel"], ipywidgets.Dropdown)
    assert isinstance(controls["angle"], ipywidgets.SelectionSlider)
    assert controls["angle"].value == 60


# ---------------------------------------------------------------------------------------
# kernel table, slope, cost figure


def test_kernel_table_matches_loops():
    q = vl.query_at(60.0, 2.0)
    kernels = {**{name: name for name in FUNCTIONS}, "taylor": lambda s: 1 + s + s**2 / 2}
    table = el.kernel_table(q, torch.tensor(KEYS), torch.tensor(VALUES), kernels)
    assert list(table.columns) == ["key 0", "key 1", "key 2", "key 3", "key 4", "y[0]",
                                   "y[1]", "largest weight", "zero weights"]
    functions = {**FUNCTIONS, "taylor": lambda s: 1 + s + s * s / 2}
    for name, f in functions.items():
        w, y = _lookup(60.0, 2.0, f)
        row = table.loc[name]
        assert [row[f"key {j}"] for j in range(5)] == pytest.approx(w, abs=6e-5)
        assert [row["y[0]"], row["y[1]"]] == pytest.approx(y, abs=6e-5)
        assert row["largest weight"] == pytest.approx(max(w), abs=6e-5)
        assert row["zero weights"] == sum(x == 0 for x in w)
    assert table.loc["relu", "zero weights"] == 2


def test_kernel_table_rejects_more_than_one_query():
    with pytest.raises(ValueError, match=r"shape \(1, d_QK\)"):
        el.kernel_table(torch.zeros(2, 2), torch.tensor(KEYS), torch.tensor(VALUES),
                        {"relu": "relu"})


def test_cost_figure_annotates_the_fitted_slope():
    n = [128, 256, 512, 1024]
    seconds = [0.0001, 0.0005, 0.0021, 0.0079]
    counts = [m * m * 64 for m in n]
    fig = vl.cost_figure(n, seconds, counts)
    slope = np.polyfit(np.log(n), np.log(seconds), 1)[0]
    local = [math.log(seconds[k + 1] / seconds[k]) / math.log(2) for k in range(3)]  # N doubles
    assert fig.layout.annotations[0].text == f"fitted slope = {slope:.2f}"
    assert list(fig.data[0].customdata) == [
        "first size", f"local slope {local[0]:.2f} from N = 128",
        f"local slope {local[1]:.2f} from N = 256", f"local slope {local[2]:.2f} from N = 512"]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    measured, fitted, reference = fig.data
    assert list(measured.y) == pytest.approx([1e3 * s for s in seconds])
    # the scaled count meets the largest measurement and has slope 2
    assert reference.y[-1] == pytest.approx(1e3 * seconds[-1])
    assert np.polyfit(np.log(n), np.log(reference.y), 1)[0] == pytest.approx(2.0, abs=1e-3)
    assert np.polyfit(np.log(n), np.log(fitted.y), 1)[0] == pytest.approx(slope, abs=1e-3)
    with pytest.raises(ValueError, match="same length"):
        vl.cost_figure(n, seconds[:2], counts)


def test_recall_weights_figure_labels_the_prompt_and_marks_the_answer():
    ids = [3, 20, 5, 17, 3]  # k3 v4 k5 v1 k3: the query k3 should read position 1
    weights = {"trained": [0.01, 0.96, 0.01, 0.01, 0.01], "random": [0.2] * 5}
    fig = vl.recall_weights_figure(ids, weights, answer=1)
    assert [t.name for t in fig.data] == ["trained", "random",
                                          "the value stored under the queried key"]
    assert list(fig.data[0].x) == ["0: k3", "1: v4", "2: k5", "3: v1", "4: k3"]
    assert list(fig.data[0].y) == weights["trained"]
    marker = fig.data[2]  # just above the tallest bar, at the answer
    assert list(marker.x) == ["1: v4"] and marker.y[0] == round(1.07 * 0.96, 4)
    assert not fig.layout.annotations
    with pytest.raises(ValueError, match="answer must be a position"):
        vl.recall_weights_figure(ids, weights, answer=5)
    with pytest.raises(ValueError, match="one weight per token"):
        vl.recall_weights_figure(ids, {"short": [1.0]}, answer=0)
