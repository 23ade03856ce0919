"""The experiments of lesson 00 as tables: tokenizers, their merges, embedding sizes.

Each function returns a ``pandas.DataFrame`` that a lesson shows as a table; the figures of
:mod:`attnlib.viz.tokens` draw the same comparisons.

Lesson: 00_tokens_and_embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import torch

from attnlib._checks import check_positive_int
from attnlib.analysis.memory import ModelSpec
from attnlib.tokens import (
    CORPUS,
    HELD_OUT,
    UNK,
    BPETokenizer,
    row_cosines,
    tokens_per_word,
)

__all__ = ["cosine_table", "embedding_table", "merge_table", "tokenizer_table"]


def tokenizer_table(
    tokenizers: Mapping[str, object], corpus: str = CORPUS, held_out: str = HELD_OUT
) -> pd.DataFrame:
    """Vocabulary size against sequence cost, one row per tokenizer.

    Args:
        tokenizers: display name -> tokenizer of :mod:`attnlib.tokens`.
        corpus: the text the tokenizers were fitted on.
        held_out: a text they never saw.

    Returns:
        pd.DataFrame: columns ``N_T``, tokens per word on each text (2 decimals) and the
        count of ``<unk>`` tokens in the held-out text; indexed by name.
    """
    rows = {}
    for name, tok in tokenizers.items():
        rows[name] = {
            "N_T": tok.vocab_size,
            "tokens per word, corpus": round(tokens_per_word(tok, corpus), 2),
            "tokens per word, held out": round(tokens_per_word(tok, held_out), 2),
            f"{UNK} in held out": sum(tok.vocab[i] == UNK for i in tok.encode(held_out)),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("tokenizer")


def merge_table(bpe: BPETokenizer, text: str, merges: Sequence[int]) -> pd.DataFrame:
    """What BPE merge ``k`` made, and how often its new token occurs in ``text``.

    The count is that of the merged pair at the moment of the merge: the number of times
    the new token occurs when ``text`` is encoded with the first ``k`` merges.

    Args:
        bpe: a trained tokenizer.
        text: usually the training corpus.
        merges: merge numbers ``k``, from 1 (the first merge) to ``len(bpe.merges)``.

    Returns:
        pd.DataFrame: columns ``new token`` (a leading space shown as ``␣``) and
        ``count in text``, indexed by merge number.
    """
    rows = {}
    for k in merges:
        check_positive_int("merges[...]", k)
        tok = bpe.with_merges(k)  # also checks k <= len(bpe.merges)
        new = tok.vocab_size - 1  # the token merge k appended
        rows[k] = {"new token": tok.vocab[new].replace(" ", "␣"),
                   "count in text": tok.encode(text).count(new)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("merge")


def embedding_table(
    specs: Sequence[ModelSpec],
    nominal: Mapping[str, float],
    tied: Mapping[str, bool],
    *,
    bytes_per_elem: int = 2,
) -> pd.DataFrame:
    """Size of the embedding matrix ``E`` in real models, and its share of the weights.

    Two shares, because models differ in what they store: the input matrix ``E`` alone,
    and ``E`` plus the output head that maps the last rows back to ``N_T`` scores. A model
    that ties its head to ``E`` stores one ``N_T x d`` matrix; an untied one stores two.

    Args:
        specs: presets from :mod:`attnlib.analysis.memory`.
        nominal: ``spec.name`` -> the parameter count in the model's name (e.g. ``70e9``).
        tied: ``spec.name`` -> whether the output head is ``E`` itself.
        bytes_per_elem: bytes per entry (2 for bfloat16).

    Returns:
        pd.DataFrame: ``N_T``, ``d``, entries of ``E``, its size in GB (``10^9`` bytes,
        2 decimals), one row's size in bytes, whether the head is tied, and both shares in
        percent (1 decimal).
    """
    rows = {}
    for spec in specs:
        n = spec.embedding_params  # N_T * d
        stored = n if tied[spec.name] else 2 * n  # E, plus an untied head of E's shape
        rows[spec.name] = {
            "N_T": spec.vocab_size,
            "d": spec.d_model,
            "entries of E": n,
            "E (GB)": round(bytes_per_elem * n / 1e9, 2),
            "one row (bytes)": bytes_per_elem * spec.d_model,
            "head tied to E": tied[spec.name],
            "share, E only (%)": round(100 * n / nominal[spec.name], 1),
            "share, E and head (%)": round(100 * stored / nominal[spec.name], 1),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")


def cosine_table(
    dims: Sequence[int], vocab_size: int = 256, *, seed: int = 0
) -> pd.DataFrame:
    """The numbers behind :func:`~attnlib.viz.tokens.embedding_dimension_figure`, one row
    per width ``d``.

    Args:
        dims: embedding widths.
        vocab_size: ``N_T``, rows of each random ``E`` (the figure's draw).
        seed: seed of the generator (the figure's draw).

    Returns:
        pd.DataFrame: pairs, standard deviation of the cosines, ``1/sqrt(d)`` and
        ``max |cos|`` (3 decimals), indexed by ``d``.
    """
    rows = {}
    for d in dims:
        E = torch.randn(vocab_size, d, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64)
        cos = row_cosines(E)
        rows[d] = {"pairs": cos.numel(), "std of cos": round(float(cos.std()), 3),
                   "1/sqrt(d)": round(d**-0.5, 3), "max |cos|": round(float(cos.abs().max()), 3)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("d")
