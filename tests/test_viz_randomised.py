"""Tests for attnlib.viz.randomised: the toy against its recipe, the tables against closed forms,
explicit computations and the bounds they print, the figures against the tables, and the
explorer's two forms.

The tables are seeded, so these checks give the same verdict on every run; where a check
compares a measured error with a bound, the margin in the lesson's settings is two orders of
magnitude or more (see the tables), far beyond the draws' noise.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
import torch.nn.functional as F

import attnlib.viz as viz
from attnlib.analysis import randomised as R
from attnlib.analysis.experiments import randomised as er
from attnlib.viz import randomised as vr

F64 = torch.float64


def test_retrieval_head_follows_its_recipe():
    Q, K, V, targets = er.retrieval_head(8.0, n=32, d=16, seed=3)
    gen = torch.Generator().manual_seed(3)
    K_ref = torch.randn(32, 16, generator=gen, dtype=F64)
    K_ref = K_ref * torch.exp(0.25 * torch.randn(32, 1, generator=gen, dtype=F64))
    V_ref = torch.randn(32, 16, generator=gen, dtype=F64)
    t_ref = torch.randint(32, (32,), generator=gen)
    noise = torch.randn(32, 16, generator=gen, dtype=F64)
    assert torch.equal(K, K_ref) and torch.equal(V, V_ref) and torch.equal(targets, t_ref)
    torch.testing.assert_close(Q, 8.0 * (K_ref[t_ref] + 0.3 * noise) / 4.0)
    # the peaked head puts its weight on the targets, the flat one does not
    weights = {}
    for name, beta in er.SHARPNESS.items():
        Qb, Kb, _, tb = er.retrieval_head(beta)
        P = torch.softmax(Qb @ Kb.T / 8.0, dim=-1)
        weights[name] = float(P[torch.arange(256), tb].mean())
    assert weights["peaked"] > 0.5 > 0.05 > weights["flat"]


def test_retrieval_head_returns_copies():
    Q, *_ = er.retrieval_head(1.0)
    Q.zero_()
    assert er.retrieval_head(1.0)[0].abs().sum() > 0


def test_proposals_are_distributions_and_P_is_softmax():
    Q, K, _, _ = er.retrieval_head(8.0)
    props = er.proposals(Q, K)
    assert list(props) == list(vr.PROPOSALS)
    for rho in props.values():
        torch.testing.assert_close(rho.sum(-1), torch.ones(256, dtype=F64))
    torch.testing.assert_close(props["attention weights"], torch.softmax(Q @ K.T / 8.0, -1))


def test_importance_table_below_the_bound_and_first_order_of_P_exact():
    table = er.importance_table((16, 64))
    assert isinstance(table, pd.DataFrame) and (table["draws"] == 200).all()
    assert (table["E|y_hat - y|^2 (measured)"] <= table["bound"]).all()
    assert (table.loc["attention weights", "ESS / m"] == 1.0).all()
    # first order for rho = P is Var_{P_0}(V) / m exactly, by an explicit sum
    Q, K, V, _ = er.retrieval_head(8.0)
    p = torch.softmax(Q[0] @ K.T / 8.0, -1)
    var = float((p * (V - p @ V).pow(2).sum(-1)).sum())
    for m in (16, 64):
        assert table.loc[("attention weights", m), "first order"] == pytest.approx(var / m,
                                                                                  rel=1e-3)
    # and the sketch keeps more effective draws than uniform sampling on the peaked head
    assert table.loc[("sketch", 16), "ESS / m"] > table.loc[("uniform", 16), "ESS / m"]


def test_importance_bound_formula():
    P = torch.tensor([0.5, 0.5], dtype=F64)
    V = torch.tensor([[0.0, 2.0], [2.0, 0.0]], dtype=F64)  # y = (1, 1)
    rho = torch.tensor([0.25, 0.75], dtype=F64)
    rho_bar = 0.25 / 0.25 + 0.25 / 0.75
    assert float(er.importance_bound(P, V, rho, 4)) == pytest.approx(4 * rho_bar * 2 / 4)


def test_proposal_figure_and_twin():
    fig = vr.proposal_figure("sketch", 16, "peaked")
    assert isinstance(fig, go.Figure) and len(fig.data) == 9
    assert "peaked head, sketch, m = 16" in fig.layout.title.text
    table = er.proposal_errors("peaked", "sketch", vr.SAMPLE_COUNTS)
    measured = [round(math.sqrt(e), 4) for e in table["E|y_hat - y|^2 (measured)"]]
    sketch_curve = next(t for t in fig.data if t.name == "measured, sketch")
    assert list(sketch_curve.y) == pytest.approx(measured, rel=1e-3)
    from attnlib.viz.style import OKABE_ITO

    pale = {OKABE_ITO["sky blue"], OKABE_ITO["yellow"]}
    for trace in fig.data:  # every series legible: opaque, no pale colour, lines of 2 px or more
        assert trace.opacity in (None, 1.0), trace.name
        assert trace.marker.color not in pale, trace.name
        if trace.type == "scatter" and "lines" in trace.mode:
            assert trace.line.color not in pale and trace.line.width >= 2, trace.name
    curves = [t for t in fig.data if (t.name or "").startswith("measured, ")]
    assert len({t.line.color for t in curves}) == len({t.marker.symbol for t in curves}) == 4
    assert max(curves, key=lambda t: t.line.width) is sketch_curve  # the chosen one bold
    twin = viz.twin(vr.proposal_figure, ("proposal", "sharpness"),
                    [("uniform", "flat"), ("sketch", "peaked")], m=16)
    assert len(twin.layout.sliders[0].steps) == 2
    with pytest.raises(ValueError, match="proposal must be one of"):
        vr.proposal_figure("softmax")
    with pytest.raises(ValueError, match="m must be one of"):
        vr.proposal_figure("sketch", 3)


def test_sampling_topk_table_costs_and_shape():
    table = er.sampling_topk_table((4, 16), draws=2)
    assert list(table.columns) == ["Monte Carlo from P", "top-k, exact logits",
                                   "importance, sketch", "top-k, sketch"]
    Q, K, V, _ = er.retrieval_head(8.0)
    Y = F.scaled_dot_product_attention(Q, K, V)
    from attnlib.analysis.approx import topk_attention
    err = float((topk_attention(Q, K, V, 16) - Y).norm() / Y.norm())
    assert table.loc[16, "top-k, exact logits"] == round(err, 3)
    assert (table.diff().iloc[1:] < 0).all().all()  # more keys, smaller errors


def test_product_table_matches_the_exact_formula_and_the_bound():
    table = er.product_table((16,), draws=50)
    Q, K, V, _ = er.retrieval_head(8.0)
    A = torch.exp(Q @ K.T / 8.0)
    AV = A @ V
    formula = float(R.sampled_product_mse(A, V, 16).sqrt() / AV.norm())
    assert table.loc[16, "optimal: formula"] == round(formula, 3)
    assert table.loc[16, "optimal: measured"] <= table.loc[16, "bound |A| |V| / √m"]
    assert table.loc[16, "optimal: formula"] < table.loc[16, "uniform: formula"]


def test_sketch_table_variance_and_tail():
    table = er.sketch_table((16, 64), draws=1000)
    assert table["variance / formula"].between(0.85, 1.15).all()
    tail = table.columns[2]
    assert tail.startswith("P(|error| > 0.5")
    assert (table[tail] <= table["bound"]).all()
    assert table.loc[64, "bound"] == round(4 * math.exp(-64 * (0.25 - 0.125) / 4), 4)
    with pytest.raises(ValueError, match="eps must lie in"):
        er.sketch_table(eps=1.5)


def test_select_weight_table_selection_beats_weighting_at_small_r():
    table = er.select_weight_table((8, 32), draws=2)
    found = table["target in the sketch's top k"]
    assert found.loc[32] >= found.loc[8]
    assert (table["error, sketch selects"] < table["error, sketch weights"]).all()


def test_sequence_rank_table_nystrom_flat_better_than_peaked():
    table = er.sequence_rank_table((8, 32))
    assert table.index.names == ["head", "r"]
    nys = table["Nystrom, segment means"]
    assert (nys.loc["flat"].values < nys.loc["peaked"].values).all()


def test_structure_table_mla_needs_a_decaying_spectrum():
    table = er.structure_table()
    mla = table["error, MLA d_L = 16"]
    assert (mla.loc["decaying"].values < 0.1).all() and (mla.loc["flat"].values > 0.3).all()
    nys = table["error, Nystrom r = 32"]
    for spectrum in ("flat", "decaying"):
        assert nys.loc[(spectrum, "flat")] < nys.loc[(spectrum, "peaked")]


def test_svd_table_below_the_bound_and_never_better_than_eckart_young():
    table = er.svd_table(((4, 0), (4, 1)), rank=8, draws=20)
    assert (table["spectral error, mean"] <= table["bound on the mean"]).all()
    assert (table["spectral error, mean"] >= table["exact SVD: s_k"] - 1e-4).all()
    assert (table["Frobenius / Eckart-Young"] >= 1 - 1e-4).all()
    assert table.loc[(4, 1), "Frobenius / Eckart-Young"] < table.loc[(4, 0),
                                                                     "Frobenius / Eckart-Young"]


def test_feature_bias_table_falls_like_one_over_r():
    table = er.feature_bias_table((4, 64))
    assert table.loc[64, "|bias| (measured)"] < table.loc[4, "|bias| (measured)"] / 8
    assert (table["|bias| (measured)"] > 3 * table["standard error"]).all()
    with pytest.raises(ValueError, match="multiple of 500"):
        er.feature_bias_table(draws=1234)


def test_delta_bias_against_monte_carlo_of_the_moments():
    """The closed-form second moments of one feature against 400,000 sampled features."""
    Q, K, _ = er.feature_head()
    root = 8 ** -0.25
    Omega = torch.randn(8, 400_000, generator=torch.Generator().manual_seed(5), dtype=F64)
    q, k = Q[0] * root, K * root
    f = torch.exp((q + k) @ Omega - (q.pow(2).sum() + k.pow(2).sum(-1, keepdim=True)) / 2)
    second = f @ f.T / f.shape[1]  # E f_j f_l, estimated
    x = 2 * q + k[:, None, :] + k[None, :, :]
    exact = torch.exp(x.pow(2).sum(-1) / 2 - q.pow(2).sum()
                      - (k.pow(2).sum(-1)[:, None] + k.pow(2).sum(-1)[None, :]) / 2)
    torch.testing.assert_close(second, exact, rtol=0.05, atol=0)


def test_estimator_table_respects_the_budget():
    table = er.estimator_table(0.25)
    assert list(table.index) == [e for e in R.ESTIMATORS if e != "exact"]
    hungry = {"monte carlo", "top-k, exact logits", "sampled product", "sketched logits"}
    for estimator, row in table.iterrows():
        limit = 0.75 if estimator in hungry else 0.25
        assert row["multiply-adds / exact"] <= limit + 1e-9
        assert row["size"] >= 1
        # one more sample, key or row would break the budget
        cost = R.multiply_adds(estimator, 256, 256, 64, 64, int(row["size"]) + 1, d_sketch=16)
        assert cost > limit * R.multiply_adds("exact", 256, 256, 64, 64, 0)
    assert table.loc["top-k, exact logits", "error, peaked head"] < 0.1
    with pytest.raises(ValueError, match="fraction must lie in"):
        er.estimator_table(1.5)


def test_trained_heads_reproduce_each_attention_output():
    """P and V of every layer give that layer's attention output, by the model's own call."""
    from attnlib.core.heads import merge_heads
    from attnlib.models import pretrained, tasks

    model = pretrained.load(vr.TRAINED_MODEL).to(F64)
    ids, _ = tasks.book_held_out(n_tokens=128, n_windows=1)
    heads = vr.trained_heads()
    assert len(heads) == len(model.blocks)
    h = model.E[ids]
    with torch.no_grad():
        for block, (P, V) in zip(model.blocks, heads, strict=True):
            X = block.attn_norm(h)
            assert P.shape == (4, 128, 128) and V.shape == (4, 128, 16)
            torch.testing.assert_close(merge_heads(P @ V)[None] @ block.attn.W_O,
                                       block.attn(X, causal=True))
            h = block(h, causal=True)
        torch.testing.assert_close(model.final_norm(h) @ model.output_weights(), model(ids))
    heads[0][0].zero_()  # copies: the cached heads stay as they were
    assert vr.trained_heads()[0][0].abs().sum() > 0


def test_trained_product_table_formula_bound_and_optimality():
    table = vr.trained_product_table((8, 32), draws=50)
    assert table.index.names == ["layer", "m"] and (table["draws"] == 50).all()
    P, V = vr.trained_heads()[2]
    Y = P @ V
    # the exact expected error by an explicit sum over the heads and keys, for m = 32
    mse = 0.0
    for h in range(P.shape[0]):
        c = [float(P[h, :, j].norm() * V[h, j].norm()) for j in range(P.shape[-1])]
        mse += (sum(c) ** 2 - float(Y[h].pow(2).sum())) / 32
    assert table.loc[(2, 32), "optimal: formula"] == round(math.sqrt(mse) / float(Y.norm()), 3)
    assert (table["optimal: measured"] <= table["bound |P| |V| / √m"]).all()
    assert (table["optimal: formula"] < table["uniform: formula"]).all()
    # with 50 draws the measurement is within 10 % of the exact expectation
    ratio = table["optimal: measured"] / table["optimal: formula"]
    assert ratio.between(0.9, 1.1).all()
