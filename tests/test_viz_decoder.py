"""Tests for attnlib.models.assemble.divergence_table and attnlib.viz.decoder: the table holds
every comparison first_divergence makes, in its order, and the heat map draws exactly it."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.models.assemble import Pieces, divergence_table, first_divergence
from attnlib.models.pretrained import load
from attnlib.viz.decoder import FLOOR, divergence_figure


@pytest.fixture(scope="module")
def book():
    return load("book", dtype=torch.float64)


IDS = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8]])


def no_scale(Q, K, V):
    return Pieces().attend(Q * Q.shape[-1] ** 0.5, K, V)


def test_attnlibs_own_pieces_agree_at_every_place(book):
    t = divergence_table(book, Pieces(), IDS, steps=2)
    n_layers = len(book.blocks)
    places = ["embed"] + [f"L{i} {s}" for i in range(n_layers)
                          for s in ("attention", "feed-forward")] + ["logits"]
    assert t["place"].tolist() == places * 3
    assert t["step"].tolist() == sorted([0, 1, 2] * len(places))
    assert float(t["max |diff|"].max()) < 1e-12 and (t["rtol"] == 1e-9).all()


def test_the_table_agrees_with_first_divergence_and_keeps_going(book):
    pieces = Pieces().replace(attend=no_scale)
    t = divergence_table(book, pieces, IDS, steps=2)
    first = first_divergence(book, pieces, IDS, steps=2)
    apart = t[~(t["relative"] <= t["rtol"])]
    row = apart.iloc[0]
    assert (row["step"], row["place"]) == (first.step, f"L{first.layer} attention")
    assert row["max |diff|"] == pytest.approx(first.max_diff, rel=1e-12)
    assert len(apart) > 1 and set(apart["step"]) == {0, 1, 2}  # it goes on past the first


def test_a_wrong_shape_is_infinitely_far(book):
    def narrow(*args, **kwargs):  # logits one entry short of the vocabulary
        return Pieces().forward(*args, **kwargs)[..., :-1]

    t = divergence_table(book, Pieces().replace(forward=narrow), IDS, steps=1)
    logits = t[t["place"] == "logits"]
    assert len(logits) == 2 and (logits["max |diff|"] == math.inf).all()
    assert float(t.loc[t["place"] != "logits", "max |diff|"].max()) < 1e-12
    fig = divergence_figure("narrow", "book", tables={("narrow", "book"): t})
    assert [row[-1] for row in fig.data[0].z] == [1.0, 1.0]  # drawn at the top of the scale


def test_figure_draws_the_table(book):
    pieces = Pieces().replace(attend=no_scale)
    tables = {("no scale", "book"): divergence_table(book, pieces, IDS, steps=1),
              ("none", "book"): divergence_table(book, Pieces(), IDS, steps=1)}
    fig = divergence_figure("no scale", "book", tables=tables)
    t = tables[("no scale", "book")]
    z = [list(r) for r in fig.data[0].z]
    assert len(z) == 2 and len(z[0]) == len(t) // 2
    for k, (_, row) in enumerate(t.iterrows()):
        want = FLOOR if row["relative"] <= row["rtol"] else \
            max(FLOOR, min(1.0, math.log10(row["relative"])))
        assert z[k // len(z[0])][k % len(z[0])] == pytest.approx(want, abs=0.051)
    assert "first apart: step 0, L0 attention" in fig.layout.title.text
    same = divergence_figure("none", "book", tables=tables).layout.title.text
    assert "agrees everywhere (relative difference at most 1e-09)" in same


def test_a_case_not_run_names_what_ran(book):
    tables = {("none", "book"): divergence_table(book, Pieces(), IDS)}
    with pytest.raises(ValueError,
                       match=r"no run of 'none' on 'G = 2'; that case ran on \['book'\]"):
        divergence_figure("none", "G = 2", tables=tables)


def test_text_figure_colours_exactly_the_characters_that_differ():
    from attnlib.viz.decoder import text_figure

    ours, theirs = "the same size of ", "the sane size of "
    fig = text_figure("c", "m", written={("c", "m"): (list(ours), list(theirs))}, per_row=8)
    z = [list(r) for r in fig.data[0].z]
    assert len(z) == 6  # three rows of 8 characters, attnlib's above the reader's
    flagged = [r * 8 + k for r in range(3) for k, v in enumerate(z[2 * r + 1]) if v == 2]
    assert flagged == [k for k, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert fig.layout.title.text.endswith("first differs at character 6 of 17: n for m</sup>")
    assert fig.data[0].text[0][3] == "␣"  # a space is shown, not left blank
    with pytest.raises(ValueError, match="one length in tokens; got 2 and 3"):
        text_figure("c", "m", written={("c", "m"): ("ab", "abc")})


def test_a_special_token_takes_one_cell():
    from attnlib.viz.decoder import text_figure

    fig = text_figure("c", "m", written={("c", "m"): (["a", "b"], ["a", "<pad>"])})
    assert list(fig.data[0].text[1][:2]) == ["a", "▯"]
