"""attnlib.models.train: the loss against an explicit sum, the schedule, the loop, every recipe."""

from __future__ import annotations

import math

import pytest
import torch

import attnlib
from attnlib.models import tasks, train

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest


def test_next_token_loss_is_the_mean_over_targets():
    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    targets = torch.tensor([[1, -100, 3, 0, -100], [6, 6, -100, 2, 5]])
    terms = [
        -(logits[b, i, targets[b, i]] - torch.logsumexp(logits[b, i], dim=0))
        for b in range(2) for i in range(5) if targets[b, i] != -100
    ]
    torch.testing.assert_close(train.next_token_loss(logits, targets), torch.stack(terms).mean())


def test_learning_rate_warms_up_then_follows_a_cosine():
    kw = {"steps": 110, "lr": 1.0, "warmup": 10}
    assert [train.learning_rate(s, **kw) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert train.learning_rate(10, **kw) == 1.0
    assert math.isclose(train.learning_rate(60, **kw), 0.5)  # halfway through the cosine
    assert math.isclose(train.learning_rate(110, **kw), 0.0, abs_tol=1e-12)
    assert train.learning_rate(80, **kw, schedule="constant") == 1.0


def test_evaluate_matches_an_explicit_computation():
    model = attnlib.TinyDecoder(32, d_model=16, n_layers=1, n_heads=2, seed=0)
    ids, targets = tasks.induction(batch_size=3, n_tokens=20, generator=torch.Generator())
    logits = model.double()(ids)
    keep = targets != -100
    logp = torch.log_softmax(logits[keep], dim=-1)
    expected = -logp.gather(-1, targets[keep][:, None]).mean().item()
    accuracy = (logits[keep].argmax(-1) == targets[keep]).double().mean().item()
    got = train.evaluate(model.float(), ids, targets, batch_size=2)
    assert math.isclose(got["loss"], expected, rel_tol=1e-6)
    assert got["accuracy"] == pytest.approx(accuracy) and got["tokens"] == int(keep.sum())
    assert next(model.parameters()).dtype == torch.float32  # evaluated on a float64 copy


def test_train_changes_only_the_parameters_it_is_given():
    model = attnlib.TinyDecoder(32, d_model=16, n_layers=2, n_heads=2, seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    chosen = [p for n, p in model.named_parameters() if ".attn." in n]
    g = torch.Generator().manual_seed(0)
    train.train(model, lambda: tasks.induction(batch_size=4, n_tokens=16, generator=g),
                steps=3, parameters=chosen)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) != (".attn." in n), n
        assert p.requires_grad  # frozen parameters are given back their gradient flag


def test_train_rejects_bad_arguments():
    model = attnlib.TinyDecoder(8, d_model=8, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match="schedule must be one of"):
        train.train(model, lambda: None, steps=1, schedule="linear")
    with pytest.raises(TypeError, match="data must be a callable"):
        train.train(model, [1, 2], steps=1)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        train.train(model, lambda: None, steps=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(train.RECIPES))
def test_fifty_steps_of_each_recipe_lower_the_loss(name):
    """Each recipe's model, optimiser settings and data, at a smaller batch (not timed)."""
    recipe = train.RECIPES[name]
    model = attnlib.TinyDecoder(**train.recipe_config(name))
    ids, targets = train.held_out(name, **({"n_windows": 4} if recipe.task == "book" else
                                           {"batch_size": 64}))
    start = train.evaluate(model, ids, targets, dtype=None)["loss"]
    data = train.recipe_data(name, torch.Generator().manual_seed(0))
    small = (lambda: tuple(t[:8] for t in data())) if recipe.task == "book" else data
    train.train(model, small, steps=50, lr=recipe.lr, warmup=5,
                weight_decay=recipe.weight_decay, clip=recipe.clip)
    end = train.evaluate(model, ids, targets, dtype=None)["loss"]
    assert end < start - 0.1, (start, end)


def test_recall_batches_mix_in_induction_rows():
    recipe = train.RECIPES["recall"]
    ids, targets = train.recipe_data("recall", torch.Generator().manual_seed(0))()
    assert ids.shape == (recipe.batch_size + recipe.mix_induction, 31)
    assert (targets[: recipe.batch_size] != -100).sum(-1).eq(8).all()  # eight queries a row


def test_cli_rejects_unknown_names(capsys):
    with pytest.raises(ValueError, match="NAME must be one of"):
        train.main(["no-such-model"])


def test_position_losses_average_each_position_over_rows():
    model = attnlib.TinyDecoder(32, d_model=16, n_layers=1, n_heads=2, seed=0)
    ids, targets = tasks.induction(batch_size=5, n_tokens=12, generator=torch.Generator())
    got = train.position_losses(model, ids, targets, batch_size=2)
    logits = model.double()(ids)
    for i in range(12):
        rows = [b for b in range(5) if targets[b, i] != -100]
        if not rows:
            assert math.isnan(got[i])
            continue
        nll = [-torch.log_softmax(logits[b, i], -1)[targets[b, i]] for b in rows]
        assert math.isclose(got[i].item(), torch.stack(nll).mean().item(), rel_tol=1e-9)


def _converts_nothing(ft, value) -> bool:
    """G = H, or the full-rank latent: the control's conversion."""
    model = attnlib.models.pretrained.load(ft.base)
    attn = model.blocks[0].attn
    exact = attn.n_kv_heads if ft.conversion == "n_kv_heads" else min(
        model.d_model, 2 * attn.n_kv_heads * attn.d_head)
    return value == exact


LOSSY = sorted(n for n, ft in train.FINETUNES.items() if not _converts_nothing(ft, min(ft.values)))


def test_each_control_converts_nothing_and_each_other_fine_tune_something():
    assert set(LOSSY) == {"book-gqa", "book-nope-mla", "book-gqa-400", "book-nope-mla-400"}
    for name in set(train.FINETUNES) - set(LOSSY):
        assert all(_converts_nothing(train.FINETUNES[name], v)
                   for v in train.FINETUNES[name].values)


@pytest.mark.slow
@pytest.mark.parametrize("name", LOSSY)
def test_fifty_steps_of_each_fine_tune_recover_loss_after_the_conversion(name):
    """Each conversion of its shipped base at the strongest cut, then 50 steps of its recipe
    on attention alone: the held-out loss falls, and nothing outside attention changes."""
    ft = train.FINETUNES[name]
    pretrained = attnlib.models.pretrained
    base = pretrained.load(ft.base)
    convert = pretrained.to_gqa if ft.conversion == "n_kv_heads" else pretrained.to_mla
    model = convert(base, min(ft.values))
    ids, targets = train.held_out(ft.base, n_windows=4)
    start = train.evaluate(model, ids, targets, dtype=None)["loss"]
    data = train.recipe_data(ft.base, torch.Generator().manual_seed(ft.data_seed))
    frozen = {k: v.clone() for k, v in model.state_dict().items() if ".attn." not in k}
    train.train(model, lambda: tuple(t[:8] for t in data()), steps=50, lr=ft.lr,
                warmup=ft.warmup, weight_decay=ft.weight_decay, clip=ft.clip,
                parameters=train.attention_parameters(model))
    end = train.evaluate(model, ids, targets, dtype=None)["loss"]
    assert end < start - 0.05, (start, end)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in frozen.items())


