"""Planted wrong answers for lesson 11's exercises."""

from __future__ import annotations

import torch

from planted import Planted

# 11.1: five requests, blocks of 16
LENGTHS = [100, 900, 33, 2048, 470]
# 11.2: alpha = 0.8, k = 4
ALPHA, K = 0.8, 4


# 11.3: gather(pool, table, n)
def _contiguous_range(pool, table, n):
    """Reads consecutive blocks from the first one in the table."""
    blocks = pool[table[0]:table[0] + len(table)]
    G, d = pool.shape[1], pool.shape[3]
    return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)[:, :n]


def _sorted_blocks(pool, table, n):
    """Reads the table's blocks in increasing block id."""
    blocks = torch.stack([pool[b] for b in sorted(table)])
    G, d = pool.shape[1], pool.shape[3]
    return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)[:, :n]


def _not_cut(pool, table, n):
    """Returns every slot of the table's blocks."""
    blocks = pool[table]
    G, d = pool.shape[1], pool.shape[3]
    return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)


def _no_permute(pool, table, n):
    """Merges blocks and slots with a reshape, heads still in the middle."""
    blocks = pool[table]
    return blocks.reshape(pool.shape[1], -1, pool.shape[3])[:, :n]


def _last_block_cut_wrong(pool, table, n):
    """Cuts the last block at n mod s, which is 0 when it is full."""
    s = pool.shape[2]
    blocks = pool[table]
    G, d = pool.shape[1], pool.shape[3]
    full = blocks.permute(1, 0, 2, 3).reshape(G, -1, d)
    return full[:, : (len(table) - 1) * s + n % s]


# 11.4: residual(p, q)
def _not_normalised(p, q):
    """max(0, p - q) as it is."""
    return torch.clamp(p - q, min=0)


def _normalised_over_all(p, q):
    """Divides by the sum over every row together."""
    r = torch.clamp(p - q, min=0)
    return r / r.sum()


def _draft_excess(p, q):
    """What the draft has too much of."""
    r = torch.clamp(q - p, min=0)
    return r / r.sum(dim=-1, keepdim=True)


def _absolute(p, q):
    """|p - q|, normalised."""
    r = (p - q).abs()
    return r / r.sum(dim=-1, keepdim=True)


def _ratio(p, q):
    """The acceptance ratio min(1, p / q), normalised."""
    r = torch.clamp(p / q, max=1.0)
    return r / r.sum(dim=-1, keepdim=True)


PLANTED = [
    # 11.1: token slots held in blocks of 16
    Planted("11.1", "blocks, not slots", sum(-(-n // 16) for n in LENGTHS),
            avoid=r"contiguous|tokens themselves|rounds each request down"),
    Planted("11.1", "n // 16 + 1 blocks each", 16 * sum(n // 16 + 1 for n in LENGTHS),
            avoid=r"contiguous|tokens themselves|rounds each request down"),
    Planted("11.1", "the contiguous reservation", 5 * 2048, names=r"contiguous"),
    Planted("11.1", "the tokens", sum(LENGTHS), names=r"tokens themselves"),
    # 11.2: expected characters per round
    Planted("11.2", "every proposal kept", K + 1, names=r"every proposal is kept"),
    Planted("11.2", "kept proposals without the target's token",
            sum(ALPHA ** i for i in range(1, K + 1)), avoid=r"whatever happened|infinity"),
    Planted("11.2", "independent proposals", ALPHA * K + 1, names=r"first rejection"),
    Planted("11.2", "one round of 4 proposals, (1 - alpha^k) / (1 - alpha)",
            (1 - ALPHA ** K) / (1 - ALPHA), names=r"the token the target adds"),
    # 11.3: gather
    Planted("11.3", "a consecutive range of blocks", _contiguous_range),
    Planted("11.3", "blocks in increasing id", _sorted_blocks, names=r"pool's order"),
    Planted("11.3", "not cut at n", _not_cut, names=r"cut at the n tokens"),
    Planted("11.3", "reshape without permute", _no_permute, names=r"permute"),
    Planted("11.3", "cut at n mod s in the last block", _last_block_cut_wrong),
    # 11.4: residual
    Planted("11.4", "not normalised", _not_normalised, names=r"divide each row"),
    Planted("11.4", "normalised over every row together", _normalised_over_all),
    Planted("11.4", "q - p", _draft_excess, names=r"max\(0, q - p\)"),
    Planted("11.4", "|p - q|", _absolute, names=r"\|p - q\|"),
    Planted("11.4", "the acceptance ratio", _ratio),
]
