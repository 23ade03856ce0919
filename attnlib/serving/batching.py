"""Continuous batching: requests join and leave the running batch at every step.

A server holds requests ``r`` with a prompt of ``P_r`` tokens, a number ``T_r`` of tokens
to generate and an arrival step ``a_r``. *Static* batching groups ``b`` requests, waits
for the last of them, prefills them together and decodes until the longest is done: a
request that finishes early leaves an idle row, and a request that arrives waits for the
whole batch before it. *Continuous* batching (Yu et al., Orca; vLLM) schedules per step.
The engine is nano-vllm's, in three parts:

* :meth:`Scheduler.schedule` picks the pass: every running sequence adds its next tokens (a
  chunk of at most ``chunk`` tokens of its prompt, or its last token), taking a block when
  its last is full; when the pool has no block left, the sequence admitted last is
  *preempted* by recomputation: its blocks go back to the pool, and it waits, first in
  line, to be prefilled again, prompt and generated tokens together. Then waiting requests
  are admitted while a row is free and the free list holds the blocks of their known
  tokens; the leading blocks already in the pool, found by hash, are shared, and the
  others are taken pass by pass, as the tokens are written.
* :meth:`Engine.step` runs the pass: the scheduled tokens of every sequence laid end to
  end in one row, each at its own positions, through one :class:`~attnlib.serving.paged.
  PagedKVCache`; attention reads each sequence's keys and values through its block table,
  so no row is padded and no mask is needed.
* :meth:`Scheduler.postprocess` reads the pass: a sequence whose known tokens are all in the
  cache emits its next token (greedy), the full blocks are hashed for later sharing, and a
  finished request leaves, its blocks back in the pool.

:func:`continuous_batching` runs it on a :class:`~attnlib.layers.blocks.TinyDecoder` and
returns each request's tokens, equal to what the request generates alone, with the counts.
``reserve=True`` admits a request only when the pool holds its worst case, prompt plus
``max_new_tokens`` blocks, taken at admission, as a contiguous server must: the baseline
that paging exists to beat. :func:`static_batching_counts` counts the same requests under
static batching, in closed form. The figure of merit is *tokens per forward pass*.

Lesson: 11_serving (05_kv_cache for the cache itself).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from attnlib._checks import check_bool, check_nonnegative_int, check_positive_int
from attnlib.serving.paged import BlockManager, PagedKVCache, Sequence

__all__ = ["BatchCounts", "BatchResult", "Engine", "Request", "Scheduler", "continuous_batching",
           "static_batching_counts"]


class Request(NamedTuple):
    """A request: its prompt ids, how many tokens to generate, the step it arrives at."""

    prompt: Seq[int]
    max_new_tokens: int
    arrival: int = 0


class BatchCounts(NamedTuple):
    """What a schedule cost: forward passes, real tokens processed, positions computed
    (a padded batch computes its pads too; a packed pass computes only real tokens)."""

    forward_passes: int
    tokens: int
    slots: int

    @property
    def tokens_per_pass(self) -> float:
        """Real tokens (prompt and generated) processed per forward pass."""
        return self.tokens / self.forward_passes


class BatchResult(NamedTuple):
    """Each request's generated ids, its logits at each emitted token, the schedule's counts
    and the log of each pass: ``step``, ``running`` (the requests of the pass, in order),
    ``n_new`` (the tokens each adds), ``blocks`` (each one's block table after the pass),
    ``preempted`` (the requests preempted before it) and ``waiting`` (arrived, not running)."""

    outputs: list[list[int]]
    logits: list[torch.Tensor]
    counts: BatchCounts
    steps: list[dict]

    @property
    def peak_running(self) -> int:
        """The most requests in one pass."""
        return max(len(s["running"]) for s in self.steps)

    @property
    def mean_running(self) -> float:
        """Requests per pass, on average."""
        return sum(len(s["running"]) for s in self.steps) / len(self.steps)

    @property
    def preemptions(self) -> int:
        """How many times a request was preempted."""
        return sum(len(s["preempted"]) for s in self.steps)


@dataclass(eq=False)
class Running(Sequence):
    """A request's sequence: the cache's :class:`~attnlib.serving.paged.Sequence` (tokens,
    block table) with the request's prompt length, budget and emitted logits."""

    n_prompt: int = 0
    max_new_tokens: int = 0
    logits: list[torch.Tensor] = field(default_factory=list)

    @property
    def outputs(self) -> list[int]:
        """The tokens generated so far."""
        return self.tokens[self.n_prompt:]

    @property
    def done(self) -> bool:
        """Whether every token it asked for is generated."""
        return len(self.tokens) - self.n_prompt == self.max_new_tokens


class Scheduler:
    """Which sequences a pass holds, and how many tokens each adds: nano-vllm's scheduler.

    Args:
        manager: the cache's :class:`~attnlib.serving.paged.BlockManager`.
        max_batch: the most sequences in one pass.
        chunk: the most known tokens (prompt, or prompt and output after a preemption) a
            sequence reads in one pass (None: all at once).
        reserve: admit a sequence only with blocks for its worst case, prompt plus
            ``max_new_tokens``, taken at admission (then no preemption is ever needed).

    Attributes:
        waiting: arrived sequences not running, first in line first.
        running: the running sequences, in admission order.
    """

    def __init__(self, manager: BlockManager, *, max_batch: int, chunk: int | None = None,
                 reserve: bool = False) -> None:
        self.manager, self.max_batch, self.chunk, self.reserve = manager, max_batch, chunk, reserve
        self.waiting: deque[Running] = deque()
        self.running: list[Running] = []

    def add(self, seq: Running) -> None:
        """A request arrives: it waits behind the others."""
        self.waiting.append(seq)

    def is_finished(self) -> bool:
        """Nothing waits and nothing runs."""
        return not self.waiting and not self.running

    def next_tokens(self, seq: Running) -> int:
        """How many tokens ``seq`` adds in its next pass: a chunk of what it has not read, or
        its last token."""
        left = len(seq.tokens) - seq.n_cached
        return left if self.chunk is None else min(self.chunk, left)

    def schedule(self) -> tuple[list[tuple[Running, int]], list[Running]]:
        """The next pass, ``[(sequence, tokens it adds), ...]``, and the sequences preempted
        to make room for it."""
        batch, preempted = [], []
        i = 0
        while i < len(self.running):  # the running sequences, oldest first
            seq, n = self.running[i], self.next_tokens(self.running[i])
            while not self.manager.can_grow(seq, n):  # no block left: the newest makes room
                victim = self.running[-1]
                self.preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq in preempted:
                break
            self.manager.grow(seq, n)
            batch.append((seq, n))
            i += 1
        while not preempted and self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting[0]  # admit in order, while the blocks of its tokens are free
            worst = seq.n_prompt + seq.max_new_tokens - 1  # the most it will hold
            if not self.manager.can_allocate(seq, worst if self.reserve else len(seq.tokens)):
                break
            self.manager.allocate(seq, worst if self.reserve else 0)  # shares its prefix
            n = self.next_tokens(seq)
            self.manager.grow(seq, n)  # the blocks of this pass's tokens
            self.running.append(self.waiting.popleft())
            batch.append((seq, n))
        return batch, preempted

    def preempt(self, seq: Running) -> None:
        """Recompute ``seq`` later: its blocks go back to the pool, and it waits first in line."""
        self.running.remove(seq)
        self.manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def postprocess(self, batch: list[tuple[Running, int]], logits: torch.Tensor) -> list[Running]:
        """After the pass: emit a token where every known token is read, hash the full
        blocks, retire the finished sequences; return them."""
        finished = []
        for (seq, _), z in zip(batch, logits, strict=True):
            self.manager.hash_blocks(seq)
            if seq.n_cached < len(seq.tokens):
                continue  # more of its known tokens to read: no token yet
            seq.tokens.append(int(z.argmax()))
            seq.logits.append(z.clone())
            if seq.done:
                self.running.remove(seq)
                self.manager.deallocate(seq)
                finished.append(seq)
        return finished


class Engine:
    """A model, its paged cache and a scheduler: nano-vllm's ``LLMEngine``, greedy.

    ``add_request`` queues a request; ``step`` runs one forward pass (schedule, run,
    postprocess) and returns its log entry.

    Args:
        model: a :class:`~attnlib.layers.blocks.TinyDecoder` whose attention keeps ``K, V``.
        n_blocks, block_size: the pool.
        max_batch, chunk, reserve: the :class:`Scheduler`'s.
    """

    def __init__(self, model, *, n_blocks: int, block_size: int, max_batch: int,
                 chunk: int | None = None, reserve: bool = False) -> None:
        self.model = model
        self.cache = PagedKVCache(len(model.blocks), n_blocks, block_size)
        self.scheduler = Scheduler(self.cache.manager, max_batch=max_batch, chunk=chunk,
                                   reserve=reserve)

    def add_request(self, request: Request, seq_id: object) -> Running:
        """Queue ``request`` under the name ``seq_id``; return its sequence."""
        seq = Running(seq_id, tokens=list(request.prompt), n_prompt=len(request.prompt),
                      max_new_tokens=request.max_new_tokens)
        self.scheduler.add(seq)
        return seq

    @torch.no_grad()
    def step(self) -> dict:
        """One forward pass: schedule it, run it, read it. Returns what it did."""
        batch, preempted = self.scheduler.schedule()
        log = {"running": [seq.seq_id for seq, _ in batch], "n_new": [n for _, n in batch],
               "blocks": {seq.seq_id: list(seq.block_table) for seq, _ in batch},
               "preempted": [seq.seq_id for seq in preempted],
               "waiting": [seq.seq_id for seq in self.scheduler.waiting]}
        if batch:
            self.scheduler.postprocess(batch, self.run(batch))
        return log

    def run(self, batch: list[tuple[Running, int]]) -> torch.Tensor:
        """The pass: the tokens of every sequence end to end, each at its own positions;
        returns each sequence's last logits ``(S, vocab_size)``."""
        device = self.model.E.device
        ids, positions, ends = [], [], []
        for seq, n in batch:
            ids.extend(seq.tokens[seq.n_cached:seq.n_cached + n])
            positions.extend(range(seq.n_cached, seq.n_cached + n))
            ends.append(len(ids) - 1)
        self.cache.schedule(batch)
        logits = self.model(torch.tensor([ids], device=device), caches=self.cache.layers,
                            positions=torch.tensor([positions], device=device))
        return logits[0, ends]


def _check_requests(requests: object) -> list[Request]:
    if not isinstance(requests, (list, tuple)) or not requests:
        raise ValueError(f"requests must be a non-empty list of Request; got {requests!r}")
    out = []
    for i, r in enumerate(requests):
        r = Request(*r)
        if len(r.prompt) < 1:
            raise ValueError(f"requests[{i}].prompt must hold at least one token; got none")
        check_positive_int(f"requests[{i}].max_new_tokens", r.max_new_tokens)
        check_nonnegative_int(f"requests[{i}].arrival", r.arrival)
        out.append(r)
    return out


@torch.no_grad()
def continuous_batching(model, requests: Seq[Request], *, max_batch: int = 4,
                        n_blocks: int = 256, block_size: int = 16, chunk: int | None = None,
                        reserve: bool = False) -> BatchResult:
    """Greedy generation for every request, scheduled continuously through a paged cache.

    At step ``t`` the requests with ``arrival <= t`` join the queue, and one
    :meth:`Engine.step` runs; a step with nothing to run passes without a forward pass.

    Args:
        model: a :class:`~attnlib.layers.blocks.TinyDecoder` whose attention keeps ``K, V``.
        requests: the :class:`Request` s, in arrival order (ties kept in list order).
        max_batch: the most requests running at once (sequences of a pass).
        n_blocks, block_size: the pool of blocks, for every layer.
        chunk: the most prompt tokens a request prefills in one pass (None: all at once).
        reserve: take each request's worst case, prompt plus ``max_new_tokens``, in blocks
            at admission, and never preempt (the baseline); False takes blocks as the
            sequences grow and preempts when the pool runs out.

    Returns:
        A :class:`BatchResult`; ``outputs[r]`` equals ``model.generate(prompt_r,
        max_new_tokens_r)``'s new tokens.

    Example:
        >>> from attnlib.layers.blocks import TinyDecoder
        >>> model = TinyDecoder(vocab_size=20, d_model=16, n_layers=2, n_heads=2, seed=0)
        >>> res = continuous_batching(model, [Request([1, 2, 3], 4), Request([5], 2, 1)])
        >>> res.counts, res.peak_running
        (BatchCounts(forward_passes=4, tokens=8, slots=8), 2)
    """
    requests = _check_requests(requests)
    check_positive_int("max_batch", max_batch)
    check_positive_int("n_blocks", n_blocks)
    check_positive_int("block_size", block_size)
    if chunk is not None:
        check_positive_int("chunk", chunk)
    check_bool("reserve", reserve)
    for r, request in enumerate(requests):  # the most a request ever holds must fit
        need = math.ceil((len(request.prompt) + request.max_new_tokens - 1) / block_size)
        if need > n_blocks:
            raise ValueError(f"n_blocks must hold request {r}'s {need} blocks; got {n_blocks}")
    engine = Engine(model, n_blocks=n_blocks, block_size=block_size, max_batch=max_batch,
                    chunk=chunk, reserve=reserve)
    order = sorted(range(len(requests)), key=lambda r: (requests[r].arrival, r))
    sequences: dict[int, Running] = {}
    steps: list[dict] = []
    t = tokens = 0
    while order or not engine.scheduler.is_finished():
        while order and requests[order[0]].arrival <= t:
            r = order.pop(0)
            sequences[r] = engine.add_request(requests[r], r)
        if not engine.scheduler.is_finished():
            log = engine.step()
            if log["running"]:
                steps.append({"step": t, **log})
                tokens += sum(log["n_new"])
        t += 1
    outputs = [sequences[r].outputs for r in range(len(requests))]
    logits = [torch.stack(sequences[r].logits) for r in range(len(requests))]
    return BatchResult(outputs, logits, BatchCounts(len(steps), tokens, tokens), steps)


def static_batching_counts(requests: Seq[Request], *, max_batch: int = 4) -> BatchCounts:
    """The counts of static batching: groups of ``max_batch`` in arrival order.

    Each group prefills its prompts in one pass (padded to the longest, ``max P`` slots a
    row) and then decodes ``max T - 1`` passes, every row kept until the longest is done:

        passes = sum_groups max T,   tokens = sum_r (P_r + T_r - 1),
        slots  = sum_groups b_g (max P + max T - 1).

    (The arrival steps change when a group can start, not what it costs.)

    Example:
        >>> static_batching_counts([Request([1, 2, 3], 4), Request([5], 2, 1)])
        BatchCounts(forward_passes=4, tokens=8, slots=12)
    """
    reqs = _check_requests(requests)
    check_positive_int("max_batch", max_batch)
    order = sorted(range(len(reqs)), key=lambda r: (reqs[r].arrival, r))
    passes = tokens = slots = 0
    for i in range(0, len(order), max_batch):
        group = [reqs[r] for r in order[i: i + max_batch]]
        P = max(len(r.prompt) for r in group)
        T = max(r.max_new_tokens for r in group)
        passes += T
        slots += len(group) * (P + T - 1)
        tokens += sum(len(r.prompt) + r.max_new_tokens - 1 for r in group)
    return BatchCounts(passes, tokens, slots)
