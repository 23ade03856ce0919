"""Continuous batching: requests join and leave the running batch at every step.

A server holds requests ``r`` with a prompt of ``P_r`` tokens, a number ``T_r`` of tokens
to generate and an arrival step ``a_r``. *Static* batching groups ``b`` requests, waits
for the last of them, prefills them together and decodes until the longest is done: a
request that finishes early leaves an idle row, and a request that arrives waits for the
whole batch before it. *Continuous* batching (Yu et al., Orca; vLLM) schedules per step:

    at step t:  admit the arrived requests while a row and the blocks are free;
                one forward pass over every running request: a chunk of at most
                ``chunk`` prompt tokens for a request still prefilling, its last token
                for one decoding; each request whose prompt is done emits a token;
                a request with ``T_r`` tokens leaves, and its blocks go back to the pool.

Prefill and decoding share the pass: the rows are left-padded to the longest chunk, each
layer's :class:`~attnlib.serving.paged.PagedKVCache` is told which real rows each sequence adds
(:meth:`~attnlib.serving.paged.PagedKVCache.select`), and the ``attention_mask`` of
:func:`attnlib.serving.paged.batch_mask` hides the pads, so the positions count each request's own
tokens and each request computes what it computes alone (up to float rounding: the
reductions run over padded widths).

:func:`continuous_batching` runs it on a :class:`~attnlib.layers.blocks.TinyDecoder` (greedy) and
returns each request's tokens with the counts; :func:`static_batching_counts` counts the
same requests under static batching, in closed form. The figure of merit is *tokens per
forward pass*: real tokens (prompt and generated) processed per pass.

Lesson: 11_serving (05_kv_cache for the cache itself).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from attnlib._checks import check_nonnegative_int, check_positive_int
from attnlib.serving.paged import PagedKVCache, batch_mask

__all__ = ["BatchCounts", "BatchResult", "Request", "continuous_batching", "static_batching_counts"]


class Request(NamedTuple):
    """A request: its prompt ids, how many tokens to generate, the step it arrives at."""

    prompt: Sequence[int]
    max_new_tokens: int
    arrival: int = 0


class BatchCounts(NamedTuple):
    """What a schedule cost: forward passes, real tokens processed, row slots of the passes."""

    forward_passes: int
    tokens: int
    slots: int

    @property
    def tokens_per_pass(self) -> float:
        """Real tokens (prompt and generated) processed per forward pass."""
        return self.tokens / self.forward_passes


class BatchResult(NamedTuple):
    """Each request's generated ids, its logits at each emitted token, the schedule's counts
    and the log of each step (the running requests and their chunk sizes)."""

    outputs: list[list[int]]
    logits: list[torch.Tensor]
    counts: BatchCounts
    steps: list[dict]



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
def continuous_batching(model, requests: Sequence[Request], *, max_batch: int = 4,
                        n_blocks: int = 256, block_size: int = 16, chunk: int | None = None,
                        check: bool = True) -> BatchResult:
    """Greedy generation for every request, scheduled continuously through paged caches.

    Args:
        model: a :class:`~attnlib.layers.blocks.TinyDecoder` whose attention keeps ``K, V``.
        requests: the :class:`Request` s, in arrival order (ties kept in list order).
        max_batch: the most requests running at once (rows of a pass).
        n_blocks, block_size: each layer's block pool.
        chunk: the most prompt tokens a request prefills in one pass (None: all at once).
        check: validate the arguments first (the default).

    Returns:
        A :class:`BatchResult`; ``outputs[r]`` equals ``model.generate(prompt_r,
        max_new_tokens_r)``'s new tokens.

    Example:
        >>> from attnlib.layers.blocks import TinyDecoder
        >>> model = TinyDecoder(vocab_size=20, d_model=16, n_layers=2, n_heads=2, seed=0)
        >>> res = continuous_batching(model, [Request([1, 2, 3], 4), Request([5], 2, 1)])
        >>> res.counts
        BatchCounts(forward_passes=4, tokens=8, slots=8)
    """
    if check:
        requests = _check_requests(requests)
        check_positive_int("max_batch", max_batch)
        check_positive_int("n_blocks", n_blocks)
        check_positive_int("block_size", block_size)
        if chunk is not None:
            check_positive_int("chunk", chunk)
    requests = [Request(*r) for r in requests]
    device = model.E.device
    caches = [PagedKVCache(n_blocks, block_size) for _ in model.blocks]
    pool = caches[0].allocator
    waiting = sorted(range(len(requests)), key=lambda r: (requests[r].arrival, r))
    running: list[int] = []
    done_prompt = [0] * len(requests)  # prompt tokens already in the cache
    outputs: list[list[int]] = [[] for _ in requests]
    logits_out: list[list[torch.Tensor]] = [[] for _ in requests]
    passes = tokens = slots = 0
    steps: list[dict] = []
    t = 0
    while waiting or running:
        # admit: a free row and blocks for the whole request (no preemption)
        reserved = sum(math.ceil((len(requests[r].prompt) + requests[r].max_new_tokens)
                                 / block_size) for r in running)
        while waiting and requests[waiting[0]].arrival <= t and len(running) < max_batch:
            r = waiting[0]
            need = math.ceil((len(requests[r].prompt) + requests[r].max_new_tokens) / block_size)
            if reserved + need > n_blocks:
                if not running:
                    raise ValueError(f"n_blocks must hold request {r}'s {need} blocks; "
                                     f"got {n_blocks}")
                break
            running.append(waiting.pop(0))
            reserved += need
        if not running:
            t += 1
            continue
        rows, counts = [], []
        for r in running:
            P = requests[r].prompt
            if done_prompt[r] < len(P):  # still prefilling: its next chunk
                left = len(P) - done_prompt[r]
                n = left if chunk is None else min(chunk, left)
                rows.append(list(P[done_prompt[r]: done_prompt[r] + n]))
            else:  # decoding: its last token
                rows.append([outputs[r][-1]])
            counts.append(len(rows[-1]))
        N = max(counts)
        ids = torch.tensor([[0] * (N - len(x)) + x for x in rows], device=device)  # left pads
        for cache in caches:
            cache.select(running, counts, check=False)
        mask = batch_mask(caches[0].lengths, counts, N, device=device)
        logits = model(ids, caches=caches, attention_mask=mask)  # (B, N, V)
        passes, tokens, slots = passes + 1, tokens + sum(counts), slots + len(running) * N
        steps.append({"step": t, "running": list(running), "n_new": list(counts),
                      "blocks": {r: list(pool.tables[r]) for r in running}})
        finished = []
        for b, r in enumerate(running):
            if done_prompt[r] < len(requests[r].prompt):
                done_prompt[r] += counts[b]
                if done_prompt[r] < len(requests[r].prompt):
                    continue  # more of the prompt to come: no token yet
            z = logits[b, -1]
            outputs[r].append(int(z.argmax()))
            logits_out[r].append(z.clone())
            if len(outputs[r]) == requests[r].max_new_tokens:
                finished.append(r)
        for r in finished:
            running.remove(r)
            for cache in caches:
                cache.release(r)
        t += 1
    return BatchResult(outputs, [torch.stack(z) for z in logits_out],
                       BatchCounts(passes, tokens, slots), steps)


def static_batching_counts(requests: Sequence[Request], *, max_batch: int = 4,
                           check: bool = True) -> BatchCounts:
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
    if check:
        requests = _check_requests(requests)
        check_positive_int("max_batch", max_batch)
    reqs = [Request(*r) for r in requests]
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
