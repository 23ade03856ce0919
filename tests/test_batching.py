"""attnlib.serving.batching: each request as it runs alone; the counts against explicit sums;
preemption, reservation and shared prefixes against what they must keep."""

import pytest
import torch

from attnlib.layers import TinyDecoder
from attnlib.models import pretrained, tasks
from attnlib.serving.batching import (
    Engine,
    Request,
    continuous_batching,
    static_batching_counts,
)


@pytest.fixture(scope="module")
def book():
    return pretrained.load("book")


def _requests(n=6, seed=0):
    tok, text = tasks.book_tokenizer(), tasks.book_text()
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        P = int(torch.randint(2, 20, (1,), generator=g))
        T = int(torch.randint(1, 12, (1,), generator=g))
        out.append(Request(tok.encode(text[400 + 173 * i: 400 + 173 * i + P]), T, 2 * i))
    return out


def _alone(model, requests, res):
    """Each request's tokens and logits equal what it generates alone."""
    with torch.no_grad():
        for r, out, z in zip(requests, res.outputs, res.logits, strict=True):
            alone = model.generate(torch.tensor([list(r.prompt)]), r.max_new_tokens)
            assert out == alone[0, len(r.prompt):].tolist()
            want = model(alone)[0, len(r.prompt) - 1: -1]  # to float32 rounding
            torch.testing.assert_close(z, want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("chunk, max_batch, block_size", [(None, 3, 8), (5, 4, 4)])
def test_each_request_generates_what_it_generates_alone(book, chunk, max_batch, block_size):
    reqs = _requests()
    res = continuous_batching(book, reqs, max_batch=max_batch, n_blocks=64,
                              block_size=block_size, chunk=chunk)
    # requests joined a running batch, and prefill shared a pass with decoding
    assert any(len(s["running"]) > 1 for s in res.steps)
    assert any(max(s["n_new"]) > 1 and min(s["n_new"]) == 1 for s in res.steps)
    assert res.peak_running <= max_batch and res.preemptions == 0
    _alone(book, reqs, res)


def test_counts_against_explicit_sums():
    model = TinyDecoder(vocab_size=30, d_model=16, n_layers=1, n_heads=2, seed=0)
    # each prompt its own token: no request shares a block of another's
    reqs = [Request([r + 1] * P, T, a) for r, (P, T, a) in enumerate(
        ((4, 6, 0), (2, 1, 0), (7, 3, 1), (1, 9, 1), (3, 2, 5)))]
    res = continuous_batching(model, reqs, max_batch=2, n_blocks=32, block_size=4)
    total = sum(len(r.prompt) + r.max_new_tokens - 1 for r in reqs)
    assert res.counts.tokens == total == sum(sum(s["n_new"]) for s in res.steps)
    assert res.counts.slots == total  # one packed row: no pads
    assert res.counts.forward_passes == len(res.steps)
    assert [len(o) for o in res.outputs] == [r.max_new_tokens for r in reqs]
    static = static_batching_counts(reqs, max_batch=2)
    # groups (0, 1), (2, 3), (4): passes max T = 6 + 9 + 2; slots b (max P + max T - 1)
    assert static == (6 + 9 + 2, total, 2 * (4 + 6 - 1) + 2 * (7 + 9 - 1) + 1 * (3 + 2 - 1))
    assert res.counts.tokens_per_pass > static.tokens_per_pass


def test_blocks_are_taken_as_sequences_grow_and_return_to_the_pool():
    model = TinyDecoder(vocab_size=30, d_model=16, n_layers=1, n_heads=2, seed=0)
    engine = Engine(model, n_blocks=8, block_size=4, max_batch=2)
    a = engine.add_request(Request([1, 2, 3, 4, 5], 8), "a")
    log = engine.step()  # admitted with the blocks of its five prompt tokens
    assert log["running"] == ["a"] and log["blocks"] == {"a": [0, 1]}
    held = []
    while not engine.scheduler.is_finished():
        engine.step()
        held.append(len(a.block_table))
    # tokens 5 .. 11 are written one a step (the last token is never fed): a block at 8
    assert held == [2, 2, 2, 3, 3, 3, 0] and engine.cache.manager.n_used == 0


def test_preemption_recomputes_and_changes_no_output(book):
    """A pool too small for the batch: the newest sequence gives its blocks back and is
    prefilled again later, prompt and generated tokens together."""
    reqs = [Request(r.prompt, r.max_new_tokens + 10, 0) for r in _requests(seed=1)]
    res = continuous_batching(book, reqs, max_batch=4, n_blocks=10, block_size=4)
    assert res.preemptions > 0
    first = next(s for s in res.steps if s["preempted"])
    victim = first["preempted"][0]
    assert victim not in first["running"] and victim in first["waiting"]
    # the victim comes back first in line, rereading more tokens than its prompt
    back = next(s for s in res.steps[res.steps.index(first) + 1:] if victim in s["running"])
    assert back["n_new"][back["running"].index(victim)] > len(reqs[victim].prompt)
    total = sum(len(r.prompt) + r.max_new_tokens - 1 for r in reqs)
    assert res.counts.tokens > total  # the recomputation is counted
    assert all(len({b for t in s["blocks"].values() for b in t}) <= 10 for s in res.steps)
    _alone(book, reqs, res)


def test_on_demand_blocks_serve_more_requests_at_once_than_reservation(book):
    reqs = [Request(r.prompt, r.max_new_tokens + 8, 0) for r in _requests(seed=2)]
    kw = {"max_batch": 6, "n_blocks": 12, "block_size": 4}
    on_demand = continuous_batching(book, reqs, **kw)
    reserved = continuous_batching(book, reqs, reserve=True, **kw)
    assert reserved.preemptions == 0
    # reserved: each request takes ceil((P + T - 1) / s) blocks at admission
    need = [-(-(len(r.prompt) + r.max_new_tokens - 1) // 4) for r in reqs]
    first = reserved.steps[0]["running"]
    assert sum(need[r] for r in first) <= 12 < sum(need[r] for r in range(len(first) + 1))
    assert on_demand.peak_running > reserved.peak_running
    assert on_demand.mean_running > reserved.mean_running
    assert on_demand.counts.forward_passes < reserved.counts.forward_passes
    assert on_demand.outputs == reserved.outputs
    _alone(book, reqs, on_demand)


def test_a_shared_prefix_is_computed_once(book):
    """Two requests with the same 16-character opening, the second arriving after the
    first's prefill: it shares the first's two full blocks and reads only the rest."""
    tok, text = tasks.book_tokenizer(), tasks.book_text()
    opening = tok.encode(text[2000:2016])
    reqs = [Request(opening + tok.encode(" keys"), 6, 0),
            Request(opening + tok.encode(" values"), 6, 2)]
    res = continuous_batching(book, reqs, max_batch=2, n_blocks=16, block_size=8)
    joined = next(s for s in res.steps if 1 in s["running"])
    tables = joined["blocks"]
    assert tables[1][:2] == tables[0][:2]  # the same two blocks, held twice
    assert joined["n_new"][joined["running"].index(1)] == len(reqs[1].prompt) - 16
    total = sum(len(r.prompt) + r.max_new_tokens - 1 for r in reqs)
    assert res.counts.tokens == total - 16
    _alone(book, reqs, res)


def test_batching_errors():
    model = TinyDecoder(vocab_size=30, d_model=16, n_layers=1, n_heads=2, seed=0)
    with pytest.raises(ValueError, match=r"requests\[0\].prompt must hold at least one token"):
        continuous_batching(model, [Request([], 2)])
    with pytest.raises(ValueError, match=r"requests\[0\].max_new_tokens must be a positive int"):
        continuous_batching(model, [Request([1], 0)])
    with pytest.raises(ValueError, match="n_blocks must hold request 0's 3 blocks; got 2"):
        continuous_batching(model, [Request([1] * 9, 3)], n_blocks=2, block_size=4)
    with pytest.raises(TypeError, match="chunk must be a positive int"):
        continuous_batching(model, [Request([1], 1)], chunk=1.5)
    with pytest.raises(TypeError, match="reserve must be a bool"):
        continuous_batching(model, [Request([1], 1)], reserve="yes")
