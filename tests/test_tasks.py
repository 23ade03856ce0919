"""attnlib.models.tasks: shapes, seeding, and targets recomputed from each sequence by explicit
loops."""

from __future__ import annotations

import json

import pytest
import torch

from attnlib.models import tasks
from attnlib.tokens import CharTokenizer


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- associative recall -----------------------------------------------------------------


@pytest.mark.parametrize(("n_pairs", "n_queries"), [(8, 1), (8, 8), (3, 2)])
def test_recall_targets_are_the_values_of_the_queried_keys(n_pairs, n_queries):
    ids, targets = tasks.associative_recall(batch_size=64, generator=_gen(), n_pairs=n_pairs,
                                            n_queries=n_queries)
    N = 2 * n_pairs + 2 * n_queries - 1
    assert ids.shape == targets.shape == (64, N) and ids.dtype == targets.dtype == torch.int64
    for row, target in zip(ids.tolist(), targets.tolist(), strict=True):
        pairs = row[: 2 * n_pairs]
        keys, values = pairs[0::2], pairs[1::2]
        assert len(set(keys)) == n_pairs and all(0 <= k < 16 for k in keys)
        assert all(16 <= v < 32 for v in values)
        store = dict(zip(keys, values, strict=True))
        queries = row[2 * n_pairs::2]
        assert len(queries) == n_queries and len(set(queries)) == n_queries
        for i, t in enumerate(target):
            if i >= 2 * n_pairs and (i - 2 * n_pairs) % 2 == 0:
                assert t == store[row[i]]  # a query: the value stored under its key
            else:
                assert t == tasks.IGNORE
        answers = row[2 * n_pairs + 1::2]  # the answers given after all but the last query
        assert answers == [store[q] for q in queries[:-1]]


def test_recall_key_position_finds_the_queried_key():
    ids, targets = tasks.associative_recall(batch_size=32, generator=_gen(3))
    j = tasks.recall_key_position(ids)
    for row, pos in zip(ids.tolist(), j.tolist(), strict=True):
        assert pos % 2 == 0 and row[pos] == row[-1]
    assert torch.equal(targets[:, -1], ids[torch.arange(32), j + 1])


def test_recall_is_seeded():
    a = tasks.associative_recall(batch_size=8, generator=_gen(1))
    b = tasks.associative_recall(batch_size=8, generator=_gen(1))
    c = tasks.associative_recall(batch_size=8, generator=_gen(2))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


def test_recall_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_queries <= n_pairs <= n_keys"):
        tasks.associative_recall(batch_size=2, generator=_gen(), n_pairs=20)
    with pytest.raises(TypeError, match=r"generator must be a CPU torch\.Generator"):
        tasks.associative_recall(batch_size=2, generator=0)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        tasks.associative_recall(batch_size=0, generator=_gen())


# --- induction --------------------------------------------------------------------------


def test_induction_targets_follow_the_previous_occurrence():
    ids, targets = tasks.induction(batch_size=32, generator=_gen(), n_tokens=40,
                                   vocab_size=24, min_period=3, max_period=20)
    assert ids.shape == targets.shape == (32, 40)
    periods = set()
    for row, target in zip(ids.tolist(), targets.tolist(), strict=True):
        for t, tok in enumerate(row):
            earlier = [j for j in range(t) if row[j] == tok]
            if earlier:  # the token after its last occurrence comes next
                assert target[t] == row[earlier[-1] + 1]
            else:  # first copy: nothing to look back at
                assert target[t] == tasks.IGNORE
        first_repeat = next(t for t in range(1, 40) if row[t] in row[:t])
        periods.add(first_repeat)
        assert 3 <= first_repeat <= 20 and len(set(row[:first_repeat])) == first_repeat
    assert len(periods) > 5  # the period varies from row to row


def test_induction_last_target_continues_the_pattern():
    ids, targets = tasks.induction(batch_size=4, generator=_gen(5), n_tokens=16,
                                   min_period=5, max_period=5)
    assert torch.equal(targets[:, -1], ids[:, 16 - 5])  # x_16 = x_11 when L = 5


def test_induction_is_seeded_and_checks_periods():
    a = tasks.induction(batch_size=4, generator=_gen(1))
    b = tasks.induction(batch_size=4, generator=_gen(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="min_period <= max_period <= vocab_size"):
        tasks.induction(batch_size=2, generator=_gen(), n_tokens=128, vocab_size=32)


# --- the book's text --------------------------------------------------------------------


def test_book_text_is_frozen_and_fully_tokenized():
    text = tasks.book_text()
    tok = tasks.book_tokenizer()
    assert isinstance(tok, CharTokenizer) and len(text) > 100_000
    assert tok.decode(tok.encode(text[:5000])) == text[:5000]
    assert 1 not in tok.encode(text)  # no <unk>
    assert len(tasks.book_sha256()) == 64


def test_book_split_is_every_tenth_chunk():
    text, tok = tasks.book_text(), tasks.book_tokenizer()
    chunks = [text[i:i + tasks.BOOK_CHUNK] for i in range(0, len(text), tasks.BOOK_CHUNK)]
    held = "".join(chunks[9::10])
    train = "".join(c for i, c in enumerate(chunks) if i % 10 != 9)
    assert tok.decode(tasks.book_ids("held-out").tolist()) == held
    assert tok.decode(tasks.book_ids("train").tolist()) == train
    with pytest.raises(ValueError, match="split must be one of"):
        tasks.book_ids("test")


def test_book_windows_and_held_out_shift_by_one():
    ids, targets = tasks.book_windows(batch_size=4, generator=_gen(), n_tokens=32)
    assert ids.shape == targets.shape == (4, 32)
    assert torch.equal(ids[:, 1:], targets[:, :-1])
    tok = tasks.book_tokenizer()
    train = tok.decode(tasks.book_ids("train").tolist())
    for row, target in zip(ids.tolist(), targets.tolist(), strict=True):
        window = tok.decode(row) + tok.decode(target[-1:])  # each window is a slice of the text
        assert window in train and tok.decode(target) == window[1:]
    h_ids, h_targets = tasks.book_held_out(n_tokens=50, n_windows=3)
    h = tasks.book_ids("held-out")
    assert torch.equal(h_ids.flatten(), h[:150]) and torch.equal(h_targets.flatten(), h[1:151])
    assert tasks.book_held_out(n_tokens=128)[0].shape == ((len(h) - 1) // 128, 128)


def test_build_book_corpus_reads_lessons_then_pages(tmp_path):
    (tmp_path / "lessons").mkdir()
    (tmp_path / "book").mkdir()
    nb = {"cells": [{"cell_type": "markdown", "source": ["# Title\n", "text"]},
                    {"cell_type": "code", "source": ["x = 1"]}]}
    (tmp_path / "lessons" / "00_a.ipynb").write_text(json.dumps(nb))
    for page in ("intro", "how-to-use", "notation", "glossary", "performance"):
        (tmp_path / "book" / f"{page}.md").write_text(f"---\ngiven: []\n---\n# {page}\n")
    text = tasks.build_book_corpus(tmp_path)
    assert text.startswith("# Title\ntext\n\n# intro\n\n# how-to-use")
    assert "x = 1" not in text and "given" not in text and text.endswith("# performance\n")
