"""From text to rows of a matrix: toy tokenizers, a shipped corpus and the embedding lookup.

A tokenizer cuts text into pieces drawn from a fixed list, the vocabulary
``T = (T_0, ..., T_{N_T - 1})``, and replaces each piece by its position in that list.
The embedding matrix ``E`` (shape ``(N_T, d)``) then turns position ``i`` into its row
``E[i]``. Three tokenizers show the trade-off between vocabulary size and sequence length:

- :class:`CharTokenizer`: one token per character; tiny vocabulary, long sequences;
- :class:`WordTokenizer`: one token per lower-cased word or punctuation mark; short
  sequences, a vocabulary that grows with the corpus, and ``<unk>`` for unseen words;
- :class:`BPETokenizer`: byte-pair encoding; starts from the characters and learns
  merges of frequent neighbours, so common words become one token and a rare word falls
  apart into known pieces.

Token ids start at 0, as Python indexes rows (the paper counts from 1).

Lesson: 00_tokens_and_embeddings.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import pairwise

import torch

from attnlib._checks import check_nonnegative_int, check_positive_int, check_tensor

__all__ = [
    "CORPUS",
    "HELD_OUT",
    "PAD",
    "UNK",
    "BPETokenizer",
    "CharTokenizer",
    "WordTokenizer",
    "embed",
    "row_cosines",
    "tokens_per_word",
]

PAD = "<pad>"
"""Padding token: fills short sequences in a batch; always id 0 where it exists."""

UNK = "<unk>"
"""Unknown token: stands for any piece missing from the vocabulary; id 1 where it exists."""

CORPUS = """\
A library is a machine for answering questions. A reader walks in with a question, the \
catalogue turns the question into a call number, and the call number points to one shelf. \
Nobody reads every book to find the right one: the catalogue does the looking up.

The catalogue works because every book has an address. The address is only a label. Book \
number 41 is not a little like book number 42; the numbers say where a book stands, not \
what it says. Change the numbering, move the books to match, and every reader still finds \
the same pages.

Librarians keep the catalogue small enough to search and fine enough to be useful. A \
catalogue with one card per letter would be tiny and useless. A catalogue with one card \
per sentence would be enormous, and most cards would never be read. Good catalogues sit \
in between: one card per common word, and for rare words a few cards for their pieces.

Old catalogues were drawers of paper cards. Each card held a title, an author, a subject \
and a call number, and the drawers were sorted so that a patient reader could search them \
by hand. Newer catalogues live on computers, but the idea has not changed: a short key \
leads to a long record, and the record leads to the book.

A database works the same way. A query arrives, the database compares it with every key, \
and it returns the value stored under the matching key. An exact match returns one value. \
A softer match could return a blend of values, weighted by how well each key fits the \
query. That softer lookup is the idea behind attention.

Before any lookup, the words must become numbers. Each word in the vocabulary gets a row \
in a table of numbers, and reading a sentence means reading the rows of its words, one \
after another. The rows are learned: words used in similar places end up with similar \
rows, and the table becomes a map of meaning.

Readers rarely ask for one word alone. They ask for a book about rivers and bridges, a \
record of a town, a letter written by a famous engineer. The librarian reads the whole \
request, weighs each word against the others, and only then walks to the shelves. Words \
mean more together than apart, and a good lookup reads them together.
"""
"""A few paragraphs written for this book, about libraries, catalogues and lookups.

The tokenizers in the lessons are fitted or trained on this text.
"""

HELD_OUT = """\
The librarian reshelved the misplaced atlases overnight, and every reader could search \
the catalogue again. By morning a student had asked for a history of lighthouses, a \
volunteer was mending a torn map, and the archivist was sorting letters from a \
shipwrecked sailor. Even so, most requests use common words, but every week brings a few \
that the catalogue has never indexed, and those are the hardest to find.
"""
"""A paragraph the tokenizers never see while fitting, with words absent from ``CORPUS``.

