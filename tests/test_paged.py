"""attnlib.serving.paged against a contiguous cache, an explicit slot map and closed forms."""

import math

import pytest
import torch

from attnlib.layers import TinyDecoder
from attnlib.models import pretrained, tasks
from attnlib.serving.cache import KVCache
from attnlib.serving.paged import BlockAllocator, PagedKVCache, batch_mask, paging_memory


@pytest.fixture(scope="module")
def book():
    return pretrained.load("book")


def _prompts(B, N):
    text = tasks.book_text()
    tok = tasks.book_tokenizer()
    return torch.tensor([tok.encode(text[1000 + 97 * b: 1000 + 97 * b + N]) for b in range(B)])


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_decoding_through_blocks_gives_the_contiguous_logits_bit_for_bit(book, block_size):
    ids = _prompts(3, 24)
    contiguous = [KVCache() for _ in book.blocks]
    paged = [PagedKVCache(n_blocks=128, block_size=block_size) for _ in book.blocks]
    with torch.no_grad():
        for a, b in ((0, 9), (9, 10), *((t, t + 1) for t in range(10, 24))):
            want = book(ids[:, a:b], caches=contiguous)
            got = book(ids[:, a:b], caches=paged)
            assert torch.equal(got, want)
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    for c, p in zip(contiguous, paged, strict=True):  # the gather holds the same rows
        assert torch.equal(p.K, c.K) and torch.equal(p.V, c.V)
        assert p.n_tokens == c.n_tokens == 24


def test_generate_with_paged_caches(book):
    ids = _prompts(2, 12)
    with torch.no_grad():
        want = book.generate(ids, 16)
        got = book.generate(ids, 16, caches=[PagedKVCache(32, 4) for _ in book.blocks])
    assert torch.equal(got, want)


def test_blocks_follow_the_table_and_the_free_list():
    cache = PagedKVCache(n_blocks=6, block_size=2)
    g = torch.Generator().manual_seed(0)
    K = torch.randn(2, 1, 3, 4, generator=g)
    cache.append(K, K + 1)
    assert cache.allocator.tables == {0: [0, 1], 1: [2, 3]}
    # token t of sequence b sits at table_b[t // s], offset t % s
    for b in range(2):
        for t in range(3):
            blk = cache.allocator.tables[b][t // 2]
            assert torch.equal(cache._held["K"][:, blk, t % 2], K[b, :, t])
    assert cache.allocator.n_free == 2 and cache.nbytes == 2 * 4 * (1 * 2 * 4) * 4
    cache.release(0)
    assert cache.allocator.free == [4, 5, 0, 1]
    cache.select([1, "new"], [1, 2])
    cache.append(torch.ones(2, 1, 2, 4), torch.ones(2, 1, 2, 4))
    assert cache.allocator.tables == {1: [2, 3], "new": [4]}
    assert cache.lengths == [4, 2]


def test_ragged_rows_return_held_then_new_with_zeros_where_masked():
    cache = PagedKVCache(n_blocks=8, block_size=2)
    ref = {0: KVCache(), 1: KVCache()}
    g = torch.Generator().manual_seed(1)
    for seqs, n_new, N in (([0], [3], 3), ([0, 1], [1, 2], 2), ([1, 0], [2, 1], 2)):
        K = torch.randn(len(seqs), 1, N, 4, generator=g)
        old = cache.lengths if cache._seqs == seqs else None
        cache.select(seqs, n_new)
        lengths = cache.lengths
        K_all, _ = cache.append(K, K)
        mask = batch_mask(lengths, n_new, N)
        assert K_all.shape[-2] == mask.shape[-1] == max(lengths) + N
        assert (K_all[:, 0][~mask] == 0).all()
        for b, (seq, c) in enumerate(zip(seqs, n_new, strict=True)):
            want, _ = ref[seq].append(K[b:b + 1, :, N - c:], K[b:b + 1, :, N - c:])
            assert torch.equal(K_all[b, :, mask[b]], want[0])
        del old


def test_paged_errors_name_the_rule():
    cache = PagedKVCache(n_blocks=2, block_size=2)
    with pytest.raises(ValueError, match="must have 3 free blocks"):
        cache.append(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))
    with pytest.raises(ValueError, match=r"must have shape \(B, G, N_new, d\)"):
        cache.append(torch.zeros(1, 5, 2), torch.zeros(1, 5, 2))
    with pytest.raises(ValueError, match="seqs must name each sequence once"):
        cache.select([0, 0])
    with pytest.raises(ValueError, match="n_new must have one count per sequence"):
        cache.select([0, 1], [1])
    with pytest.raises(TypeError, match="block_size must be a positive int"):
        PagedKVCache(4, 2.0)
    model = TinyDecoder(vocab_size=10, d_model=8, n_layers=1, n_heads=2, seed=0)
    with pytest.raises(ValueError, match="free blocks"):
        model.generate(torch.tensor([[1, 2, 3]]), 5, caches=[PagedKVCache(1, 4)])


def test_allocator_reuses_freed_blocks():
    pool = BlockAllocator(3, 4)
    pool.add("a")
    pool.reserve("a", 9)
    assert pool.tables["a"] == [0, 1, 2] and pool.n_free == 0
    with pytest.raises(ValueError, match="must have 1 free blocks"):
        pool.add("b")
        pool.reserve("b", 1)
    pool.release("a")
    pool.reserve("b", 1)
    assert pool.tables["b"] == [0]


@pytest.mark.parametrize("s, m", [(1, 7), (4, 5), (16, 8)])
def test_paging_memory_closed_form(s, m):
    # lengths 1 .. M with M = m s: contiguous M^2, used M (M + 1) / 2, and
    # sum_n ceil(n / s) = s (1 + ... + m), so paged = s^2 m (m + 1) / 2
    M = m * s
    got = paging_memory(range(1, M + 1), max_tokens=M, block_size=s, bytes_per_token=3)
    assert got.contiguous == 3 * M * M
    assert got.used == 3 * M * (M + 1) // 2
    assert got.paged == 3 * s * s * m * (m + 1) // 2
    # each request wastes fewer than s slots in blocks
    assert got.paged - got.used < 3 * s * M
    assert math.isclose(got.saving, 1 - s * s * m * (m + 1) / 2 / (M * M))


def test_paging_memory_checks():
    with pytest.raises(ValueError, match="lengths must be at most max_tokens=4; got 5"):
        paging_memory([5], max_tokens=4, block_size=2)
