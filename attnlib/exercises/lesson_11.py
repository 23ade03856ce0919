"""Checked exercises of lesson 11: serving attention (sampling, paged caches, speculation)."""

from __future__ import annotations

import torch

from attnlib.exercises import numbers, scalar, whole_number
from attnlib.exercises.implement import (
    Implementation,
    Mistake,
    function_case,
    implementation,
    randn,
)
from attnlib.serving.paged import paging_memory

F64 = torch.float64

PAGING_LENGTHS = (100, 900, 33, 2048, 470)
"""Exercise 11.1: the tokens five requests end up holding."""


@whole_number("11.1", what="a whole number of token slots (an int)", floats="whole")
def _paged_slots():
    """Token slots a paged cache with blocks of 16 holds for PAGING_LENGTHS."""
    mem = paging_memory(PAGING_LENGTHS, max_tokens=2048, block_size=16)
    hints = (
        (mem.contiguous, "that is the contiguous reservation, 5 x 2,048 slots; a paged cache "
                         "holds only the blocks each request has filled."),
        (mem.used, "that is the tokens themselves; each request's last block is only partly "
                   "filled, and the whole block is held."),
        (16 * sum(n // 16 for n in PAGING_LENGTHS), "that rounds each request down to whole "
                                                   "blocks; a partly filled block is held too: "
                                                   "ceil(n_b / s) blocks."),
        (16 * -(-sum(PAGING_LENGTHS) // 16), "that packs all five requests' tokens into "
                                             "shared blocks; each block belongs to one "
                                             "request, so each request rounds up on its own."),
    )
    return mem.paged, hints, "count ceil(n_b / 16) blocks for each request, 16 slots a block."


@numbers("11.2", rel=1e-3, what="one number, the expected tokens per target pass")
def _tokens_per_pass():
    """Expected tokens a round emits, proposals kept independently with alpha = 0.8, k = 4."""
    alpha, k = 0.8, 4
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    return scalar(expected), (
        (scalar(alpha * k + 1), "that assumes each proposal is kept whatever happened before; "
                                "a round stops at the first rejection."),
        (scalar((1 - alpha ** k) / (1 - alpha)), "that forgets the token the target adds at "
                                                 "the end of every round, kept or not."),
        # 1 / (1 - alpha) = k + 1 = 5 at alpha = 0.8, k = 4
        (scalar(1 / (1 - alpha)), "5 is the k = infinity limit 1 / (1 - alpha), and also k + 1, "
                                  "a round whose every proposal is kept: the draft proposes "
                                  "only 4, each kept with probability 0.8, and the round stops "
                                  "at the first rejection."),
        (scalar((1 - alpha ** (k + 2)) / (1 - alpha)), "that sums k + 2 = 6 terms, as if the "
                                                       "draft proposed 5; it proposes k = 4, "
                                                       "and with the target's token a round "
                                                       "emits at most 5: 1 + alpha + ... + "
                                                       "alpha^4."),
    )


# ---------------------------------------------------------------------------------------
# implementation exercises


def _gather_reference(pool, table, n):
    blocks = pool[table]  # (n_b, G, s, d): the sequence's blocks, in table order
    G, d = pool.shape[1], pool.shape[3]
    return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)[:, :n]


@implementation("11.3")
def _paged_gather() -> Implementation:
    """Read one sequence's keys (G, n, d) out of a block pool through its block table."""

    def pool_order(pool, table, n):
        blocks = pool[sorted(table)]
        G, d = pool.shape[1], pool.shape[3]
        return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)[:, :n]

    def uncut(pool, table, n):
        return _gather_reference(pool, table, len(table) * pool.shape[2])

    def blocks_first(pool, table, n):
        blocks = pool[table]  # (n_b, G, s, d) reshaped without moving G first
        G, d = pool.shape[1], pool.shape[3]
        return blocks.reshape(G, -1, d)[:, :n]

    def case(name, n_blocks, G, s, d, table, n, seed, dtype=F64):
        pool = randn(n_blocks, G, s, d, seed=seed, dtype=dtype)
        return function_case(name, {"pool": pool, "table": list(table), "n": n})

    cases = [
        case("one head, blocks out of order", 6, 1, 4, 3, [4, 1, 3], 10, 1),
        case("two heads, the last block full", 8, 2, 2, 5, [7, 0, 2], 6, 2),
        case("float32, one token in the last block", 5, 3, 3, 2, [2, 4], 4, 3, torch.float32),
    ]
    return Implementation(
        "a function gather(pool, table, n) returning (G, n, d)", _gather_reference, cases, (
            Mistake(pool_order, "you read the blocks in the pool's order; the table lists "
                                "them in the sequence's order: pool[table]."),
            Mistake(uncut, "you return every slot of the blocks; the last block is partly "
                           "filled: cut at the n tokens written."),
            Mistake(blocks_first, "a reshape without a permute interleaves the heads with the "
                                  "blocks: move G to the front, (n_b, G, s, d) -> (G, n_b, s, "
                                  "d), before merging n_b and s."),
        ))


def _residual_reference(p, q):
    r = (p - q).clamp_min(0)
    return r / r.sum(dim=-1, keepdim=True)


@implementation("11.4")
def _residual() -> Implementation:
    """The distribution speculative sampling redraws from after a rejection."""

    def unnormalised(p, q):
        return (p - q).clamp_min(0)

    def absolute(p, q):
        r = (p - q).abs()
        return r / r.sum(dim=-1, keepdim=True)

    def backwards(p, q):
        r = (q - p).clamp_min(0)
        return r / r.sum(dim=-1, keepdim=True)

    def target_only(p, q):
        return p

    def case(name, R, V, seed, dtype=F64):
        p = torch.softmax(randn(R, V, seed=seed, dtype=dtype), dim=-1)
        q = torch.softmax(randn(R, V, seed=seed + 1, dtype=dtype), dim=-1)
        return function_case(name, {"p": p, "q": q})

    cases = [case("one row of 5", 1, 5, 1), case("four rows of 9", 4, 9, 3),
             case("float32, three rows of 30", 3, 30, 5, torch.float32)]
    return Implementation(
        "a function residual(p, q) returning (R, V)", _residual_reference, cases, (
            Mistake(unnormalised, "max(0, p - q) sums to TV(p, q), not to 1: divide each row "
                                  "by its sum."),
            Mistake(absolute, "|p - q| also counts the tokens the draft over-proposes; only "
                              "the ones it under-proposes, max(0, p - q), need topping up."),
            Mistake(backwards, "max(0, q - p) is what the draft has too much of; the redraw "
                               "supplies what the target lacks, max(0, p - q)."),
            Mistake(target_only, "redrawing from p itself counts the accepted mass twice: "
                                 "the output would lean towards the draft."),
        ))