Long enough (69 words) for its tokens per word to measure a tokenizer rather than a few
lucky words.
"""

# Word tokenizer: runs of letters/digits, or any single other non-space character.
_WORD_PATTERN = re.compile(r"\w+|[^\w\s]")
# BPE pre-tokenizer, in the spirit of GPT-2's: a word with its leading space, a run of
# punctuation with its leading space, or whitespace. Every character falls in exactly one
# piece, so joining the pieces gives back the text.
_CHUNK_PATTERN = re.compile(r" ?\w+| ?[^\w\s]+|\s+(?!\S)|\s+")
_NO_SPACE_BEFORE = re.compile(r" ([.,;:!?)\]}'])")
_NO_SPACE_AFTER = re.compile(r"([(\[{']) ")


class _VocabTokenizer(ABC):
    """Shared machinery: a vocabulary list, its inverse and the id <-> token mapping."""

    def __init__(self, vocab: Sequence[str], *, unique: bool = True) -> None:
        vocab = list(vocab)
        if not all(isinstance(t, str) and t for t in vocab):
            raise TypeError("vocab must be a sequence of non-empty str tokens")
        if unique and len(set(vocab)) != len(vocab):
            dupes = sorted(t for t, c in Counter(vocab).items() if c > 1)
            raise ValueError(f"vocab must not repeat a token; got duplicates {dupes[:5]}")
        self.vocab: list[str] = vocab
        self.token_to_id: dict[str, int] = {}
        for i, t in enumerate(vocab):
            self.token_to_id.setdefault(t, i)

    @property
    def vocab_size(self) -> int:
        """``N_T``, the number of entries in the vocabulary (rows of ``E``)."""
        return len(self.vocab)

    def __len__(self) -> int:
        return self.vocab_size

    @abstractmethod
    def tokenize(self, text: str) -> list[str]:
        """Split ``text`` into vocabulary pieces (each subclass has its own rule)."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Turn token ids back into text."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; a piece missing from the vocabulary becomes ``<unk>``."""
        _check_text("text", text)
        unk = self.token_to_id.get(UNK)
        ids = []
        for piece in self.tokenize(text):
            i = self.token_to_id.get(piece, unk)
            if i is None:
                raise ValueError(f"text contains {piece!r}, which is not in the vocabulary")
            ids.append(i)
        return ids

    def _tokens_of(self, ids: Iterable[int]) -> list[str]:
        tokens = []
        for i in _as_id_list(ids):
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"ids must lie in [0, {self.vocab_size}); got {i}")
            tokens.append(self.vocab[i])
        return tokens

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class WordTokenizer(_VocabTokenizer):
    """Lower-cased words and single punctuation marks, with ``<pad>`` = 0 and ``<unk>`` = 1.

    ``fit`` lists every piece of a corpus, most frequent first (ties alphabetical), after
    the two special tokens. A word the corpus never contained encodes to ``<unk>``: the
    unknown-word problem of word-level vocabularies.

    Args:
        vocab: the vocabulary, starting with ``"<pad>"`` and ``"<unk>"``.

    Example:
        >>> tok = WordTokenizer.fit("The cat sat. The cat ran!")
        >>> tok.vocab
        ['<pad>', '<unk>', 'cat', 'the', '!', '.', 'ran', 'sat']
        >>> tok.encode("The dog sat.")
        [3, 1, 7, 5]
        >>> tok.decode([3, 2, 7, 5])
        'the cat sat.'

    Lesson: 00_tokens_and_embeddings.
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        super().__init__(vocab)
        if self.vocab[:2] != [PAD, UNK]:
            raise ValueError(f"vocab must start with {[PAD, UNK]}; got {self.vocab[:2]}")

    @classmethod
    def fit(
        cls, corpus: str, *, min_count: int = 1, max_size: int | None = None
    ) -> WordTokenizer:
        """Build the vocabulary of ``corpus``: specials, then pieces by falling frequency.

        Args:
            corpus: the text to learn the vocabulary from.
            min_count: keep only pieces seen at least this many times.
            max_size: cap on ``N_T`` (specials included); the rarest pieces are dropped.

        Returns:
            WordTokenizer: the fitted tokenizer.
        """
        _check_text("corpus", corpus)
        check_positive_int("min_count", min_count)
        if max_size is not None:
            check_positive_int("max_size", max_size)
            if max_size < 2:
                raise ValueError(
                    f"max_size must be >= 2 (room for {PAD} and {UNK}); got {max_size}"
                )
        counts = Counter(_WORD_PATTERN.findall(corpus.lower()))
        kept = [w for w, c in counts.items() if c >= min_count]
        kept.sort(key=lambda w: (-counts[w], w))
        vocab = [PAD, UNK, *kept]
        if max_size is not None:
            vocab = vocab[:max_size]
        return cls(vocab)

    def tokenize(self, text: str) -> list[str]:
        """Split lower-cased ``text`` into words (``\\w+``) and single punctuation marks."""
        _check_text("text", text)
        return _WORD_PATTERN.findall(text.lower())

    def decode(self, ids: Iterable[int]) -> str:
        """Join the tokens of ``ids`` with spaces, with no space before punctuation.

        Lower-casing is not undone, and an unknown word stays ``<unk>``.
        """
        text = " ".join(self._tokens_of(ids))
        return _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", text))


