"""Tests for attnlib.exercises.lesson_00 (tokens and embeddings): right answers computed
independently (published model shapes, a hand loop over BPE merges, the closed-form
estimate), and the hint each kind of wrong answer gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

from attnlib import exercises
from attnlib.tokens import CORPUS, BPETokenizer

# published shapes (config.json of each model): vocabulary size N_T and width d
LLAMA3_8B_E = 128_256 * 4_096
MISTRAL_7B_E = 32_000 * 4_096
LLAMA3_70B_E = 128_256 * 8_192
SHARES = [LLAMA3_8B_E / 8e9, MISTRAL_7B_E / 7e9, LLAMA3_70B_E / 70e9]


def _catalogue_merges() -> int:
    bpe = BPETokenizer.train(CORPUS, 200)
    for k in range(201):
        if bpe.with_merges(k).tokenize(" catalogue") == [" catalogue"]:
            return k
    raise AssertionError("' catalogue' should become one token within 200 merges")


def _llama_estimate(m: float = 128_256 * 128_255 / 2) -> float:
    """The leading-order largest |cos| of m cosines of width 8,192 (m: Llama 3's pairs)."""
    return math.sqrt(2 * math.log(m) / 8_192)


def _llama_next_terms(m: float) -> float:
    """The same with the next terms of the expected largest of m Gaussians (Euler's 0.5772)."""
    a = math.sqrt(2 * math.log(m))
    return (a - (math.log(math.log(m)) + math.log(4 * math.pi)) / (2 * a) + 0.5772 / a) / 8_192**0.5


PAIRS = 128_256 * 128_255 / 2


@pytest.mark.parametrize(
    ("label", "answer"),
    [
        ("00.2", SHARES),
        ("00.2", torch.tensor(SHARES)),
        ("00.2", np.array(SHARES) * 1.005),  # within the 1% tolerance
        ("00.4", _catalogue_merges()),
        ("00.4", np.int64(_catalogue_merges())),
        ("00.5", _llama_estimate()),
        ("00.5", round(_llama_estimate(), 3)),
        ("00.5", _llama_estimate(2 * PAIRS)),  # m = N_T (N_T - 1): |c| is large at either sign
        ("00.5", _llama_next_terms(2 * PAIRS)),  # the solution's third column
        ("00.5", _llama_next_terms(PAIRS)),
    ],
)
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(
    ("label", "answer", "hint"),
    [
        ("00.2", SHARES[:2], "of shape (3,); got shape (2,)"),
        ("00.2", "6.6%", "got a str"),
        ("00.2", [100 * s for s in SHARES], "off by a factor of 10^2"),
        ("00.2", [2 * s for s in SHARES], "count E twice"),
        ("00.2", [-s for s in SHARES], "the sign is wrong"),
        ("00.2", [3 * s for s in SHARES], "about 3 times too large"),
        ("00.2", [float("nan")] * 3, "nan or inf"),
        ("00.4", 2.5, "expected a whole number of merges (an int); got a float"),
        ("00.4", _catalogue_merges() + 1, "off by one"),
        ("00.4", 3, "too few: after 3 merges ' catalogue' is still the pieces"),
        ("00.4", 400, "too many"),
        ("00.5", math.degrees(math.acos(_llama_estimate())), "the angle in degrees"),
        ("00.5", math.sqrt(2 * math.log(128_256) / 8_192), "count pairs of rows"),
        ("00.5", math.sqrt(2 * math.log10(128_256 * 128_255 / 2) / 8_192), "natural logarithm"),
        ("00.5", [_llama_estimate()] * 2, "of shape (); got shape (2,)"),
        ("00.5", 0.5 * _llama_estimate(), "about 0.5 times too small"),
        ("00.5", 0.07, "close, but not within the tolerance"),  # rounded to one digit
        ("00.5", [_llama_estimate(2 * PAIRS)] * 2, "of shape (); got shape (2,)"),
    ],
)
def test_wrong_answers_get_the_right_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def test_too_few_merges_shows_the_pieces():
    pieces = BPETokenizer.train(CORPUS, 3).tokenize(" catalogue")
    assert str(pieces) in exercises.check("00.4", 3).message
