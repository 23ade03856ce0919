"""attnlib.serving.sampling against Hugging Face's logits processors, and generate's sampling."""

import math

import pytest
import torch

from attnlib.layers import TinyDecoder
from attnlib.models import pretrained, tasks
from attnlib.serving.sampling import (
    min_p_filter,
    sample,
    temperature_scale,
    top_k_filter,
    top_p_filter,
    warp,
)

hf = pytest.importorskip("transformers.generation.logits_process")


def _logits(seed=0, B=4, V=50):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, V, generator=g) * 2
    z[0, :10] = z[0, 0]  # a tie at the top
    z[1, 5:20] = 0.25  # a tie in the middle
    z[2] = torch.round(z[2])  # many ties
    return z


IDS = torch.zeros(4, 1, dtype=torch.long)


@pytest.mark.parametrize("T", [0.3, 1.0, 2.5])
def test_temperature_equals_hf(T):
    z = _logits()
    assert torch.equal(temperature_scale(z, T), hf.TemperatureLogitsWarper(T)(IDS, z))


@pytest.mark.parametrize("k", [1, 3, 10, 11, 50, 80])
@pytest.mark.parametrize("keep", [1, 5])
@pytest.mark.parametrize("fill", [-math.inf, -1e4])
def test_top_k_equals_hf(k, keep, fill):
    for seed in range(3):
        z = _logits(seed)
        ours = top_k_filter(z, k, filter_value=fill, min_tokens_to_keep=keep)
        ref = hf.TopKLogitsWarper(k, filter_value=fill, min_tokens_to_keep=keep)(IDS, z)
        assert torch.equal(ours, ref)


def test_top_k_keeps_ties():
    z = torch.tensor([[1.0, 3.0, 2.0, 3.0, 3.0]])
    assert (top_k_filter(z, 2) > -math.inf).sum() == 3


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 0.999, 1.0])
@pytest.mark.parametrize("keep", [1, 3])
@pytest.mark.parametrize("fill", [-math.inf, -1e4])
def test_top_p_equals_hf(p, keep, fill):
    for seed in range(3):
        z = _logits(seed)
        ours = top_p_filter(z, p, filter_value=fill, min_tokens_to_keep=keep)
        ref = hf.TopPLogitsWarper(p, filter_value=fill, min_tokens_to_keep=keep)(IDS, z)
        assert torch.equal(ours, ref)


def test_top_p_is_the_smallest_nucleus():
    # an explicit loop: take tokens by decreasing probability until the mass exceeds p
    z = _logits(5)[3]
    P = z.softmax(-1).double()
    for p in (0.2, 0.6, 0.95):
        kept = top_p_filter(z, p) > -math.inf
        order = torch.argsort(P, descending=True)
        mass, n = 0.0, 0
        while not mass > p - 1e-6:  # float32 cumsum: compare with a rounding margin
            mass += float(P[order[n]])
            n += 1
        assert int(kept.sum()) == n


