"""attnlib.serving.paged against a contiguous cache, SDPA, an explicit slot map and closed forms.

The Triton decoding kernel runs compiled on a CUDA device and, without one, in Triton's
interpreter, which Triton reads when a kernel is defined: this file sets
``TRITON_INTERPRET=1`` before it imports the kernel (attnlib never sets it).
"""

import math
import os
from collections import deque
from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attnlib.layers import TinyDecoder
from attnlib.models import pretrained, tasks
from attnlib.serving.cache import KVCache
from attnlib.serving.paged import (
    BlockManager,
    PagedKVCache,
    Sequence,
    paged_attention,
    paging_memory,
)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton_kernel = pytest.importorskip("attnlib.kernels.paged_decode")


@pytest.fixture(scope="module")
def book():
    return pretrained.load("book")


def _prompts(B, N):
    text = tasks.book_text()
    tok = tasks.book_tokenizer()
    return torch.tensor([tok.encode(text[1000 + 97 * b: 1000 + 97 * b + N]) for b in range(B)])


def _scatter(cache: PagedKVCache, seed: int = 0) -> None:
    """Hand out the pool's blocks in a random order in which no block comes right after the
    one before it: every block a sequence takes starts a run of its own."""
    gen = torch.Generator().manual_seed(seed)
    order = [0, 1]
    while any(b + 1 == c for b, c in pairwise(order)):  # draw again
        order = torch.randperm(cache.manager.n_blocks, generator=gen).tolist()
    cache.manager.free = deque(order)


# --- the model through the pool ---------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_decoding_through_blocks_gives_the_contiguous_logits(book, block_size):
    ids = _prompts(3, 24)
    contiguous = [KVCache() for _ in book.blocks]
    paged = PagedKVCache(len(book.blocks), n_blocks=128, block_size=block_size)
    with torch.no_grad():
        for a, b in ((0, 9), (9, 10), *((t, t + 1) for t in range(10, 24))):
            want = book(ids[:, a:b], caches=contiguous)
            got = book(ids[:, a:b], caches=paged.layers)
            torch.testing.assert_close(got, want, atol=2e-5, rtol=0)
            assert torch.equal(got.argmax(-1), want.argmax(-1))
    for row in range(3):  # the table holds the same rows, in the sequence's order
        K, V = paged.held(row, layer=0)
        torch.testing.assert_close(K, contiguous[0].K[row], atol=1e-6, rtol=0)
        torch.testing.assert_close(V, contiguous[0].V[row], atol=1e-6, rtol=0)
    assert paged.n_tokens == contiguous[0].n_tokens == 24


def test_one_run_is_read_in_place_bit_for_bit(book):
    """A lone sequence in a fresh pool takes consecutive blocks: its table is one run, read
    as one view by the same fused kernel the contiguous cache's view meets."""
    ids = _prompts(1, 40)
    paged = PagedKVCache(len(book.blocks), n_blocks=8, block_size=8)
    contiguous = book.new_caches(40)
    with torch.no_grad():
        for a, b in ((0, 20), *((t, t + 1) for t in range(20, 40))):
            assert torch.equal(book(ids[:, a:b], caches=paged.layers),
                               book(ids[:, a:b], caches=contiguous))
    assert paged.sequences[0].block_table == [0, 1, 2, 3, 4]
    assert paged.sequences[0].runs == [[0, 40]]


def test_generate_with_a_paged_cache(book):
    ids = _prompts(2, 12)
    cache = PagedKVCache(len(book.blocks), 32, 4)
    _scatter(cache)
    with torch.no_grad():
        assert torch.equal(book.generate(ids, 16, caches=cache.layers), book.generate(ids, 16))
    # 12 + 16 tokens, the last never written: 27 tokens, 7 blocks of 4 per sequence
    assert [len(cache.sequences[b].block_table) for b in (0, 1)] == [7, 7]
    G, d = book.blocks[0].attn.n_kv_heads, book.blocks[0].attn.d_head
    assert cache.manager.n_used == 14  # keys and values, 4 layers, float32:
    assert cache.nbytes == 14 * 2 * len(book.blocks) * G * 4 * d * 4


