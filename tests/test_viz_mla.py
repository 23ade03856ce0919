"""Tests for attnlib.viz.mla (lesson 07): table entries against closed forms written out
here, the names against book/notation.md, the conversion errors against numpy's SVD and an
explicit per-head softmax loop, and the explorer figure's contents."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib
import attnlib.viz as viz
from attnlib.analysis.experiments import mla as em
from attnlib.viz import mla as vm

V2 = {"N_L": 60, "d": 5120, "H": 128, "d_head": 128, "d_v": 128, "d_L": 512, "d_R": 64,
      "d_LQ": 1536}  # DeepSeek-V2, section 3.1.2 of its paper


# ---------------------------------------------------------------------------------------
# names and sizes


def test_names_table_shapes_are_the_closed_forms():
    s = V2
    H = s["H"]
    expected = {
        "W_L": (s["d"], s["d_L"]), "W_LK": (s["d_L"], H * s["d_head"]),
        "W_LV": (s["d_L"], H * s["d_v"]), "W_LQ": (s["d"], s["d_LQ"]),
        "W_LQQ": (s["d_LQ"], H * s["d_head"]), "W_QR": (s["d_LQ"], H * s["d_R"]),
        "W_KR": (s["d"], s["d_R"]), "W_O": (H * s["d_v"], s["d"]),
        "gains of the latent RMSNorm": (s["d_L"],),
        "gains of the query-latent RMSNorm": (s["d_LQ"],),
        "W_LQK^h = W_LQQ^h (W_LK^h)^T": (H, s["d_LQ"], s["d_L"]),
        "W_LO = blockdiag(W_LV^h) W_O": (H * s["d_L"], s["d"]),
    }
    table = em.names_table()
    assert list(table.index) == list(expected)
    for name, shape in expected.items():
        assert table.loc[name, "shape at DeepSeek-V2"] == str(shape)


def _notation_rows() -> dict[str, str]:
    """attnlib name -> the whole row of book/notation.md's names table."""
    text = (Path(__file__).resolve().parents[1] / "book" / "notation.md").read_text()
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| \$[^|]*\$ \| `(W_\w+)` ", line)
        if match:
            rows[match[1]] = line
    return rows


def test_names_agree_with_the_notation_page():
    rows = _notation_rows()
    for _paper, ours, deepseek, hf in em.NAMES[:8]:  # the eight weight matrices
        row = rows[ours]
        plain = row.replace("{", "").replace("}", "").replace("$", "")
        assert deepseek in plain, (ours, deepseek, row)
        hf_names = re.findall(r"[a-z]\w*_\w+|o_proj", hf)
        for name in hf_names:
            assert f"`{name}`" in row, (ours, name, row)


def test_cache_table_matches_closed_forms():
    s = V2
    table = em.cache_table()
    mha, latent, both = 2 * s["H"] * s["d_head"], s["d_L"], s["d_L"] + s["d_R"]
    assert table["numbers / token / layer"].tolist() == [mha, latent, both]
    assert table["bytes / token, all layers"].tolist() == [v * s["N_L"] * 2
                                                           for v in (mha, latent, both)]
    assert table["MHA / this"].tolist() == [1.0, 64.0, round(mha / both, 2)]
    assert table["same as GQA with G ="].tolist() == [128.0, 2.0, 2.25]


def test_decode_cost_table_matches_closed_forms():
    s = V2
    H, dh, dv, dL, dR, dLQ, d = (s[k] for k in ("H", "d_head", "d_v", "d_L", "d_R", "d_LQ", "d"))
    table = em.decode_cost_table(contexts=(4096,))
    proj = d * dLQ + dLQ * H * (dh + dR) + d * (dL + dR) + H * dv * d
    n = 4096
    expected = {  # path: (numbers cached per token, multiply-adds)
        "expanded": (H * (dh + dv) + dR, proj + dL * H * (dh + dv) + n * H * (dh + dR + dv)),
        "rebuilt": (dL + dR, proj + n * (dL * H * (dh + dv) + H * (dh + dR + dv))),
        "absorbed": (dL + dR, proj + H * dh * dL + H * dL * dv + n * H * (2 * dL + dR)),
    }
    for path, (values, macs) in expected.items():
        row = table.loc[(n, em.PATH_LABELS[path])]
        assert row["cache read, MB"] == round(n * values * 2 / 1e6, 1)
        assert row["multiply-adds, millions"] == round(macs / 1e6, 1)
    assert table.loc[(n, em.PATH_LABELS["absorbed"]), "attention multiply-adds per cache byte"] \
        == round(H * (2 * dL + dR) / ((dL + dR) * 2), 2)
    assert table.index.names == ["context n", "path"]


@pytest.mark.parametrize(("fn", "error"), [
    (lambda: em.cache_table(attnlib.analysis.memory.LLAMA3_8B), ValueError),
    (lambda: em.decode_cost_table("DeepSeek-V2"), TypeError),
    (lambda: em.names_table(attnlib.analysis.memory.LLAMA3_70B), ValueError),
])
def test_tables_reject_models_without_a_latent(fn, error):
    with pytest.raises(error, match="spec"):
        fn()


