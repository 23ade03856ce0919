"""Figures and tables for lesson 13 (attention as a kernel): what the backward keeps in
memory, and which tiles a causal kernel computes, masks or skips.

Both are measured or counted, not modelled: :func:`backward_memory_table` records every tensor
autograd saves for the backward (``torch.autograd.graph.saved_tensors_hooks``) and the
largest tensor the backward creates
(:func:`attnlib.analysis.experiments.frontier.largest_intermediate`);
:func:`causal_tiles` classifies the tiles exactly as the kernels' loops bound them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from attnlib._checks import check_positive_int
from attnlib.analysis.experiments.frontier import largest_intermediate
from attnlib.kernels.backward import (
    FlashAttentionTorch,
    attention_forward,
    tiled_backward,
    tiled_forward,
)
from attnlib.viz.style import COLORS, DASHES, HEIGHT, OKABE_ITO, rounded, style


def _saved_and_largest(forward, Q, K, V) -> tuple[int, int]:
    """Bytes autograd keeps between ``forward`` and its backward (each storage once), and
    elements of the largest tensor the backward creates."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        O = forward(Q, K, V)
    dO = torch.ones_like(O)
    largest = largest_intermediate(lambda: torch.autograd.grad(O, (Q, K, V), dO))
    return sum(storages.values()), largest


def backward_memory_table(ns: Sequence[int] = (256, 512, 1024), *, d: int = 32,
                          block: int = 64, causal: bool = True, seed: int = 0) -> pd.DataFrame:
    """What the naive and the tiled backward hold, measured at each ``N``.

    One head of ``N`` queries, keys and values of width ``d`` in float32. The naive path is
    autograd through the explicit softmax (:func:`attnlib.kernels.attention_forward`), which
    keeps the ``N x N`` weights; the tiled path is :class:`attnlib.kernels.FlashAttentionTorch`
    (``block x block`` tiles), which keeps ``Q, K, V, O`` and the row log-sum-exp ``L``.

    Args:
        ns: the sequence lengths.
        d: the head width.
        block: rows and keys per tile of the tiled path.
        causal: mask the future in both.
        seed: seeds the inputs.

    Returns:
        pd.DataFrame: per ``N``, the kilobytes saved for the backward and the elements of the
        largest tensor the backward creates, naive and tiled, and the naive-over-tiled ratio
        of the saved bytes.

    Example:
        >>> table = backward_memory_table([64, 128], d=8, block=16)
        >>> int(table.loc[128, "naive: largest in backward"])  # the N x N weights
        16384
    """
    check_positive_int("d", d)
    check_positive_int("block", block)
    rows = []
    for n in ns:
        check_positive_int("n in ns", n)
        gen = torch.Generator().manual_seed(seed)
        Q, K, V = (torch.randn(1, 1, n, d, generator=gen).requires_grad_() for _ in range(3))
        naive = _saved_and_largest(
            lambda q, k, v: attention_forward(q, k, v, causal=causal)[0], Q, K, V)
        tiled = _saved_and_largest(
            lambda q, k, v: FlashAttentionTorch.apply(q, k, v, causal, None, block, block),
            Q, K, V)
        rows.append({"N": n,
                     "naive: KB saved": naive[0] / 1024, "tiled: KB saved": tiled[0] / 1024,
                     "naive: largest in backward": naive[1],
                     "tiled: largest in backward": tiled[1],
                     "saved, naive / tiled": naive[0] / tiled[0]})
    return pd.DataFrame(rows).set_index("N").round(1)