def test_blocks_are_taken_one_at_a_time_as_sequences_grow():
    cache = PagedKVCache(n_layers=1, n_blocks=6, block_size=2)
    g = torch.Generator().manual_seed(0)
    K = torch.randn(2, 1, 3, 4, generator=g)
    cache.layers[0].append(K, K + 1)
    tables = [cache.sequences[b].block_table for b in (0, 1)]
    assert tables == [[0, 1], [2, 3]] and cache.manager.n_free == 2
    pool = cache.pool[0, 0]  # layer 0's keys, (G, n_blocks, s, d)
    for b in range(2):  # token t of sequence b sits at table_b[t // s], offset t % s
        for t in range(3):
            assert torch.equal(pool[:, tables[b][t // 2], t % 2], K[b, :, t])
    cache.layers[0].append(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))  # token 3: no block
    assert cache.manager.n_free == 2
    cache.layers[0].append(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))  # token 4: one each
    assert [cache.sequences[b].block_table for b in (0, 1)] == [[0, 1, 4], [2, 3, 5]]
    with pytest.raises(ValueError, match="must have 2 free blocks for this pass; it has 0 of 6"):
        for _ in range(2):
            cache.layers[0].append(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))
    cache.release(0)
    assert list(cache.manager.free) == [4, 1, 0]  # the last block first