@pytest.mark.parametrize("p", [0.0, 0.05, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("keep", [1, 4])
@pytest.mark.parametrize("fill", [-math.inf, -1e4])
def test_min_p_equals_hf(p, keep, fill):
    for seed in range(3):
        z = _logits(seed)
        ours = min_p_filter(z, p, filter_value=fill, min_tokens_to_keep=keep)
        ref = hf.MinPLogitsWarper(p, filter_value=fill, min_tokens_to_keep=keep)(IDS, z)
        assert torch.equal(ours, ref)


@pytest.mark.parametrize("opts", [
    {"temperature": 0.7, "top_k": 8},
    {"temperature": 1.3, "top_p": 0.8},
    {"top_k": 20, "top_p": 0.9, "min_p": 0.05},
    {"temperature": 0.5, "min_p": 0.2},
])
def test_warp_equals_hf_chain(opts):
    z = _logits(7)
    ref = z
    if opts.get("temperature", 1.0) != 1.0:
        ref = hf.TemperatureLogitsWarper(opts["temperature"])(IDS, ref)
    if "top_k" in opts:
        ref = hf.TopKLogitsWarper(opts["top_k"])(IDS, ref)
    if "top_p" in opts:
        ref = hf.TopPLogitsWarper(opts["top_p"])(IDS, ref)
    if "min_p" in opts:
        ref = hf.MinPLogitsWarper(opts["min_p"])(IDS, ref)
    assert torch.equal(warp(z, **opts), ref)


def test_sample_is_reproducible_and_respects_the_filter():
    z = _logits(1)
    a = sample(z, top_k=3, generator=torch.Generator().manual_seed(4))
    b = sample(z, top_k=3, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and a.shape == (4, 1)
    kept = top_k_filter(z, 3) > -math.inf
    draws = sample(z.expand(200, 4, 50), top_k=3, generator=torch.Generator().manual_seed(0))
    assert kept.expand(200, 4, 50).gather(-1, draws).all()


def test_empirical_distribution_matches_the_warped_softmax():
    # n draws from P: the total-variation distance of the empirical distribution obeys
    # E[TV] <= (1/2) sum_i sqrt(P_i (1 - P_i) / n), and TV - E[TV] exceeds t with
    # probability at most exp(-2 n t^2) (McDiarmid: one draw moves TV by at most 1/n).
    # With t = sqrt(log(1/delta) / (2 n)), delta = 1e-6, a correct sampler fails with
    # probability below 1e-6; a seeded generator makes the test deterministic.
    model = pretrained.load("book")
    ids = torch.tensor([tasks.book_tokenizer().encode("The cache ")])
    with torch.no_grad():
        z = model(ids)[0, -1]
    n, delta = 20000, 1e-6
    for opts in ({"temperature": 1.0}, {"temperature": 0.8, "top_k": 10},
                 {"top_p": 0.9}, {"temperature": 1.5, "min_p": 0.1}):
        P = torch.softmax(warp(z, **opts).double(), -1)
        draws = sample(z.expand(n, -1), generator=torch.Generator().manual_seed(0), **opts)
        emp = torch.bincount(draws.flatten(), minlength=z.numel()).double() / n
        tv = 0.5 * float((emp - P).abs().sum())
        bound = 0.5 * float((P * (1 - P) / n).sqrt().sum()) + math.sqrt(
            math.log(1 / delta) / (2 * n))
        assert tv <= bound, (opts, tv, bound)
        assert float(emp[P == 0].sum()) == 0.0  # nothing filtered is ever drawn
    # and the bound is tight enough to catch a wrong sampler: unwarped draws against the
    # top-k distribution
    P = torch.softmax(warp(z, top_k=3).double(), -1)
    draws = sample(z.expand(n, -1), generator=torch.Generator().manual_seed(0))
    emp = torch.bincount(draws.flatten(), minlength=z.numel()).double() / n
    bound = 0.5 * float((P * (1 - P) / n).sqrt().sum()) + math.sqrt(math.log(1 / delta) / (2 * n))
    assert 0.5 * float((emp - P).abs().sum()) > bound


def test_generate_greedy_unchanged_and_sampling_reproducible():
    model = TinyDecoder(vocab_size=30, d_model=16, n_layers=2, n_heads=2, seed=0)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    greedy = model.generate(ids, 6)
    ref, out = ids, ids
    for _ in range(6):  # an explicit greedy loop without caches
        out = torch.cat((out, model(out)[:, -1].argmax(-1, keepdim=True)), -1)
    assert torch.equal(greedy, out)
    assert torch.equal(model.generate(ids, 6, do_sample=False, temperature=0.3), greedy)
    a = model.generate(ids, 8, do_sample=True, temperature=1.5, top_k=10,
                       generator=torch.Generator().manual_seed(1))
    b = model.generate(ids, 8, do_sample=True, temperature=1.5, top_k=10,
                       generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and torch.equal(a[:, :3], ref)
    # the sampled tokens are those of an explicit loop drawing with the same generator
    g, out = torch.Generator().manual_seed(1), ids
    for _ in range(8):
        out = torch.cat((out, sample(model(out)[:, -1], temperature=1.5, top_k=10,
                                     generator=g)), -1)
    assert torch.equal(a, out)
    # top_k=1 is greedy
    assert torch.equal(model.generate(ids, 6, do_sample=True, top_k=1), greedy)


@pytest.mark.parametrize("kw, err, words", [
    ({"temperature": 0.0}, ValueError, "temperature must be a finite number > 0"),
    ({"temperature": "1"}, TypeError, "temperature must be a positive number"),
    ({"top_k": 0}, ValueError, "top_k must be a positive int"),
    ({"top_p": 0.0}, ValueError, "top_p must lie in (0, 1]; got 0.0"),
    ({"min_p": 1.5}, ValueError, "min_p must lie in [0, 1]; got 1.5"),
    ({"generator": 3}, TypeError, "generator must be a torch.Generator"),
])
def test_errors_name_the_argument(kw, err, words):
    with pytest.raises(err, match=None) as info:
        sample(torch.zeros(1, 5), **kw)
    assert words in str(info.value)
    model = TinyDecoder(vocab_size=10, d_model=8, n_layers=1, n_heads=2, seed=0)
    with pytest.raises(err) as info:
        model.generate(torch.tensor([[1]]), 2, do_sample=True, **kw)
    assert words in str(info.value)
    with pytest.raises(TypeError, match="do_sample must be a bool"):
        model.generate(torch.tensor([[1]]), 2, do_sample=1)


def test_logits_must_be_a_tensor():
    with pytest.raises(TypeError, match="logits"):
        sample([1.0, 2.0])
