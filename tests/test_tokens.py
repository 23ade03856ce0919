"""Tests for attnlib.tokens: tokenizers against hand-worked examples and naive references,
the embedding lookup against one-hot matmuls and PyTorch's own embedding."""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib.tokens import (
    CORPUS,
    HELD_OUT,
    PAD,
    UNK,
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    embed,
    row_cosines,
    tokens_per_word,
)

# ---------------------------------------------------------------------------------------
# WordTokenizer


def test_word_vocab_is_specials_then_falling_frequency_then_alphabetical():
    tok = WordTokenizer.fit("b a c, a b a. C!")
    # counts: a 3, b 2, c 2, "," 1, "." 1, "!" 1; ties broken alphabetically (by code point)
    assert tok.vocab == [PAD, UNK, "a", "b", "c", "!", ",", "."]
    assert tok.vocab_size == len(tok) == 8
    assert tok.token_to_id[PAD] == 0 and tok.token_to_id[UNK] == 1


def test_word_encode_lowercases_splits_punctuation_and_maps_unknowns():
    tok = WordTokenizer.fit("The cat sat. The cat ran!")
    assert tok.tokenize("The DOG sat.") == ["the", "dog", "sat", "."]
    expected = [tok.vocab.index("the"), 1, tok.vocab.index("sat"), tok.vocab.index(".")]
    assert tok.encode("The DOG sat.") == expected


def test_word_corpus_counts_match_a_regex_reference():
    tok = WordTokenizer.fit(CORPUS)
    pieces = re.findall(r"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]", CORPUS.lower())  # ASCII corpus
    assert tok.vocab_size == 2 + len(set(pieces))
    assert len(tok.encode(CORPUS)) == len(pieces)
    assert UNK not in [tok.vocab[i] for i in tok.encode(CORPUS)]
    counts = Counter(pieces)
    freqs = [counts[t] for t in tok.vocab[2:]]
    assert freqs == sorted(freqs, reverse=True)


def test_word_held_out_has_unknown_words():
    tok = WordTokenizer.fit(CORPUS)
    seen = set(re.findall(r"\w+", CORPUS.lower()))
    unseen = [w for w in re.findall(r"\w+", HELD_OUT.lower()) if w not in seen]
    assert unseen, "the held-out text must contain words absent from the corpus"
    assert tok.encode(HELD_OUT).count(1) == len(unseen)


def test_word_decode_round_trips_tokens():
    tok = WordTokenizer.fit(CORPUS)
    for text in (CORPUS, "A reader (any reader) asks: where is the book?"):
        known = " ".join(t for t in tok.tokenize(text) if t in tok.token_to_id)
        assert tok.tokenize(tok.decode(tok.encode(known))) == tok.tokenize(known)
    assert tok.decode([tok.token_to_id[w] for w in ["the", "book", "."]]) == "the book."


