"""Feed-forward networks, transformer blocks and TinyDecoder (the norms: tests/test_norms.py).

References: torch's own ``nn.Linear`` and ``F.embedding``; formulas written out with
``F.relu``/``F.gelu``/``F.silu``; the residual equations of each norm placement recomputed
here from the block's parts; and properties (permutation equivariance, causality, cache
equivalence) that hold whatever the weights are. The comparison of GroupedQueryAttention
with ``nn.MultiheadAttention`` lives in tests/test_gqa.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import randomise, tolerances

from attnlib.core.masks import key_padding_mask, position_ids
from attnlib.core.rope import RopeTables
from attnlib.layers import FeedForward, TinyDecoder, TransformerBlock
from attnlib.layers.norms import LayerNorm, RMSNorm, layer_norm
from attnlib.serving.cache import KVCache, LatentCache

F64 = torch.float64


# --- feed-forward ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["relu", "gelu", "swiglu"])
@pytest.mark.parametrize("bias", [False, True])
def test_feed_forward_matches_formula(device, gen, kind, bias):
    ffn = FeedForward(8, 20, kind, bias=bias, device=device, dtype=F64)
    randomise(ffn, gen)
    x = torch.randn(2, 5, 8, generator=gen, dtype=F64).to(device)
    if kind == "swiglu":
        gate, up = x @ ffn.W_gate, x @ ffn.W_up
        if bias:
            gate, up = gate + ffn.b_gate, up + ffn.b_up
        ref = (F.silu(gate) * up) @ ffn.W_down + (ffn.b_down if bias else 0)
        n_params = 3 * 8 * 20 + (20 + 20 + 8) * bias
    else:
        f = F.relu if kind == "relu" else F.gelu
        ref = f(x @ ffn.W_1 + (ffn.b_1 if bias else 0)) @ ffn.W_2 + (ffn.b_2 if bias else 0)
        n_params = 2 * 8 * 20 + (20 + 8) * bias
    torch.testing.assert_close(ffn(x), ref, **tolerances(F64))
    assert sum(p.numel() for p in ffn.parameters()) == n_params


@pytest.mark.parametrize("kind", ["relu", "gelu"])
def test_mlp_matches_torch_linear_layers(gen, kind):
    ffn = FeedForward(6, 10, kind, bias=True, dtype=F64)
    randomise(ffn, gen)
    act = torch.nn.ReLU() if kind == "relu" else torch.nn.GELU()
    net = torch.nn.Sequential(torch.nn.Linear(6, 10), act, torch.nn.Linear(10, 6)).to(F64)
    with torch.no_grad():  # nn.Linear stores the transpose of a right-multiplying weight
        net[0].weight.copy_(ffn.W_1.T)
        net[0].bias.copy_(ffn.b_1)
        net[2].weight.copy_(ffn.W_2.T)
        net[2].bias.copy_(ffn.b_2)
    x = torch.randn(3, 4, 6, generator=gen, dtype=F64)
    torch.testing.assert_close(ffn(x), net(x))


# --- transformer block -----------------------------------------------------------------


def _norm_ref(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The block's norm recomputed with torch's functional norms and its parameters."""
    if isinstance(norm, RMSNorm):
        return F.rms_norm(x, (x.shape[-1],), norm.g, norm.eps)
    return F.layer_norm(x, (x.shape[-1],), norm.gamma, norm.beta, norm.eps)


def _ffn_ref(ffn: FeedForward, x: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ ffn.W_gate) * (x @ ffn.W_up)) @ ffn.W_down


@pytest.mark.parametrize("placement", ["pre", "post", "peri"])
@pytest.mark.parametrize("norm_kind", ["rms", "layer"])
@pytest.mark.parametrize("cross", [False, True])
def test_block_is_its_residual_equation(device, gen, placement, norm_kind, cross):
    block = TransformerBlock(16, 4, n_kv_heads=2, d_ff=24, norm=placement, norm_kind=norm_kind,
                             rope_base=10000.0, cross_attention=cross, device=device, dtype=F64)
    randomise(block, gen)
    x = torch.randn(2, 6, 16, generator=gen, dtype=F64).to(device)
    memory = torch.randn(2, 4, 16, generator=gen, dtype=F64).to(device) if cross else None

    def A(h):
        return block.attn(h, causal=True)

    def C(h):
        return block.cross_attn(h, memory)

    def N(name, h):
        return _norm_ref(getattr(block, name), h)

    h = x
    if placement == "pre":
        h = h + A(N("attn_norm", h))
        if cross:
            h = h + C(N("cross_norm", h))
        h = h + _ffn_ref(block.ffn, N("ffn_norm", h))
    elif placement == "post":
        h = N("attn_norm", h + A(h))
        if cross:
            h = N("cross_norm", h + C(h))
        h = N("ffn_norm", h + _ffn_ref(block.ffn, h))
    else:
        h = h + N("attn_out_norm", A(N("attn_norm", h)))
        if cross:
            h = h + N("cross_out_norm", C(N("cross_norm", h)))
        h = h + N("ffn_out_norm", _ffn_ref(block.ffn, N("ffn_norm", h)))
    out = block(x, causal=True, memory=memory)
    assert out.shape == (2, 6, 16)
    torch.testing.assert_close(out, h, **tolerances(F64))


