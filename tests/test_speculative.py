"""attnlib.serving.speculative: greedy speculation is the target's greedy output; the sampling rule
draws from the target's distribution (a seeded statistical test with a derived bound)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnlib.layers import TinyDecoder
from attnlib.models import pretrained, tasks
from attnlib.serving.speculative import RollbackKVCache, accept_reject, speculative_generate


@pytest.fixture(scope="module")
def book_pair():
    return (pretrained.load("book", dtype=torch.float64),
            pretrained.load("book-draft", dtype=torch.float64))


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_is_the_targets_greedy_output(book_pair, k):
    target, draft = book_pair
    chars = tasks.book_tokenizer()
    for text in ("The cache holds", "A"):
        prompt = torch.tensor([chars.encode(text)])
        res = speculative_generate(target, draft, prompt, 40, k=k)
        assert torch.equal(res.ids, target.generate(prompt, 40))
        assert res.n_new == 40 and res.proposed >= res.accepted
        # every round emits its kept proposals and one token of the target's
        assert res.accepted + res.target_passes == 40


def test_a_draft_equal_to_the_target_keeps_every_proposal(book_pair):
    target, _ = book_pair
    prompt = torch.tensor([tasks.book_tokenizer().encode("The cache")])
    res = speculative_generate(target, target, prompt, 30, k=4)
    assert res.acceptance_rate == 1.0 and res.target_passes == math.ceil(30 / 5)


def test_random_models_greedy_and_a_one_token_prompt():
    target = TinyDecoder(vocab_size=9, d_model=16, n_layers=2, n_heads=2, seed=0,
                         dtype=torch.float64)
    draft = TinyDecoder(vocab_size=9, d_model=8, n_layers=1, n_heads=1, seed=3,
                        dtype=torch.float64)
    for prompt in (torch.tensor([[4]]), torch.tensor([2, 5, 1, 1])):
        for k in (1, 2, 5):
            res = speculative_generate(target, draft, prompt, 17, k=k)
            assert torch.equal(res.ids, target.generate(prompt.reshape(1, -1), 17).reshape(
                (*prompt.shape[:-1], -1)))


def _l1_bound(m: int, n: int, delta: float) -> float:
    """P(||p_hat - p||_1 >= lam) <= 2^m exp(-n lam^2 / 2) (Weissman et al. 2003) = delta."""
    return math.sqrt(2 * (m * math.log(2) + math.log(1 / delta)) / n)


def test_accept_reject_gives_the_target_distribution():
    g = torch.Generator().manual_seed(0)
    V, n = 6, 200_000
    p = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, -1)
    x = torch.multinomial(q, n, replacement=True, generator=g)
    tok, ok = accept_reject(p.expand(n, V), q.expand(n, V), x, generator=g)
    tv = 0.5 * float((torch.bincount(tok, minlength=V) / n - p).abs().sum())
    tol = _l1_bound(V, n, 1e-9) / 2
    assert tv < tol
    assert 0.5 * float((q - p).abs().sum()) > 4 * tol  # the draft alone would fail
    accept = 1 - 0.5 * float((p - q).abs().sum())  # P(keep) = sum min(p, q) = 1 - TV
    assert abs(float(ok.double().mean()) - accept) < 6 * math.sqrt(accept * (1 - accept) / n)


def _sequence_probs(model, prompt, n_new, temperature):
    """Exact probability of every continuation of n_new tokens (float64)."""
    V = model.E.shape[0]
    out = {}
    for seq in itertools.product(range(V), repeat=n_new):
        ids = torch.tensor([prompt + list(seq)])
        with torch.no_grad():
            P = torch.softmax(model(ids)[0].double() / temperature, -1)
        steps = range(len(prompt) - 1, len(prompt) - 1 + n_new)
        out[seq] = math.prod(float(P[t, s]) for t, s in zip(steps, seq, strict=True))
    return out


@pytest.mark.slow
def test_sampled_sequences_follow_the_target():
    """Many seeded draws of two tokens: the empirical distribution of the 9 sequences is
    within the bound's tolerance of the target's exact one, and far from the draft's."""
    target = TinyDecoder(vocab_size=3, d_model=8, n_layers=2, n_heads=2, seed=0,
                         dtype=torch.float64)
    draft = TinyDecoder(vocab_size=3, d_model=8, n_layers=1, n_heads=1, seed=5,
                        dtype=torch.float64)
    # temperature 0.1 sharpens both random models, so that they disagree clearly
    prompt, n_new, T, n = [1, 2], 2, 0.1, 2000
    exact = _sequence_probs(target, prompt, n_new, T)
    drafts = _sequence_probs(draft, prompt, n_new, T)
    g = torch.Generator().manual_seed(0)
    counts = dict.fromkeys(exact, 0)
    for _ in range(n):
        res = speculative_generate(target, draft, torch.tensor([prompt]), n_new, k=2,
                                   do_sample=True, temperature=T, generator=g)
        counts[tuple(res.ids[0, len(prompt):].tolist())] += 1
    tv = 0.5 * sum(abs(counts[s] / n - exact[s]) for s in exact)
    tol = _l1_bound(len(exact), n, 1e-6) / 2
    assert tv < tol, (tv, tol)
    assert 0.5 * sum(abs(drafts[s] - exact[s]) for s in exact) > 2 * tol


def test_rollback_cache_and_errors():
    cache = RollbackKVCache()
    cache.append(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))
    with pytest.raises(ValueError, match=r"n must lie in \[0, 4\]"):
        cache.crop(5)
    target = TinyDecoder(vocab_size=9, d_model=16, n_layers=1, n_heads=2, seed=0)
    other = TinyDecoder(vocab_size=8, d_model=16, n_layers=1, n_heads=2, seed=0)
    with pytest.raises(ValueError, match="share the target's vocabulary"):
        speculative_generate(target, other, torch.tensor([[1]]), 3)
    with pytest.raises(ValueError, match="one prompt"):
        speculative_generate(target, target, torch.tensor([[1], [2]]), 3)
    with pytest.raises(ValueError, match="k must"):
        speculative_generate(target, target, torch.tensor([[1]]), 3, k=0)