def causal_tiles(n: int, block_m: int, block_n: int) -> torch.Tensor:
    """The fate of each ``(query tile, key tile)`` of a causal kernel, as the loops bound it.

    ``0``: skipped, the tile lies wholly in the future of every query in it, so the kernel's
    loop stops before it; ``1``: computed with the mask (the tile crosses the diagonal);
    ``2``: computed, nothing masked.

    Example:
        >>> causal_tiles(4, 2, 2)
        tensor([[1, 0],
                [2, 1]])
    """
    for name, value in (("n", n), ("block_m", block_m), ("block_n", block_n)):
        check_positive_int(name, value)
    tiles_m, tiles_n = -(-n // block_m), -(-n // block_n)
    fate = torch.zeros(tiles_m, tiles_n, dtype=torch.long)
    for i in range(tiles_m):
        last_row = min(n, (i + 1) * block_m) - 1
        for j in range(tiles_n):
            first_key, last_key = j * block_n, min(n, (j + 1) * block_n) - 1
            if first_key > last_row:
                continue
            fate[i, j] = 2 if last_key <= i * block_m else 1
    return fate


def causal_tiles_figure(n: int = 128, block_m: int = 16, block_n: int = 16) -> go.Figure:
    """The tiles of a causal kernel at sequence length ``n``: skipped, masked or whole.

    Example:
        >>> fig = causal_tiles_figure(64, 16, 16)
        >>> fig.data[0].z[0]
        [1, 0, 0, 0]
    """
    fate = causal_tiles(n, block_m, block_n)
    counts = [int((fate == k).sum()) for k in range(3)]
    names = ["skipped", "computed, masked", "computed whole"]
    colours = ["#ffffff", OKABE_ITO["orange"], OKABE_ITO["blue"]]
    scale = [[0.0, colours[0]], [1 / 3, colours[0]], [1 / 3, colours[1]], [2 / 3, colours[1]],
             [2 / 3, colours[2]], [1.0, colours[2]]]
    fig = go.Figure(go.Heatmap(
        z=fate.tolist(), zmin=0, zmax=2, colorscale=scale, xgap=2, ygap=2,
        text=[[names[k] for k in row] for row in fate.tolist()],
        hovertemplate="query tile %{y}, key tile %{x}: %{text}<extra></extra>",
        showscale=False))
    for name, colour in zip(names, colours, strict=True):  # a legend, not a colour bar
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker={"symbol": "square", "size": 12, "color": colour,
                                         "line": {"color": "#999999", "width": 1}}))
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
                      margin={"b": 110})
    fig.update_yaxes(autorange="reversed", title=f"query tile ({block_m} rows)")
    fig.update_xaxes(title=f"key tile ({block_n} keys)")
    return style(fig, f"Causal tiles at N = {n}: {counts[0]} skipped, {counts[1]} masked, "
                      f"{counts[2]} whole")


# ---------------------------------------------------------------------------------------
# the tile walk: the forward's loop and the backward's two kernels, step by step
# ---------------------------------------------------------------------------------------

WALK_VIEWS = ("forward", "backward: dK, dV", "backward: dQ")
"""The three loops :func:`tile_walk` records: the forward, and the backward's two kernels."""

_READ = ("Q", "K", "V", "dO", "L", "D")


H100_SM_KB = {"registers": 256, "shared": 228}
"""KB of registers and of shared memory in one H100 streaming multiprocessor: what the
programs running on it share (one program's take: :func:`tile_budget`)."""


def tile_budget(block_m: int, block_n: int, d: int, *, stages: int = 2, in_bytes: int = 2,
                acc_bytes: int = 4) -> tuple[float, float]:
    """KB of registers and of shared memory that one forward program's blocks take.

    Registers: the query tile (``in_bytes``), the output accumulator and the tile of scores
    (``acc_bytes``). Shared memory: a key and a value tile per stage (``in_bytes``). A floor:
    real kernels also keep addresses and masks in registers.

    Example:
        >>> tile_budget(128, 64, 128)  # 16-bit inputs, float32 accumulator and scores
        (128.0, 64.0)
    """
    for name, value in (("block_m", block_m), ("block_n", block_n), ("d", d),
                        ("stages", stages), ("in_bytes", in_bytes), ("acc_bytes", acc_bytes)):
        check_positive_int(name, value)
    registers = block_m * d * in_bytes + block_m * d * acc_bytes + block_m * block_n * acc_bytes
    shared = stages * 2 * block_n * d * in_bytes
    return registers / 1024, shared / 1024


