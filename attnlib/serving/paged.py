"""A paged KV cache: one pool of blocks for every layer, a block table per sequence.

A contiguous cache reserves, for every sequence, room for the longest it may become: a
server that admits ``B`` requests of at most ``N_max`` tokens reserves ``B N_max`` token
slots, though request ``b`` only ever fills ``n_b``. Kwon et al. (vLLM, PagedAttention)
cut the cache into blocks of ``s`` tokens, handed out from a free list as a sequence grows;
sequence ``b``'s block table lists its blocks in order, so its token ``t`` lives at

    block = table_b[t // s],   offset = t mod s,

and a sequence holds ``ceil(n_b / s)`` blocks: it wastes fewer than ``s`` slots, in its
last block, against ``N_max - n_b`` for contiguous pre-allocation (:func:`paging_memory`).

The pieces follow nano-vllm's block manager (hashed full blocks, reference counts, the last
block never shared, freed blocks keeping their content); its pool is ``(2, L, n_blocks, s,
G, d)``, blocks before heads, and attnlib puts heads first:

* :class:`BlockManager`, one per model: the blocks, their free list, a reference count per
  block, and the full blocks indexed by content. A :class:`Sequence` carries its own block
  table. A sequence takes one more block only when its last one is full. A full block is
  indexed by its tokens and the SHA-256 digest of the block before it (its own digest covers
  both), so equal keys mean equal prefixes unless SHA-256 collides (Python's ``hash`` of
  integers collides by construction, ``hash(0) == hash(2**61 - 1)``), and a
  new sequence whose prompt starts with blocks already in the pool shares them (their
  count goes up) instead of computing them again. Only full blocks are hashed; a block
  whose count falls to 0 returns to the free list but keeps its content, and is found
  again by its hash until the free list hands it out.
* :class:`PagedKVCache`: the pool ``(2, L, G, n_blocks, s, d)`` (keys and values, every
  layer) and the manager. Pass ``cache.layers`` (one view per layer) as ``caches=``.
  Heads come before blocks, as everywhere in attnlib (``(..., G, N, d)``): a run of
  consecutive blocks of one head is then a strided view ``(G, r s, d)`` that attention
  reads in place, and one block of one head is a contiguous ``(s, d)`` tile for a kernel.
* :func:`paged_attention`: each sequence's queries against its keys and values, read
  through its block table, never gathered into one dense copy. The table is read as runs
  of consecutive blocks, each a view of the pool: a table that is one run is attended in
  one call of PyTorch's fused attention, and a table of several runs by an online softmax
  over them (the running maximum, normaliser and output of FlashAttention, merged run by
  run). On a GPU, a decoding step runs :func:`attnlib.kernels.paged_decode.paged_decode`,
  a Triton kernel that loads each block through the table.

When the pool runs out, the scheduler of :mod:`attnlib.serving.batching` preempts a
sequence by *recomputation*: its blocks return to the pool and it waits to be prefilled
again, prompt and generated tokens together (its prefix is found by hash if its blocks
have not been handed out meanwhile).

Lesson: 11_serving (05_kv_cache for the cache itself).
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from attnlib._checks import check_choice, check_nonnegative_int, check_positive_int
from attnlib.device import work_dtype

__all__ = ["KERNELS", "Block", "BlockManager", "PagedBlocks", "PagedKVCache", "PagingMemory",
           "Sequence", "paged_attention", "paging_memory"]

KERNELS = ("auto", "torch", "triton")
"""How :func:`paged_attention` reads a decoding step: ``"auto"`` runs the Triton kernel on a
CUDA device and PyTorch elsewhere; ``"torch"`` and ``"triton"`` force one (Triton on a CPU
needs its interpreter, ``TRITON_INTERPRET=1`` before triton is imported). The kernel
accumulates in float32 whatever the dtype, so a float64 model's decoding steps are then
float32-accurate (about 1e-7); ``"torch"`` keeps float64."""


# ---------------------------------------------------------------------------------------
# Blocks, sequences and the block manager
# ---------------------------------------------------------------------------------------


class Block:
    """One block of the pool: its id, how many sequences hold it, and its content key.

    ``key`` is ``(digest of the previous block, this block's tokens)`` once the block is full
    and its tokens are known, and ``hash`` is the SHA-256 digest of that key (32 bytes), which
    the next block's key carries; both are None before.
    """

    __slots__ = ("block_id", "hash", "key", "ref_count")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.key: tuple | None = None
        self.hash: bytes | None = None

    def __repr__(self) -> str:
        return f"Block({self.block_id}, ref_count={self.ref_count}, hashed={self.key is not None})"


@dataclass(eq=False)
class Sequence:
    """A sequence the cache holds: its tokens (when known), its block table, its length.

    Attributes:
        seq_id: a name for it.
        tokens: its token ids so far, when the caller knows them (the scheduler does; a
            plain ``generate`` does not): full blocks of known tokens are hashed and shared.
        block_table: its blocks, in order.
        n_cached: the tokens whose keys and values are in the pool.
        n_hashed: the leading blocks of the table already indexed by content.
        runs: what is held, as runs ``[first slot, tokens]`` of consecutive slots of the
            pool, the order attention reads them in.
        n_runs: the tokens the runs cover.
    """

    seq_id: object
    tokens: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    n_cached: int = 0
    n_hashed: int = 0
    runs: list[list[int]] = field(default_factory=list)
    n_runs: int = 0


class BlockManager:
    """The blocks of one pool: a free list, reference counts, full blocks by content.

    ``allocate(seq, n)`` gives a new sequence blocks for its first ``n`` tokens, sharing the
    leading full blocks whose content is already in the pool; ``grow(seq, n)`` takes a block
    from the free list whenever the next ``n`` tokens pass the end of the last one;
    ``hash_blocks(seq)`` indexes the blocks a pass has filled; ``deallocate(seq)`` drops the
    sequence's references, and a block nobody holds goes back to the free list.

    Example:
        >>> manager = BlockManager(n_blocks=4, block_size=2)
        >>> a = Sequence("a", tokens=[1, 2, 3, 4, 5])
        >>> manager.allocate(a, 5); a.block_table, manager.n_free
        ([0, 1, 2], 1)
        >>> a.n_cached = 5; manager.hash_blocks(a)   # a pass wrote the five tokens
        >>> b = Sequence("b", tokens=[1, 2, 3, 4, 9])   # the same first two blocks
        >>> manager.allocate(b, 5); b.block_table, b.n_cached
        ([0, 1, 3], 4)
        >>> [manager.blocks[i].ref_count for i in range(4)]
        [2, 2, 1, 1]
    """

    def __init__(self, n_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(n_blocks)]
        self.free: deque[int] = deque(range(n_blocks))  # taken from the left, returned right
        self.cached: dict[tuple, int] = {}  # (previous hash, tokens) -> block id

    @property
    def n_blocks(self) -> int:
        """Blocks in the pool."""
        return len(self.blocks)

    @property
    def n_free(self) -> int:
        """Blocks on the free list (some may still hold a prefix that can be found again)."""
        return len(self.free)

    @property
    def n_used(self) -> int:
        """Blocks held by at least one sequence."""
        return len(self.blocks) - len(self.free)

    # --- sharing by content -------------------------------------------------------------

    def prefix(self, seq: Sequence) -> list[int]:
        """The blocks holding ``seq``'s leading full blocks of tokens, found by content.

        The block holding its last token is never shared, so that a pass computes at least
        that token (its logits give the next one).
        """
        s, out, h = self.block_size, [], None
        for i in range((len(seq.tokens) - 1) // s):
            block_id = self.cached.get((h, tuple(seq.tokens[i * s:(i + 1) * s])))
            if block_id is None:
                break
            out.append(block_id)
            h = self.blocks[block_id].hash
        return out

    def hash_blocks(self, seq: Sequence) -> None:
        """Index the full blocks of ``seq`` whose tokens are written and known."""
        s = self.block_size
        for i in range(seq.n_hashed, min(seq.n_cached, len(seq.tokens)) // s):
            block = self.blocks[seq.block_table[i]]
            previous = self.blocks[seq.block_table[i - 1]].hash if i else None
            block.key = (previous, tuple(seq.tokens[i * s:(i + 1) * s]))
            block.hash = _digest(block.key)
            self.cached.setdefault(block.key, block.block_id)
            seq.n_hashed = i + 1

    # --- allocation ---------------------------------------------------------------------

    def blocks_needed(self, seq: Sequence, n: int) -> int:
        """Blocks ``seq`` must take from the free list to write ``n`` more tokens."""
        return max(0, math.ceil((seq.n_cached + n) / self.block_size) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, n: int) -> bool:
        """Whether the free list holds the blocks a new ``seq`` of ``n`` tokens needs."""
        shared = self.prefix(seq)
        idle = sum(self.blocks[b].ref_count == 0 for b in shared)  # on the free list
        return math.ceil(n / self.block_size) - len(shared) + idle <= len(self.free)

    def allocate(self, seq: Sequence, n: int) -> None:
        """Blocks for the first ``n`` tokens of a new ``seq``: shared by content, then fresh.

        Sets ``seq.n_cached`` to the tokens the shared blocks already hold.
        """
        for block_id in self.prefix(seq):
            block = self.blocks[block_id]
            if block.ref_count == 0:  # free, but its content is still there
                self.free.remove(block_id)
            block.ref_count += 1
            seq.block_table.append(block_id)
        seq.n_hashed = len(seq.block_table)  # the shared blocks are hashed already
        seq.n_cached = seq.n_hashed * self.block_size
        while len(seq.block_table) * self.block_size < n:
            seq.block_table.append(self._take())

    def can_grow(self, seq: Sequence, n: int) -> bool:
        """Whether ``seq`` can write ``n`` more tokens with the blocks on the free list."""
        return self.blocks_needed(seq, n) <= len(self.free)

    def grow(self, seq: Sequence, n: int) -> None:
        """Take blocks from the free list until ``seq`` has room for ``n`` more tokens."""
        need = self.blocks_needed(seq, n)
        if need > len(self.free):
            raise ValueError(f"the block pool must have {need} free blocks for {n} more tokens "
                             f"of sequence {seq.seq_id!r}; it has {len(self.free)} of "
                             f"{self.n_blocks}")
        for _ in range(need):
            seq.block_table.append(self._take())

    def deallocate(self, seq: Sequence) -> None:
        """Drop ``seq``'s blocks (last first); a block no sequence holds is free again."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free.append(block_id)
        seq.block_table, seq.n_cached, seq.n_hashed, seq.runs, seq.n_runs = [], 0, 0, [], 0

    def _take(self) -> int:
        block = self.blocks[self.free.popleft()]
        if block.key is not None:  # its old content is overwritten: forget it
            if self.cached.get(block.key) == block.block_id:
                del self.cached[block.key]
            block.key = block.hash = None
        block.ref_count = 1
        return block.block_id

    def __repr__(self) -> str:
        return (f"BlockManager(n_blocks={self.n_blocks}, block_size={self.block_size}, "
                f"n_free={self.n_free}, cached={len(self.cached)})")


def _digest(key: tuple[bytes | None, tuple[int, ...]]) -> bytes:
    """SHA-256 of a block's key: the previous digest (32 bytes, or none) and the tokens."""
    previous, tokens = key
    return hashlib.sha256((previous or b"") + repr(tokens).encode()).digest()


# ---------------------------------------------------------------------------------------
# The pool, and what one forward pass writes and reads
# ---------------------------------------------------------------------------------------


class _Segment(NamedTuple):
    """One sequence in a pass: its queries ``Q[row, :, start:start + n]``, its length after
    the pass, its keys as runs ``[first slot, tokens]`` of consecutive slots, its table."""

    row: int
    start: int
    n: int
    length: int
    runs: list[list[int]]
    table: list[int]


class _Pass(NamedTuple):
    """What one forward pass writes (pieces ``(row, start, first slot, tokens)``, or the
    slot of every new token) and reads (the segments); the same for every layer."""

    segments: list[_Segment]
    pieces: list[tuple[int, int, int, int]]
    slots: torch.Tensor | None
    packed: bool
    kernel: str
    decoding: bool  # one query per sequence
    lone: _Segment | None  # the only sequence, in the only row, its table one run


class PagedBlocks(NamedTuple):
    """One layer's keys (or values) in the pool, with the pass that reads them.

    What a :class:`PagedKVCache` layer's ``append`` returns in place of dense tensors: the
    attend step of a layer recognises it and calls :func:`paged_attention`.
    """

    pool: torch.Tensor
    """``(1, G, n_blocks * s, d)``, this layer's blocks laid end to end (a view)."""
    block_size: int
    """``s``, the tokens a block holds."""
    step: _Pass
    """The sequences of the pass, their queries, lengths and block runs."""


class _Layer:
    """One layer's view of a :class:`PagedKVCache`: what a layer's ``cache=`` receives."""

    def __init__(self, cache: PagedKVCache, index: int) -> None:
        self.cache, self.index = cache, index

    @property
    def n_tokens(self) -> int:
        """Tokens each row of a plain batch holds (:attr:`PagedKVCache.n_tokens`)."""
        return self.cache.n_tokens

    def append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[PagedBlocks, PagedBlocks]:
        """Write the pass's new keys and values ``(B, G, N, d)`` into their slots; return
        this layer's blocks for attention to read through the tables."""
        cache = self.cache
        if self.index == 0:
            cache._start_pass(K, V)
        step, (pool_K, pool_V) = cache._step, cache._flat[self.index]
        if step.slots is None:  # a few runs of consecutive slots: slice by slice
            for row, start, slot, n in step.pieces:
                if n == K.shape[2] and K.shape[0] == 1:  # all of K
                    pool_K[:, :, slot:slot + n] = K
                    pool_V[:, :, slot:slot + n] = V
                else:
                    pool_K[:, :, slot:slot + n] = K[row:row + 1, :, start:start + n]
                    pool_V[:, :, slot:slot + n] = V[row:row + 1, :, start:start + n]
        else:  # many: one indexed copy, tokens in (row, position) order
            G = K.shape[1]
            pool_K.index_copy_(2, step.slots, K.transpose(0, 1).reshape(1, G, -1, K.shape[3]))
            pool_V.index_copy_(2, step.slots, V.transpose(0, 1).reshape(1, G, -1, V.shape[3]))
        s = cache.manager.block_size
        return PagedBlocks(pool_K, s, step), PagedBlocks(pool_V, s, step)

    def __repr__(self) -> str:
        return f"PagedKVCache.layers[{self.index}]"


class PagedKVCache:
    """Keys and values of every layer in one pool of blocks, shared by many sequences.

    The pool ``(2, L, G, n_blocks, block_size, d)`` is allocated by the first pass, from its
    keys' shape, dtype and device. ``cache.layers`` holds one view per layer: pass it as
    ``caches=`` to :class:`~attnlib.layers.blocks.TinyDecoder`'s ``forward`` or
    ``generate``. Each layer's ``append`` writes the new keys and values into their
    sequences' slots and returns :class:`PagedBlocks`, which the attend step reads through
    the block tables (:func:`paged_attention`); nothing is gathered into a dense copy.

    Which sequences a pass holds:

    * a plain batch ``(B, N)`` (``generate``, or ``forward`` called directly): row ``b`` is
      sequence ``b`` (opened by its first pass), and every row adds ``N`` tokens;
    * a packed pass, as the scheduler of :mod:`attnlib.serving.batching` runs it: before
      the forward pass, :meth:`schedule` names the sequences and how many tokens each adds;
      the tokens are laid end to end in one row ``(1, sum n)``, with their positions given.

    Blocks are taken from :attr:`manager` as sequences grow, one when the last is full;
    with no block left, the pass raises ``ValueError`` (the scheduler preempts first).

    Args:
        n_layers: the model's layers ``L``.
        n_blocks: blocks in the pool.
        block_size: tokens per block ``s``.
        kernel: how decoding steps read the blocks (:data:`KERNELS`).

    Example:
        >>> cache = PagedKVCache(n_layers=1, n_blocks=8, block_size=4)
        >>> K, V = cache.layers[0].append(torch.ones(2, 1, 5, 3), torch.ones(2, 1, 5, 3))
        >>> [cache.sequences[b].block_table for b in (0, 1)], cache.manager.n_free
        ([[0, 1], [2, 3]], 4)
        >>> cache.nbytes   # 4 blocks * keys and values * 1 layer * (1 * 4 * 3) numbers * 4 bytes
        384

    Lesson: 11_serving.
    """

    def __init__(self, n_layers: int, n_blocks: int, block_size: int, *,
                 kernel: str = "auto") -> None:
        check_positive_int("n_layers", n_layers)
        check_positive_int("n_blocks", n_blocks)
        check_positive_int("block_size", block_size)
        self.kernel = check_choice("kernel", kernel, KERNELS)
        self.manager = BlockManager(n_blocks, block_size)
        self.layers = [_Layer(self, i) for i in range(n_layers)]
        self.pool: torch.Tensor | None = None  # (2, L, G, n_blocks, s, d)
        self._flat: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer (G, n_blocks s, d)
        self.sequences: dict[object, Sequence] = {}  # the sequences of plain batches, by row
        self._rows: list[Sequence] = []  # the sequences of the last plain batch
        self._next: list[tuple[Sequence, int]] | None = None  # the next packed pass
        self._step: _Pass | None = None

    @property
    def n_tokens(self) -> int:
        """Tokens each row of a plain batch holds, the position of its next token: those of
        the last plain batch, or after :meth:`release` those of the sequences still held
        (0 before any)."""
        if self._rows:
            return self._rows[0].n_cached
        held = {seq.n_cached for seq in self.sequences.values()}
        return held.pop() if len(held) == 1 else 0

    @property
    def block_size(self) -> int:
        """Tokens per block ``s``."""
        return self.manager.block_size

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks in use, keys and values of every layer."""
        return 0 if self.pool is None else self.manager.n_used * self._block_bytes

    @property
    def allocated_nbytes(self) -> int:
        """Bytes of the whole pool."""
        return 0 if self.pool is None else self.pool.numel() * self.pool.element_size()

    @property
    def _block_bytes(self) -> int:
        two, L, G, _, s, d = self.pool.shape
        return two * L * G * s * d * self.pool.element_size()

    def schedule(self, batch: Seq[tuple[Sequence, int]]) -> None:
        """The next pass is packed: sequence ``batch[i][0]`` adds ``batch[i][1]`` tokens,
        the tokens of the sequences laid end to end in one row, in this order."""
        self._next = list(batch)

    def release(self, seq_id: object) -> None:
        """Free the blocks of the plain-batch sequence ``seq_id`` (it has finished).

        The sequences still held continue as rows ``0 .. B - 1`` of the next plain batch,
        which must name only rows that hold the same number of tokens (release the last rows,
        or schedule packed passes, :mod:`attnlib.serving.batching`)."""
        self.manager.deallocate(self.sequences.pop(seq_id))
        self._rows = []  # the next plain batch names its rows again

    def reset(self) -> None:
        """Release every plain-batch sequence (the pool is kept)."""
        for seq_id in list(self.sequences):
            self.release(seq_id)
        self._rows, self._step = [], None

    def held(self, seq: Sequence | object, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """A dense copy ``(G, n, d)`` of one sequence's keys and values in ``layer``, read
        through its table: for inspection (attention never makes it)."""
        seq = seq if isinstance(seq, Sequence) else self.sequences[seq]
        K, V = self._flat[layer]
        s = self.block_size
        slots = [seq.block_table[t // s] * s + t % s for t in range(seq.n_cached)]
        index = torch.tensor(slots, dtype=torch.long, device=K.device)
        return K[0].index_select(1, index), V[0].index_select(1, index)

    # --- one pass ---------------------------------------------------------------------------

    def _start_pass(self, K: torch.Tensor, V: torch.Tensor) -> None:
        """Layer 0's append: take the blocks of the pass, plan its writes and reads."""
        if K.dim() != 4 or V.shape[:3] != K.shape[:3]:
            raise ValueError(f"K and V must have shape (B, G, N, d) for a PagedKVCache, one row "
                             f"per sequence (ids of shape (B, N), not unbatched (N,)); got "
                             f"{tuple(K.shape)} and {tuple(V.shape)}")
        B, G, N, d = K.shape
        if self.pool is None:
            shape = (len(self.layers), G, self.manager.n_blocks, self.block_size, d)
            self.pool = K.new_zeros((2, *shape))
            flat = self.pool.flatten(3, 4).unsqueeze(2)  # (2, L, 1, G, n_blocks s, d): a view
            self._flat = [(flat[0, i], flat[1, i]) for i in range(len(self.layers))]
        elif (G, d, K.dtype, K.device) != (self.pool.shape[2], self.pool.shape[-1],
                                           self.pool.dtype, self.pool.device):
            raise ValueError(f"K must have G={self.pool.shape[2]} heads of d="
                             f"{self.pool.shape[-1]}, dtype {self.pool.dtype} and device "
                             f"{self.pool.device} like the pool; got {tuple(K.shape)}, "
                             f"{K.dtype}, {K.device}")
        if self._next is not None:  # a packed pass the scheduler named
            batch, self._next, packed = self._next, None, True
            if B != 1 or N != sum(n for _, n in batch):
                raise ValueError(f"K must have shape (1, G, {sum(n for _, n in batch)}, d) for "
                                 f"the scheduled pass; got {tuple(K.shape)}")
        else:  # a plain batch: row b is sequence b
            if len(self._rows) != B:
                held = [self.sequences[b].n_cached if b in self.sequences else 0
                        for b in range(B)]
                if len(set(held)) > 1:  # the positions of a plain batch are shared by its rows
                    raise ValueError(f"every row of a plain batch must hold the same number of "
                                     f"tokens (row b continues sequence b); rows 0 .. {B - 1} "
                                     f"hold {held}")
                self._rows = [self.sequences.setdefault(b, Sequence(b)) for b in range(B)]
            batch, packed = [(seq, N) for seq in self._rows], False
        need = sum(self.manager.blocks_needed(seq, n) for seq, n in batch)
        if need > self.manager.n_free:
            raise ValueError(f"the block pool must have {need} free blocks for this pass; it "
                             f"has {self.manager.n_free} of {self.manager.n_blocks}")
        s = self.block_size
        segments, pieces, start = [], [], 0
        for i, (seq, n) in enumerate(batch):
            self.manager.grow(seq, n)
            row, first = (0, start) if packed else (i, 0)
            old = seq.n_cached
            if seq.n_runs < old:  # held tokens not read yet (a prefix shared at admission)
                _extend(seq.runs, seq.block_table, s, seq.n_runs, old)
            new = _extend(seq.runs, seq.block_table, s, old, old + n)
            pieces.extend((row, first + at - old, slot, count) for slot, count, at in new)
            seq.n_cached = seq.n_runs = old + n
            segments.append(_Segment(row, first, n, seq.n_cached, seq.runs, seq.block_table))
            start += n
        slots = None
        if len(pieces) > 2:  # one indexed copy instead of many small ones
            slots = torch.tensor([slot + j for _, _, slot, count in pieces for j in range(count)],
                                 dtype=torch.long, device=K.device)
        lone = segments[0] if len(segments) == 1 and B == 1 and len(segments[0].runs) == 1 else None
        decoding = all(seg.n == 1 for seg in segments)
        self._step = _Pass(segments, pieces, slots, packed, self.kernel, decoding, lone)

    def __repr__(self) -> str:
        return (f"PagedKVCache(n_layers={len(self.layers)}, n_blocks={self.manager.n_blocks}, "
                f"block_size={self.block_size}, n_free={self.manager.n_free}, "
                f"nbytes={self.nbytes})")


def _extend(runs: list[list[int]], table: list[int], s: int, begin: int,
            end: int) -> list[tuple[int, int, int]]:
    """Add tokens ``begin .. end - 1`` of a sequence to its runs of consecutive slots
    ``[first slot, tokens]`` (token ``t`` at slot ``table[t // s] * s + t mod s``); return
    the pieces they were written in, ``(first slot, tokens, first token)``, one per block."""
    pieces = []
    t = begin
    while t < end:
        block, offset = table[t // s], t % s
        n = min(s - offset, end - t)
        slot = block * s + offset
        if runs and runs[-1][0] + runs[-1][1] == slot:  # continues the last run
            runs[-1][1] += n
        else:
            runs.append([slot, n])
        if pieces and pieces[-1][0] + pieces[-1][1] == slot:
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + n, pieces[-1][2])
        else:
            pieces.append((slot, n, t))
        t += n
    return pieces


# ---------------------------------------------------------------------------------------
# Attention through the block tables
# ---------------------------------------------------------------------------------------


def paged_attention(Q: torch.Tensor, K: PagedBlocks, V: PagedBlocks, *,
                    mask: torch.Tensor | None = None, causal: bool = True,
                    scale: float | None = None) -> torch.Tensor:
    """Softmax attention of each sequence's queries over its keys and values, in the pool.

    Sequence ``i`` of the pass has ``n`` queries (the tokens it adds), at positions
    ``L - n .. L - 1`` of its ``L`` tokens; with ``causal`` (bottom-right aligned, as
    everywhere in attnlib) query ``j`` sees keys ``0 .. L - n + j``. Its keys are read
    through its block table as runs of consecutive blocks, each a view of the pool:

    * one run: one call of PyTorch's fused attention on that view;
    * several runs: an online softmax over them. With ``S_r = scale Q K_r^T`` on run
      ``r``, keep per query the running maximum ``m``, normaliser ``l`` and output ``o``::

          m' = max(m, max_j S_r),  l' = e^{m - m'} l + sum_j e^{S_r - m'},
          o' = e^{m - m'} o + e^{S_r - m'} V_r,     Y = o / l,

      so no tensor spans more than one run. A query that sees no key gets zeros.

    A decoding step (one query per sequence, no mask) on a CUDA device, or with the cache's
    ``kernel="triton"``, runs :func:`attnlib.kernels.paged_decode.paged_decode` instead,
    which accumulates in float32 whatever the dtype (:data:`KERNELS`).

    Args:
        Q: ``(B, H, N, d)``: the pass's queries (one row per sequence, or one packed row).
        K, V: this layer's :class:`PagedBlocks`, as the cache's ``append`` returned them.
        mask: bool, broadcastable to ``(B, H, N, L)`` with ``L`` the tokens every sequence
            holds (plain batches only); True = may attend.
        causal: bottom-right causal mask within each sequence.
        scale: default ``1/sqrt(d)``.

    Returns:
        ``(B, H, N, d_v)``, query for query what a contiguous cache's attention returns.

    Lesson: 11_serving.
    """
    step = K.step
    scale = Q.shape[-1] ** -0.5 if scale is None else scale
    if mask is None:
        if step.decoding and (step.kernel == "triton" or (step.kernel == "auto" and Q.is_cuda)):
            return _decode_kernel(Q, K, V, scale)
        if step.lone is not None:  # one sequence, one run: the whole pass in one call
            return _one_run(Q, K.pool, V.pool, step.lone.runs[0], causal, scale)
    out = Q.new_empty((*Q.shape[:-1], V.pool.shape[-1]))
    for seg in step.segments:
        q = Q[seg.row:seg.row + 1, :, seg.start:seg.start + seg.n]  # (1, H, n, d)
        m = None
        if mask is not None:  # this sequence's rows of the mask: (H, n, L)
            m = mask.expand(*Q.shape[:-2], Q.shape[-2], seg.length)[seg.row]
            m = m[:, seg.start:seg.start + seg.n] if m.shape[-2] == Q.shape[-2] else m
        if len(seg.runs) == 1 and m is None:
            y = _one_run(q, K.pool, V.pool, seg.runs[0], causal, scale)
        else:
            y = _online_softmax(q[0], K.pool[0], V.pool[0], seg, m, causal, scale)
        out[seg.row, :, seg.start:seg.start + seg.n] = y
    return out


def _one_run(q: torch.Tensor, pool_K: torch.Tensor, pool_V: torch.Tensor, run: list[int],
             causal: bool, scale: float) -> torch.Tensor:
    """Queries ``(1, H, n, d)`` of one sequence whose table is one run of consecutive blocks:
    fused attention on the pool's view (PyTorch's CPU kernel wants four dimensions)."""
    slot, L = run
    K = pool_K[:, :, slot:slot + L]  # (1, G, L, d): a view, nothing copied
    V = pool_V[:, :, slot:slot + L]
    _, H, n, d = q.shape
    G = K.shape[1]
    if n == 1:  # one query sees every key; group g's H / G queries become rows against K_g
        if G == H:
            return F.scaled_dot_product_attention(q, K, V, scale=scale)
        y = F.scaled_dot_product_attention(q.reshape(1, G, H // G, d), K, V, scale=scale)
        return y.reshape(1, H, 1, -1)
    kw = {"scale": scale, "enable_gqa": True} if G != H else {"scale": scale}
    if not causal:
        return F.scaled_dot_product_attention(q, K, V, **kw)
    if n == L:  # a whole sequence: top-left and bottom-right alignment agree
        return F.scaled_dot_product_attention(q, K, V, is_causal=True, **kw)
    allowed = torch.ones(n, L, dtype=torch.bool, device=q.device).tril(L - n)
    return F.scaled_dot_product_attention(q, K, V, attn_mask=allowed, **kw)


def _online_softmax(q: torch.Tensor, pool_K: torch.Tensor, pool_V: torch.Tensor,
                    seg: _Segment, mask: torch.Tensor | None, causal: bool,
                    scale: float) -> torch.Tensor:
    """Attention over the runs of a table, one run at a time, merged by their maxima."""
    H, n, d = q.shape
    G = pool_K.shape[0]
    r = H // G  # query heads per KV head: group g's queries are rows (head, query)
    dtype = work_dtype(q.dtype)
    qg = q.reshape(G, r * n, d).to(dtype)  # (G, r n, d)
    m = torch.full((G, r * n, 1), -math.inf, dtype=dtype, device=q.device)
    l = torch.zeros((G, r * n, 1), dtype=dtype, device=q.device)
    o = torch.zeros((G, r * n, pool_V.shape[-1]), dtype=dtype, device=q.device)
    first = seg.length - n  # the position of the first query
    key0 = 0  # the first key of the run
    for slot, c in seg.runs:
        K = pool_K[:, slot:slot + c].to(dtype)  # (G, c, d): a view of the pool
        V = pool_V[:, slot:slot + c].to(dtype)
        S = (qg @ K.mT) * scale  # (G, r n, c)
        allowed = None
        if causal and key0 + c - 1 > first:  # keys past the first query's position
            keys = torch.arange(key0, key0 + c, device=q.device)
            allowed = keys <= torch.arange(first, first + n, device=q.device)[:, None]
            allowed = allowed.expand(r, n, c)
        if mask is not None:
            cut = mask[..., key0:key0 + c].expand(H, n, c).reshape(G, r, n, c)
            allowed = cut if allowed is None else cut & allowed
        if allowed is not None:
            S = S.masked_fill(~allowed.reshape(-1, r * n, c), -math.inf)
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))
        shift = torch.where(torch.isfinite(m_new), m_new, 0.0)  # no key yet: shift by 0
        P = torch.exp(S - shift)
        alpha = torch.exp(m - shift)  # rescales what the earlier runs gave
        l = alpha * l + P.sum(dim=-1, keepdim=True)
        o = alpha * o + P @ V
        m = m_new
        key0 += c
    Y = torch.where(l > 0, o / torch.where(l > 0, l, 1.0), 0.0)  # no key at all: zeros
    return Y.reshape(H, n, -1).to(q.dtype)


def _decode_kernel(Q: torch.Tensor, K: PagedBlocks, V: PagedBlocks, scale: float) -> torch.Tensor:
    """One query per sequence: the Triton kernel, the tables padded to the longest."""
    from attnlib.kernels.paged_decode import paged_decode

    step, s = K.step, K.block_size
    if step.packed:  # (1, H, S, d): sequence i's query is column i
        q = Q[0].transpose(0, 1)
    else:  # (B, H, 1, d)
        q = Q[:, :, 0]
    width = max(len(seg.table) for seg in step.segments)
    tables = torch.tensor([seg.table + [0] * (width - len(seg.table)) for seg in step.segments],
                          dtype=torch.int32, device=Q.device)
    lengths = torch.tensor([seg.length for seg in step.segments], dtype=torch.int32,
                           device=Q.device)
    pool_K = K.pool[0].unflatten(1, (-1, s))  # (G, n_blocks, s, d): views
    pool_V = V.pool[0].unflatten(1, (-1, s))
    y = paged_decode(q, pool_K, pool_V, tables, lengths, scale=scale)  # (S, H, d_v)
    return y.transpose(0, 1).unsqueeze(0) if step.packed else y.unsqueeze(2)


# ---------------------------------------------------------------------------------------
# Memory: Kwon et al.'s count
# ---------------------------------------------------------------------------------------


class PagingMemory(NamedTuple):
    """Token slots (or bytes) of a mix of requests: reserved contiguously, held in blocks, used."""

    contiguous: int
    paged: int
    used: int

    @property
    def saving(self) -> float:
        """``1 - paged / contiguous``: the share of the contiguous reservation paging saves."""
        return 1 - self.paged / self.contiguous


def paging_memory(lengths: Seq[int], *, max_tokens: int, block_size: int,
                  bytes_per_token: int = 1) -> PagingMemory:
    """Kwon et al.'s argument: ``B N_max`` reserved against ``s sum_b ceil(n_b / s)`` held.

    Args:
        lengths: the tokens ``n_b`` each request ends up holding (prompt and output).
        max_tokens: ``N_max``, what contiguous pre-allocation reserves per request.
        block_size: ``s``.
        bytes_per_token: the bytes one token's cache takes in every layer (1: count slots).

    Example:
        >>> paging_memory([1, 5, 16], max_tokens=16, block_size=4)
        PagingMemory(contiguous=48, paged=28, used=22)
    """
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
