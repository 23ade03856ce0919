"""Tests for lesson 11's answer checks: right answers computed by hand, and the hint each
kind of wrong answer gets."""

from __future__ import annotations

import pytest
import torch
from attnlib_testing import assert_correct, assert_hint

# 11.1: ceil(n / 16) blocks of 16 for n = 100, 900, 33, 2048, 470: 7 + 57 + 3 + 128 + 30
PAGED = 16 * (7 + 57 + 3 + 128 + 30)
# 11.2: 1 + a + a^2 + a^3 + a^4 with a = 0.8
TOKENS = 1 + 0.8 + 0.64 + 0.512 + 0.4096


def test_hand_values():
    assert PAGED == 3600 and abs(TOKENS - 3.3616) < 1e-12


@pytest.mark.parametrize(("label", "answer"), [("11.1", PAGED), ("11.1", float(PAGED)),
                                               ("11.1", torch.tensor(PAGED)),
                                               ("11.2", TOKENS), ("11.2", 3.362)])
def test_right_answers_are_correct(label, answer, capsys):
    assert_correct(label, answer, capsys)


@pytest.mark.parametrize(("label", "answer", "hint"), [
    ("11.1", 5 * 2048, "contiguous reservation"),
    ("11.1", 3551, "the tokens themselves"),
    ("11.1", 16 * (6 + 56 + 2 + 128 + 29), "rounds each request down"),
    ("11.2", 0.8 * 4 + 1, "stops at the first rejection"),
    ("11.2", 1 + 0.8 + 0.64 + 0.512, "forgets the token the target adds"),
    ("11.2", 5.0, "k = infinity"),
    ("11.2", 1 + 0.8 + 0.64 + 0.512 + 0.4096 + 0.32768, "as if the draft proposed 5"),
    ("11.1", 3552, "shared blocks"),
    ("11.1", 3600.5, "a whole number of token slots"),
])
def test_wrong_numbers_get_their_hint(label, answer, hint, capsys):
    assert_hint(label, answer, hint, capsys)


def gather(pool, table, n):  # the reader's loop over the tokens
    s = pool.shape[2]
    return torch.stack([pool[table[t // s], :, t % s] for t in range(n)], dim=1)


def residual(p, q):
    r = torch.where(p > q, p - q, torch.zeros_like(p))
    return r / r.sum(-1, keepdim=True)


def test_implementations_written_another_way_are_correct(capsys):
    assert_correct("11.3", gather, capsys)
    assert_correct("11.4", residual, capsys)


def test_wrong_implementations_get_their_hint(capsys):
    def pool_order(pool, table, n):
        return gather(pool, sorted(table), n)

    def uncut(pool, table, n):
        return gather(pool, table, len(table) * pool.shape[2])

    assert_hint("11.3", pool_order, "the pool's order", capsys)
    assert_hint("11.3", uncut, "cut at the n tokens", capsys)
    assert_hint("11.4", lambda p, q: (p - q).clamp_min(0), "divide each row", capsys)
    assert_hint("11.4", lambda p, q: (p - q).abs() / (p - q).abs().sum(-1, keepdim=True),
                "over-proposes", capsys)
    assert_hint("11.4", lambda p, q: p, "counts the accepted mass twice", capsys)
