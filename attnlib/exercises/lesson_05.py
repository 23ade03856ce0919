"""Checked exercises of lesson 05: the KV cache."""

from __future__ import annotations

from attnlib.costs import generation_macs
from attnlib.exercises import numbers, scalar, whole_number
from attnlib.memory import LLAMA3_8B, kv_cache_bytes


@numbers("05.1", rel=1e-3, what="one number of bytes")
def _fp8_batch_cache():
    """Bytes of an FP8 cache: 32 layers, 8 KV heads of 128, a batch of 16 x 32,768 tokens."""
    shape = (32, 8, 128)
    tokens, batch = 32_768, 16
    expected = kv_cache_bytes(*shape, n_tokens=tokens, batch=batch, bytes_per_elem=1)
    return scalar(expected), (
        (scalar(expected / 2), "that counts the keys only (or the values only): the cache "
                               "holds both, hence the factor 2."),
        (scalar(2 * expected), "that is a 2-byte (bf16) cache; FP8 stores 1 byte per number."),
        (scalar(expected / batch), "that is one sequence; the batch holds 16."),
        (scalar(kv_cache_bytes(*shape, bytes_per_elem=1)),
         "that is the cache of a single token; multiply by every token of the batch."),
        (scalar(expected / 2**30), "that is in GiB; the question asks for bytes."),
        (scalar(expected / 1e9), "that is in GB; the question asks for bytes."),
    )


@numbers("05.2", rel=1e-3, what="one number, the ratio")
def _attention_saving():
    """Ratio of the attention multiply-adds without and with a cache, passes n = 1..4096."""
    n = 4096
    shape = dict(n_layers=1, d_model=1, n_heads=1, n_kv_heads=1, d_head=1, d_ff=1,
                 vocab_size=1)
    totals = [sum(s["attention"] for s in generation_macs(1, n, use_cache=c, **shape))
              for c in (False, True)]
    return scalar(totals[0] / totals[1]), (
        (scalar(totals[1] / totals[0]), "that is the inverse: divide the work without the "
                                        "cache by the work with it."),
        (scalar(n), "that is N; the ratio of the sums of n^2 and of n is (2N + 1) / 3."),
        (scalar(n / 2), "close to the ratio of N^3 / 3 to N^2 / 2, but the sums are "
                        "N(N+1)(2N+1)/6 and N(N+1)/2: compute them exactly."),
    )


@whole_number("05.3", what="a whole number of tokens (an int)")
def _longest_context():
    """Tokens of bf16 cache that fit beside Llama 3 8B's bf16 weights in 80 GB."""
    per_token = LLAMA3_8B.kv_bytes_per_token()
    left = 80 * 10**9 - LLAMA3_8B.weight_bytes()  # bytes left after the weights
    expected = left // per_token
    hints = {
        (80 * 2**30 - LLAMA3_8B.weight_bytes()) // per_token:
            "that takes 80 GiB (2^30 bytes each); the accelerator has 80 GB, 80 x 10^9 bytes.",
        80 * 10**9 // per_token: "that ignores the weights, which take their share first.",
        left // (per_token // 2):
            "that is an fp8 cache (1 byte); the question stores it in bf16, 2 bytes.",
        left // LLAMA3_8B.cache_bytes_per_token("mha"):
            "that sizes the cache for all 32 query heads; Llama 3 8B caches its 8 KV heads.",
        expected + 1: "one token too many: round the number of tokens down, the last one must "
                      "fit.",
    }
    return expected, hints, ("not quite: divide the memory left after the weights by the "
                             "cache bytes per token (kv_bytes_per_token()) and round down.")