class _Allocations(TorchDispatchMode):
    """The largest tensor, and the bytes of all tensors, that operations create."""

    def __init__(self):
        super().__init__()
        self.bytes = self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {a.untyped_storage().data_ptr() for a in [*args, *kwargs.values()]
                  if isinstance(a, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.bytes += t.untyped_storage().nbytes()
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def _step_allocations(model, held, scattered):
    ids = _prompts(1, held + 1)
    cache = PagedKVCache(len(model.blocks), n_blocks=64, block_size=4)
    if scattered:
        _scatter(cache)
    with torch.no_grad():
        model(ids[:, :held - 1], caches=cache.layers)
        model(ids[:, held - 1:held], caches=cache.layers)
        with _Allocations() as counted:
            model(ids[:, held:held + 1], caches=cache.layers)
    return counted


def test_a_decoding_step_makes_no_copy_of_the_cache(book):
    """A dense gather of one layer's keys would allocate G L d numbers, 12 KiB at 48 tokens."""
    G, d = book.blocks[0].attn.n_kv_heads, book.blocks[0].attn.d_head
    one_run = [_step_allocations(book, held, False) for held in (48, 96)]
    assert one_run[0].bytes == one_run[1].bytes  # nothing grows with the tokens held
    scattered = [_step_allocations(book, held, True) for held in (48, 96)]
    assert scattered[0].largest == scattered[1].largest < G * 48 * d * 4
    assert scattered[1].bytes > scattered[0].bytes  # one run's temporaries after another


# --- paged attention against SDPA ---------------------------------------------------------


def _reference(q, K, V, causal=True, mask=None):
    """SDPA over one sequence's dense keys: q (H, n, d), K and V (G, L, d)."""
    n, L = q.shape[1], K.shape[1]
    allowed = torch.ones(n, L, dtype=torch.bool).tril(L - n) if causal else torch.ones(n, L,
                                                                                        dtype=bool)
    if mask is not None:
        allowed = allowed & mask
    has_key = allowed.any(-1, keepdim=True)
    y = F.scaled_dot_product_attention(q[None], K[None], V[None], attn_mask=allowed | ~has_key,
                                       enable_gqa=True)[0]
    return y.masked_fill(~has_key, 0.0)


@pytest.mark.parametrize("kernel", ["torch", "triton"])
def test_packed_passes_against_sdpa(kernel):
    """Three sequences in scattered blocks, prefilled in chunks beside decoding steps, with
    GQA; every query against SDPA over its sequence's keys laid out contiguously."""
    H, G, d = 4, 2, 8
    cache = PagedKVCache(n_layers=1, n_blocks=24, block_size=4, kernel=kernel)
    _scatter(cache, seed=1)
    seqs = [Sequence(name) for name in "abc"]
    dense = {seq.seq_id: (torch.zeros(G, 0, d), torch.zeros(G, 0, d)) for seq in seqs}
    a, b, c = seqs
    g = torch.Generator().manual_seed(0)
    passes = [[(a, 5), (b, 3)], [(a, 1), (b, 6), (c, 7)], [(a, 1), (b, 1), (c, 1)],
              [(c, 1), (a, 1)]]
    for batch in passes:
        for seq, n in batch:
            if not seq.block_table:
                cache.manager.allocate(seq, n)
        T = sum(n for _, n in batch)
        Q, K, V = (torch.randn(1, h, T, d, generator=g) for h in (H, G, G))
        cache.schedule(batch)
        Y = paged_attention(Q, *cache.layers[0].append(K, V), causal=True)
        start = 0
        for seq, n in batch:
            K_all, V_all = (torch.cat((old, new[0, :, start:start + n]), dim=1)
                            for old, new in zip(dense[seq.seq_id], (K, V), strict=True))
            dense[seq.seq_id] = K_all, V_all
            want = _reference(Q[0, :, start:start + n], K_all, V_all)
            torch.testing.assert_close(Y[0, :, start:start + n], want, atol=1e-5, rtol=1e-5)
            start += n
    assert all(len(seq.runs) == len(seq.block_table) > 1 for seq in seqs)  # scattered


def test_masked_rows_and_rows_that_see_no_key_give_zeros():
    H = G = 2
    d = 4
    cache = PagedKVCache(n_layers=1, n_blocks=8, block_size=2)
    _scatter(cache)
    g = torch.Generator().manual_seed(3)
    K, V, Q = (torch.randn(2, h, 5, d, generator=g) for h in (G, G, H))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[0, :, :, :2] = False  # row 0: the first two keys are pads
    mask[1, :, 3] = False  # row 1, query 3: no key at all
    Y = paged_attention(Q, *cache.layers[0].append(K, V), mask=mask, causal=True)
    for row in range(2):
        want = _reference(Q[row], K[row], V[row], mask=mask[row, 0])
        torch.testing.assert_close(Y[row], want, atol=1e-6, rtol=1e-6)
    assert torch.equal(Y[1, :, 3], torch.zeros(H, d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_decode_kernel_against_sdpa_and_the_contiguous_cache(dtype):
    """The kernel alone: scattered tables, GQA, a block size that is no power of two, a
    sequence with no token (zeros), against SDPA over each sequence's keys laid end to end;
    then against the keys a contiguous cache holds for the same tokens."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(0)
    G, H, n_blocks, s, d = 2, 6, 12, 3, 16
    K = torch.randn(G, n_blocks, s, d, generator=g).to(device, dtype)
    V = torch.randn(G, n_blocks, s, d, generator=g).to(device, dtype)
    tables = torch.tensor([[7, 2, 9, 4], [11, 0, 0, 0], [3, 0, 0, 0], [5, 8, 1, 6]],
                          dtype=torch.int32, device=device)
    lengths = torch.tensor([10, 2, 0, 12], dtype=torch.int32, device=device)
    q = torch.randn(4, H, d, generator=g).to(device, dtype)
    out = triton_kernel.paged_decode(q, K, V, tables, lengths)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-3, "rtol": 2e-3}
    for i in range(4):
        L = int(lengths[i])
        if L == 0:
            assert torch.equal(out[i], torch.zeros_like(out[i]))
            continue
        blocks = tables[i].long()[: math.ceil(L / s)]
        K_i = K[:, blocks].reshape(G, -1, d)[:, :L].float()
        V_i = V[:, blocks].reshape(G, -1, d)[:, :L].float()
        want = F.scaled_dot_product_attention(q[i].float()[:, None], K_i, V_i,
                                              enable_gqa=True)[:, 0]
        torch.testing.assert_close(out[i].float(), want, **tol)
    # a layer decoding through the kernel gives the contiguous cache's outputs
    from attnlib.layers.gqa import GroupedQueryAttention

    layer = GroupedQueryAttention(32, 4, 2, 8, rope_base=10000.0).to(device)
    X = torch.randn(2, 12, 32, generator=g).to(device)
    paged = PagedKVCache(n_layers=1, n_blocks=16, block_size=3, kernel="triton")
    _scatter(paged)
    contiguous = KVCache()
    with torch.no_grad():
        for a, b in ((0, 7), *((t, t + 1) for t in range(7, 12))):
            want = layer(X[:, a:b], causal=True, cache=contiguous)
            got = layer(X[:, a:b], causal=True, cache=paged.layers[0])
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# --- the block manager ----------------------------------------------------------------------


def test_prefix_blocks_are_shared_by_a_chained_hash_with_reference_counts():
    m = BlockManager(n_blocks=8, block_size=2)
    a = Sequence("a", tokens=[1, 2, 3, 4, 5])
    m.allocate(a, 5)
    assert a.block_table == [0, 1, 2] and a.n_cached == 0
    a.n_cached = 5
    m.hash_blocks(a)  # the two full blocks; the last, half full, is never hashed
    assert [m.blocks[i].key is not None for i in range(3)] == [True, True, False]
    b = Sequence("b", tokens=[1, 2, 3, 4, 9, 9])
    m.allocate(b, 6)
    assert b.block_table[:2] == [0, 1] and b.n_cached == 4
    assert [m.blocks[i].ref_count for i in (0, 1, 2)] == [2, 2, 1]
    c = Sequence("c", tokens=[9, 9, 3, 4, 1])  # block (3, 4) after another prefix: no match
    assert m.prefix(c) == []
    d = Sequence("d", tokens=[1, 2, 3, 4])  # its last block is computed, never shared
    assert m.prefix(d) == [0]
    m.deallocate(a)
    assert [m.blocks[i].ref_count for i in (0, 1, 2)] == [1, 1, 0] and 2 in m.free
    m.deallocate(b)  # free, but findable by content until handed out again
    e = Sequence("e", tokens=[1, 2, 3, 4, 7])
    assert m.n_used == 0 and m.prefix(e) == [0, 1] and m.can_allocate(e, 5)
    m.allocate(e, 5)
    assert e.block_table[:2] == [0, 1] and 0 not in m.free and e.n_cached == 4
    m.deallocate(e)
    f = Sequence("f")
    m.grow(f, m.block_size * m.n_free)  # every block handed out: their old content is forgotten
    assert m.cached == {} and m.prefix(Sequence("g", tokens=[1, 2, 3, 4, 7])) == []


def test_growing_takes_a_block_only_when_the_last_is_full():
    m = BlockManager(n_blocks=3, block_size=4)
    seq = Sequence(0)
    taken = []
    for _ in range(12):
        m.grow(seq, 1)
        seq.n_cached += 1
        taken.append(len(seq.block_table))
    assert taken == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    assert not m.can_grow(seq, 1)
    with pytest.raises(ValueError, match="must have 1 free blocks for 1 more tokens of sequence 0"):
        m.grow(seq, 1)


def test_paged_errors_name_the_rule():
    with pytest.raises(TypeError, match="block_size must be a positive int"):
        PagedKVCache(1, 4, 2.0)
    with pytest.raises(ValueError, match="kernel must be one of"):
        PagedKVCache(1, 4, 2, kernel="cuda")
    cache = PagedKVCache(1, 4, 2)
    with pytest.raises(ValueError, match=r"must have shape \(B, G, N, d\)"):
        cache.layers[0].append(torch.zeros(1, 5, 2), torch.zeros(1, 5, 2))
    cache.layers[0].append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    with pytest.raises(ValueError, match="must have G=1 heads of d=2"):
        cache.layers[0].append(torch.zeros(1, 2, 1, 2), torch.zeros(1, 2, 1, 2))
    cache.schedule([(Sequence("x"), 2)])
    with pytest.raises(ValueError, match=r"must have shape \(1, G, 2, d\) for the scheduled pass"):
        cache.layers[0].append(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    model = TinyDecoder(vocab_size=10, d_model=8, n_layers=1, n_heads=2, seed=0)
    with pytest.raises(ValueError, match=r"ids of shape \(B, N\), not unbatched \(N,\)"):
        model(torch.tensor([1, 2, 3]), caches=PagedKVCache(1, 4, 2).layers)
    with pytest.raises(ValueError, match="free blocks"):
        model.generate(torch.tensor([[1, 2, 3]]), 5, caches=PagedKVCache(1, 1, 4).layers)


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


def test_release_keeps_the_positions_of_the_rows_still_held():
    model = TinyDecoder(vocab_size=29, d_model=48, n_layers=2, n_heads=6, n_kv_heads=2, seed=3,
                        dtype=torch.float64)
    ids = torch.randint(0, 29, (3, 11), generator=torch.Generator().manual_seed(0))
    cache = PagedKVCache(2, 64, 4)
    out = model.generate(ids, 5, caches=cache.layers)  # three rows of 15 tokens held
    cache.release(2)  # the last row finished: rows 0 and 1 continue at position 15
    assert cache.n_tokens == 15
    with torch.no_grad():
        paged_next = model(out[:2, -1:], caches=cache.layers)  # (2, 1, V)
        alone = model(out[:2])[:, -1:]  # no cache: the same continuation
    torch.testing.assert_close(paged_next, alone)
    cache.release(0)  # rows 0 .. B - 1 would now mix an empty sequence with a held one
    with pytest.raises(ValueError, match=r"must hold the same number of tokens.*\[0, 16\]"):
        model(out[:2, -1:], caches=cache.layers)


def test_equal_keys_mean_equal_prefixes_where_python_hashes_collide():
    collide = 2**61 - 1
    assert hash((None, (0,))) == hash((None, (collide,)))  # Python hashes ints mod 2**61 - 1
    m = BlockManager(n_blocks=8, block_size=1)
    for name, tokens in (("c", [collide, 5, 9]), ("a", [0, 7, 7])):  # blocks (5,) after c's
        seq = Sequence(name, tokens=tokens)
        m.allocate(seq, 3)
        seq.n_cached = 3
        m.hash_blocks(seq)
    b = Sequence("b", tokens=[0, 5, 8])  # a's first block, then (5,), which only c holds
    assert m.prefix(b) == [3]  # a's first block only: c's (5,) follows another prefix
