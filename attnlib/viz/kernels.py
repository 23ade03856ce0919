"""Figures and tables for lesson 13 (attention as a kernel): what the backward keeps in
memory, and which tiles a causal kernel computes, masks or skips.

Both are measured or counted, not modelled: :func:`backward_memory_table` records every tensor
autograd saves for the backward (``torch.autograd.graph.saved_tensors_hooks``) and the
largest tensor the backward creates (:func:`attnlib.viz.frontier.largest_intermediate`);
:func:`causal_tiles` classifies the tiles exactly as the kernels' loops bound them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch

from attnlib._checks import check_positive_int
from attnlib.kernels.backward import FlashAttentionTorch, attention_forward
from attnlib.viz.frontier import largest_intermediate
from attnlib.viz.style import OKABE_ITO, style


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
        colorbar={"tickvals": [1 / 3, 1, 5 / 3], "ticktext": names}))
    fig.update_yaxes(autorange="reversed", title=f"query tile ({block_m} rows)")
    fig.update_xaxes(title=f"key tile ({block_n} keys)")
    return style(fig, f"Causal tiles at N = {n}: {counts[0]} skipped, {counts[1]} masked, "
                      f"{counts[2]} whole")