@functools.lru_cache(maxsize=32)
def tile_walk(n: int, block_m: int, block_n: int, causal: bool, view: str = "forward",
              d: int = 8, seed: int = 0) -> tuple[dict, ...]:
    """Every step of one head's tile loop, recorded from attnlib's own loops.

    ``"forward"`` runs :func:`attnlib.kernels.tiled_forward` with ``on_tile`` and records,
    after each tile, the running max ``m`` and sum ``l`` of the query block's rows and the
    first row of its accumulator divided by ``l`` (the output so far), beside the final
    output row. ``"backward: dK, dV"`` runs :func:`attnlib.kernels.tiled_backward`, whose
    loops visit the tiles as the dK/dV kernel does (a program per key tile); ``"backward:
    dQ"`` is the dQ kernel's order (a program per query tile, the forward's loop bounds).
    The backward steps record what the program in flight has read so far, in elements of
    ``Q, K, V, dO, L, D``, and the rows of ``L`` and ``D`` it reads at this step.

    Returns:
        A tuple of dicts, one per step: ``"i"`` and ``"j"`` (query and key tile), and the
        view's records.

    Example:
        >>> [(s["i"], s["j"]) for s in tile_walk(32, 16, 16, True)]
        [(0, 0), (1, 0), (1, 1)]
    """
    for name, value in (("n", n), ("block_m", block_m), ("block_n", block_n), ("d", d)):
        check_positive_int(name, value)
    if view not in WALK_VIEWS:
        raise ValueError(f"view must be one of {WALK_VIEWS}; got {view!r}")
    gen = torch.Generator().manual_seed(seed)
    Q, K, V, dO = (torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64)
                   for _ in range(4))
    O, L = tiled_forward(Q, K, V, causal=causal, block_m=block_m, block_n=block_n)
    D = (dO * O).sum(-1)
    steps: list[dict] = []
    if view == "backward: dK, dV":
        def record(i0: int, j0: int) -> None:
            steps.append({"i": i0 // block_m, "j": j0 // block_n})

        tiled_backward(Q, K, V, O, dO, L, causal=causal, block_m=block_m, block_n=block_n,
                       on_tile=record)
    else:
        def record(i0, j0, m, l, acc) -> None:
            steps.append({"i": i0 // block_m, "j": j0 // block_n,
                          "m": m[0, 0, :, 0].tolist(), "l": l[0, 0, :, 0].tolist(),
                          "output so far": (acc[0, 0, 0] / l[0, 0, 0]).tolist(),
                          "output": O[0, 0, i0].tolist()})

        tiled_forward(Q, K, V, causal=causal, block_m=block_m, block_n=block_n,
                      on_tile=record)
    if view != "forward":
        own = "j" if view == "backward: dK, dV" else "i"  # the program's own tile
        reads: dict[str, int] = {}
        for k, step in enumerate(steps):
            if k == 0 or steps[k - 1][own] != step[own]:  # a new program loads its own tile
                reads = dict.fromkeys(_READ, 0)
                loads = ("K", "V") if own == "j" else ("Q", "dO", "L", "D")
            else:
                loads = ()
            rows = slice(step["i"] * block_m, min(n, (step["i"] + 1) * block_m))
            n_rows = rows.stop - rows.start
            keys = min(n, (step["j"] + 1) * block_n) - step["j"] * block_n
            size = {"Q": n_rows * d, "dO": n_rows * d, "L": n_rows, "D": n_rows,
                    "K": keys * d, "V": keys * d}  # elements of each tensor's tile
            each = ("Q", "dO", "L", "D") if own == "j" else ("K", "V")
            for name in (*loads, *each):
                reads[name] += size[name]
            step["read"] = dict(reads)
            step["L rows"] = L[0, 0, rows].tolist()
            step["D rows"] = D[0, 0, rows].tolist()
    return tuple(steps)


_WALK_COLOURS = ("#f2f2f2", "#c9d9e8", OKABE_ITO["blue"], OKABE_ITO["vermillion"])
_WALK_NAMES = ("skipped", "to visit", "visited", "in flight")


def tile_walk_figure(n: int = 64, block_m: int = 16, block_n: int = 16, causal: bool = True,
                     step: int = 0, view: str = "forward") -> go.Figure:
    """One step of a tile loop: the tiles, then the online softmax's state or the reads.

    The top panel shows every (query tile, key tile): skipped, still to visit, visited, and
    the one in flight; "m" marks a tile the mask cuts. Below, for the forward, the running
    max ``m`` and sum ``l`` of the query block's rows, and its first row of the output so
    far against the final output; for a backward kernel, the elements the program in flight
    has read from each tensor, and the rows of ``L`` and ``D`` it reads now. A ``step``
    past the last shows the last. Recorded by :func:`tile_walk`.

    Example:
        >>> fig = tile_walk_figure(32, 16, 16, True, step=2)
        >>> [list(row) for row in fig.data[0].z]  # the last step: tile (1, 1) in flight
        [[2, 0], [2, 3]]
    """
    steps = tile_walk(n, block_m, block_n, bool(causal), view)
    k = min(max(int(step), 0), len(steps) - 1)
    now = steps[k]
    fate = causal_tiles(n, block_m, block_n) if causal else \
        torch.full((-(-n // block_m), -(-n // block_n)), 2, dtype=torch.long)
    z = [[0 if f == 0 else 1 for f in row] for row in fate.tolist()]
    for s in steps[:k]:
        z[s["i"]][s["j"]] = 2
    z[now["i"]][now["j"]] = 3
    text = [["m" if f == 1 else "" for f in row] for row in fate.tolist()]
    fig = make_subplots(rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]],
                        row_heights=[0.55, 0.45], vertical_spacing=0.16,
                        horizontal_spacing=0.16,
                        subplot_titles=("", "m and l per row" if view == "forward" else
                                        "elements read", "first row: O so far" if view ==
                                        "forward" else "L and D of the rows"))
    scale = []
    for c, colour in enumerate(_WALK_COLOURS):
        scale += [[c / 4, colour], [(c + 1) / 4, colour]]
    fig.add_trace(go.Heatmap(z=z, zmin=-0.5, zmax=3.5, colorscale=scale, showscale=False,
                             xgap=2, ygap=2, text=text, texttemplate="%{text}",
                             customdata=[[_WALK_NAMES[c] for c in row] for row in z],
                             hovertemplate="query tile %{y}, key tile %{x}: %{customdata}"
                                           "<extra></extra>"), row=1, col=1)
    for c in range(1, 4):  # the legend of the tiles' colours
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=_WALK_NAMES[c],
                                 marker={"symbol": "square", "size": 12,
                                         "color": _WALK_COLOURS[c]}), row=1, col=1)
    fig.update_yaxes(autorange="reversed", title_text="query tile", row=1, col=1)
    fig.update_xaxes(title_text="key tile", row=1, col=1)
    if view == "forward":
        rows = list(range(len(now["m"])))
        for name, colour, dash in (("m", COLORS["main"], "solid"),
                                   ("l", COLORS["reference"], "dot")):
            fig.add_trace(go.Scatter(x=rows, y=rounded(now[name], 4), mode="lines+markers",
                                     name=f"{name}, rows of the tile", showlegend=False,
                                     line={"color": colour, "dash": dash}),
                          row=2, col=1)
        dims = list(range(len(now["output"])))
        fig.add_trace(go.Bar(x=dims, y=rounded(now["output so far"], 4), name="O so far",
                             marker={"color": COLORS["main"]}, showlegend=False),
                      row=2, col=2)
        fig.add_trace(go.Scatter(x=dims, y=rounded(now["output"], 4), mode="markers",
                                 name="final O", showlegend=False,
                                 marker={"color": COLORS["marker"], "symbol": "diamond"}),
                      row=2, col=2)
        fig.update_xaxes(title_text="row (solid m, dotted l)", row=2, col=1)
        fig.update_xaxes(title_text="dim (bars now, ◆ final)", row=2, col=2)
        program = f"query tile {now['i']}, key tile {now['j']}"
    else:
        fig.add_trace(go.Bar(x=list(_READ), y=[now["read"][t] for t in _READ],
                             marker={"color": COLORS["main"]}, showlegend=False,
                             name="elements read"), row=2, col=1)
        rows = list(range(len(now["L rows"])))
        for name, colour, dash in (("L", COLORS["main"], "solid"),
                                   ("D", COLORS["reference"], "dot")):
            fig.add_trace(go.Scatter(x=rows, y=rounded(now[f"{name} rows"], 4),
                                     mode="lines+markers", name=name, showlegend=False,
                                     line={"color": colour, "dash": dash}), row=2, col=2)
        fig.update_xaxes(title_text="tensor", row=2, col=1)
        fig.update_xaxes(title_text="row (solid L, dotted D)", row=2, col=2)
        own = f"key tile {now['j']}" if view == "backward: dK, dV" else \
            f"query tile {now['i']}"
        other = f"query tile {now['i']}" if view == "backward: dK, dV" else \
            f"key tile {now['j']}"
        program = f"program of {own}, at {other}"
    style(fig, f"{view}, N = {n}, tiles {block_m} x {block_n}{', causal' if causal else ''}"
               f"<br><sup>step {k + 1} of {len(steps)}: {program}</sup>", height=HEIGHT + 220)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom",
                              "xanchor": "left"}, margin={"t": 120, "b": 60})
    return fig