class CharTokenizer(_VocabTokenizer):
    """One token per character (case kept), with ``<pad>`` = 0 and ``<unk>`` = 1.

    Args:
        vocab: the vocabulary, starting with ``"<pad>"`` and ``"<unk>"``, then one
            single character per entry.

    Example:
        >>> tok = CharTokenizer.fit("abba")
        >>> tok.vocab
        ['<pad>', '<unk>', 'a', 'b']
        >>> tok.encode("abc")
        [2, 3, 1]
        >>> tok.decode(tok.encode("baab"))
        'baab'

    Lesson: 00_tokens_and_embeddings.
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        super().__init__(vocab)
        if self.vocab[:2] != [PAD, UNK]:
            raise ValueError(f"vocab must start with {[PAD, UNK]}; got {self.vocab[:2]}")
        long = [t for t in self.vocab[2:] if len(t) != 1]
        if long:
            raise ValueError(
                f"vocab entries after the specials must be single characters; got {long[:5]}"
            )

    @classmethod
    def fit(cls, corpus: str) -> CharTokenizer:
        """Vocabulary = the specials, then every distinct character of ``corpus``, sorted."""
        _check_text("corpus", corpus)
        return cls([PAD, UNK, *sorted(set(corpus))])

    def tokenize(self, text: str) -> list[str]:
        """The characters of ``text``, spaces and newlines included."""
        _check_text("text", text)
        return list(text)

    def decode(self, ids: Iterable[int]) -> str:
        """Concatenate the characters of ``ids``: ``decode(encode(t)) == t`` for seen characters."""
        return "".join(self._tokens_of(ids))


class BPETokenizer(_VocabTokenizer):
    """Byte-pair encoding over characters: the character vocabulary plus one token per merge.

    Training starts from the characters of each pre-token (a word with its leading space,
    or a run of punctuation with its leading space) and repeats: count adjacent token
    pairs, weighted by how often each pre-token occurs; replace the most frequent pair
    (ties: the pair with the smaller ids) by a new token, appended to the vocabulary.
    Encoding replays the merges in the order they were learned, so a word seen in training
    may become one token while a rare word falls apart into known pieces.

    With 0 merges this is exactly :class:`CharTokenizer` fitted on the same corpus. A
    character never seen in training encodes to ``<unk>``; production tokenizers (GPT-2,
    Llama 3) start from the 256 byte values instead, so that nothing is ever unknown.

    The merges of a shorter training run are a prefix of a longer run's, so
    :meth:`with_merges` gives every smaller tokenizer without training again.

    Args:
        alphabet: the base characters (after ``<pad>`` and ``<unk>``), in id order.
        merges: the learned merges in order, as pairs of token ids.

    Example:
        >>> bpe = BPETokenizer.train("aaabdaaabac", 3)
        >>> bpe.tokenize("aaabdaaabac")
        ['aaab', 'd', 'aaab', 'a', 'c']
        >>> bpe.vocab
        ['<pad>', '<unk>', 'a', 'b', 'c', 'd', 'aa', 'ab', 'aaab']
        >>> bpe.decode(bpe.encode("abacab"))
        'abacab'

    Lesson: 00_tokens_and_embeddings.
    """

    def __init__(self, alphabet: Sequence[str], merges: Sequence[tuple[int, int]] = ()) -> None:
        alphabet = list(alphabet)
        bad = [a for a in alphabet if not isinstance(a, str) or len(a) != 1]
        if bad:
            raise ValueError(f"alphabet must hold single characters; got {bad[:5]}")
        vocab = [PAD, UNK, *alphabet]
        n_base = len(vocab)
        ranks: dict[tuple[int, int], int] = {}
        for k, pair in enumerate(merges):
            if (
                not isinstance(pair, tuple)
                or len(pair) != 2
                or not all(
                    isinstance(i, int) and 2 <= i < len(vocab) and not isinstance(i, bool)
                    for i in pair
                )
            ):
                raise ValueError(
                    f"merges[{k}] must be a pair of ids of earlier non-special tokens "
                    f"(in [2, {len(vocab)})); got {pair!r}"
                )
            if pair in ranks:
                raise ValueError(f"merges[{k}] repeats the pair {pair} of merges[{ranks[pair]}]")
            ranks[pair] = k
            vocab.append(vocab[pair[0]] + vocab[pair[1]])
        # Two different merge paths may spell the same string: both tokens stay, and
        # token_to_id names the first.
        super().__init__(vocab, unique=False)
        self.alphabet: list[str] = alphabet
        self.merges: list[tuple[int, int]] = list(merges)
        self._n_base = n_base
        self._ranks = ranks
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(cls, corpus: str, n_merges: int) -> BPETokenizer:
        """Learn up to ``n_merges`` merges on ``corpus``.

        Training stops early once every pre-token of the corpus is a single token.

        Args:
            corpus: the training text; its distinct characters form the alphabet.
            n_merges: the number of merges to learn.

        Returns:
            BPETokenizer: the trained tokenizer, ``N_T = 2 + len(alphabet) + n_merges``.
        """
        _check_text("corpus", corpus)
        check_nonnegative_int("n_merges", n_merges)
        alphabet = sorted(set(corpus))
        char_id = {ch: 2 + k for k, ch in enumerate(alphabet)}
        n_base = 2 + len(alphabet)
        counts = Counter(_CHUNK_PATTERN.findall(corpus))
        words = [([char_id[ch] for ch in chunk], c) for chunk, c in counts.items()]
        merges: list[tuple[int, int]] = []
        for k in range(n_merges):
            pairs: Counter[tuple[int, int]] = Counter()
            for ids, c in words:
                for pair in pairwise(ids):
                    pairs[pair] += c
            if not pairs:
                break
            best = min(pairs, key=lambda p: (-pairs[p], p))
            merges.append(best)
            for ids, _ in words:
                ids[:] = _merge(ids, best, n_base + k)
        return cls(alphabet, merges)

    def with_merges(self, n_merges: int) -> BPETokenizer:
        """The tokenizer that training with ``n_merges`` merges gives: a prefix of the merges."""
        check_nonnegative_int("n_merges", n_merges)
        if n_merges > len(self.merges):
            raise ValueError(
                f"n_merges must be <= the {len(self.merges)} merges learned; got {n_merges}"
            )
        return BPETokenizer(self.alphabet, self.merges[:n_merges])

    def _encode_chunk(self, chunk: str) -> list[int]:
        if chunk not in self._cache:
            unk = self.token_to_id[UNK]
            ids = [self.token_to_id.get(ch, unk) for ch in chunk]
            while len(ids) > 1:
                # the earliest-learned merge present in the sequence goes first
                pair = min(pairwise(ids), key=lambda p: self._ranks.get(p, len(self._ranks)))
                if pair not in self._ranks:
                    break
                ids = _merge(ids, pair, self._n_base + self._ranks[pair])
            self._cache[chunk] = ids
        return self._cache[chunk]

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text`` (leading spaces kept); unseen characters become ``<unk>``."""
        _check_text("text", text)
        return [self.vocab[i] for i in self.encode(text)]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: the merges replayed in learned order on each pre-token."""
        _check_text("text", text)
        return [i for chunk in _CHUNK_PATTERN.findall(text) for i in self._encode_chunk(chunk)]

    def decode(self, ids: Iterable[int]) -> str:
        """Concatenate the pieces: ``decode(encode(t)) == t`` when every character of ``t``
        was seen in training."""
        return "".join(self._tokens_of(ids))

    def __repr__(self) -> str:
        return f"BPETokenizer(n_merges={len(self.merges)}, vocab_size={self.vocab_size})"


def embed(ids: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """Look up the rows of the embedding matrix: ``X = E[ids]``.

    Row ``n`` of the result is ``E[ids[n]]``. Picking row ``i`` is multiplying the one-hot
    vector ``e_i`` by ``E``, so the embedding is a linear map applied to one-hot vectors.

    Args:
        ids: integer token ids, shape ``(...,)`` (for example ``(N,)`` or ``(B, N)``),
            each in ``[0, N_T)``.
        E: the embedding matrix, shape ``(N_T, d)``.

    Returns:
        torch.Tensor: ``X`` of shape ``(..., d)``, on ``E``'s device and dtype.

    Equivalent to ``torch.nn.functional.one_hot(ids, N_T).to(E.dtype) @ E`` and to
    ``torch.nn.functional.embedding(ids, E)``.

    Example:
        >>> E = torch.arange(6.0).reshape(3, 2)
        >>> embed(torch.tensor([2, 0, 2]), E)
        tensor([[4., 5.],
                [0., 1.],
                [4., 5.]])

    Lesson: 00_tokens_and_embeddings.
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(
            f"ids must be a torch.Tensor of integer token ids (wrap a list with "
            f"torch.tensor(ids)); got {type(ids).__name__}"
        )
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"ids must have an integer dtype (token ids); got {ids.dtype}")
    check_tensor("E", E, min_dim=2)
    if E.dim() != 2:
        raise ValueError(f"E must have shape (N_T, d), two dimensions; got shape {tuple(E.shape)}")
    if ids.device != E.device:
        raise ValueError(
            f"ids and E must live on one device; got ids on {ids.device} and E on {E.device}"
        )
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= E.shape[0]:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"ids must lie in [0, N_T) with N_T = E.shape[0] = {E.shape[0]}; got id {bad}"
            )
    return E[ids]  # (..., d)


