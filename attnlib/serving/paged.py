"""A paged KV cache: fixed-size blocks, a free list, and a block table per sequence.

A contiguous cache reserves, for every sequence, room for the longest it may become: a
server that admits ``B`` requests of at most ``N_max`` tokens reserves ``B N_max`` token
slots, though request ``b`` only ever fills ``n_b``. Kwon et al. (vLLM, PagedAttention)
cut the cache into blocks of ``s`` tokens, handed out from a free list as a sequence grows;
sequence ``b``'s block table lists its blocks in order, so its token ``t`` lives at

    block = table_b[t // s],   offset = t mod s,

and a sequence holds ``ceil(n_b / s)`` blocks: it wastes fewer than ``s`` slots, in its
last block, against ``N_max - n_b`` for contiguous pre-allocation. In slots,

    contiguous = B N_max,    paged = s * sum_b ceil(n_b / s),    used = sum_b n_b

(:func:`paging_memory`). Attention reads through the table: the keys of sequence ``b``
are the gather ``K_pool[table_b]``, its blocks laid end to end and cut at ``n_b``, which
are exactly the rows a contiguous cache holds, so the logits are the same.

:class:`BlockAllocator` is the free list and the tables; :class:`PagedKVCache` is one
layer's pools ``K_pool, V_pool`` of shape ``(G, n_blocks, s, d)`` (heads first, so that a
sequence's blocks laid end to end are a view of the gather) and implements the
:class:`~attnlib.serving.cache.Cache` protocol for a batch of sequences: pass one per layer as
``TinyDecoder.generate(ids, n, caches=[...])``. For a batch whose rows hold different
numbers of tokens (continuous batching, :mod:`attnlib.serving.batching`),
:meth:`PagedKVCache.select`
names the sequence of each row and how many of its new rows are real.

Lesson: 11_serving (05_kv_cache for the cache itself).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from attnlib._checks import check_nonnegative_int, check_positive_int
from attnlib.serving.cache import Cache

__all__ = ["BlockAllocator", "PagedKVCache", "PagingMemory", "batch_mask", "paging_memory"]


class BlockAllocator:
    """A pool of ``n_blocks`` blocks of ``block_size`` tokens: a free list and block tables.

    ``add(seq)`` opens an empty table; ``reserve(seq, n)`` takes blocks from the front of
    the free list until the sequence has room for ``n`` more tokens; ``advance(seq, n)``
    counts them as written; ``release(seq)`` returns its blocks to the free list.

    Example:
        >>> pool = BlockAllocator(n_blocks=4, block_size=2)
        >>> pool.add(0); pool.reserve(0, 3); pool.advance(0, 3)
        >>> pool.tables[0], pool.n_free
        ([0, 1], 2)
        >>> pool.release(0); pool.n_free
        4
    """

    def __init__(self, n_blocks: int, block_size: int) -> None:
        self.n_blocks = check_positive_int("n_blocks", n_blocks)
        self.block_size = check_positive_int("block_size", block_size)
        self.free: list[int] = list(range(n_blocks))  # the free list, taken from the front
        self.tables: dict[object, list[int]] = {}  # sequence -> its blocks, in order
        self.lengths: dict[object, int] = {}  # sequence -> tokens written

    @property
    def n_free(self) -> int:
        """Blocks on the free list."""
        return len(self.free)

    @property
    def n_used(self) -> int:
        """Blocks held by sequences."""
        return self.n_blocks - len(self.free)

    def blocks_needed(self, seq: object, n: int) -> int:
        """Blocks ``seq`` must take to hold ``n`` more tokens (a new sequence holds 0)."""
        have = len(self.tables.get(seq, ()))
        return max(0, math.ceil((self.lengths.get(seq, 0) + n) / self.block_size) - have)

    def add(self, seq: object) -> None:
        """Open an empty block table for sequence ``seq``."""
        if seq in self.tables:
            raise ValueError(f"seq must be a new sequence id; {seq!r} already holds "
                             f"{self.lengths[seq]} tokens")
        self.tables[seq], self.lengths[seq] = [], 0

    def reserve(self, seq: object, n: int) -> None:
        """Take blocks from the free list until ``seq`` has room for ``n`` more tokens."""
        need = self.blocks_needed(seq, n)
        if need > len(self.free):
            raise ValueError(f"the block pool must have {need} free blocks for {n} more tokens "
                             f"of sequence {seq!r}; it has {len(self.free)} of {self.n_blocks}")
        self.tables[seq].extend(self.free[:need])
        del self.free[:need]

    def advance(self, seq: object, n: int) -> None:
        """Count ``n`` tokens of ``seq`` as written (after :meth:`reserve`)."""
        self.lengths[seq] += n

    def release(self, seq: object) -> None:
        """Return the blocks of ``seq`` to the free list and forget it."""
        if seq not in self.tables:
            raise KeyError(f"seq must be a sequence of this pool; got {seq!r}")
        self.free.extend(self.tables.pop(seq))
        del self.lengths[seq]

    def slots(self, seq: object, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(block, offset)`` of tokens ``start .. start + n - 1`` of ``seq``."""
        table, size = self.tables[seq], self.block_size
        tokens = range(start, start + n)
        return (torch.tensor([table[t // size] for t in tokens], dtype=torch.long),
                torch.tensor([t % size for t in tokens], dtype=torch.long))

    def __repr__(self) -> str:
        return (f"BlockAllocator(n_blocks={self.n_blocks}, block_size={self.block_size}, "
                f"n_free={self.n_free}, sequences={len(self.tables)})")


class PagedKVCache(Cache):
    """One layer's keys and values in blocks: pools ``(G, n_blocks, block_size, d)``.

    ``append(K, V)`` with ``K, V`` of shape ``(B, G, N_new, d)`` writes each row's new
    tokens into its sequence's blocks (taking blocks from the free list as needed) and
    returns every held key and value, read through the block tables: row ``b`` is the
    gather of its blocks, cut at its length. When every row holds the same number of
    tokens this is ``(B, G, n_tokens, d)``, row for row the tensor a contiguous
    :class:`~attnlib.serving.cache.KVCache` returns, so decoding through it gives the same logits.

    Without :meth:`select`, the first append opens sequences ``0 .. B-1``, one per row, as
    a contiguous cache does. With ``select(seqs, n_new)`` row ``b`` belongs to sequence
    ``seqs[b]`` and only its last ``n_new[b]`` new rows are real (a prompt chunk or one
    decoded token, left-padded to ``N_new``): the return is then ``(B, G, n_held + N_new,
    d)``, row ``b``'s held tokens first, zeros up to ``n_held`` (the most any row holds),
    then the new rows with the pads zeroed; a mask hides the zeros (see
    :func:`batch_mask`).

    Args:
        n_blocks: blocks in the pool.
        block_size: tokens per block ``s``.
        max_tokens: accepted for the protocol of ``new_cache(max_tokens)`` and ignored.

    Attributes:
        allocator: the :class:`BlockAllocator` (free list, tables, lengths).

    Example:
        >>> cache = PagedKVCache(n_blocks=8, block_size=4)
        >>> K, V = cache.append(torch.ones(2, 1, 5, 3), torch.ones(2, 1, 5, 3))
        >>> K.shape, cache.n_tokens, cache.allocator.tables
        (torch.Size([2, 1, 5, 3]), 5, {0: [0, 1], 1: [2, 3]})
        >>> cache.nbytes   # 4 blocks * 2 tensors * (1 * 4 * 3) numbers * 4 bytes
        384

    Lesson: 11_serving.
    """

    fields = ("K", "V")

    def __init__(self, n_blocks: int, block_size: int, max_tokens: int | None = None) -> None:
        super().__init__(None)
        self.allocator = BlockAllocator(n_blocks, block_size)
        self.block_size = block_size
        self._seqs: list[object] | None = None  # the sequence of each row
        self._n_new: list[int] | None = None  # real new rows of each row (None: all)
        self._index: tuple | None = None  # (sequences and tables, their gather index)

    # --- the batch of the next append ---------------------------------------------------

    def add_sequence(self, seq: object) -> None:
        """Open sequence ``seq`` (an empty block table)."""
        self.allocator.add(seq)

    def release(self, seq: object) -> None:
        """Free the blocks of sequence ``seq`` (it has finished)."""
        self.allocator.release(seq)
        if self._seqs is not None and seq in self._seqs:
            i = self._seqs.index(seq)
            del self._seqs[i]
            if self._n_new is not None:
                del self._n_new[i]
        self._n = self._held_width()

    def select(self, seqs: Sequence[object], n_new: Sequence[int] | None = None, *,
               check: bool = True) -> None:
        """Row ``b`` of the next appends is sequence ``seqs[b]`` (opened if new), with its last
        ``n_new[b]`` new rows real (None: all of them)."""
        seqs = list(seqs)
        if check:
            if len(set(seqs)) != len(seqs):
                raise ValueError(f"seqs must name each sequence once; got {seqs}")
            if n_new is not None:
                if len(n_new) != len(seqs):
                    raise ValueError(f"n_new must have one count per sequence ({len(seqs)}); "
                                     f"got {len(n_new)}")
                for c in n_new:
                    check_nonnegative_int("n_new", c)
        for seq in seqs:
            if seq not in self.allocator.tables:
                self.allocator.add(seq)
        self._seqs, self._n_new = seqs, None if n_new is None else list(n_new)
        self._n = self._held_width()

    def _held_width(self) -> int:
        if not self._seqs:
            return 0
        return max(self.allocator.lengths[s] for s in self._seqs)

    @property
    def lengths(self) -> list[int]:
        """Tokens held by each row's sequence."""
        return [] if self._seqs is None else [self.allocator.lengths[s] for s in self._seqs]

    # --- the protocol ---------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks in use (keys and values): what the paged cache holds."""
        K = self._held["K"]
        if K is None:
            return 0
        return 2 * self.allocator.n_used * K[:, 0].numel() * K.element_size()

    @property
    def allocated_nbytes(self) -> int:
        """Bytes of the whole pool (keys and values)."""
        K = self._held["K"]
        return 0 if K is None else 2 * K.numel() * K.element_size()

    def held(self, name: str) -> torch.Tensor | None:
        """The held rows of ``name`` for the selected rows, ``(B, G, n_tokens, d)``, read
        through the block tables (zeros past a shorter row's length)."""
        pool = self._held[name]
        if pool is None or not self._seqs:
            return None
        return self._gather(pool, self._seqs, self._n)

    def _tables(self, seqs: list, width: int, device: torch.device) -> torch.Tensor:
        """``(B, ceil(width / s))``: the first blocks of each sequence's table (0 past its
        end), as the index of the gather; built when a table changes, for keys and values."""
        n_b = max(1, math.ceil(width / self.block_size))
        rows = [self.allocator.tables[seq][:n_b] for seq in seqs]
        key = (tuple(seqs), tuple(tuple(t) for t in rows), device)
        if self._index is not None and self._index[0] == key:
            return self._index[1]
        tables = torch.tensor([t + [0] * (n_b - len(t)) for t in rows], dtype=torch.long)
        self._index = (key, tables.to(device))
        return self._index[1]

    def _gather(self, pool: torch.Tensor, seqs: list, width: int,
                tables: torch.Tensor | None = None, *, full: bool = False) -> torch.Tensor:
        """``(B, G, width, d)``: each sequence's blocks end to end, zero past its length
        (``full``: every sequence holds at least ``width`` tokens, nothing to zero)."""
        if tables is None:
            tables = self._tables(seqs, width, pool.device)
        # The gather through the table along the pool's block axis; the heads come first,
        # so laying the blocks end to end is a view: (G, B n_b, s, d) -> (G, B, n_b s, d)
        # -> (B, G, width, d).
        B, n_b = tables.shape
        G, _, s, d = pool.shape
        X = pool.index_select(1, tables.reshape(-1)).view(G, B, n_b * s, d)
        X = X.transpose(0, 1)[:, :, :width]
        if full:
            return X
        lengths = torch.tensor([self.allocator.lengths[q] for q in seqs], device=pool.device)
        short = torch.arange(width, device=pool.device) >= lengths[:, None]  # (B, width)
        if short.any():
            X = X.masked_fill(short[:, None, :, None], 0.0)
        return X

    def append(self, K: torch.Tensor, V: torch.Tensor, *,
               check: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Write each row's real new rows into its blocks; return every held ``K, V``."""
        if self._seqs is None:  # a plain batch: one new sequence per row
            self.select(range(K.shape[0]), check=False)
        if check:
            self.check_next(K, V)
        B, G, N, d = K.shape
        if self._held["K"] is None:
            shape = (G, self.allocator.n_blocks, self.block_size, d)
            self._held["K"], self._held["V"] = K.new_zeros(shape), V.new_zeros(shape)
        n_new = [N] * B if self._n_new is None else self._n_new
        width = self._n
        uniform = self._n_new is None and all(x == width for x in self.lengths)
        if not uniform:  # the rows held before this append, each zero past its length
            held = [self._gather(self._held[f], self._seqs, width) for f in self.fields]
        for b, (seq, c) in enumerate(zip(self._seqs, n_new, strict=True)):
            if c == 0:
                continue
            start = self.allocator.lengths[seq]
            self.allocator.reserve(seq, c)
            table, s = self.allocator.tables[seq], self.block_size
            t = start  # token t goes to block table[t // s], offset t mod s, a block at a time
            while t < start + c:
                block, offset = table[t // s], t % s
                n = min(s - offset, start + c - t)  # the tokens that fit in this block
                rows = slice(N - c + t - start, N - c + t - start + n)
                self._held["K"][:, block, offset:offset + n].copy_(K[b, :, rows])
                self._held["V"][:, block, offset:offset + n].copy_(V[b, :, rows])
                t += n
            self.allocator.advance(seq, c)
        self._n = self._held_width()
        if uniform:  # every row holds the same tokens, the new ones written: one gather each
            if not width:
                return K, V
            tables = self._tables(self._seqs, self._n, K.device)
            return tuple(self._gather(self._held[f], self._seqs, self._n, tables, full=True)
                         for f in self.fields)
        pad = torch.arange(N, device=K.device) < N - torch.tensor(n_new, device=K.device)[:, None]
        pad = pad[:, None, :, None]  # (B, 1, N, 1): the left pads of the new rows
        return (torch.cat((held[0], K.masked_fill(pad, 0.0)), dim=-2),
                torch.cat((held[1], V.masked_fill(pad, 0.0)), dim=-2))

    def check_next(self, K: torch.Tensor | None, V: torch.Tensor | None = None) -> None:
        """4-D rows ``(B, G, N_new, d)`` of the pools' shape, dtype and device, one row per
        selected sequence, and enough free blocks for them."""
        for name, rows in (("K", K), ("V", V)):
            if rows is None:
                raise ValueError(f"{name} must be given to a PagedKVCache; got None")
            if len(rows.shape) != 4:
                raise ValueError(f"{name} must have shape (B, G, N_new, d) for a PagedKVCache; "
                                 f"got {tuple(rows.shape)}")
        if K.shape != V.shape:
            raise ValueError(f"K and V must have the same shape; got {tuple(K.shape)} and "
                             f"{tuple(V.shape)}")
        pool = self._held["K"]
        if pool is not None:
            want = (pool.shape[0], pool.shape[3])
            if (K.shape[1], K.shape[3]) != want:
                raise ValueError(f"K must have G={want[0]} heads and d={want[1]} like the "
                                 f"blocks held; got {tuple(K.shape)}")
            if K.dtype != pool.dtype or K.device != pool.device:
                raise ValueError(f"K must match the pool's dtype and device ({pool.dtype}, "
                                 f"{pool.device}); got ({K.dtype}, {K.device})")
        seqs = self._seqs if self._seqs is not None else list(range(K.shape[0]))
        if len(seqs) != K.shape[0]:
            raise ValueError(f"K must have one row per selected sequence ({len(seqs)}); got "
                             f"batch {K.shape[0]}")
        n_new = [K.shape[2]] * len(seqs) if self._n_new is None else self._n_new
        if any(c > K.shape[2] for c in n_new):
            raise ValueError(f"n_new must be at most N_new={K.shape[2]}; got {n_new}")
        need = sum(self.allocator.blocks_needed(s, c) for s, c in zip(seqs, n_new, strict=True))
        if need > self.allocator.n_free:
            raise ValueError(f"the block pool must have {need} free blocks for these tokens; "
                             f"it has {self.allocator.n_free} of {self.allocator.n_blocks}")

    def reset(self) -> None:
        """Release every sequence (the pools are kept)."""
        for seq in list(self.allocator.tables):
            self.allocator.release(seq)
        self._seqs, self._n_new, self._n = None, None, 0

    def __repr__(self) -> str:
        return (f"PagedKVCache(block_size={self.block_size}, n_blocks={self.allocator.n_blocks},"
                f" n_free={self.allocator.n_free}, n_tokens={self._n}, nbytes={self.nbytes})")


def batch_mask(lengths: Sequence[int], n_new: Sequence[int], N_new: int, *,
               device: torch.device | str | None = None) -> torch.Tensor:
    """The ``attention_mask`` ``(B, n_held + N_new)`` of a :meth:`PagedKVCache.select` batch.

    Row ``b``: its ``lengths[b]`` held tokens, pads up to ``n_held = max(lengths)``, then
    ``N_new - n_new[b]`` pads and its ``n_new[b]`` real new tokens.
    """
    width = max(lengths) if len(lengths) else 0
    L = torch.tensor(list(lengths), device=device)[:, None]
    c = torch.tensor(list(n_new), device=device)[:, None]
    held = torch.arange(width, device=device) < L
    new = torch.arange(N_new, device=device) >= N_new - c
    return torch.cat((held, new), dim=-1)



class PagingMemory(NamedTuple):
    """Token slots (or bytes) of a mix of requests: reserved contiguously, held in blocks, used."""

    contiguous: int
    paged: int
    used: int

    @property
    def saving(self) -> float:
        """``1 - paged / contiguous``: the share of the contiguous reservation paging saves."""
        return 1 - self.paged / self.contiguous


def paging_memory(lengths: Sequence[int], *, max_tokens: int, block_size: int,
                  bytes_per_token: int = 1, check: bool = True) -> PagingMemory:
    """Kwon et al.'s argument: ``B N_max`` reserved against ``s sum_b ceil(n_b / s)`` held.

    Args:
        lengths: the tokens ``n_b`` each request ends up holding (prompt and output).
        max_tokens: ``N_max``, what contiguous pre-allocation reserves per request.
        block_size: ``s``.
        bytes_per_token: the bytes one token's cache takes in every layer (1: count slots).
        check: validate the arguments first (the default).

    Example:
        >>> paging_memory([1, 5, 16], max_tokens=16, block_size=4)
        PagingMemory(contiguous=48, paged=28, used=22)
    """
    if check:
        check_positive_int("max_tokens", max_tokens)
        check_positive_int("block_size", block_size)
        check_positive_int("bytes_per_token", bytes_per_token)
        for n in lengths:
            check_nonnegative_int("lengths", n)
            if n > max_tokens:
                raise ValueError(f"lengths must be at most max_tokens={max_tokens}; got {n}")
    paged = block_size * sum(math.ceil(n / block_size) for n in lengths)
    return PagingMemory(len(lengths) * max_tokens * bytes_per_token,
                        paged * bytes_per_token, sum(lengths) * bytes_per_token)
