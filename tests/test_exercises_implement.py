"""Tests for the implementation exercises (attnlib/exercises/implement.py and the
``@implementation`` entries of every lesson_NN.py): the reference passes, every catalogued
mistake gets its own hint (and differs from the reference on some case, so it can be told
apart), an exception in the reader's code is shown as theirs, the stub gives "not
implemented yet", and an unrelated wrong function gets the first failing case."""

from __future__ import annotations

import pytest
import torch

from attnlib import exercises
from attnlib.exercises import implement
from attnlib.models.assemble import Weights

LABELS = implement.implementation_labels()
# Exercises whose answer is a Triton kernel, not a Python function: their expected answers
# come from PyTorch, not from a reference kernel, so the right answers, the catalogue, the
# stub, the reader's error and an unrelated wrong answer are checked with kernels in
# tests/test_exercises_13.py.
KERNEL_LABELS = {"13.2", "13.3", "13.4", "13.5", "13.6", "13.7"}
PYTHON_LABELS = [label for label in LABELS if label not in KERNEL_LABELS]
MISTAKES = [(label, k) for label in PYTHON_LABELS
            for k in range(len(implement.exercise(label).mistakes))]


def test_the_book_has_the_exercises_it_promises():
    """At least 12 implementation exercises, at least one in every lesson 01-10, each with at
    least three catalogued mistakes."""
    assert len(LABELS) >= 12
    assert {label[:2] for label in LABELS} >= {f"{n:02d}" for n in range(1, 11)}
    for label in LABELS:
        assert len(implement.exercise(label).mistakes) >= 3, label


@pytest.mark.parametrize("label", PYTHON_LABELS)
def test_reference_is_correct(label, capsys):
    spec = implement.exercise(label)
    result = exercises.check(label, spec.reference)
    assert result.status == "correct", result.message
    assert capsys.readouterr().out == f"{label}: correct.\n"


@pytest.mark.parametrize(("label", "k"), MISTAKES)
def test_each_mistake_gets_its_own_hint(label, k, capsys):
    spec = implement.exercise(label)
    mistake = spec.mistakes[k]
    result = exercises.check(label, mistake.fn)
    assert result.status == "incorrect"
    # a mistake that raises gets its hint first, then its error
    assert result.message.split("\n")[0] == f"{label}: {mistake.hint}"
    assert capsys.readouterr().out == result.message + "\n"