def test_post_norm_output_is_normalised_and_pre_norm_output_is_not(gen):
    x = 5 * torch.randn(3, 8, 16, generator=gen, dtype=F64)
    post = TransformerBlock(16, 4, norm="post", norm_kind="layer", dtype=F64)
    y = post(x)  # the last operation is LayerNorm with gains 1 and shifts 0
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 8, dtype=F64))
    pre = TransformerBlock(16, 4, norm="pre", norm_kind="layer", dtype=F64)
    assert pre(x).mean(-1).abs().max() > 0.1  # the skip path carries x through unnormalised


@pytest.mark.parametrize("placement", ["pre", "post", "peri"])
@pytest.mark.parametrize("attention", ["gqa", "mla"])
def test_encoder_without_rope_is_permutation_equivariant(device, gen, placement, attention):
    mla = {"d_latent": 6} if attention == "mla" else {}
    block = TransformerBlock(16, 4, norm=placement, attention=attention, device=device,
                             dtype=F64, **mla)
    x = torch.randn(2, 7, 16, generator=gen, dtype=F64).to(device)
    perm = torch.randperm(7, generator=gen).to(device)
    torch.testing.assert_close(block(x[:, perm]), block(x)[:, perm], **tolerances(F64))
    # a padding mask moves with its tokens
    pad = key_padding_mask([7, 4], 7, device=device)
    torch.testing.assert_close(block(x[:, perm], mask=pad[..., perm]),
                               block(x, mask=pad)[:, perm], **tolerances(F64))


@pytest.mark.parametrize("attention", ["gqa", "mla"])
def test_decoder_is_causal(device, gen, attention):
    mla = {"d_latent": 6, "d_rope": 4} if attention == "mla" else {"n_kv_heads": 2}
    block = TransformerBlock(16, 4, attention=attention, rope_base=10000.0, device=device,
                             dtype=F64, **mla)
    x = torch.randn(2, 8, 16, generator=gen, dtype=F64).to(device)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 3, 16, generator=gen, dtype=F64).to(device)
    y, y2 = block(x, causal=True), block(x2, causal=True)
    torch.testing.assert_close(y[:, :5], y2[:, :5], **tolerances(F64))
    assert (y[:, 5:] - y2[:, 5:]).abs().amax() > 1e-3
    # without the causal mask the earlier tokens do see the change
    assert (block(x)[:, :5] - block(x2)[:, :5]).abs().amax() > 1e-3


def test_cross_attention_reads_memory(device, gen):
    block = TransformerBlock(16, 4, n_kv_heads=1, cross_attention=True, device=device,
                             dtype=F64)
    x = torch.randn(2, 5, 16, generator=gen, dtype=F64).to(device)
    memory = torch.randn(2, 9, 16, generator=gen, dtype=F64).to(device)
    y = block(x, causal=True, memory=memory)
    assert y.shape == (2, 5, 16)
    other = torch.randn(2, 9, 16, generator=gen, dtype=F64).to(device)
    assert (block(x, causal=True, memory=other) - y).abs().amax() > 1e-3
    # a shorter memory works too: N_mem is free
    assert block(x, causal=True, memory=memory[:, :3]).shape == (2, 5, 16)
    # masked memory tokens (padding) do not matter
    lengths = key_padding_mask([6, 9], 9, device=device)
    changed = memory.clone()
    changed[0, 6:] = 100.0
    torch.testing.assert_close(block(x, causal=True, memory=memory, memory_mask=lengths),
                               block(x, causal=True, memory=changed, memory_mask=lengths))
    assert (block(x, causal=True, memory=changed) - y).abs().amax() > 1e-3


@pytest.mark.parametrize("attention", ["gqa", "mla"])
@pytest.mark.parametrize("placement", ["pre", "peri"])
def test_block_with_cache_in_pieces_equals_one_causal_call(device, gen, attention, placement):
    if attention == "mla":
        kw, cache = {"d_latent": 6, "d_latent_q": 10, "d_rope": 4}, LatentCache()
    else:
        kw, cache = {"n_kv_heads": 2}, KVCache()
    block = TransformerBlock(16, 4, attention=attention, norm=placement, rope_base=500.0,
                             device=device, dtype=F64, **kw)
    x = torch.randn(2, 9, 16, generator=gen, dtype=F64).to(device)
    full = block(x, causal=True)
    pieces = [block(x[:, a:b], causal=True, cache=cache) for a, b in [(0, 4), (4, 5), (5, 9)]]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, **tolerances(F64))
    assert cache.n_tokens == 9


# --- TinyDecoder -----------------------------------------------------------------------


def _decoder(attention: str, device, **kw) -> TinyDecoder:
    if attention == "mla":
        kw = {"d_latent": 12, "d_rope": 4, **kw}
    return TinyDecoder(61, 32, 2, 4, attention=attention, device=device, dtype=F64, **kw)


@pytest.mark.parametrize("tie", [True, False])
def test_decoder_forward_recomputed_with_torch_parts(device, gen, tie):
    model = TinyDecoder(50, 16, 2, 4, n_kv_heads=2, tie_weights=tie, seed=3, device=device,
                        dtype=F64)
    ids = torch.randint(0, 50, (3, 7), generator=gen).to(device)
    x = F.embedding(ids, model.E)
    for block in model.blocks:
        x = block(x, causal=True)
    h = F.rms_norm(x, (16,), model.final_norm.g, model.final_norm.eps)
    ref = F.linear(h, model.E) if tie else h @ model.W_out
    logits = model(ids)
    assert logits.shape == (3, 7, 50)
    torch.testing.assert_close(logits, ref, **tolerances(F64))


