"""Tests for the trained-model dial of lessons 06 and 07 (attnlib.viz.trained, with
attnlib.viz.gqa.trained_* and attnlib.viz.mla.trained_*): cache bytes against the closed
forms, losses against the metrics each model's card recorded when it was trained, and the
figures' marked setting and numbers against the table."""

from __future__ import annotations

import math

import pytest

import attnlib
from attnlib.viz import gqa as vg
from attnlib.viz import mla as vm
from attnlib.viz import trained as vt

N_LAYERS, N_HEADS, D_HEAD, FLOAT32 = 4, 4, 16, 4  # the book models' shape


def test_gqa_table_cache_is_the_closed_form_and_pooling_to_h_changes_nothing():
    table = vg.trained_table()
    assert list(table.index) == [4, 2, 1]
    for G in table.index:  # 2 N_L G d_head bytes per token, in float32
        assert table.loc[G, vt.CACHE] == 2 * N_LAYERS * G * D_HEAD * FLOAT32
    assert table.attrs["source cache"] == table.loc[4, vt.CACHE]
    assert table.loc[4, vt.CONVERTED] == table.attrs["source loss"]  # G = H: exact
    assert math.isnan(table.loc[4, vt.AFTER])  # no uptraining ships at G = H
    assert table.attrs["uniform loss"] == round(math.log(101), 3)


def test_mla_table_cache_is_the_closed_form_and_the_full_latent_is_exact():
    table = vm.trained_table()
    assert list(table.index) == list(vm.TRAINED_LATENTS)
    for d_L in table.index:  # N_L d_L numbers per token
        assert table.loc[d_L, vt.CACHE] == N_LAYERS * d_L * FLOAT32
    assert table.attrs["source cache"] == 2 * N_LAYERS * N_HEADS * D_HEAD * FLOAT32
    assert table.loc[2 * N_HEADS * D_HEAD, vt.CONVERTED] == table.attrs["source loss"]
    shipped = [d_L for d_L in table.index if not math.isnan(table.loc[d_L, vt.AFTER])]
    assert shipped == [16, 32, 64]
    assert table[vt.CONVERTED].is_monotonic_decreasing  # on this model, as lesson 07 says


@pytest.mark.parametrize(("name", "conversion", "value"),
                         [("book", "n_kv_heads", 2), ("book-nope", "d_latent", 16)])
def test_losses_reproduce_the_cards_on_the_cards_held_out_text(name, conversion, value):
    # The cards were written when the fine-tunes were trained, on all 64 held-out windows.
    table = vt.dial_table(name, conversion, (value,), n_windows=64)
    card = attnlib.pretrained.card(name, **{conversion: value})
    assert table.loc[value, vt.CONVERTED] == round(card["held_out_converted"]["loss"], 3)
    assert table.loc[value, vt.AFTER] == round(card["held_out"]["loss"], 3)
    assert table.attrs["source loss"] == round(card["held_out_base"]["loss"], 3)


def test_dial_table_is_computed_once_and_returned_as_a_copy():
    first = vg.trained_table()
    first.loc[2, vt.CONVERTED] = -1.0
    first.attrs["source loss"] = -1.0
    again = vg.trained_table()
    assert again.loc[2, vt.CONVERTED] > 0 and again.attrs["source loss"] > 0


@pytest.mark.parametrize(("figure", "value", "others"),
                         [(vg.trained_figure, 2, vg.TRAINED_KV_HEADS),
                          (vm.trained_figure, 32, vm.TRAINED_LATENTS)])
def test_figure_marks_the_setting_and_states_its_numbers(figure, value, others):
    table = (vg if figure is vg.trained_figure else vm).trained_table()
    fig = figure(value)
    bars = next(t for t in fig.data if t.type == "bar")
    assert list(bars.x) == [str(v) for v in others]
    assert list(bars.y) == [int(b) for b in table[vt.CACHE]]
    marked = [t for t in fig.data if t.type == "scatter" and t.showlegend is False]
    assert [t.x for t in marked] == [(str(value),)] * 2  # converted and fine-tuned, ringed
    assert {t.y[0] for t in marked} == {table.loc[value, vt.CONVERTED], table.loc[value, vt.AFTER]}
    title = fig.layout.title.text
    assert f"{table.loc[value, vt.CONVERTED]:.3f}" in title
    assert f"{int(table.loc[value, vt.CACHE]):,} cache bytes" in title


def test_figure_without_a_fine_tune_marks_only_the_conversion():
    fig = vm.trained_figure(128)
    marked = [t for t in fig.data if t.type == "scatter" and t.showlegend is False]
    assert len(marked) == 1 and "after 100 steps" not in fig.layout.title.text


def test_twins_offer_every_setting():
    for figure, name, values in ((vg.trained_figure, "n_kv_heads", vg.TRAINED_KV_HEADS),
                                 (vm.trained_figure, "d_latent", vm.TRAINED_LATENTS)):
        fig = attnlib.viz.twin(figure, name, list(values))
        assert len(fig.layout.sliders[0].steps) == len(values)
        assert len(fig.to_json()) < 200_000


@pytest.mark.parametrize(("call", "message"), [
    (lambda: vg.trained_figure(3), "n_kv_heads must be one of"),
    (lambda: vm.trained_figure(12), r"d_latent must be one of \[8, 16, 32, 64, 96, 128\]; got 12"),
    (lambda: vt.dial_table("book", "heads", (2,)), "conversion must be one of"),
    (lambda: vg.trained_table(n_windows=0), "n_windows"),
])
def test_bad_arguments_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
