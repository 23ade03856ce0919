"""Data the book makes itself: associative recall, induction, and the book's own text.

Every task returns ``(ids, targets)``: token ids ``(B, N)`` and targets of the same shape,
aligned with the logits of :class:`attnlib.TinyDecoder` (``targets[b, i]`` is the token
that should follow ``ids[b, i]``), with ``-100`` (:data:`IGNORE`, PyTorch's ignore index
for ``cross_entropy``) wherever nothing can be predicted. The synthetic tasks draw from the
``torch.Generator`` they are given (a CPU generator), so one seed gives the same batch on
any machine; the tensors are then moved to ``device``.

- :func:`associative_recall`: key-value pairs, then a query key; the target is its value.
  The database lookup of chapter 01, learned (``Y = Z^-1 A V`` with one key that matches).
- :func:`induction`: a random segment repeated; once a token has been seen, the token after
  it is the token that followed it last time. Previous-token and induction heads (03).
- :func:`book_windows` and :func:`book_held_out`: windows of the book's own prose (the
  markdown of the lessons and the book's pages), one character per token with chapter 00's
  :class:`~attnlib.tokens.CharTokenizer`. The text is frozen: a copy ships with the
  package (:func:`book_text`, its hash :func:`book_sha256`), so editing a lesson does not
  change what the shipped models were trained on. :func:`build_book_corpus` makes a new
  copy from a checkout of the book.

Lesson: 01_attention_as_lookup, 03_multi_head_attention, 05_kv_cache to 09_frontier.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path

import torch

from attnlib._checks import check_choice, check_positive_int
from attnlib.tokens import CharTokenizer

__all__ = [
    "BOOK_CHUNK",
    "BOOK_HELD_OUT_EVERY",
    "IGNORE",
    "associative_recall",
    "book_held_out",
    "book_ids",
    "book_sha256",
    "book_text",
    "book_tokenizer",
    "book_windows",
    "build_book_corpus",
    "induction",
    "recall_key_position",
]

IGNORE = -100
"""The target of a position with nothing to predict (``F.cross_entropy``'s ``ignore_index``)."""

BOOK_CHUNK = 2048
"""The book's text is cut into chunks of this many characters to split it."""

BOOK_HELD_OUT_EVERY = 10
"""Every tenth chunk (indices 9, 19, ...) is held out; the others are for training."""

_CORPUS = Path(__file__).parent / "data" / "book.txt"
_SPLITS = ("train", "held-out")


def _check_batch(batch_size: object, generator: object) -> None:
    check_positive_int("batch_size", batch_size)
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(
            "generator must be a CPU torch.Generator (torch.Generator().manual_seed(s)); "
            f"got {generator!r}"
        )


def _rows_of_distinct(
    batch_size: int, n_choices: int, n: int, generator: torch.Generator
) -> torch.Tensor:
    """``(batch_size, n)`` ids, each row ``n`` distinct draws from ``range(n_choices)``."""
    return torch.rand(batch_size, n_choices, generator=generator).argsort(dim=-1)[:, :n]


# ---------------------------------------------------------------------------------------
# Associative recall
# ---------------------------------------------------------------------------------------


def associative_recall(
    *,
    batch_size: int,
    generator: torch.Generator,
    n_pairs: int = 8,
    n_queries: int = 1,
    n_keys: int = 16,
    n_values: int = 16,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Key-value pairs, then queries: ``k_1 v_1 ... k_n v_n q_1 a_1 ... q_m``; targets: values.

    Format of one row (``N = 2 n_pairs + 2 n_queries - 1`` tokens):

    - keys are ids ``0 .. n_keys - 1``, values ids ``n_keys .. n_keys + n_values - 1``
      (so ``vocab_size = n_keys + n_values``);
    - the ``n_pairs`` keys of a row are distinct, each value is drawn uniformly (values may
      repeat);
    - then ``n_queries`` distinct keys of the row, in random order, each followed by its
      value (the answer), except the last, which ends the row;
    - ``targets`` is ``-100`` everywhere except at the queries, whose target is the value
      stored under that key. With ``n_queries=1`` (the default) the row ends in the one
      query and only the last position has a target.

    A model that guesses among all values is right with probability ``1 / n_values``; one
    that picks a random value of the row, about ``1 / n_pairs``. To answer, attention at a
    query must find the one pair whose key matches: the lookup of chapter 01.

    Args:
        batch_size: ``B``, rows.
        generator: a CPU ``torch.Generator``; the batch depends on nothing else.
        n_pairs: pairs per row (at most ``n_keys``).
        n_queries: queries per row (at most ``n_pairs``).
        n_keys: size of the key vocabulary.
        n_values: size of the value vocabulary.
        device: where the tensors go.

    Returns:
        ``(ids, targets)``, both ``(B, 2 n_pairs + 2 n_queries - 1)`` int64.

    Example:
        >>> ids, targets = associative_recall(batch_size=2, n_pairs=3,
        ...                                   generator=torch.Generator().manual_seed(0))
        >>> ids.shape, targets[:, :-1].unique().tolist()
        (torch.Size([2, 7]), [-100])
        >>> j = recall_key_position(ids)  # where the queried key stands
        >>> bool((targets[:, -1] == ids[torch.arange(2), j + 1]).all())  # its value is next
        True

    Lesson: 01_attention_as_lookup.
    """
    _check_batch(batch_size, generator)
    for name, value in (("n_pairs", n_pairs), ("n_queries", n_queries), ("n_keys", n_keys),
                        ("n_values", n_values)):
        check_positive_int(name, value)
    if not n_queries <= n_pairs <= n_keys:
        raise ValueError(
            "counts must satisfy n_queries <= n_pairs <= n_keys (keys and queries are "
            f"distinct); got n_queries={n_queries}, n_pairs={n_pairs}, n_keys={n_keys}"
        )
    B, n, m = batch_size, n_pairs, n_queries
    keys = _rows_of_distinct(B, n_keys, n, generator)  # (B, n)
    values = n_keys + torch.randint(n_values, (B, n), generator=generator)  # (B, n)
    asked = _rows_of_distinct(B, n, m, generator)  # (B, m) which pairs are asked for
    q, a = keys.gather(-1, asked), values.gather(-1, asked)  # (B, m) queries, answers
    ids = torch.cat((torch.stack((keys, values), dim=-1).reshape(B, 2 * n),
                     torch.stack((q, a), dim=-1).reshape(B, 2 * m)[:, :-1]), dim=-1)
    targets = torch.full_like(ids, IGNORE)
    targets[:, 2 * n::2] = a  # (B, m): the queries stand at 2n, 2n + 2, ...
    return ids.to(device), targets.to(device)


def recall_key_position(ids: torch.Tensor) -> torch.Tensor:
    """Where the queried key stands in each row of :func:`associative_recall`: ``(B,)``.

    The last token is the query; the answer is the position ``2 j`` of the earlier key equal
    to it (its value sits at ``2 j + 1``).
    """
    keys = ids[..., :-1:2]  # (B, n_pairs), the keys at the even positions
    return 2 * (keys == ids[..., -1:]).int().argmax(dim=-1)


# ---------------------------------------------------------------------------------------
# Induction
# ---------------------------------------------------------------------------------------


def induction(
    *,
    batch_size: int,
    generator: torch.Generator,
    n_tokens: int = 64,
    vocab_size: int = 32,
    min_period: int = 4,
    max_period: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random segment of ``L`` distinct tokens, repeated: ``x_t = S[t mod L]``.

    Format of one row: the period ``L`` is drawn uniformly from
    ``[min_period, max_period]`` (per row, so no fixed offset solves the task), the segment
    ``S`` holds ``L`` distinct ids from ``range(vocab_size)``, and the row is ``S`` repeated
    to ``n_tokens`` tokens. ``targets[t] = x_{t+1}`` for ``t >= L`` and ``-100`` before: the
    first copy is random and cannot be predicted. Once ``x_t`` has been seen, at ``t - L``,
    the next token is the one that followed it then, ``x_{t-L+1}``: "find the previous
    occurrence of the current token and copy what came after it", what a previous-token
    head followed by an induction head computes (Olsson et al., 2022).

    Args:
        batch_size: ``B``, rows.
        generator: a CPU ``torch.Generator``.
        n_tokens: ``N``, tokens per row.
        vocab_size: ids are drawn from ``range(vocab_size)``; at least ``max_period``.
        min_period: shortest period.
        max_period: longest period; ``None`` means ``n_tokens // 2`` (every row holds at
            least two copies).
        device: where the tensors go.

    Returns:
        ``(ids, targets)``, both ``(B, n_tokens)`` int64.

    Example:
        >>> ids, targets = induction(batch_size=1, n_tokens=12, min_period=5, max_period=5,
        ...                          generator=torch.Generator().manual_seed(0))
        >>> bool((ids[0, 5:] == ids[0, :7]).all()), targets[0, :5].tolist()
        (True, [-100, -100, -100, -100, -100])
        >>> bool((targets[0, 5:-1] == ids[0, 6:]).all())
        True

    Lesson: 03_multi_head_attention, 08_rope.
    """
    _check_batch(batch_size, generator)
    check_positive_int("n_tokens", n_tokens)
    check_positive_int("vocab_size", vocab_size)
    check_positive_int("min_period", min_period)
    max_period = n_tokens // 2 if max_period is None else check_positive_int(
        "max_period", max_period)
    if not min_period <= max_period <= vocab_size:
        raise ValueError(
            "periods must satisfy min_period <= max_period <= vocab_size (a segment holds "
            f"distinct tokens); got min_period={min_period}, max_period={max_period}, "
            f"vocab_size={vocab_size}"
        )
    B = batch_size
    L = torch.randint(min_period, max_period + 1, (B, 1), generator=generator)  # (B, 1)
    S = _rows_of_distinct(B, vocab_size, max_period, generator)  # (B, max_period)
    t = torch.arange(n_tokens + 1)  # one more, for the target of the last position
    x = S.gather(-1, t % L)  # (B, N + 1): x_t = S[t mod L]
    ids, targets = x[:, :-1], x[:, 1:].clone()
    targets[t[:-1] < L] = IGNORE  # the first copy: nothing to look back at
    return ids.contiguous().to(device), targets.to(device)


# ---------------------------------------------------------------------------------------
# The book's own text
# ---------------------------------------------------------------------------------------


@functools.cache
def book_text() -> str:
    """The frozen text of the book that the ``"book"`` models were trained on (UTF-8).

    The markdown cells of the lessons, in order, then the book's pages (intro, how to use,
    notation, glossary, performance), as made by :func:`build_book_corpus` and shipped in
    ``attnlib/data/book.txt``.
    """
    return _CORPUS.read_text(encoding="utf-8")


def book_sha256() -> str:
    """SHA-256 of :func:`book_text` encoded as UTF-8 (the models' cards record it)."""
    return hashlib.sha256(book_text().encode("utf-8")).hexdigest()


@functools.cache
def book_tokenizer() -> CharTokenizer:
    """Chapter 00's character tokenizer fitted on the whole frozen text (no ``<unk>`` in it)."""
    return CharTokenizer.fit(book_text())


@functools.cache
def _book_ids(split: str) -> torch.Tensor:
    text = book_text()
    chunks = [text[i:i + BOOK_CHUNK] for i in range(0, len(text), BOOK_CHUNK)]
    held = [i % BOOK_HELD_OUT_EVERY == BOOK_HELD_OUT_EVERY - 1 for i in range(len(chunks))]
    keep = "".join(c for c, h in zip(chunks, held, strict=True) if h == (split == "held-out"))
    return torch.tensor(book_tokenizer().encode(keep), dtype=torch.int64)


def book_ids(split: str = "train") -> torch.Tensor:
    """The token ids of one part of the book's text: ``"train"`` or ``"held-out"``, ``(N,)``.

    The text is cut into chunks of :data:`BOOK_CHUNK` characters; every
    :data:`BOOK_HELD_OUT_EVERY`-th chunk is held out, so both parts sample every chapter.
    Each part is its chunks joined in order.
    """
    return _book_ids(check_choice("split", split, _SPLITS)).clone()


def book_windows(
    *,
    batch_size: int,
    generator: torch.Generator,
    n_tokens: int = 128,
    split: str = "train",
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the book's text: ``ids = x[s:s+N]``, ``targets = x[s+1:s+N+1]``.

    Each row starts at an offset ``s`` drawn uniformly from the chosen part
    (:func:`book_ids`); every position has a target (no ``-100``). Token ids are those of
    :func:`book_tokenizer`.

    Args:
        batch_size: ``B``, windows.
        generator: a CPU ``torch.Generator``.
        n_tokens: ``N``, characters per window.
        split: ``"train"`` or ``"held-out"``.
        device: where the tensors go.

    Returns:
        ``(ids, targets)``, both ``(B, n_tokens)`` int64.

    Example:
        >>> ids, targets = book_windows(batch_size=2, n_tokens=16,
        ...                             generator=torch.Generator().manual_seed(0))
        >>> ids.shape, bool((ids[:, 1:] == targets[:, :-1]).all())
        (torch.Size([2, 16]), True)
    """
    _check_batch(batch_size, generator)
    check_positive_int("n_tokens", n_tokens)
    x = _book_ids(check_choice("split", split, _SPLITS))
    starts = torch.randint(len(x) - n_tokens, (batch_size, 1), generator=generator)
    idx = starts + torch.arange(n_tokens + 1)  # (B, N + 1)
    window = x[idx]
    return window[:, :-1].to(device), window[:, 1:].to(device)


def book_held_out(
    *,
    n_tokens: int = 128,
    n_windows: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed held-out evaluation set: consecutive windows of the held-out part.

    Window ``w`` is ``ids = x[w N : (w + 1) N]`` with ``targets`` shifted by one, over the
    held-out ids ``x`` (:func:`book_ids`); no randomness, so every evaluation sees the same
    tokens.

    Args:
        n_tokens: ``N``, characters per window.
        n_windows: how many windows, from the start; ``None`` means all that fit.
        device: where the tensors go.

    Returns:
        ``(ids, targets)``, both ``(n_windows, n_tokens)`` int64.
    """
    check_positive_int("n_tokens", n_tokens)
    x = _book_ids("held-out")
    fit = (len(x) - 1) // n_tokens
    if n_windows is None:
        n_windows = fit
    elif check_positive_int("n_windows", n_windows) > fit:
        raise ValueError(f"n_windows must be at most {fit} (windows of {n_tokens} tokens in "
                         f"the held-out part); got {n_windows}")
    ids = x[: n_windows * n_tokens].reshape(n_windows, n_tokens)
    targets = x[1: n_windows * n_tokens + 1].reshape(n_windows, n_tokens)
    return ids.to(device), targets.to(device)


_PAGES = ("intro", "how-to-use", "notation", "glossary", "performance")
_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)


def build_book_corpus(root: str | Path) -> str:
    """The book's prose from a checkout at ``root``: lesson markdown cells, then book pages.

    Each lesson ``lessons/NN_*.ipynb`` contributes its markdown cells in order; then the
    pages ``book/{intro, how-to-use, notation, glossary, performance}.md``, without their
    YAML front matter. Parts are separated by a blank line. To freeze a new copy for
    training, write the result to ``attnlib/data/book.txt`` (then retrain: the models'
    cards record :func:`book_sha256`).
    """
    root = Path(root)
    parts = []
    for path in sorted((root / "lessons").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        parts += ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    for page in _PAGES:
        parts.append(_FRONT_MATTER.sub("", (root / "book" / f"{page}.md").read_text("utf-8")))
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"
