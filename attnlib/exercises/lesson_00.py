"""Checked exercises of lesson 00: tokens and embeddings."""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from attnlib.analysis.memory import LLAMA3_8B, LLAMA3_70B, MISTRAL_7B
from attnlib.exercises import checker, compare, integer, numbers, scalar
from attnlib.tokens import CORPUS, BPETokenizer


@numbers("00.2", rel=0.01,
         what="three fractions, one per model in the order Llama 3 8B, Mistral 7B, Llama 3 70B")
def _embedding_shares():
    """Shares of the input E in Llama 3 8B, Mistral 7B and Llama 3 70B (fractions)."""
    nominal = ((LLAMA3_8B, 8e9), (MISTRAL_7B, 7e9), (LLAMA3_70B, 70e9))
    expected = torch.tensor([s.embedding_params / n for s, n in nominal], dtype=torch.float64)
    specials = {LLAMA3_8B.name: 256, LLAMA3_70B.name: 256}  # Llama 3's reserved tokens
    without_specials = torch.tensor(  # the BPE vocabulary alone: 128,000 rows for Llama 3
        [(s.vocab_size - specials.get(s.name, 0)) * s.d_model / n for s, n in nominal],
        dtype=torch.float64)
    return expected, (
        (2 * expected, "these count E twice: the question asks for the input E only, not E "
                       "plus an output head."),
        (without_specials, "these give Llama 3 128,000 rows; its E has N_T = 128,256 "
                           "(LLAMA3_8B.vocab_size): the 256 reserved special tokens have rows "
                           "too."),
    )


@lru_cache(maxsize=1)
def _lesson_bpe() -> BPETokenizer:
    """The lesson's BPE tokenizer: 500 merges trained on the shipped corpus."""
    return BPETokenizer.train(CORPUS, 500)


def _catalogue_pieces(k: int) -> list[str]:
    return _lesson_bpe().with_merges(k).tokenize(" catalogue")


def _merges_needed() -> int:
    """The smallest k after which ' catalogue' is a single token."""
    n_merges = len(_lesson_bpe().merges)
    return next(k for k in range(n_merges + 1) if len(_catalogue_pieces(k)) == 1)


_OFF_BY_ONE = ("off by one: bpe.with_merges(k) applies the first k merges; find the smallest "
               "k whose tokenizer keeps ' catalogue' whole.")


def _merges_mistakes() -> list[tuple[int, str]]:
    expected = _merges_needed()
    return [(expected - 1, _OFF_BY_ONE), (expected + 1, _OFF_BY_ONE)]


@checker("00.4", mistakes=_merges_mistakes)
def _catalogue(answer: object) -> str | None:
    """Smallest number of merges after which ' catalogue' is a single token."""
    got = integer(answer)
    if got is None:
        return f"expected a whole number of merges (an int); got a {type(answer).__name__}."
    expected = _merges_needed()
    if got == expected:
        return None
    if got < 0:
        return "a number of merges cannot be negative."
    if abs(got - expected) == 1:
        return _OFF_BY_ONE
    if got < expected:
        return (f"too few: after {got} merges ' catalogue' is still the pieces "
                f"{_catalogue_pieces(got)}.")
    return (f"too many: ' catalogue' is one token well before {got} merges; look for the "
            "first k at which it becomes one.")


def _largest_gaussian(m: float) -> float:
    """Expected largest of m independent N(0, 1), to the first three terms of its expansion."""
    a = math.sqrt(2 * math.log(m))
    return a - (math.log(math.log(m)) + math.log(4 * math.pi)) / (2 * a) + 0.5772 / a


def _closest_pair_mistakes() -> list[tuple[torch.Tensor, str]]:
    """Wrong estimates of the largest |cos| for Llama 3 70B's shape, with their hints."""
    n, d = LLAMA3_70B.vocab_size, LLAMA3_70B.d_model
    pairs = n * (n - 1) / 2
    expected = math.sqrt(2 * math.log(pairs) / d)
    return [
        (scalar(math.degrees(math.acos(expected))),
         "that is the angle in degrees; the question asks for the cosine."),
        (scalar(math.sqrt(2 * math.log(n) / d)),
         "count pairs of rows, N_T (N_T - 1) / 2, not rows: each pair has a cosine."),
        (scalar(math.sqrt(2 * math.log10(pairs) / d)),
         "use the natural logarithm (math.log), not log10."),
        (scalar(2 * math.log(pairs) / d), "you forgot the square root."),
    ]


@checker("00.5", mistakes=_closest_pair_mistakes)
def _closest_pair(answer: object) -> str | None:
    """Estimate of the largest absolute cosine among Llama 3 70B's random rows.

    The exercise asks for the leading-order formula with m = N_T (N_T - 1) / 2 pairs. Its
    refinements are right too: m = N_T (N_T - 1), twice the pairs, since a cosine can be large
    at either sign, and the expansion with its next terms (the solution's third column), at
    either m.
    """
    n, d = LLAMA3_70B.vocab_size, LLAMA3_70B.d_model
    pairs = n * (n - 1) / 2
    expected = math.sqrt(2 * math.log(pairs) / d)
    refined = [math.sqrt(2 * math.log(2 * pairs) / d)]
    refined += [_largest_gaussian(m) / math.sqrt(d) for m in (pairs, 2 * pairs)]
    what = "one number, the largest |cos| (a float)"
    if any(compare(answer, scalar(x), rel=0.01, what=what) is None for x in refined):
        return None
    return compare(answer, scalar(expected), rel=0.01, what=what,
                   mistakes=_closest_pair_mistakes())
