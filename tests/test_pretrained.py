"""attnlib.models.pretrained: each shipped model loads, meets its card, decodes the same with a
cache."""

from __future__ import annotations

import pytest
import torch

import attnlib
from attnlib.models import pretrained, train

MODELS = pretrained.names()
VARIANTS = [(name, v) for name in MODELS for v in pretrained.variants(name)]


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest


def _close_to_card(got: dict, card: dict) -> None:
    """The card rounds to CARD_DECIMALS; float32 evaluation adds at most a few 1e-7."""
    slack = 0.5 * 10.0 ** -train.CARD_DECIMALS + 2e-6
    for key in ("loss", "accuracy"):
        assert abs(got[key] - card[key]) <= slack, (key, got[key], card[key])
    assert got["tokens"] == card["tokens"]


def test_the_shipped_models():
    assert set(MODELS) == set(train.RECIPES)  # every recipe ships, and nothing else
    for base in {ft.base for ft in train.FINETUNES.values()}:  # and every fine-tuned conversion
        made = [{ft.conversion: v, "steps": ft.steps} for ft in train.FINETUNES.values()
                if ft.base == base for v in ft.values]
        assert pretrained.variants(base) == sorted(made, key=lambda v: tuple(sorted(v.items())))
    files = {p.stem for p in pretrained.WEIGHTS.glob("*.pt")}
    assert files == {p.stem for p in pretrained.WEIGHTS.glob("*.json")}
    assert len(files) == len(MODELS) + len(VARIANTS)
    total = sum(p.stat().st_size for p in pretrained.WEIGHTS.glob("*.pt"))
    assert total < 20 * 2**20, total


def test_float16_weights_change_no_printed_number():
    """Where a card says its weights are stored in float16, they are, and rounding them moved
    the held-out loss by less than the third decimal the lessons print can show."""
    stored = [c for c in pretrained._cards().values() if "weights_dtype" in c]
    assert len(stored) >= 10
    for card in stored:
        assert card["weights_dtype"] == "float16"
        state = torch.load(pretrained.WEIGHTS / f"{card['name']}.pt", weights_only=True)
        assert {v.dtype for v in state.values()} == {torch.float16}, card["name"]
        before, after = card["held_out_float32"]["loss"], card["held_out"]["loss"]
        assert abs(before - after) < 1e-4, (card["name"], before, after)
        # each card names its recipe, seeds, steps, evaluation set, CPU time, parameters
        for key in ("recipe", "seed", "steps", "evaluation_set", "train_cpu_seconds",
                    "parameters", "held_out"):
            assert key in card, (card["name"], key)
        assert "8,192" in card["evaluation_set"]


def test_every_card_names_its_recipe_seeds_steps_and_evaluation_set():
    cards = pretrained._cards()
    assert len(cards) == len(MODELS) + len(VARIANTS)
    for card in cards.values():
        for key in ("recipe", "seed", "steps", "evaluation_set", "train_cpu_seconds",
                    "parameters", "held_out"):
            assert key in card, (card["name"], key)
        assert card["recipe"]["data_seed"] in (1, 2), card["name"]  # the seed of the batches
        assert card["evaluation_set"] == train.evaluation_set(card.get("base", card["name"]))


def test_every_book_model_reports_the_one_evaluation_set():
    ids, targets = train.eval_set()
    assert ids.shape == (64, 128) and int((targets != -100).sum()) == 8192
    for name in [n for n in MODELS if train.RECIPES[n].task == "book"]:
        held = train.held_out(name)
        assert torch.equal(held[0], ids) and torch.equal(held[1], targets), name
        assert pretrained.card(name)["held_out"]["tokens"] == 8192
    model = pretrained.load("book-scratch-gqa1")
    assert round(train.eval_loss(model), train.CARD_DECIMALS) == model.card["held_out"]["loss"]


@pytest.mark.parametrize("name", MODELS)
def test_each_model_meets_its_card(name):
    model = pretrained.load(name)
    card = model.card
    assert isinstance(model, attnlib.TinyDecoder) and not model.training
    assert card["name"] == name and card["steps"] == train.RECIPES[name].steps
    assert card["config"] == train.recipe_config(name)
    untrained = type(model)(**card["config"])  # the same architecture, at initialisation
    assert {k: v.shape for k, v in untrained.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()}
    ids, targets = train.held_out(name)
    _close_to_card(train.evaluate(model, ids, targets, dtype=None), card["held_out"])
    if card["task"] == "book":
        assert card["corpus_sha256"] == attnlib.models.tasks.book_sha256()


