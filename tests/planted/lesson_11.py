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


def _last_slots(pool, table, n):
    """Keeps the last n slots of the table's blocks instead of the first n."""
    blocks = pool[table]
    G, d = pool.shape[1], pool.shape[3]
    return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)[:, -n:]


def _first_head(pool, table, n):
    """Returns the first head only."""
    return _not_cut(pool, table, n)[:1, :n]


def _blocks_of_16(pool, table, n):
    """Takes ceil(n / 16) blocks, whatever the pool's block size."""
    blocks = pool[table[: -(-n // 16)]]
    G, d = pool.shape[1], pool.shape[3]
    return blocks.permute(1, 0, 2, 3).reshape(G, -1, d)[:, :n]


def _tokens_first(pool, table, n):
    """Returns (n, G, d), tokens first."""
    return _not_cut(pool, table, n)[:, :n].transpose(0, 1)


def _table_backwards(pool, table, n):
    """Reads the table from its end."""
    return _not_cut(pool, list(reversed(table)), n)[:, :n]


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


def _over_axis_0(p, q):
    """Normalises over axis 0, the rows, instead of each row."""
    r = torch.clamp(p - q, min=0)
    return r / r.sum(dim=0, keepdim=True)


def _epsilon(p, q):
    """Adds 1e-6 to each row's sum."""
    r = torch.clamp(p - q, min=0)
    return r / (r.sum(dim=-1, keepdim=True) + 1e-6)


def _no_clamp(p, q):
    """p - q, normalised, negative entries kept."""
    r = p - q
    return r / r.sum(dim=-1, keepdim=True)


def _float64_out(p, q):
    """Computes in float64 and returns float64 for float32 inputs."""
    r = torch.clamp(p.double() - q.double(), min=0)
    return r / r.sum(dim=-1, keepdim=True)


def _softmax_of_difference(p, q):
    """softmax(p - q)."""
    return torch.softmax(p - q, dim=-1)


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
    Planted("11.1", "blocks of 32", 32 * sum(-(-n // 32) for n in LENGTHS),
            avoid=r"contiguous|tokens themselves|rounds each request down|shared blocks"),
    Planted("11.1", "a slot kept for the next token", 16 * sum(-(-(n + 1) // 16) for n in LENGTHS),
            avoid=r"contiguous|tokens themselves|rounds each request down|shared blocks"),
    Planted("11.1", "all tokens packed into shared blocks", 16 * -(-sum(LENGTHS) // 16),
            names=r"shared blocks"),
    Planted("11.1", "the contiguous reservation for 4,096 tokens", 5 * 4096,
            avoid=r"tokens themselves|rounds each request down|shared blocks"),
    # 11.2: expected characters per round
    Planted("11.2", "every proposal kept", K + 1, names=r"every proposal is kept"),
    Planted("11.2", "kept proposals without the target's token",
            sum(ALPHA ** i for i in range(1, K + 1)), avoid=r"whatever happened|infinity"),
    Planted("11.2", "independent proposals", ALPHA * K + 1, names=r"first rejection"),
    Planted("11.2", "one round of 4 proposals, (1 - alpha^k) / (1 - alpha)",
            (1 - ALPHA ** K) / (1 - ALPHA), names=r"the token the target adds"),
    Planted("11.2", "k = 5", (1 - ALPHA ** 6) / (1 - ALPHA), names=r"proposed 5"),
    Planted("11.2", "alpha read as the rejection rate", (1 - 0.2 ** 5) / 0.8,
            avoid=r"whatever happened|target adds|infinity|proposed 5"),
    Planted("11.2", "all kept with probability alpha^k, else one token",
            ALPHA ** K * (K + 1) + (1 - ALPHA ** K),
            avoid=r"whatever happened|target adds|infinity|proposed 5"),
    # 11.3: gather
    Planted("11.3", "a consecutive range of blocks", _contiguous_range),
    Planted("11.3", "blocks in increasing id", _sorted_blocks, names=r"pool's order"),
    Planted("11.3", "not cut at n", _not_cut, names=r"cut at the n tokens"),
    Planted("11.3", "reshape without permute", _no_permute, names=r"permute"),
    Planted("11.3", "cut at n mod s in the last block", _last_block_cut_wrong),
    Planted("11.3", "the last n slots kept", _last_slots, avoid=r"pool's order|permute"),
    Planted("11.3", "the first head only", _first_head, names=r"shape"),
    Planted("11.3", "blocks of 16 assumed", _blocks_of_16, names=r"shape"),
    Planted("11.3", "(n, G, d) returned", _tokens_first, names=r"shape"),
    Planted("11.3", "the table read backwards", _table_backwards,
            avoid=r"cut at the n|permute"),
    # 11.4: residual
    Planted("11.4", "not normalised", _not_normalised, names=r"divide each row"),
    Planted("11.4", "normalised over every row together", _normalised_over_all),
    Planted("11.4", "q - p", _draft_excess, names=r"max\(0, q - p\)"),
    Planted("11.4", "|p - q|", _absolute, names=r"\|p - q\|"),
    Planted("11.4", "the acceptance ratio", _ratio),
    Planted("11.4", "normalised over axis 0", _over_axis_0, avoid=r"over-proposes|q - p|twice"),
    Planted("11.4", "an epsilon in the denominator", _epsilon,
            avoid=r"over-proposes|q - p|twice|divide each row"),
    Planted("11.4", "no clamp", _no_clamp, avoid=r"q - p|twice|divide each row"),
    Planted("11.4", "float64 out for float32 in", _float64_out, names=r"dtype"),
    Planted("11.4", "softmax(p - q)", _softmax_of_difference,
            avoid=r"over-proposes|q - p|twice|divide each row"),
]