def row_cosines(E: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair of distinct rows: ``<E_i, E_j> / (|E_i| |E_j|)``, ``i < j``.

    The full ``N_T x N_T`` cosine matrix is formed on the way, so keep ``N_T`` to a few
    thousand rows.

    Args:
        E: a matrix of shape ``(N_T, d)`` with ``N_T >= 2`` and no zero row.

    Returns:
        torch.Tensor: shape ``(N_T (N_T - 1) / 2,)``, the upper triangle of the cosine
        matrix read row by row.

    Equivalent to ``torch.nn.functional.cosine_similarity(E[i], E[j], dim=0)`` for each
    pair ``i < j``.

    Example:
        >>> row_cosines(torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]))
        tensor([0.0000, 0.7071, 0.7071])

    Lesson: 00_tokens_and_embeddings.
    """
    check_tensor("E", E, min_dim=2)
    if E.dim() != 2 or E.shape[0] < 2:
        raise ValueError(f"E must have shape (N_T, d) with N_T >= 2; got shape {tuple(E.shape)}")
    norms = torch.linalg.vector_norm(E, dim=-1, keepdim=True)  # (N_T, 1)
    if bool((norms == 0).any()):
        row = int((norms[:, 0] == 0).nonzero()[0])
        raise ValueError(f"E must have no zero row (its cosine is undefined); row {row} is zero")
    U = E / norms  # unit rows
    C = U @ U.T  # (N_T, N_T)
    i, j = torch.triu_indices(E.shape[0], E.shape[0], offset=1, device=E.device)
    return C[i, j]


def tokens_per_word(tokenizer: _VocabTokenizer, text: str) -> float:
    """Average sequence cost of a word: ``len(tokenizer.encode(text)) / #words``.

    A word is a run of letters, digits or underscores (``\\w+``); punctuation and spaces
    cost tokens but are not words, so a character tokenizer pays for them too.

    Args:
        tokenizer: any tokenizer of this module.
        text: a text with at least one word.

    Returns:
        float: tokens per word.

    Example:
        >>> tokens_per_word(CharTokenizer.fit("ab cd"), "ab cd")
        2.5

    Lesson: 00_tokens_and_embeddings.
    """
    _check_text("text", text)
    n_words = len(re.findall(r"\w+", text))
    if n_words == 0:
        raise ValueError(f"text must contain at least one word; got {text!r}")
    return len(tokenizer.encode(text)) / n_words


def _merge(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    """Replace each non-overlapping occurrence of ``pair`` in ``ids``, left to right."""
    out = []
    k = 0
    while k < len(ids):
        if k + 1 < len(ids) and (ids[k], ids[k + 1]) == pair:
            out.append(new)
            k += 2
        else:
            out.append(ids[k])
            k += 1
    return out


def _as_id_list(ids: Iterable[int]) -> list[int]:
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(
                f"ids must be a 1-D integer tensor or a list of ints; got a tensor of shape "
                f"{tuple(ids.shape)} and dtype {ids.dtype}"
            )
        return [int(i) for i in ids.tolist()]
    out = []
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"ids must contain ints; got {i!r} ({type(i).__name__})")
        out.append(i)
    return out


def _check_text(name: str, text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str; got {type(text).__name__}")