# ---------------------------------------------------------------------------------------
# the backward's memory beside a tile's on-chip budget
# ---------------------------------------------------------------------------------------

MEMORY_LENGTHS = (128, 256, 512, 1024, 2048)
"""The sequence lengths the memory explorer measures."""


@functools.lru_cache(maxsize=8)
def _memory(d: int) -> pd.DataFrame:
    return backward_memory_table(MEMORY_LENGTHS, d=d, block=64)


def backward_memory_figure(n: int = 1024, d: int = 64, block: int = 64) -> go.Figure:
    """What the backward keeps, measured up to ``n``, beside one tile's on-chip budget.

    Left: the kilobytes autograd saves for the backward of the naive path (the ``N x N``
    weights) and of the tiled one (``Q, K, V, O, L``), measured by
    :func:`backward_memory_table` at every length of :data:`MEMORY_LENGTHS` up to ``n``.
    Right: the registers and shared memory one forward program of ``block x block`` tiles
    takes (:func:`tile_budget`) with 16-bit and with 32-bit inputs, against an H100
    multiprocessor's 256 KB of registers and 228 KB of shared memory (:data:`H100_SM_KB`,
    dashed).

    Example:
        >>> fig = backward_memory_figure(256, 32, 64)
        >>> fig.data[0].x  # the lengths measured
        (128, 256)
    """
    check_positive_int("n", n)
    ns = tuple(x for x in MEMORY_LENGTHS if x <= n)
    if not ns:
        raise ValueError(f"n must be at least {MEMORY_LENGTHS[0]}; got {n}")
    table = _memory(d).loc[list(ns)]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2,
                        subplot_titles=("KB saved for backward", f"one {block} x {block} tile, KB"))
    for column, name, colour, dash in (("naive: KB saved", "naive", COLORS["reference"], "solid"),
                                       ("tiled: KB saved", "tiled", COLORS["main"], "dot")):
        fig.add_trace(go.Scatter(x=list(ns), y=rounded(list(table[column]), 1),
                                 mode="lines+markers", name=name,
                                 line={"color": colour, "dash": dash}), row=1, col=1)
    budgets = {f"{8 * b}-bit in": tile_budget(block, block, d, in_bytes=b) for b in (2, 4)}
    for k, (part, colour) in enumerate((("registers", OKABE_ITO["orange"]),
                                        ("shared", OKABE_ITO["bluish green"]))):
        fig.add_trace(go.Bar(x=list(budgets), y=[rounded(v[k], 1) for v in budgets.values()],
                             name=part, marker={"color": colour}), row=1, col=2)
    for limit in H100_SM_KB.values():
        fig.add_hline(y=limit, line={"color": COLORS["marker"], "dash": DASHES["marker"],
                                     "width": 1}, row=1, col=2)
    fig.update_xaxes(type="log", title_text="N", tickvals=list(ns),
                     ticktext=[str(x) for x in ns], row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    top = max(300.0, max(max(v) for v in budgets.values()) * 1.1)
    fig.update_yaxes(range=[0, top], row=1, col=2)
    last = table.loc[ns[-1]]
    style(fig, f"Backward memory, d = {d}: {last['saved, naive / tiled']:.1f}x at N = {ns[-1]}"
               f"<br><sup>dashed: {H100_SM_KB['registers']} KB registers, "
               f"{H100_SM_KB['shared']} KB shared (H100)</sup>",
          height=HEIGHT + 40)
    fig.update_layout(barmode="group", legend={"orientation": "h", "x": 0, "y": -0.22,
                                               "yanchor": "top"}, margin={"t": 110, "b": 120})
    return fig
