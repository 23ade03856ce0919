"""Tests for the trained-model dials of lessons 06 and 07 (attnlib.viz.trained, with
attnlib.viz.gqa.trained_* and attnlib.viz.mla.trained_*): cache bytes against the closed
forms, losses against the one evaluation set and the metrics each card recorded, the
controls, and the figures' marked setting and numbers against the table."""

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
    assert list(table.columns) == [vt.CACHE, *(f"loss, {b} steps" for b in vt.BUDGETS)]
    for G in table.index:  # 2 N_L G d_head bytes per token, in float32
        assert table.loc[G, vt.CACHE] == 2 * N_LAYERS * G * D_HEAD * FLOAT32
    assert table.attrs["source cache"] == table.loc[4, vt.CACHE]
    assert table.loc[4, "loss, 0 steps"] == table.attrs["source loss"]  # G = H: exact
    assert not table.isna().any().any()  # every G ships at every budget, the control too
    assert table.attrs["uniform loss"] == round(math.log(101), 3)
    seeds = [attnlib.models.pretrained.card(n)["held_out"]["loss"] for n in vt.SEEDS]
    assert table.attrs["seeds"] == len(seeds) == 5
    mean = sum(seeds) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in seeds) / 4)  # one run's, n - 1 = 4
    assert table.attrs["seed sd"] == round(sd, 4) > 0
    # two single runs: t_{0.975, 4} = 2.776445 times sd sqrt(2)
    assert table.attrs["run to run"] == round(2.776445 * sd * math.sqrt(2), 3)


def test_mla_table_cache_is_the_closed_form_and_the_full_latent_is_exact():
    table = vm.trained_table()
    assert list(table.index) == list(vm.TRAINED_LATENTS)
    for d_L in table.index:  # N_L d_L numbers per token
        assert table.loc[d_L, vt.CACHE] == N_LAYERS * d_L * FLOAT32
    assert table.attrs["source cache"] == 2 * N_LAYERS * N_HEADS * D_HEAD * FLOAT32
    assert table.loc[2 * N_HEADS * D_HEAD, "loss, 0 steps"] == table.attrs["source loss"]
    for b in (100, 400):
        shipped = [d_L for d_L in table.index
                   if not math.isnan(table.loc[d_L, f"loss, {b} steps"])]
        assert shipped == [16, 32, 64, 128]
    assert table["loss, 0 steps"].is_monotonic_decreasing  # on this model, as lesson 07 says
    assert {(d, b) for d in table.index for b in vt.BUDGETS
            if not math.isnan(table.loc[d, f"loss, {b} steps"])} == set(vm.TRAINED_SETTINGS)


def test_conversions_without_a_card_are_measured_on_the_one_evaluation_set():
    table = vm.trained_table()
    model = attnlib.models.pretrained.to_mla(attnlib.models.pretrained.load("book-nope"), 96)
    assert table.loc[96, "loss, 0 steps"] == round(attnlib.models.train.eval_loss(model), 3)


@pytest.mark.parametrize(("name", "conversion", "value"),
                         [("book", "n_kv_heads", 2), ("book-nope", "d_latent", 16),
                          ("book", "n_kv_heads", 4), ("book-nope", "d_latent", 128)])
def test_losses_are_the_cards_on_the_one_evaluation_set(name, conversion, value):
    table = vt.dial_table(name, conversion, (value,))
    for steps in (100, 400):
        card = attnlib.models.pretrained.card(name, **{conversion: value}, steps=steps)
        assert table.loc[value, "loss, 0 steps"] == round(card["held_out_converted"]["loss"], 3)
        assert table.loc[value, f"loss, {steps} steps"] == round(card["held_out"]["loss"], 3)
        assert table.attrs["source loss"] == round(card["held_out_base"]["loss"], 3)
    model = attnlib.models.pretrained.load(name, **{conversion: value}, steps=400)
    assert table.loc[value, "loss, 400 steps"] == round(attnlib.models.train.eval_loss(model), 3)


def test_scratch_table_lists_the_recipe_at_every_layout():
    table = vt.scratch_table()
    assert list(table.index) == list(vt.SCRATCH)
    cached = dict(zip(table.index, table["numbers cached per token and layer"], strict=True))
    assert cached == {**dict.fromkeys(vt.SEEDS, 128), "book-scratch-gqa2": 64,
                      "book-scratch-gqa1": 32}
    for name in table.index:
        card = attnlib.models.pretrained.card(name)
        assert card["recipe"]["steps"] == 2000 and card["data_seed"] == 1
        assert table.loc[name, vt.CACHE] == N_LAYERS * cached[name] * FLOAT32
        assert table.loc[name, "loss"] == round(card["held_out"]["loss"], 3)
    assert table.loc["book", "above 'book'"] == 0