def test_tied_head_shares_storage_with_embedding(device):
    tied = TinyDecoder(40, 16, 1, 2, seed=0, device=device)
    untied = TinyDecoder(40, 16, 1, 2, tie_weights=False, seed=0, device=device)
    assert tied.W_out is None
    assert tied.output_weights().untyped_storage().data_ptr() == tied.E.untyped_storage().data_ptr()
    assert tied.output_weights().shape == (16, 40)
    n_tied = sum(p.numel() for p in tied.parameters())
    assert sum(p.numel() for p in untied.parameters()) == n_tied + 16 * 40
    # editing E changes the tied head: they are one tensor
    with torch.no_grad():
        tied.E[7, 3] = 123.0
    assert tied.output_weights()[3, 7].item() == 123.0


def test_seed_gives_reproducible_weights_and_leaves_global_rng_alone():
    before = torch.get_rng_state()
    a = TinyDecoder(30, 16, 2, 2, seed=11)
    assert torch.equal(torch.get_rng_state(), before)
    b = TinyDecoder(30, 16, 2, 2, seed=11)
    c = TinyDecoder(30, 16, 2, 2, seed=12)
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(p, q), name
        if p.dim() == 2:
            assert not torch.equal(p, r), name


@pytest.mark.parametrize(
    "attention,kw",
    [("gqa", {"n_kv_heads": 2}), ("gqa", {"n_kv_heads": 1}), ("mla", {}),
     ("mla", {"d_latent_q": 10, "norm": "peri"})],
)
def test_decoder_caches_in_pieces_equal_one_call(device, gen, attention, kw):
    model = _decoder(attention, device, seed=0, **kw)
    ids = torch.randint(0, 61, (2, 10), generator=gen).to(device)
    full = model(ids)
    caches = model.new_caches()
    assert all(isinstance(c, KVCache if attention == "gqa" else LatentCache) for c in caches)
    pieces = [model(ids[:, a:b], caches=caches) for a, b in [(0, 3), (3, 4), (4, 10)]]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, **tolerances(F64))
    assert [c.n_tokens for c in caches] == [10, 10]


@pytest.mark.parametrize(
    "attention,kw,seed",
    [("gqa", {"n_kv_heads": 2}, 0), ("gqa", {"n_kv_heads": 2}, 1), ("gqa", {"n_kv_heads": 2}, 2),
     ("gqa", {"n_kv_heads": 1}, 3), ("gqa", {"n_kv_heads": 4}, 4),
     ("mla", {}, 0), ("mla", {}, 1), ("mla", {}, 2), ("mla", {"d_rope": 0}, 5),
     ("gqa", {"norm": "post", "norm_kind": "layer"}, 6), ("gqa", {"norm": "peri"}, 7)],
)
def test_generate_same_tokens_with_and_without_cache(device, attention, kw, seed):
    model = _decoder(attention, device, seed=seed, **kw)
    prompt = torch.tensor([[5, 17, 3], [60, 0, 9]], device=device)
    with_cache = model.generate(prompt, 16)
    without = model.generate(prompt, 16, use_cache=False)
    assert with_cache.shape == (2, 19)
    assert torch.equal(with_cache[:, :3], prompt)
    assert torch.equal(with_cache, without)
    # greedy: every generated token is the argmax of the full forward at the step before
    logits = model(with_cache[:, :-1])
    assert torch.equal(logits[:, 2:].argmax(-1), with_cache[:, 3:])


def test_generate_takes_a_single_unbatched_prompt_and_zero_steps():
    model = TinyDecoder(20, 16, 1, 2, seed=0)
    out = model.generate(torch.tensor([1, 2]), 3)
    assert out.shape == (5,)
    assert torch.equal(model.generate(torch.tensor([[1, 2]]), 0), torch.tensor([[1, 2]]))


@pytest.mark.parametrize("attention,kw", [("gqa", {"n_kv_heads": 2}), ("mla", {})])
def test_forward_with_rotation_tables_made_once_equals_making_them_per_call(device, attention, kw):
    """generate makes the tables of every position once and hands each step its rows; a
    forward pass given those rows computes what it computes making them itself."""
    model = _decoder(attention, device, seed=2, **kw)
    ids = torch.tensor([[5, 17, 3, 8, 9], [60, 0, 9, 1, 2]], device=device)
    attn = model.blocks[0].attn
    table = attn.rope_tables(None, 9, 0, F64, device)  # positions 0 .. 8
    assert torch.equal(table.positions, torch.arange(9, device=device))
    caches, plain = model.new_caches(), model.new_caches()
    for a, b in [(0, 3), (3, 4), (4, 5)]:
        rows = RopeTables(table.positions[a:b], table.cos[a:b], table.sin[a:b])
        given = model(ids[:, a:b], caches=caches, rope=rows)
        torch.testing.assert_close(given, model(ids[:, a:b], caches=plain), rtol=0, atol=0)
    # rows at positions (B, 1, N), as the mask's positions give them
    pos = torch.tensor([[0, 0, 1, 2, 3], [0, 1, 2, 3, 4]], device=device)
    rows = RopeTables(pos[:, None], table.cos[pos[:, None]], table.sin[pos[:, None]])
    torch.testing.assert_close(model(ids, positions=pos, rope=rows), model(ids, positions=pos),
                               rtol=0, atol=0)