def test_masked_logits_with_every_key_allowed_is_the_model():
    model = attnlib.TinyDecoder(32, d_model=16, n_layers=2, n_heads=2, seed=0).double()
    ids, _ = tasks.induction(batch_size=3, n_tokens=12, generator=torch.Generator())
    everything = torch.ones(12, 12, dtype=torch.bool)
    torch.testing.assert_close(train.masked_logits(model, ids, everything), model(ids))
    window = attnlib.core.masks.sliding_window_mask(12, window=4)
    cut = train.masked_logits(model, ids, window)
    torch.testing.assert_close(cut[:, :4], model(ids)[:, :4])  # nothing evicted yet
    assert (cut[:, 4:] - model(ids)[:, 4:]).abs().max() > 1e-6  # then the window matters
    with pytest.raises(ValueError, match="key_mask must be a bool tensor of shape"):
        train.masked_logits(model, ids, everything[:5])
    losses = train.position_losses(model, ids, ids, key_mask=window)
    assert losses.shape == (12,)


def test_the_one_evaluation_set_is_the_book_cards_held_out_set():
    ids, targets = train.eval_set()
    held = train.held_out("book")
    assert torch.equal(ids, held[0]) and torch.equal(targets, held[1])
    ids[0, 0] = -1  # a copy: the next call is unchanged
    assert train.eval_set()[0][0, 0] == held[0][0, 0]
    model = attnlib.models.pretrained.load("book")
    assert round(train.eval_loss(model), train.CARD_DECIMALS) == model.card["held_out"]["loss"]
    assert "8,192" in train.evaluation_set("book-nope")


def test_window_losses_average_to_the_cards_loss_and_pair_the_windows():
    model = attnlib.models.pretrained.load("book")
    per = train.window_losses(model)
    assert per.shape == (64,) and per.dtype == torch.float64 and not per.requires_grad
    assert round(per.mean().item(), train.CARD_DECIMALS) == model.card["held_out"]["loss"]
    ids, targets = train.eval_set()
    one = train.evaluate(model, ids[3:4], targets[3:4])["loss"]  # window 3 scored alone
    assert per[3].item() == pytest.approx(one, abs=1e-12)
    targets[1] = -100
    with pytest.raises(ValueError, match="a target in every window"):
        train.window_losses(model, ids, targets)