# ---------------------------------------------------------------------------------------
# GQA -> MLA


def _documented_source(seed: int):
    c = vm.CONVERSION
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gqa = attnlib.GroupedQueryAttention(c["d_in"], c["n_heads"], c["n_kv_heads"],
                                            c["d_head"], dtype=torch.float64)
    X = torch.randn(1, c["n_tokens"], c["d_in"], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed))
    return gqa, X


def _softmax_loop_error(gqa, X, r: int) -> float:
    """Relative output error of the rank-r conversion, in numpy, head by head."""
    mla = attnlib.mla_from_mha(gqa, r)
    p = {k: v.detach().numpy() for k, v in mla.named_parameters()}
    x = X[0].numpy()
    H, dh, n = gqa.n_heads, gqa.d_head, x.shape[0]
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    Ys = []
    for h in range(H):
        c = slice(h * dh, (h + 1) * dh)
        q = x @ p["W_LQQ"][:, c]
        k, v = x @ p["W_L"] @ p["W_LK"][:, c], x @ p["W_L"] @ p["W_LV"][:, c]
        S = np.where(future, -np.inf, q @ k.T / math.sqrt(dh))
        P = np.exp(S - S.max(axis=1, keepdims=True))
        Ys.append(P / P.sum(axis=1, keepdims=True) @ v)
    Y = np.concatenate(Ys, axis=1) @ p["W_O"]
    Y_ref = gqa(X, causal=True)[0].detach().numpy()
    return float(np.linalg.norm(Y - Y_ref) / np.linalg.norm(Y_ref))


@pytest.mark.parametrize("seed", [vm.SEED, 0, 5])
def test_conversion_errors_against_numpy(seed):
    errors = vm.conversion_errors(seed=seed)
    gqa, X = _documented_source(seed)
    W_KV = torch.cat((gqa.W_K, gqa.W_V), dim=1).detach().numpy()
    s = np.linalg.svd(W_KV, compute_uv=False)
    assert [e["d_L"] for e in errors] == list(range(1, 17))
    for e in errors:
        tail = math.sqrt((s[e["d_L"]:] ** 2).sum()) / math.sqrt((s ** 2).sum())
        assert e["eckart_young"] == pytest.approx(tail, abs=1e-12)
        assert e["weight"] == pytest.approx(tail, abs=1e-9)  # the truncated SVD attains it
    for a, b in itertools.pairwise(errors):
        assert b["weight"] <= a["weight"] + 1e-12 and b["kv"] <= a["kv"] + 1e-12
    assert errors[-1]["output"] < 1e-9 and errors[-1]["output_max"] < 1e-9
    for r in (1, 8, 9, 15):
        assert errors[r - 1]["output"] == pytest.approx(_softmax_loop_error(gqa, X, r), abs=1e-9)


def test_conversion_table_flags_the_rises():
    table = em.conversion_table()
    out = table["output error"]
    rose = [k for k in range(2, 17) if out[k] > out[k - 1]]
    assert table.index[table["output error rose"]].tolist() == rose == [3, 9, 10]
    assert table.loc[16].tolist()[:3] == [0.0, 0.0, 0.0]


def test_conversion_errors_leave_the_global_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    threads = torch.get_num_threads()
    vm.conversion_errors(seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("d_latent", [1, 8, 16])
def test_latent_width_figure(d_latent):
    fig = vm.latent_width_figure(d_latent=d_latent)
    assert isinstance(fig, go.Figure)
    assert {type(t).__name__ for t in fig.data} <= {"Bar", "Scatter"}
    bars = fig.data[0]
    assert list(bars.y) == [64, 16, d_latent]  # 2 H d_head, 2 G d_head, d_L
    errors = vm.conversion_errors()
    marker = [t for t in fig.data if isinstance(t, go.Scatter) and len(t.x) == 1]
    assert [t.x[0] for t in marker] == [d_latent, d_latent]
    assert marker[1].y[0] == round(errors[d_latent - 1]["output"], 4)
    title = fig.layout.title.text
    assert f"d_L = {d_latent}" in title
    assert ("up to rounding" in title) == (d_latent == 16)
    assert any("exact: d_L = 2·G·d_head = 16" in a.text for a in fig.layout.annotations)


@pytest.mark.parametrize("d_latent", [0, 17])
def test_latent_width_figure_rejects_widths_outside_the_range(d_latent):
    with pytest.raises(ValueError, match="d_latent"):
        vm.latent_width_figure(d_latent=d_latent)


def test_latent_width_twin_is_small_and_has_every_width():
    fig = viz.twin(vm.latent_width_figure, "d_latent", list(range(1, 17)), active=7)
    assert len(fig.layout.sliders[0].steps) == 16
    assert len(fig.to_json()) < 1_000_000


def test_mla_module_is_reachable_from_attnlib_viz():
    assert attnlib.viz.mla is vm