def test_generate_continues_caches_that_already_hold_tokens(device):
    """The tables generate makes reach past what the caches held before it."""
    model = _decoder("gqa", device, seed=4, n_kv_heads=2)
    prompt = torch.tensor([[5, 17, 3, 8, 9, 10]], device=device)
    caches = model.new_caches(prompt.shape[-1] + 12)
    model(prompt[:, :4], caches=caches)
    continued = model.generate(prompt[:, 4:], 12, caches=caches)
    assert torch.equal(continued, model.generate(prompt, 12)[:, 4:])


def test_forward_refuses_rotation_tables_that_do_not_fit():
    model = TinyDecoder(30, 16, 2, 4, n_kv_heads=2, seed=0)
    ids = torch.tensor([[1, 2, 3]])
    tables = model.blocks[0].attn.rope_tables(None, 3, 0, torch.float32, ids.device)
    with pytest.raises(ValueError, match=r"rope's cos and sin must end in \(N, rope width\) = "
                                         r"\(3, 4\).*got cos \(2, 4\)"):
        model(ids, rope=RopeTables(tables.positions[:2], tables.cos[:2], tables.sin[:2]))
    with pytest.raises(TypeError,
                       match=r"rope must be an attnlib\.core\.rope\.RopeTables.*got tuple"):
        model(ids, rope=tuple(tables))
    nope = TinyDecoder(30, 16, 2, 4, rope_base=None, seed=0)
    with pytest.raises(ValueError, match="rope must be None: this model's attention has no RoPE"):
        nope(ids, rope=tables)


# --- a batch of prompts padded on the left: attention_mask ------------------------------
#
# The reference is each prompt run alone, unpadded, with no mask: what a row of the padded
# batch must reproduce at its real tokens. Pad id 0 also occurs as a real token (row 1).