@pytest.mark.parametrize("label", PYTHON_LABELS)
def test_stub_is_not_implemented_yet(label, capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    class Stub:  # the class exercise's stub raises in its methods
        def append(self, K, V):
            raise NotImplementedError

    spec = implement.exercise(label)
    for fn in (Stub,) if isinstance(spec.reference, type) else (stub,):
        result = exercises.check(label, fn)
        assert result.status == "unanswered" and not result
        assert capsys.readouterr().out == (
            f"{label}: not implemented yet. Replace the line `raise NotImplementedError` with "
            "your code and run the cell again.\n")


@pytest.mark.parametrize("label", PYTHON_LABELS)
def test_an_error_in_the_readers_code_is_shown_as_theirs(label, capsys):
    def attend(*args, **kwargs):
        scores = {}
        return scores["missing key"]

    result = exercises.check(label, attend)
    assert result.status == "incorrect"
    first_case = implement.exercise(label).cases[0].name
    lines = result.message.splitlines()
    assert lines[0].startswith(f"{label}: your code raised an error on case '{first_case}'")
    assert "  in attend, line" in result.message
    assert 'return scores["missing key"]' in result.message
    assert lines[-1] == "  KeyError: 'missing key'"
    assert "implement.py" not in result.message and "lesson_" not in result.message


@pytest.mark.parametrize("label", PYTHON_LABELS)
def test_an_unrelated_wrong_answer_names_the_first_failing_case(label):
    spec = implement.exercise(label)

    if isinstance(spec.reference, type):
        class Wrong(spec.reference):
            def append(self, K, V):
                K_all, V_all = super().append(K, V)
                return K_all + 1, V_all
        wrong = Wrong
    else:
        def off(out):
            if out.is_floating_point():
                return out * 1.5 + 0.25
            out = out.clone()
            out.view(-1)[0] = ~out.view(-1)[0]  # one entry flipped
            return out

        def wrong(*args, **kwargs):
            out = spec.reference(*args, **kwargs)
            if isinstance(out, Weights):  # the loader's answer: every weight but E kept
                return out._replace(E=off(out.E))
            return tuple(map(off, out)) if isinstance(out, tuple) else off(out)
    result = exercises.check(label, wrong)
    assert result.status == "incorrect"
    assert result.message.startswith(f"{label}: case 1 of {len(spec.cases)} "
                                     f"('{spec.cases[0].name}'"), result.message


def test_a_hint_gives_the_shapes_the_largest_difference_and_where(capsys):
    def attend(Q, K, V):
        Y = torch.softmax(Q @ K.mT / Q.shape[-1] ** 0.5, dim=-1) @ V
        Y[..., -1, -1] += 0.5
        return Y

    result = exercises.check("02.5", attend)
    assert result.message == (
        "02.5: case 1 of 4 ('float64, small logits'; inputs Q (2, 4), K (5, 4), V (5, 3)) "
        "fails: the output is off by up to 0.5 at (1, 2) (expected "
        f"{(attend(*[c for c in _inputs_02()]) - 0.5)[1, 2].item():.4g}, got "
        f"{attend(*_inputs_02())[1, 2].item():.4g}).")


def _inputs_02():
    from attnlib.exercises.implement import randn
    return randn(2, 4, seed=1), randn(5, 4, seed=2), randn(5, 3, seed=5)


def test_a_wrong_dtype_and_shape_are_named():
    def float64_out(Q, K, V):
        return torch.softmax(Q.double() @ K.double().mT / Q.shape[-1] ** 0.5, -1) @ V.double()

    def transposed(Q, K, V):
        return (torch.softmax(Q @ K.mT / Q.shape[-1] ** 0.5, -1) @ V).mT

    assert "has dtype torch.float64, expected torch.float32" in exercises.check(
        "02.5", float64_out).message
    assert "the output has shape (3, 2), expected (2, 3)" in exercises.check(
        "02.5", transposed).message


def test_a_float64_answer_off_by_little_is_not_told_to_compute_in_float64():
    """An answer within float32's precision of the expected float64 one is told to keep the
    dtype only when its numbers are float32 numbers; a float64 answer with a slightly wrong
    eps is told where it is off."""
    from attnlib.layers.norms import rms_norm

    def twice_eps(x, g, eps):
        return rms_norm(x, g, 2 * eps, check=False)

    message = exercises.check("14.2", twice_eps).message
    assert "compute in the input's dtype" not in message
    assert message.startswith("14.2: case 1 of 2") and "is off by up to" in message


def test_the_catalogue_is_public():
    assert implement.implementation_labels() == LABELS
    assert [m.hint for m in implement.catalogue("02.5")] == \
        [m.hint for m in implement.exercise("02.5").mistakes]
    with pytest.raises(ValueError, match="label must name an implementation exercise"):
        implement.exercise("99.1")


def test_a_non_function_answer():
    assert exercises.check("02.5", 3.0).message == (
        "02.5: expected a function attend(Q, K, V) returning Y; got a float.")


def test_statistical_tolerance_accepts_another_correct_sampler():
    """10.6 compares means over 400 seeds within z = 5 standard errors of their difference.

    For a correct estimator each coordinate's score is about standard normal, so a false
    failure has probability about 6e-7 per coordinate (under 1e-5 over the cases' 13
    coordinates). A correct estimator that draws its keys differently from attnlib's
    (inverse CDF on uniforms, not multinomial) passes; every catalogued mistake lies more
    than 10 standard errors away on some case, twice the tolerance.
    """

    def inverse_cdf(Q, K, V, rho, m, generator):
        u = torch.rand(Q.shape[0], m, generator=generator, dtype=torch.float64)
        cdf = rho.double().cumsum(-1)
        j = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=K.shape[0] - 1)  # (N_Q, m)
        logits = (K[j] * Q[:, None, :]).sum(-1) * Q.shape[-1] ** -0.5
        w = torch.exp(logits - logits.amax(-1, keepdim=True)) / torch.gather(rho, -1, j)
        return (w[..., None] * V[j]).sum(-2) / w.sum(-1, keepdim=True)

    assert exercises.check("10.6", inverse_cdf).status == "correct"
    spec = implement.exercise("10.6")
    assert all(case.statistical for case in spec.cases)
    expected = [implement._run(c, spec.reference, reader=False)[0] for c in spec.cases]
    for mistake in spec.mistakes:
        scores = []
        for case, e in zip(spec.cases, expected, strict=True):
            g = implement._run(case, mistake.fn, reader=False)[0].double()
            e = e.double()
            se = ((g.var(0) + e.var(0)) / g.shape[0]).sqrt()
            scores.append(float(((g.mean(0) - e.mean(0)).abs() / se).max()))
        assert max(scores) > 10, (mistake.hint, scores)