def test_word_min_count_and_max_size():
    tok = WordTokenizer.fit("a a a b b c", min_count=2)
    assert tok.vocab == [PAD, UNK, "a", "b"]
    tok = WordTokenizer.fit("a a a b b c", max_size=3)
    assert tok.vocab == [PAD, UNK, "a"]
    assert tok.encode("b") == [1]


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: WordTokenizer.fit(3), TypeError, "corpus must be a str"),
        (lambda: WordTokenizer.fit("a", min_count=0), ValueError, "min_count"),
        (lambda: WordTokenizer.fit("a", max_size=1), ValueError, "max_size must be >= 2"),
        (lambda: WordTokenizer(["a", "b"]), ValueError, "must start with"),
        (lambda: WordTokenizer([PAD, UNK, "a", "a"]), ValueError, "duplicates ['a']"),
        (lambda: WordTokenizer.fit("a").decode([5]), ValueError, "[0, 3); got 5"),
        (lambda: WordTokenizer.fit("a").decode([1.0]), TypeError, "ids must contain ints"),
        (lambda: WordTokenizer.fit("a").encode(None), TypeError, "text must be a str"),
    ],
)
def test_word_errors_name_the_argument(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call()


# ---------------------------------------------------------------------------------------
# CharTokenizer


def test_char_round_trip_and_vocab():
    tok = CharTokenizer.fit(CORPUS)
    assert tok.vocab == [PAD, UNK, *sorted(set(CORPUS))]
    assert tok.decode(tok.encode(CORPUS)) == CORPUS
    assert len(tok.encode(CORPUS)) == len(CORPUS)
    assert tok.encode("é") == [1]
    assert tok.decode(torch.tensor(tok.encode("book"))) == "book"


def test_char_rejects_multi_character_entries():
    with pytest.raises(ValueError, match="single characters"):
        CharTokenizer([PAD, UNK, "ab"])


# ---------------------------------------------------------------------------------------
# BPETokenizer


def _reference_encode(text: str, tok: BPETokenizer) -> list[str]:
    """Apply every merge in learned order to every pre-token (the textbook BPE encoder)."""
    out = []
    for chunk in re.findall(r" ?\w+| ?[^\w\s]+|\s+(?!\S)|\s+", text):
        pieces = [ch if ch in tok.alphabet else UNK for ch in chunk]
        for a, b in tok.merges:
            left, right = tok.vocab[a], tok.vocab[b]
            merged, k = [], 0
            while k < len(pieces):
                if k + 1 < len(pieces) and pieces[k] == left and pieces[k + 1] == right:
                    merged.append(left + right)
                    k += 2
                else:
                    merged.append(pieces[k])
                    k += 1
            pieces = merged
        out.extend(pieces)
    return out


def test_bpe_wikipedia_example():
    # en.wikipedia.org/wiki/Byte_pair_encoding: aa -> Z, ab -> Y, ZY -> X gives "XdXac"
    bpe = BPETokenizer.train("aaabdaaabac", 3)
    assert [(bpe.vocab[a], bpe.vocab[b]) for a, b in bpe.merges] == [
        ("a", "a"),
        ("a", "b"),
        ("aa", "ab"),
    ]
    assert bpe.tokenize("aaabdaaabac") == ["aaab", "d", "aaab", "a", "c"]
    assert bpe.vocab_size == 2 + 4 + 3


def test_bpe_each_merge_is_the_most_frequent_pair_at_its_step():
    bpe = BPETokenizer.train(CORPUS, 60)
    chunks = Counter(re.findall(r" ?\w+| ?[^\w\s]+|\s+(?!\S)|\s+", CORPUS))
    for k, (a, b) in enumerate(bpe.merges):
        before = bpe.with_merges(k)
        pairs: Counter = Counter()
        for chunk, count in chunks.items():
            pieces = _reference_encode(chunk, before)
            for pair in pairwise(pieces):
                pairs[pair] += count
        assert pairs[(bpe.vocab[a], bpe.vocab[b])] == max(pairs.values()), f"merge {k}"


def test_bpe_prefix_property_and_zero_merges_is_char_level():
    big = BPETokenizer.train(CORPUS, 120)
    for k in (0, 1, 7, 50, 120):
        small = BPETokenizer.train(CORPUS, k)
        assert small.merges == big.merges[:k]
        assert big.with_merges(k).encode(HELD_OUT) == small.encode(HELD_OUT)
    char = CharTokenizer.fit(CORPUS)
    assert big.with_merges(0).vocab == char.vocab
    assert big.with_merges(0).encode(CORPUS) == char.encode(CORPUS)


def test_bpe_encode_matches_reference_and_round_trips():
    bpe = BPETokenizer.train(CORPUS, 300)
    for text in (CORPUS, HELD_OUT, "Catalogues, catalogues; CATALOGUES!"):
        assert bpe.tokenize(text) == _reference_encode(text, bpe)
        if set(text) <= set(bpe.alphabet):
            assert bpe.decode(bpe.encode(text)) == text
    assert bpe.vocab_size == 2 + len(set(CORPUS)) + 300


def test_bpe_training_stops_when_every_pre_token_is_one_token():
    bpe = BPETokenizer.train("ab ab", 50)
    assert [bpe.vocab[i] for i in bpe.encode("ab ab")] == ["ab", " ab"]
    assert [(bpe.vocab[a], bpe.vocab[b]) for a, b in bpe.merges] == [("a", "b"), (" ", "ab")]
    with pytest.raises(ValueError, match="n_merges must be <= the 2 merges"):
        bpe.with_merges(3)


def test_bpe_rare_word_splits_into_known_pieces():
    bpe = BPETokenizer.train(CORPUS, 400)
    assert bpe.tokenize(" catalogue") == [" catalogue"]
    pieces = bpe.tokenize(" reshelved")
    assert len(pieces) > 1 and "".join(pieces) == " reshelved"
    assert all(p in bpe.vocab for p in pieces)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="abcdeT .,!\n", max_size=60))
def test_bpe_properties_on_random_text(text):
    bpe = _BPE_FOR_PROPERTIES
    assert bpe.decode(bpe.encode(text)) == text
    assert bpe.tokenize(text) == _reference_encode(text, bpe)
    lengths = [len(bpe.with_merges(k).encode(text)) for k in (0, 5, 10, len(bpe.merges))]
    assert lengths == sorted(lengths, reverse=True)  # more merges never lengthen a text


