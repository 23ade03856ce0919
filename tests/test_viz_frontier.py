"""Tests for attnlib.viz.frontier: the tables against closed forms and explicit loops, the
figures against the tables, and the explorer's two forms."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

import attnlib.viz as viz
from attnlib.analysis.experiments import frontier as ef
from attnlib.viz import frontier as vf


def test_largest_intermediate_counts_the_biggest_tensor():
    X = torch.ones(5, 3)
    assert ef.largest_intermediate(lambda A: A @ A.T, X) == 25
    assert ef.largest_intermediate(lambda A: (A.T @ A).sum(), X) == 9


def test_tiling_table_is_n_squared_against_n_times_block():
    table = vf.tiling_table((64, 128), block_size=16, d=8)
    assert table["explicit: elements"].tolist() == [64 * 64, 128 * 128]
    assert table["tiled: elements"].tolist() == [64 * 16, 128 * 16]
    assert table["ratio"].tolist() == [4.0, 8.0]
    fig = vf.tiling_figure((64, 128), block_size=16, d=8)
    assert isinstance(fig, go.Figure) and len(fig.data) == 4
    assert list(fig.data[0].y) == [64 * 64 * 4 / 1000, 128 * 128 * 4 / 1000]
    assert table["explicit: kB"].tolist() == [16.4, 65.5]
    assert "8× smaller" in fig.layout.title.text


def test_io_table_closed_forms():
    table = ef.io_table((256,), d=32, block_q=64)
    n, d, b = 256, 32, 64
    row = table.loc[n]
    assert row["multiply-adds (both)"] == 2 * n * n * d
    assert row["traffic explicit"] == 4 * n * n + 4 * n * d
    assert row["traffic tiled"] == 2 * n * d + 2 * n * n * d // b
    assert row["traffic ratio"] == round(
        (4 * n * n + 4 * n * d) / (2 * n * d + 2 * n * n * d // b), 2
    )


def test_topk_table_errors_and_costs():
    table = vf.topk_table((1, 4, 32), n=32, d=8, d_index=2)
    assert (
        table.loc[32, "error, exact top-k"] == 0.0 and table.loc[32, "error, indexer top-k"] == 0.0
    )
    errs = table["error, exact top-k"].tolist()
    assert errs[0] > errs[1] > errs[2]
    # cost at k = N: full attention plus the indexer, closed form
    visible = sum(range(1, 33))
    expected = (visible * 2 * 8 + visible * 2 + 2 * 32 * 8 * 2) / (visible * 2 * 8)
    assert table.loc[32, "cost / full"] == round(expected, 4)
    fig = vf.topk_figure((1, 4, 32), n=32, d=8, d_index=2)
    assert len(fig.data) == 3 and list(fig.data[2].y) == table["cost / full"].tolist()


def test_feature_errors_fall_with_r_and_match_a_direct_estimate():
    table = vf.feature_errors((4, 64))
    assert (table.loc[64] < table.loc[4]).iloc[:4].all()
    assert (
        table.loc[64, "√r × error of A, i.i.d."]
        == round(8 * table.loc[64, "error of A, i.i.d."], 3)
        or abs(table.loc[64, "√r × error of A, i.i.d."] - 8 * table.loc[64, "error of A, i.i.d."])
        < 1e-3
    )


def test_feature_count_figure_and_twin():
    fig = vf.feature_count_figure(r=16, orthogonal=True)
    assert "r = 16 (orthogonal)" in fig.layout.title.text
    scatter = fig.data[1]
    assert len(scatter.x) == 16 * 16
    # the exact kernel on the x axis, computed independently
    gen = torch.Generator().manual_seed(0)
    Q = torch.randn(16, 8, generator=gen, dtype=torch.float64) * 0.5
    K = torch.randn(16, 8, generator=gen, dtype=torch.float64) * 0.5
    A = torch.exp(Q @ K.T / math.sqrt(8))
    np.testing.assert_allclose(scatter.x, A.flatten().numpy(), atol=5.1e-4)  # 3 decimals
    twin = viz.twin(vf.feature_count_figure, "r", [1, 4])
    assert len(twin.layout.sliders[0].steps) == 2


def test_feature_count_figure_rejects_bad_r():
    with pytest.raises(ValueError, match="r"):
        vf.feature_count_figure(r=0)


def test_sink_table_no_gate_needs_the_sink():
    table = ef.sink_table((0.1, 0.01))
    assert isinstance(table, pd.DataFrame)
    no_gate = table["share on token 0, no gate"].tolist()
    assert no_gate[1] > no_gate[0] > 0.5  # tighter tolerance, more weight on token 0
    assert (table["share on token 0, gated"] < 1 / 16 + 0.01).all()
    assert table["largest idle |y|, gated"].tolist() == [0.1, 0.01]


def test_needle_table_closed_form():
    table = ef.needle_table((4096,), gap=10.0)
    logits = torch.zeros(4096, dtype=torch.float64)
    logits[0] = 10.0
    assert table.iloc[0, 0] == round(float(torch.softmax(logits, 0)[0]), 4)
    assert table.iloc[0, 1] == round(math.log(4095), 2)


def test_first_token_table_matches_the_probe_per_layer():
    from attnlib.layers import TinyDecoder
    from attnlib.models import probes

    model = TinyDecoder(vocab_size=11, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=32,
                        seed=0).eval()
    ids = torch.randint(0, 11, (3, 9), generator=torch.Generator().manual_seed(0))
    table = vf.first_token_table({"m": model}, ids)
    share = probes.first_token_share(model, ids)
    assert list(table.index) == [0, 1]
    assert table["m: mean over heads"].tolist() == share.mean(dim=-1).numpy().round(4).tolist()
    assert table["m: largest head"].tolist() == share.amax(dim=-1).numpy().round(4).tolist()
    # shares of attention weights: in (0, 1]
    assert (table.to_numpy() <= 1).all() and (table.to_numpy() > 0).all()
    # zero queries make every logit 0: uniform causal weights, whose share on position 0 is
    # the mean over queries i = 1 .. N-1 of 1 / (i + 1), written out here
    with torch.no_grad():
        for block in model.blocks:
            block.attn.W_Q.zero_()
    uniform = round(sum(1 / (i + 1) for i in range(1, 9)) / 8, 4)
    table = vf.first_token_table({"m": model}, ids)
    assert table.to_numpy().tolist() == [[uniform, uniform], [uniform, uniform]]
