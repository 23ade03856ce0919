"""Planted wrong answers for lesson 00's exercises (published shapes typed in by hand)."""

from __future__ import annotations

import math

from planted import Planted

# config.json of each model: vocabulary N_T and width d; nominal sizes 8, 7 and 70 billion
SHAPES = [(128_256, 4_096, 8e9), (32_000, 4_096, 7e9), (128_256, 8_192, 70e9)]
# the parameter counts the models' cards give, instead of the nominal ones
COUNTED = [8.03e9, 7.24e9, 70.6e9]
SHARES = [n * d / size for n, d, size in SHAPES]

N, D = 128_256, 8_192
PAIRS = N * (N - 1) / 2
ESTIMATE = math.sqrt(2 * math.log(PAIRS) / D)

PLANTED = [
    # 00.2: the share of E in three models
    Planted("00.2", "shares as percentages", [100 * s for s in SHARES], names=r"10\^2"),
    Planted("00.2", "the models in reverse order", SHARES[::-1], names=r"order",
            avoid=r"twice|sign"),
    Planted("00.2", "divided by the counted parameters, not the nominal",
            [n * d / c for (n, d, _), c in zip(SHAPES, COUNTED, strict=True)],
            avoid=r"twice|order|round"),
    Planted("00.2", "rows of width d_head = 128, not d", [n * 128 / size for n, _, size in SHAPES],
            avoid=r"twice|order"),
    Planted("00.2", "input E plus an untied output head",
            [2 * n * d / size for n, d, size in SHAPES],
            names=r"twice"),
    Planted("00.2", "Llama 3's 128,000 BPE tokens without its 256 special ones",
            [128_000 * 4_096 / 8e9, 32_000 * 4_096 / 7e9, 128_000 * 8_192 / 70e9],
            names=r"128,256"),
    Planted("00.2", "Mistral's later vocabulary of 32,768",
            [SHARES[0], 32_768 * 4_096 / 7e9, SHARES[2]], avoid=r"twice|order|128,256"),
    Planted("00.2", "the width 8,192 for every model", [n * 8_192 / size for n, _, size in SHAPES],
            avoid=r"twice|order|128,256"),
    # 00.4: merges until ' catalogue' is one token (70 for the lesson's tokenizer)
    Planted("00.4", "the 0-based index of the merge that joins it", 69, names=r"off by one"),
    Planted("00.4", "the pieces of ' catalogue' at 0 merges", 10, names=r"too few"),
    Planted("00.4", "every merge the tokenizer learned", 500, names=r"too many"),
    Planted("00.4", "a float", 70.0, names=r"whole number"),
    Planted("00.4", "merges of a tokenizer trained on the held-out paragraph too", 58,
            names=r"too few"),
    Planted("00.4", "merges until ' catalogues', the plural, is one token", 140,
            names=r"too many"),
    # 00.5: the largest |cos| of Llama 3 70B's random rows
    Planted("00.5", "the factor 2 under the root left out", math.sqrt(math.log(PAIRS) / D),
            avoid=r"degrees|pairs|log10|square root"),
    Planted("00.5", "the angle in radians", math.acos(ESTIMATE), avoid=r"degrees"),
    Planted("00.5", "the head width 128 for d", math.sqrt(2 * math.log(PAIRS) / 128),
            avoid=r"degrees|pairs|log10|square root"),
    Planted("00.5", "log2 for the natural logarithm", math.sqrt(2 * math.log2(PAIRS) / D),
            avoid=r"log10|degrees"),
    Planted("00.5", "the angle in degrees", math.degrees(math.acos(ESTIMATE)), names=r"degrees"),
    Planted("00.5", "Llama 3 8B's width 4,096", math.sqrt(2 * math.log(PAIRS) / 4_096),
            avoid=r"degrees|pairs|log10|square root"),
    Planted("00.5", "the typical |cos|, sqrt(2 / (pi d)), not the largest",
            math.sqrt(2 / (math.pi * D)), avoid=r"degrees|pairs|log10|square root"),
]