def test_scratch_table_takes_the_mla_models_at_the_caches_of_g2_and_mqa():
    names = [*vt.SCRATCH, *vt.SCRATCH_MLA]
    table = vt.scratch_table(names)
    assert list(table.index) == names
    cached = table["numbers cached per token and layer"]
    assert cached["book-scratch-mla56"] == cached["book-scratch-gqa2"] == 64
    assert cached["book-scratch-mla24"] == cached["book-scratch-gqa1"] == 32
    for name in vt.SCRATCH_MLA:
        card = attnlib.models.pretrained.card(name)
        config = card["config"]
        assert config["attention"] == "mla"
        assert config["d_latent"] + config["d_rope"] == cached[name]
        assert card["recipe"]["steps"] == 2000 and card["data_seed"] == 1  # the book recipe
        assert table.loc[name, vt.CACHE] == N_LAYERS * cached[name] * FLOAT32
        assert table.loc[name, "loss"] == round(card["held_out"]["loss"], 3)
    with pytest.raises(ValueError, match="names"):
        vt.scratch_table(["book-gqa2"])


def test_dial_table_is_computed_once_and_returned_as_a_copy():
    first = vg.trained_table()
    first.loc[2, "loss, 0 steps"] = -1.0
    first.attrs["source loss"] = -1.0
    again = vg.trained_table()
    assert again.loc[2, "loss, 0 steps"] > 0 and again.attrs["source loss"] > 0


@pytest.mark.parametrize(("figure", "value", "steps", "others", "control"),
                         [(vg.trained_figure, 2, 100, vg.TRAINED_KV_HEADS, 4),
                          (vm.trained_figure, 32, 400, vm.TRAINED_LATENTS, 128)])
def test_figure_marks_the_setting_and_states_its_numbers(figure, value, steps, others,
                                                        control):
    table = (vg if figure is vg.trained_figure else vm).trained_table()
    fig = figure(value, steps)
    bars = next(t for t in fig.data if t.type == "bar")
    assert list(bars.x) == [str(v) for v in others]
    assert list(bars.y) == [int(b) for b in table[vt.CACHE]]
    marked = [t for t in fig.data if t.type == "scatter" and t.showlegend is False]
    now = table.loc[value, f"loss, {steps} steps"]
    assert [(t.x, t.y) for t in marked] == [((str(steps),), (now,))]
    ctrl = table.loc[control, f"loss, {steps} steps"]
    title = fig.layout.title.text
    assert f"loss {now:.3f}, {now - ctrl:+.3f} against the control" in title
    assert f"{int(table.loc[value, vt.CACHE]):,} bytes per token" in title
    assert f"±{table.attrs['run to run']:.3f}, two runs of the book recipe" in title
    band = next(shape for shape in fig.layout.shapes if shape.type == "rect")
    source = table.attrs["source loss"]
    assert (band.y0, band.y1) == pytest.approx((source - table.attrs["run to run"],
                                                source + table.attrs["run to run"]))
    lines = [t for t in fig.data if t.type == "scatter" and t.mode == "lines+markers"]
    dashed = [t for t in lines if t.line.dash == "dash"]
    assert len(dashed) == 1 and "control" in dashed[0].name


def test_gqa_figure_draws_the_from_scratch_models():
    fig = vg.trained_figure(1, 400)
    square = next(t for t in fig.data if t.type == "scatter" and t.marker.symbol == "square")
    assert list(square.y) == [round(attnlib.models.pretrained.card(n)["held_out"]["loss"], 3)
                              for n in vg.TRAINED_SCRATCH.values()]


def test_twins_offer_every_shipped_setting():
    for figure, names, values in (
            (vg.trained_figure, ("n_kv_heads", "steps"), vg.TRAINED_SETTINGS),
            (vm.trained_figure, ("d_latent", "steps"), vm.TRAINED_SETTINGS)):
        fig = attnlib.viz.twin(figure, names, list(values))
        assert len(fig.layout.sliders[0].steps) == len(values)
        assert len(fig.to_json()) < 400_000


def test_a_budget_that_ships_no_model_shows_the_largest_that_does():
    """The live explorer's controls move one at a time, through every combination: where no
    fine-tune ships (d_L = 8 after 100 steps) the figure shows 0 steps and says so."""
    fig = vm.trained_figure(8, 100)
    assert fig.layout.title.text == vm.trained_figure(8, 0).layout.title.text.replace(
        "</sup>", "; no fine-tune ships at d_L = 8 after 100 steps</sup>")


@pytest.mark.parametrize(("call", "message"), [
    (lambda: vg.trained_figure(3), "n_kv_heads must be one of"),
    (lambda: vg.trained_figure(2, 200), r"steps must be one of \[0, 100, 400\]; got 200"),
    (lambda: vm.trained_figure(12), r"d_latent must be one of \[8, 16, 32, 64, 96, 128\]; got 12"),
    (lambda: vt.dial_table("book", "heads", (2,)), "conversion must be one of"),
])
def test_bad_arguments_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