@pytest.mark.parametrize(("name", "variant"), VARIANTS, ids=[f"{n}-{v}" for n, v in VARIANTS])
def test_each_fine_tuned_conversion_meets_its_card(name, variant):
    model = pretrained.load(name, **variant)
    card = model.card
    conversion = {k: v for k, v in variant.items() if k != "steps"}
    assert card["base"] == name and card["variant"] == conversion
    assert card["steps"] == variant["steps"]
    ids, targets = train.held_out(name)
    _close_to_card(train.evaluate(model, ids, targets, dtype=None), card["held_out"])
    convert = pretrained.to_gqa if "n_kv_heads" in variant else pretrained.to_mla
    converted = convert(pretrained.load(name), *conversion.values())
    _close_to_card(train.evaluate(converted, ids, targets, dtype=None),
                   card["held_out_converted"])


@pytest.mark.parametrize("name", MODELS)
def test_each_model_decodes_the_same_with_and_without_a_cache(name):
    model = pretrained.load(name, dtype=torch.float64)  # float64: no near-ties to split
    prompt = train.held_out(name)[0][:2, :8]
    with_cache = model.generate(prompt, 24)
    assert torch.equal(with_cache, model.generate(prompt, 24, use_cache=False))


def test_the_default_budget_is_the_100_step_conversion():
    assert pretrained.card("book", n_kv_heads=2) == pretrained.card("book", n_kv_heads=2,
                                                                    steps=100)
    assert pretrained.card("book", n_kv_heads=2, steps=400)["name"] == "book-gqa2-400"


def test_the_controls_convert_nothing():
    """The controls' conversions are exact: right after them the loss is the source's."""
    for name, variant in (("book", {"n_kv_heads": 4}), ("book-nope", {"d_latent": 128})):
        for steps in (100, 400):
            card = pretrained.card(name, **variant, steps=steps)
            assert card["held_out_converted"]["loss"] == card["held_out_base"]["loss"]


def test_recall_is_solved_and_was_not_at_initialisation():
    card = pretrained.card("recall")
    assert card["held_out"]["accuracy"] >= 0.95
    assert card["held_out_at_init"]["accuracy"] < 0.1  # chance is 1/16


def test_load_refuses_unknown_names_and_variants():
    with pytest.raises(ValueError, match=r"name must be one of the shipped models \[.*'book'"):
        pretrained.load("gpt2")
    with pytest.raises(ValueError, match="ships no fine-tuned variant"):
        pretrained.load("book", n_kv_heads=3)
    with pytest.raises(ValueError, match="ships no fine-tuned variant"):
        pretrained.load("book", n_kv_heads=2, steps=200)
    with pytest.raises(ValueError, match="steps applies to a fine-tuned conversion"):
        pretrained.load("book", steps=400)
    with pytest.raises(ValueError, match="at most one of n_kv_heads and d_latent"):
        pretrained.load("book", n_kv_heads=2, d_latent=8)


def test_conversions_are_exact_where_they_should_be():
    """G = H pooling and full-rank SVD change nothing (the reference: the source model)."""
    ids = train.held_out("book")[0][:2, :32]
    book = pretrained.load("book", dtype=torch.float64)
    same = pretrained.to_gqa(book, book.blocks[0].attn.n_heads)
    torch.testing.assert_close(same(ids), book(ids))
    nope = pretrained.load("induction-nope", dtype=torch.float64)
    ids = train.held_out("induction-nope")[0][:2, :32]
    attn = nope.blocks[0].attn  # d_model = 64 < 2 G d_head = 128: rank 64 is full rank
    full = pretrained.to_mla(nope, min(nope.d_model, 2 * attn.n_kv_heads * attn.d_head))
    torch.testing.assert_close(full(ids), nope(ids), atol=1e-9, rtol=1e-9)
    cut = pretrained.to_mla(nope, 8)
    assert (cut(ids) - nope(ids)).abs().max() > 1e-3  # a low rank is not exact
    with pytest.raises(ValueError, match="rope_base must be None"):
        pretrained.to_mla(book, 8)


def test_decoder_config_rebuilds_the_architecture():
    model = attnlib.TinyDecoder(40, d_model=24, n_layers=3, n_heads=6, n_kv_heads=2,
                                d_head=4, d_ff=40, rope_base=500.0, norm="peri", ffn="gelu",
                                tie_weights=False)
    config = pretrained.decoder_config(model)
    rebuilt = attnlib.TinyDecoder(**config)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()}
    assert pretrained.decoder_config(rebuilt) == config
