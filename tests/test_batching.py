"""attnlib.serving.batching: each request as it runs alone; the counts against explicit sums."""

import pytest
import torch

from attnlib.layers import TinyDecoder
from attnlib.models import pretrained, tasks
from attnlib.serving.batching import Request, continuous_batching, static_batching_counts


def _requests(n=6, seed=0):
    tok, text = tasks.book_tokenizer(), tasks.book_text()
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        P = int(torch.randint(2, 20, (1,), generator=g))
        T = int(torch.randint(1, 12, (1,), generator=g))
        out.append(Request(tok.encode(text[400 + 173 * i: 400 + 173 * i + P]), T, 2 * i))
    return out


@pytest.mark.parametrize("chunk, max_batch, block_size", [(None, 3, 8), (5, 4, 4)])
def test_each_request_generates_what_it_generates_alone(chunk, max_batch, block_size):
    model = pretrained.load("book")
    reqs = _requests()
    res = continuous_batching(model, reqs, max_batch=max_batch, n_blocks=64,
                              block_size=block_size, chunk=chunk)
    # requests joined a running batch, and prefill shared a pass with decoding
    assert any(len(s["running"]) > 1 for s in res.steps)
    assert any(max(s["n_new"]) > 1 and min(s["n_new"]) == 1 for s in res.steps)
    assert max(len(s["running"]) for s in res.steps) <= max_batch
    with torch.no_grad():
        for r, out, z in zip(reqs, res.outputs, res.logits, strict=True):
            alone = model.generate(torch.tensor([list(r.prompt)]), r.max_new_tokens)
            assert out == alone[0, len(r.prompt):].tolist()
            # the logits too, to float32 rounding over padded widths
            want = model(alone)[0, len(r.prompt) - 1: -1]
            torch.testing.assert_close(z, want, atol=1e-4, rtol=1e-5)


def test_counts_against_explicit_sums():
    model = TinyDecoder(vocab_size=30, d_model=16, n_layers=1, n_heads=2, seed=0)
    reqs = [Request([1] * P, T, a) for P, T, a in ((4, 6, 0), (2, 1, 0), (7, 3, 1),
                                                   (1, 9, 1), (3, 2, 5))]
    res = continuous_batching(model, reqs, max_batch=2, n_blocks=32, block_size=4)
    total = sum(len(r.prompt) + r.max_new_tokens - 1 for r in reqs)
    assert res.counts.tokens == total == sum(sum(s["n_new"]) for s in res.steps)
    assert res.counts.forward_passes == len(res.steps)
    assert res.counts.slots == sum(len(s["running"]) * max(s["n_new"]) for s in res.steps)
    assert [len(o) for o in res.outputs] == [r.max_new_tokens for r in reqs]
    static = static_batching_counts(reqs, max_batch=2)
    # groups (0, 1), (2, 3), (4): passes max T = 6 + 9 + 2; slots b (max P + max T - 1)
    assert static == (6 + 9 + 2, total, 2 * (4 + 6 - 1) + 2 * (7 + 9 - 1) + 1 * (3 + 2 - 1))
    assert res.counts.tokens_per_pass > static.tokens_per_pass


def test_blocks_return_to_the_pool():
    model = TinyDecoder(vocab_size=30, d_model=16, n_layers=1, n_heads=2, seed=0)
    reqs = [Request([1, 2, 3, 4, 5], 4, 0), Request([6, 7], 3, 0), Request([8], 2, 2)]
    # the pool holds two requests' blocks at once: the third waits for a release
    res = continuous_batching(model, reqs, max_batch=3, n_blocks=5, block_size=4)
    first = next(s for s in res.steps if 2 in s["running"])
    assert 1 not in first["running"] or 0 not in first["running"]
    assert all(len(o) == r.max_new_tokens for o, r in zip(res.outputs, reqs, strict=True))


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
