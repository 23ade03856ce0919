"""Checked exercises of lesson 05: the KV cache."""

from __future__ import annotations

import torch

from attnlib.analysis.costs import decode_step_macs
from attnlib.analysis.memory import LLAMA3_8B, LLAMA3_70B, kv_cache_bytes
from attnlib.exercises import numbers, scalar, whole_number


@numbers("05.1", rel=1e-3, what="one number of bytes")
def _fp8_batch_cache():
    """Bytes of an FP8 cache: 32 layers, 8 KV heads of 128, a batch of 16 x 32,768 tokens."""
    shape = (32, 8, 128)
    tokens, batch = 32_768, 16
    expected = kv_cache_bytes(*shape, n_tokens=tokens, batch=batch, bytes_per_elem=1)
    return scalar(expected), (
        (scalar(expected / 2), "that counts the keys only (or the values only): the cache "
                               "holds both, hence the factor 2."),
        (scalar(2 * expected), "that is twice the answer, what a 2-byte (bf16) cache would "
                               "take (or 16 KV heads): FP8 stores 1 byte per number, and "
                               "the model has 8 KV heads."),
        (scalar(expected / batch), "that is one sequence; the batch holds 16."),
        (scalar(kv_cache_bytes(*shape, bytes_per_elem=1)),
         "that is the cache of a single token; multiply by every token of the batch."),
        (scalar(expected / 2**30), "that is in GiB; the question asks for bytes."),
        (scalar(expected / 1e9), "that is in GB; the question asks for bytes."),
    )


# The shapes of exercise 05.2 (d_ff = 14,336 and 28,672: Table 3 of the Llama 3 paper).
LLAMA3_8B_SHAPE = dict(n_layers=LLAMA3_8B.n_layers, d_model=LLAMA3_8B.d_model,
                       n_heads=LLAMA3_8B.n_heads, n_kv_heads=LLAMA3_8B.n_kv_heads,
                       d_head=LLAMA3_8B.d_head, d_ff=14_336, vocab_size=LLAMA3_8B.vocab_size)
LLAMA3_70B_SHAPE = dict(n_layers=LLAMA3_70B.n_layers, d_model=LLAMA3_70B.d_model,
                        n_heads=LLAMA3_70B.n_heads, n_kv_heads=LLAMA3_70B.n_kv_heads,
                        d_head=LLAMA3_70B.d_head, d_ff=28_672, vocab_size=LLAMA3_70B.vocab_size)