PROMPTS = [[5, 17, 3, 8, 9, 10, 11], [60, 0, 9], [42]]  # 7, 3 and 1 real tokens
PADDED = [
    ("gqa", {"n_kv_heads": 2}),  # GQA with RoPE
    ("gqa", {"n_kv_heads": 1, "norm": "peri"}),  # MQA
    ("gqa", {"rope_base": None}),  # no positions at all (NoPE)
    ("mla", {}),  # decoupled RoPE, d_rope = 4
    ("mla", {"d_latent_q": 10, "norm": "post", "norm_kind": "layer"}),
    ("mla", {"d_rope": 0}),  # MLA without positions
]
PADDED_IDS = [f"{a}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for a, kw in PADDED]


def _left_padded(prompts: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` with pads (id 0) in front of the shorter prompts, and its 0/1 mask."""
    n = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (n - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask


def _then_real(mask: torch.Tensor, n_new: int) -> torch.Tensor:
    """The mask followed by ``n_new`` real columns (the generated tokens)."""
    return torch.cat((mask, torch.ones_like(mask[:, :1]).expand(-1, n_new)), dim=1)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("attention,kw", PADDED, ids=PADDED_IDS)
def test_left_padded_batch_generates_each_prompt_alone(device, attention, kw, use_cache):
    model = _decoder(attention, device, seed=0, **kw)
    ids, mask = _left_padded(PROMPTS, device)
    n, n_new = ids.shape[1], 12
    out = model.generate(ids, n_new, attention_mask=mask, use_cache=use_cache)
    assert torch.equal(out[:, :n], ids)
    logits = model(out, attention_mask=_then_real(mask, n_new))
    for b, prompt in enumerate(PROMPTS):
        alone = model.generate(torch.tensor([prompt], device=device), n_new)
        assert torch.equal(out[b, n - len(prompt):], alone[0]), b
        torch.testing.assert_close(logits[b, n - len(prompt):], model(alone)[0], rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize("attention,kw", PADDED, ids=PADDED_IDS)
def test_left_padded_forward_needs_the_mask(device, attention, kw):
    model = _decoder(attention, device, seed=1, **kw)
    ids, mask = _left_padded(PROMPTS, device)
    alone = model(torch.tensor([PROMPTS[1]], device=device))[0]  # (3, N_T)
    masked = model(ids, attention_mask=mask)[1, -3:]
    unmasked = model(ids)[1, -3:]  # the pads are read as tokens
    torch.testing.assert_close(masked, alone, rtol=0, atol=1e-12)
    assert (unmasked - alone).abs().max() > 1e-3
    # an all-real mask is no mask
    torch.testing.assert_close(model(ids, attention_mask=torch.ones_like(mask)), model(ids),
                               **tolerances(F64))


def test_left_padded_batch_in_float32_and_a_wide_group(device, gen):
    """float32 to 1e-5; 32 query heads on one KV head (the decoding path in blocks of rows)."""
    for model in (TinyDecoder(61, 32, 2, 4, n_kv_heads=2, seed=0, device=device),
                  TinyDecoder(61, 64, 2, 32, n_kv_heads=1, seed=0, device=device)):
        ids, mask = _left_padded(PROMPTS, device)
        n, n_new = ids.shape[1], 8
        out = model.generate(ids, n_new, attention_mask=mask)
        logits = model(out, attention_mask=_then_real(mask, n_new))
        for b, prompt in enumerate(PROMPTS):
            alone = model.generate(torch.tensor([prompt], device=device), n_new)
            assert torch.equal(out[b, n - len(prompt):], alone[0]), b
            torch.testing.assert_close(logits[b, n - len(prompt):], model(alone)[0],
                                       rtol=1e-5, atol=1e-5)


def test_left_padded_batch_on_the_trained_book_model():
    """Logits of size ~10: float32 to a relative 1e-5; the same characters as each prompt alone."""
    from attnlib.models import pretrained, tasks

    book, chars = pretrained.load("book"), tasks.book_tokenizer()
    prompts = [chars.encode("The cache holds the keys and values"), chars.encode("A query")]
    ids, mask = _left_padded(prompts, book.E.device)
    n, n_new = ids.shape[1], 24
    out = book.generate(ids, n_new, attention_mask=mask)
    with torch.no_grad():
        logits = book(out, attention_mask=_then_real(mask, n_new))
        for b, prompt in enumerate(prompts):
            alone = book.generate(torch.tensor([prompt]), n_new)
            assert torch.equal(out[b, n - len(prompt):], alone[0]), b
            torch.testing.assert_close(logits[b, n - len(prompt):], book(alone)[0], rtol=1e-5,
                                       atol=1e-5)
        assert not torch.equal(book.generate(ids, n_new)[1, n - 7:], alone[0])  # unmasked


@pytest.mark.parametrize("attention,kw", PADDED, ids=PADDED_IDS)
def test_padded_prompt_in_pieces_through_caches_equals_one_call(device, attention, kw):
    model = _decoder(attention, device, seed=2, **kw)
    ids, mask = _left_padded(PROMPTS, device)
    full = model(ids, attention_mask=mask)
    caches = model.new_caches()
    # the first piece holds only pads in rows 1 and 2: allowed when it goes into caches
    pieces = [model(ids[:, a:b], caches=caches, attention_mask=mask[:, :b])
              for a, b in [(0, 2), (2, 5), (5, 6), (6, 7)]]
    real = mask.bool()
    torch.testing.assert_close(torch.cat(pieces, dim=1)[real], full[real], **tolerances(F64))
    assert [c.n_tokens for c in caches] == [7, 7]  # a slot for every column, pads included


ROTATED = [0, 1, 3, 4]  # the configurations of PADDED with RoPE


@pytest.mark.parametrize("attention,kw", [PADDED[i] for i in ROTATED],
                         ids=[PADDED_IDS[i] for i in ROTATED])
def test_the_cache_holds_each_prompts_keys_rotated_as_if_alone(device, attention, kw):
    """Cached keys carry their absolute positions (the logits see only differences): the real
    tokens' keys equal the prompt's own only if the positions skip the pads."""
    model = _decoder(attention, device, seed=6, **kw)
    ids, mask = _left_padded(PROMPTS, device)
    n, rotated = ids.shape[1], "K" if attention == "gqa" else "k_R"
    padded, counted = model.new_caches(), model.new_caches()
    with torch.no_grad():
        model(ids, caches=padded, attention_mask=mask)
        model(ids, caches=counted, attention_mask=mask, positions=torch.arange(n, device=device))
        for b, prompt in enumerate(PROMPTS[1:], start=1):
            alone = model.new_caches()
            model(torch.tensor([prompt], device=device), caches=alone)
            for mine, pads_counted, ref in zip(padded, counted, alone, strict=True):
                keys = getattr(mine, rotated)[b, ..., n - len(prompt):, :]
                torch.testing.assert_close(keys, getattr(ref, rotated)[0], rtol=0, atol=1e-12)
                shifted = getattr(pads_counted, rotated)[b, ..., n - len(prompt):, :]
                assert (shifted - getattr(ref, rotated)[0]).abs().max() > 1e-3


@pytest.mark.parametrize("attention,kw", PADDED, ids=PADDED_IDS)
def test_the_pads_slots_in_the_cache_are_written_and_never_read(device, gen, attention, kw):
    model = _decoder(attention, device, seed=3, **kw)
    ids, mask = _left_padded(PROMPTS, device)
    n = ids.shape[1]
    names = {"gqa": ("K", "V"), "mla": ("L", "k_R") if kw.get("d_rope", 4) else ("L",)}[attention]

    def next_logits(corrupt: tuple[int, slice] | None) -> torch.Tensor:
        caches = model.new_caches(max_tokens=n + 1)
        with torch.no_grad():
            first = model(ids, caches=caches, attention_mask=mask)[:, -1].argmax(-1, keepdim=True)
            if corrupt is not None:  # overwrite those slots in every layer with garbage
                for cache in caches:
                    for name in names:
                        T = getattr(cache, name)
                        slots = T[corrupt[0], ..., corrupt[1], :]
                        noise = torch.randn(slots.shape, generator=gen, dtype=T.dtype)
                        T[corrupt[0], ..., corrupt[1], :] = 1e3 * noise.to(device)
            return model(first, caches=caches, attention_mask=_then_real(mask, 1))[:, -1]

    clean = next_logits(None)
    # rows 1 and 2 hold 4 and 6 pads: their keys and values sit in slots 0..3 and 0..5
    torch.testing.assert_close(next_logits((1, slice(0, 4))), clean, rtol=0, atol=1e-12)
    torch.testing.assert_close(next_logits((2, slice(0, 6))), clean, rtol=0, atol=1e-12)
    assert (next_logits((1, slice(4, 5)))[1] - clean[1]).abs().max() > 1e-3  # a real slot is read


def test_right_padding_works_for_forward_and_generate_refuses_it(device):
    model = _decoder("gqa", device, seed=4)
    ids = torch.tensor([[60, 0, 9, 0, 0], [5, 17, 3, 8, 9]], device=device)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], device=device)
    alone = model(ids[:1, :3])[0]
    torch.testing.assert_close(model(ids, attention_mask=mask)[0, :3], alone, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"attention_mask must end in a real token .* row 0 "
                                         r"ends in a pad: \[1, 1, 1, 0, 0\]"):
        model.generate(ids, 3, attention_mask=mask)


def test_positions_given_override_the_ones_the_mask_gives(device):
    model = _decoder("gqa", device, seed=5)
    ids, mask = _left_padded(PROMPTS, device)
    derived = model(ids, attention_mask=mask)
    torch.testing.assert_close(model(ids, attention_mask=mask, positions=position_ids(mask)),
                               derived, rtol=0, atol=0)
    # positions that count the pads shift each row by a constant: RoPE sees only differences
    counted = model(ids, attention_mask=mask, positions=torch.arange(7, device=device))
    real = mask.bool()
    torch.testing.assert_close(counted[real], derived[real], **tolerances(F64))
    # a count that is not kept (row 1 moved by 2 after its first real token) changes the logits
    kept_badly = position_ids(mask).clone()
    kept_badly[1, 5:] += 2
    assert (model(ids, attention_mask=mask, positions=kept_badly)[1, 5:]
            - derived[1, 5:]).abs().max() > 1e-3


def test_generate_with_a_mask_runs_the_same_checks_at_every_step():
    model = TinyDecoder(30, 16, 2, 4, n_kv_heads=2, seed=0)
    ids, mask = _left_padded([[1, 2, 3], [4]], "cpu")
    calls = [_check_calls(lambda n=n: model.generate(ids, n, attention_mask=mask))
             for n in (1, 2, 3)]
    step = calls[1][len(calls[0]):]  # what the second step added
    assert calls[2][len(calls[1]):] == step and calls[1][:len(calls[0])] == calls[0]
    assert not _FUNCTIONAL & set(step), step


# --- bad input -------------------------------------------------------------------------


def _bad_cases():
    ok = torch.tensor([[1, 2]])
    model = TinyDecoder(10, 8, 1, 2, seed=0)
    return [
        ("norm", lambda: TransformerBlock(8, 2, norm="middle"), ValueError),
        ("norm_kind", lambda: TransformerBlock(8, 2, norm_kind="batch"), ValueError),
        ("ffn", lambda: TransformerBlock(8, 2, ffn="tanh"), ValueError),
        ("kind", lambda: FeedForward(8, 16, kind="tanh"), ValueError),
        ("attention", lambda: TransformerBlock(8, 2, attention="linear"), ValueError),
        ("d_model", lambda: TransformerBlock(0, 2), ValueError),
        ("n_heads", lambda: TransformerBlock(8, -1), ValueError),
        ("d_ff", lambda: TransformerBlock(8, 2, d_ff=0), ValueError),
        ("d_ff", lambda: FeedForward(8, -3), ValueError),
        ("d", lambda: RMSNorm(0), ValueError),
        ("d", lambda: LayerNorm(2.5), TypeError),
        ("eps", lambda: RMSNorm(4, eps=0.0), ValueError),
        ("gamma", lambda: layer_norm(torch.zeros(2, 4), torch.ones(3)), ValueError),
        ("d_model", lambda: TransformerBlock(10, 4), ValueError),  # 10 heads do not split 4
        ("d_latent", lambda: TransformerBlock(8, 2, attention="mla"), ValueError),
        ("d_latent", lambda: TransformerBlock(8, 2, d_latent=4), ValueError),
        ("n_kv_heads", lambda: TransformerBlock(8, 2, attention="mla", d_latent=4,
                                                n_kv_heads=1), ValueError),
        ("memory", lambda: TransformerBlock(8, 2, cross_attention=True)(torch.zeros(1, 3, 8)),
         ValueError),
        ("memory", lambda: TransformerBlock(8, 2)(torch.zeros(1, 3, 8),
                                                  memory=torch.zeros(1, 2, 8)), ValueError),
        ("x", lambda: TransformerBlock(8, 2)(torch.zeros(1, 3, 7)), ValueError),
        ("vocab_size", lambda: TinyDecoder(0, 8, 1, 2), ValueError),
        ("n_layers", lambda: TinyDecoder(10, 8, 0, 2), ValueError),
        ("ids", lambda: model(torch.tensor([[1, 10]])), ValueError),
        ("ids", lambda: model(torch.tensor([[-1, 2]])), ValueError),
        ("ids", lambda: model(torch.tensor([[1.0, 2.0]])), TypeError),
        ("ids", lambda: model.generate([[1, 2]], 3), TypeError),
        ("max_new_tokens", lambda: model.generate(ok, -1), ValueError),
        ("caches", lambda: model(ok, caches=[]), ValueError),
        ("caches", lambda: model(ok, caches=[LatentCache()]), TypeError),
        ("seed", lambda: TinyDecoder(10, 8, 1, 2, seed=1.5), TypeError),
    ]


@pytest.mark.parametrize(
    "argument,call,error", _bad_cases(), ids=[f"{c[0]}-{i}" for i, c in enumerate(_bad_cases())]
)
def test_bad_input_names_the_argument(argument, call, error):
    with pytest.raises(error, match=argument):
        call()


def _mask_cases():
    ok = torch.tensor([[1, 2]])
    model = TinyDecoder(10, 8, 1, 2, seed=0)
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.tensor([[3, 4, 5]]), caches=caches)  # 3 tokens held
    mask = torch.tensor
    return [  # (call, error, fragments: the argument, the rule, the value given)
        (lambda: model(ok, attention_mask=[[1, 1]]), TypeError,
         ["attention_mask", "True/1 = a real token", "list"]),
        (lambda: model(ok, attention_mask=torch.ones(1, 2)), TypeError,
         ["attention_mask", "the integers 0 and 1", "torch.float32"]),
        (lambda: model(ok, attention_mask=mask([[1, 2]])), ValueError,
         ["attention_mask", "the integers 0 and 1", "the value 2"]),
        (lambda: model(ok, attention_mask=mask([[1, 1, 1]])), ValueError,
         ["attention_mask", "shape (1, 2)", "(1, 3)"]),
        (lambda: model(ok, caches=caches, attention_mask=mask([[1, 1]])), ValueError,
         ["attention_mask", "shape (1, 5)", "the 3 the caches hold and the 2 of ids", "(1, 2)"]),
        (lambda: model(ok[None], attention_mask=mask([[[1, 1]]])), ValueError,
         ["attention_mask", "ids of shape (N,) or (B, N)", "(1, 1, 2)"]),
        (lambda: model(torch.tensor([[1, 2], [3, 4]]), attention_mask=mask([[1, 1], [0, 0]])),
         ValueError, ["attention_mask", "at least one real token", "row 1 has none"]),
        (lambda: model.generate(ok, 2, attention_mask=mask([[1, 0]])), ValueError,
         ["attention_mask", "end in a real token", "left padding", "row 0 ends in a pad: [1, 0]"]),
        (lambda: model(ok, positions=torch.arange(3)), ValueError,
         ["positions", "(N,) or (B, N) with N = 2", "(3,)"]),
    ]


@pytest.mark.parametrize("call,error,fragments", _mask_cases(),
                         ids=[f"mask-{i}" for i in range(len(_mask_cases()))])
def test_a_bad_attention_mask_names_the_argument_the_rule_and_the_value(call, error, fragments):
    with pytest.raises(error) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} missing from: {info.value}"


# --- what trained weights depend on: the names in state_dict ---------------------------


def _block_keys(i: int, attn: list[str], extra: list[str] = ()) -> list[str]:
    return ([f"blocks.{i}.attn.{n}" for n in attn] + [f"blocks.{i}.attn_norm.g"]
            + [f"blocks.{i}.ffn.{n}" for n in ("W_gate", "W_up", "W_down")]
            + [f"blocks.{i}.ffn_norm.g"] + [f"blocks.{i}.{n}" for n in extra])


def test_state_dict_keys_are_pinned():
    """Weights saved from a TinyDecoder load into this one: the keys, and their order, of
    attnlib 0.2, written out."""
    gqa = TinyDecoder(50, 16, 2, 4, n_kv_heads=2, attention="gqa", seed=0)
    assert list(gqa.state_dict()) == [
        "E",
        *_block_keys(0, ["W_Q", "W_K", "W_V", "W_O"]),
        *_block_keys(1, ["W_Q", "W_K", "W_V", "W_O"]),
        "final_norm.g",
    ]
    mla = TinyDecoder(50, 16, 2, 4, attention="mla", d_latent=6, d_latent_q=5, d_rope=4,
                      norm="peri", seed=0)
    mla_weights = ["W_L", "W_LK", "W_LV", "W_LQ", "W_LQQ", "W_O", "W_QR", "W_KR"]
    assert list(mla.state_dict()) == [
        "E",
        *_block_keys(0, mla_weights, ["attn_out_norm.g", "ffn_out_norm.g"]),
        *_block_keys(1, mla_weights, ["attn_out_norm.g", "ffn_out_norm.g"]),
        "emb_norm.g",
        "final_norm.g",
    ]
    untied = TinyDecoder(50, 16, 1, 4, norm="post", tie_weights=False, seed=0)
    assert list(untied.state_dict()) == ["E", "W_out", *_block_keys(0, ["W_Q", "W_K", "W_V",
                                                                         "W_O"])]


# --- checks run at the entry points, never below them ------------------------------------


def _check_calls(fn) -> list[str]:
    """The attnlib checks (functions and methods named check, check_* or _check*) called,
    directly or not, while ``fn()`` runs, by name."""
    import sys
    from pathlib import Path

    import attnlib

    package, calls = str(Path(attnlib.__file__).parent), []

    def hook(frame, event, arg):
        code = frame.f_code
        if (event == "call" and code.co_filename.startswith(package)
                and (code.co_name == "check" or code.co_name.startswith(("check_", "_check")))):
            calls.append(code.co_name)

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


# The checks of the functional API (attention, grouped_query_attention, split_heads, RoPE's
# tables, the norms' functions): a module that calls the mathematics never runs them.
_FUNCTIONAL = {"_check_attention", "_check_grouped", "_check_split", "_check_latents",
               "_check_angle_inputs", "_check_rope_inputs", "_check_norm_inputs", "check_qkv",
               "check_attention_options", "_check_ffn_call"}


# What a layer checks inside a decoder's call, per step: its cache's append (a cache refuses
# rows that do not fit what it holds) and the public functions the layer calls.
_PER_LAYER = {"_check_new", "check_tensor"}


@pytest.mark.parametrize("attention", ["gqa", "mla"])
def test_a_decode_step_checks_the_decoders_arguments_and_no_module_again(attention):
    kw = {"d_latent": 6, "d_rope": 4} if attention == "mla" else {"n_kv_heads": 2}
    ids = torch.tensor([[1, 2, 3]])
    in_layers = {}
    for n_layers in (1, 3):
        model = TinyDecoder(30, 16, n_layers, 4, attention=attention, seed=0, **kw)
        caches = model.new_caches(12)
        with torch.no_grad():
            model(ids, caches=caches)
            steps = [_check_calls(lambda m=model, c=caches, t=t: m(torch.tensor([[t]]), caches=c))
                     for t in (4, 5, 6)]
        assert steps[0] == steps[1] == steps[2]  # every step alike
        decoder = _check_calls(lambda m=model, c=caches: m.check(torch.tensor([[1]]), c))
        assert steps[0][:len(decoder)] == decoder  # the decoder's check comes first
        in_layers[n_layers] = steps[0][len(decoder):]
        assert set(in_layers[n_layers]) <= _PER_LAYER, in_layers  # no module checks again
    assert len(in_layers[3]) == 3 * len(in_layers[1]) > 0


def test_generate_checks_its_own_arguments_once_not_per_step():
    model = TinyDecoder(30, 16, 2, 4, seed=0)
    ids = torch.tensor([[1, 2, 3]])
    calls = {n: _check_calls(lambda n=n: model.generate(ids, n)) for n in (1, 8)}
    for name in ("check", "check_nonnegative_int", "check_bool", "check_positive_int"):
        assert calls[1].count(name) == calls[8].count(name) > 0, name
    added = list(calls[8])
    for name in calls[1]:
        added.remove(name)
    assert added and set(added) <= _PER_LAYER, added  # what 7 more steps add


def test_a_module_called_on_its_own_checks_its_arguments():
    block = TransformerBlock(16, 4, n_kv_heads=2)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        calls = _check_calls(lambda: block(x, causal=True))
    assert calls.count("check") == 2  # the block's own (memory) and its attention layer's
    assert "check_input" in calls  # what the attention layer receives
    with pytest.raises(ValueError, match="x must have last dimension 16"):
        block(torch.randn(2, 5, 12), causal=True)


# --- the registry of attention variants --------------------------------------------------


def test_a_registered_variant_is_built_by_blocks_and_decoders():
    from attnlib.layers.gqa import GroupedQueryAttention
    from attnlib.layers.variants import ATTENTION, register_attention

    @register_attention("test-mqa")
    def build(d_model, n_heads, d_head, *, rope_base=None, device=None, dtype=None):
        return GroupedQueryAttention(d_model, n_heads, 1, d_head, rope_base=rope_base,
                                     device=device, dtype=dtype)

    try:
        model = TinyDecoder(30, 16, 2, 4, attention="test-mqa", seed=0)
        assert all(b.attn.n_kv_heads == 1 for b in model.blocks)
        ids = torch.tensor([[3, 1, 4]])
        assert torch.equal(model.generate(ids, 5), model.generate(ids, 5, use_cache=False))
        with pytest.raises(ValueError, match=r"d_latent applies to attention='mla' only"):
            TransformerBlock(16, 4, attention="test-mqa", d_latent=4)
        with pytest.raises(ValueError, match="is registered"):
            register_attention("test-mqa")(build)
    finally:
        del ATTENTION["test-mqa"]
    with pytest.raises(ValueError, match=r"attention must be one of \[.*'sliding'.*\]"):
        TransformerBlock(16, 4, attention="test-mqa")


@pytest.mark.parametrize("attention", ["gqa", "mla"])
def test_new_caches_with_room_equal_growing_caches(attention):
    from attnlib.serving.cache import StaticKVCache, StaticLatentCache

    kw = {"d_latent": 6, "d_rope": 4} if attention == "mla" else {"n_kv_heads": 2}
    model = TinyDecoder(30, 16, 2, 4, attention=attention, seed=0, **kw)
    static = model.new_caches(max_tokens=12)
    kind = StaticLatentCache if attention == "mla" else StaticKVCache
    assert all(type(c) is kind for c in static)
    growing = model.new_caches()
    ids = torch.randint(0, 30, (2, 10))
    with torch.no_grad():
        for piece in (ids[:, :4], ids[:, 4:5], ids[:, 5:]):
            torch.testing.assert_close(model(piece, caches=static), model(piece, caches=growing))
        assert [c.n_tokens for c in static] == [10, 10]
        with pytest.raises(ValueError, match="max_tokens=12"):
            model(ids[:, :3], caches=static)