_BPE_FOR_PROPERTIES = BPETokenizer.train("a cab, a dab, a bead. Ace! Bad deed.\nTea", 60)


def test_bpe_rejects_bad_merges():
    with pytest.raises(ValueError, match=re.escape("merges[0] must be a pair")):
        BPETokenizer(["a", "b"], [(0, 2)])  # id 0 is <pad>
    with pytest.raises(ValueError, match="repeats the pair"):
        BPETokenizer(["a", "b"], [(2, 3), (2, 3)])
    with pytest.raises(ValueError, match="single characters"):
        BPETokenizer(["ab"])


# ---------------------------------------------------------------------------------------
# embed and row_cosines


@pytest.mark.parametrize("shape", [(7,), (3, 5), (0,)])
def test_embed_is_one_hot_matmul_and_torch_embedding(shape, device, gen):
    E = torch.randn(11, 6, generator=gen).to(device)
    ids = torch.randint(0, 11, shape, generator=gen).to(device)
    X = embed(ids, E)
    assert X.shape == (*shape, 6)
    assert X.dtype == E.dtype and X.device == E.device
    torch.testing.assert_close(X, F.one_hot(ids, 11).to(E.dtype) @ E)
    torch.testing.assert_close(X, F.embedding(ids, E), rtol=0, atol=0)
    loop = torch.stack([E[i] for i in ids.flatten().tolist()]) if ids.numel() else X.flatten(0, -2)
    torch.testing.assert_close(X.reshape(-1, 6), loop.reshape(-1, 6), rtol=0, atol=0)


def test_embed_gradient_reaches_only_the_rows_looked_up(gen):
    E = torch.randn(10, 4, generator=gen, requires_grad=True)
    ids = torch.tensor([3, 7, 3])
    embed(ids, E).sum().backward()
    expected = torch.zeros(10, 4)
    expected[3] = 2.0
    expected[7] = 1.0
    torch.testing.assert_close(E.grad, expected)


@pytest.mark.parametrize(
    ("ids", "E", "error", "words"),
    [
        ([1, 2], torch.zeros(4, 2), TypeError, "ids must be a torch.Tensor"),
        (torch.tensor([1.0]), torch.zeros(4, 2), TypeError, "integer dtype"),
        (torch.tensor([True]), torch.zeros(4, 2), TypeError, "integer dtype"),
        (torch.tensor([4]), torch.zeros(4, 2), ValueError, "N_T = E.shape[0] = 4; got id 4"),
        (torch.tensor([-1]), torch.zeros(4, 2), ValueError, "got id -1"),
        (torch.tensor([0]), torch.zeros(4), ValueError, "at least 2 dimensions"),
        (torch.tensor([0]), torch.zeros(4, 2, 2), ValueError, "(N_T, d), two dimensions"),
        (torch.tensor([0]), torch.zeros(4, 2, dtype=torch.long), TypeError, "floating-point"),
    ],
)
def test_embed_errors_name_the_argument(ids, E, error, words):
    with pytest.raises(error, match=re.escape(words)):
        embed(ids, E)


def test_row_cosines_matches_numpy_loop(gen):
    E = torch.randn(9, 5, generator=gen, dtype=torch.float64)
    A = E.numpy()
    expected = [
        A[i] @ A[j] / (np.linalg.norm(A[i]) * np.linalg.norm(A[j]))
        for i in range(9)
        for j in range(i + 1, 9)
    ]
    got = row_cosines(E)
    assert got.shape == (36,)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_row_cosines_on_device_and_errors(device):
    E = torch.tensor([[1.0, 0.0], [0.0, 3.0], [-2.0, 0.0]], device=device)
    torch.testing.assert_close(row_cosines(E).cpu(), torch.tensor([0.0, -1.0, 0.0]))
    with pytest.raises(ValueError, match="row 1 is zero"):
        row_cosines(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="N_T >= 2"):
        row_cosines(torch.ones(1, 3))


# ---------------------------------------------------------------------------------------
# tokens_per_word


def test_tokens_per_word_counts_tokens_over_regex_words():
    words = len(re.findall(r"[A-Za-z0-9_]+", HELD_OUT))  # ASCII text
    assert tokens_per_word(CharTokenizer.fit(CORPUS), HELD_OUT) == len(HELD_OUT) / words
    pieces = re.findall(r"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]", HELD_OUT)
    assert tokens_per_word(WordTokenizer.fit(CORPUS), HELD_OUT) == len(pieces) / words
    with pytest.raises(ValueError, match="at least one word"):
        tokens_per_word(CharTokenizer.fit("a"), " .")