def _crossovers(count=None, **changes) -> torch.Tensor:
    """For Llama 3 8B and 70B, the N at which a cached step's attention reaches the rest:
    ``count(shape, rest, per_key)`` (by default the smallest such N, rest / per_key rounded
    up), for the shapes with ``changes`` (what the hints recompute with a mistaken count)."""
    found = []
    for shape in (LLAMA3_8B_SHAPE, LLAMA3_70B_SHAPE):
        changed = {**shape, **{k: v(shape) if callable(v) else v for k, v in changes.items()}}
        step = decode_step_macs(1, 1, **changed)
        rest, per_key = step["other"], step["attention"]
        found.append(count(shape, rest, per_key) if count else -(-rest // per_key))
    return torch.tensor(found, dtype=torch.float64)


@numbers("05.2", rel=0.0, what="two whole numbers of keys, (Llama 3 8B, Llama 3 70B)")
def _attention_dominates():
    """Smallest N at which one cached decoding step of Llama 3 8B, and of Llama 3 70B, spends
    at least as many multiply-adds on attention as on everything else. 8B's division is
    exact and 70B's is not, so that rounding down is told apart from rounding up."""
    expected = _crossovers()
    return expected, (
        (_crossovers(lambda shape, rest, per_key: -(-(rest - shape["d_model"]
                                                       * shape["vocab_size"]) // per_key)),
         "that leaves out the output head, d x N_T multiply-adds per token: count it with "
         "the rest."),
        (_crossovers(ffn="gelu"), "that counts two matrices in the feed-forward network; "
                                  "SwiGLU has three (gate, up and down)."),
        (_crossovers(lambda shape, rest, per_key: -(-rest * shape["n_heads"]
                                                     // (per_key * shape["n_kv_heads"]))),
         "that scores the keys once per KV head (G = 8); every one of the H query heads "
         "scores every key."),
        (_crossovers(lambda shape, rest, per_key: -(-rest // (per_key // 2))),
         "that counts Q K^T only; the weighted sum P V costs as much again."),
        (_crossovers(n_kv_heads=lambda shape: shape["n_heads"]),
         "that gives W_K and W_V one head per query head; Llama 3 projects to G = 8 "
         "key/value heads."),
        (_crossovers(lambda shape, rest, per_key: rest // per_key),
         "that rounds the division down: for Llama 3 70B attention is then still below the "
         "rest. Round up, to the smallest N with N x 2 N_L H d_head >= the rest."),
        (_crossovers(lambda shape, rest, per_key: rest // per_key + 1),
         "that is where attention first exceeds the rest; the question asks for at least as "
         "many, and for Llama 3 8B one key fewer already gives exactly as many."),
        (expected - 1, "one short: at that N attention is still below the rest; round up."),
        (expected + 1, "one too many: one key fewer already gives attention at least as many "
                       "multiply-adds as the rest."),
    )


@whole_number("05.3", what="a whole number of tokens (an int)", floats="whole")
def _longest_context():
    """Tokens of bf16 cache that fit beside Llama 3 8B's bf16 weights in 80 GB."""
    per_token = LLAMA3_8B.kv_bytes_per_token()
    left = 80 * 10**9 - LLAMA3_8B.weight_bytes()  # bytes left after the weights
    expected = left // per_token
    hints = (
        ((80 * 2**30 - LLAMA3_8B.weight_bytes()) // per_token,
         "that takes 80 GiB (2^30 bytes each); the accelerator has 80 GB, 80 x 10^9 bytes."),
        (80 * 10**9 // per_token, "that ignores the weights, which take their share first."),
        (left // (per_token // 2),
         "that is about twice the answer, what an fp8 cache (1 byte a number) or the keys "
         "alone would allow: the cache holds keys and values, in bf16, 2 bytes each."),
        (left // LLAMA3_8B.cache_bytes_per_token("mha"),
         "that sizes the cache for all 32 query heads; Llama 3 8B caches its 8 KV heads."),
        (expected + 1, "one token too many: round the number of tokens down, the last one must "
                       "fit."),
    )
    return expected, hints, ("not quite: divide the memory left after the weights by the "
                             "cache bytes per token (kv_bytes_per_token()) and round down.")


# ---------------------------------------------------------------------------------------
# implementation exercises


from attnlib.exercises.implement import (  # noqa: E402
    Case,
    Implementation,
    Mistake,
    implementation,
    randn,
)


class _Reference:
    """A KV cache: holds K and V, tokens on axis -2, and appends to them."""

    def __init__(self, axis: int = -2, first: bool = False):
        self.K = self.V = None
        self.axis, self.first = axis, first
        self.calls = 0

    def _join(self, held, new):
        if held is None:
            return new
        pair = (new, held) if self.first else (held, new)
        return torch.cat(pair, dim=self.axis)

    def append(self, K, V):
        self.K, self.V = self._join(self.K, K), self._join(self.V, V)
        self.calls += 1
        return self.K, self.V

    @property
    def n_tokens(self):
        return 0 if self.K is None else self.K.shape[-2]


class _Prepends(_Reference):
    def __init__(self):
        super().__init__(first=True)


class _Features(_Reference):
    def __init__(self):
        super().__init__(axis=-1)


class _NewOnly(_Reference):
    def append(self, K, V):
        super().append(K, V)
        return K, V


class _CountsCalls(_Reference):
    @property
    def n_tokens(self):
        return self.calls


def _cache_case(name: str, seed: int, batch: tuple, G: int, chunks: tuple, d: int, dtype) -> Case:
    N = sum(chunks)
    K = randn(*batch, G, N, d, seed=seed, dtype=dtype)
    V = randn(*batch, G, N, d + 1, seed=seed + 1, dtype=dtype)

    def held(cache) -> int:
        n_tokens = cache.n_tokens
        if callable(n_tokens):
            raise TypeError("n_tokens is a method; make it a property (@property)")
        return int(n_tokens)

    def run(cls):
        cache, out, start, counts = cls(), [], 0, []
        for n in chunks:
            K_all, V_all = cache.append(K[..., start:start + n, :].clone(),
                                        V[..., start:start + n, :].clone())
            start += n
            out += [K_all, V_all]
            counts.append(held(cache))
        counts.append(held(cls()))  # a new, empty cache holds 0 tokens
        return (*out, torch.tensor(counts))

    return Case(name, run, f"K {tuple(K.shape)}, V {tuple(V.shape)} in chunks of {chunks}")


@implementation("05.5")
def _kv_cache() -> Implementation:
    """A KV cache class: append(K, V) returns everything held; n_tokens counts the tokens."""
    cases = [
        _cache_case("float32, prefill of 4, then 3 single tokens", 1, (1,), 2, (4, 1, 1, 1), 3,
                    torch.float32),
        _cache_case("float64, batch of 2, one KV head, chunks of 1, 2, 1", 5, (2,), 1,
                    (1, 2, 1), 2, torch.float64),
        _cache_case("float64, no batch dims, 3 KV heads, chunks of 2, 3", 9, (), 3, (2, 3), 4,
                    torch.float64),
    ]
    return Implementation(
        "a class with append(K, V) -> (K_all, V_all) and a property n_tokens", _Reference, cases, (
            Mistake(_Features, "the tokens are on axis -2 of (..., G, N, d): concatenate with "
                               "dim=-2, not along the features (dim=-1)."),
            Mistake(_Prepends, "the new tokens go after the held ones: torch.cat((held, new)), "
                               "so that position n stays row n."),
            Mistake(_NewOnly, "append must return everything held so far, the old tokens "
                              "followed by the new, not only the new K and V."),
            Mistake(_CountsCalls, "n_tokens counts tokens, not calls to append: a prefill of "
                                  "N tokens adds N (K.shape[-2] of what is held)."),
        ))