def test_mistakes_are_told_apart_by_the_cases():
    """Each mistake differs from the reference on at least one case, and from every other
    mistake of its exercise, so each hint can be reached (the kernels' catalogues: each
    mistake refused with its own hint, in tests/test_exercises_13.py)."""
    for label in PYTHON_LABELS:
        spec = implement.exercise(label)
        outs = []
        for fn in (spec.reference, *(m.fn for m in spec.mistakes)):
            out = []
            for c in spec.cases:
                try:
                    out.append(implement._run(c, fn, reader=False))
                except Exception as exc:  # a mistake that raises is told apart by its error
                    out.append(f"{type(exc).__name__}: {exc}")
            outs.append(out)

        def agree(x, y, c, z=spec.z):
            if isinstance(x, str) or isinstance(y, str):
                return x == y
            return implement._mismatch(x, y, c, z) is None

        for a in range(len(outs)):
            for b in range(a + 1, len(outs)):
                same = all(agree(x, y, c)
                           for x, y, c in zip(outs[a], outs[b], spec.cases, strict=True))
                assert not same, (label, a, b)


def _card_loss_of(model, card) -> None:
    from attnlib.models import train

    ids, targets = train.held_out("book")
    assert round(train.evaluate(model, ids, targets)["loss"], 5) == card["held_out"]["loss"]


@pytest.mark.slow
def test_the_readers_functions_run_the_trained_models_at_the_cards_loss():
    """What lessons 02, 05, 06 and 08 do after their solutions: the exercises' references,
    put into the shipped models through attnlib's seam (with_attention, caches=), give the
    held-out loss of each model's card at its printed precision and attnlib's text."""
    from attnlib.models import pretrained, tasks, train
    from attnlib.serving import cache

    book = pretrained.load("book")
    chars = tasks.book_tokenizer()
    prompt = torch.tensor([chars.encode("Attention is")])
    expected = book.generate(prompt, 30)

    attend = implement.exercise("02.5").reference

    def attend_causal(Q, K, V, *, mask=None, causal=False):
        assert mask is None and causal
        offset = K.shape[-2] - Q.shape[-2]
        return torch.cat([attend(Q[..., i:i + 1, :], K[..., : i + offset + 1, :],
                                 V[..., : i + offset + 1, :]) for i in range(Q.shape[-2])], -2)

    yours = book.with_attention(attend=attend_causal)
    _card_loss_of(yours, book.card)
    assert torch.equal(yours.generate(prompt, 30), expected)

    rope = implement.exercise("08.5").reference
    yours = book.with_attention(rope=rope)
    _card_loss_of(yours, book.card)
    assert torch.equal(yours.generate(prompt, 30), expected)

    reference_cache = implement.exercise("05.5").reference

    class Plugged(reference_cache, cache.Cache):
        def append(self, K, V, check=False):
            return reference_cache.append(self, K, V)

    assert torch.equal(book.generate(prompt, 30, caches=[Plugged() for _ in book.blocks]),
                       expected)
    book64 = pretrained.load("book", dtype=torch.float64)
    ids, targets = train.held_out("book")
    caches = [Plugged() for _ in book64.blocks]
    with torch.no_grad():
        logits = torch.cat([book64(ids[:, :64], caches=caches),
                            book64(ids[:, 64:], caches=caches)], dim=-2)
    assert round(train.next_token_loss(logits, targets).item(), 5) == book.card["held_out"]["loss"]

    gqa = implement.exercise("06.5").reference
    shipped = pretrained.load("book", n_kv_heads=2)
    yours = shipped.with_attention(attend=lambda Q, K, V, *, mask=None, causal=False:
                                   gqa(Q, K, V, causal=causal))
    _card_loss_of(yours, shipped.card)
    assert torch.equal(yours.generate(prompt, 30), shipped.generate(prompt, 30))
