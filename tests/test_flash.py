"""tiled_attention and online_softmax: the online softmax equals attention exactly, block size
notwithstanding, and a row that sees no key gives zeros and L = -inf."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import attention_loop, tolerances

from attnlib import attention, causal_mask, tiled_attention
from attnlib.analysis.flash import online_softmax
from attnlib.core.masks import query_positions


@pytest.mark.parametrize("block_size", [1, 3, 16, 64, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa(device, block_size, causal, gen):
    Q = torch.randn(2, 3, 20, 8, generator=gen, dtype=torch.float64).to(device)
    K = torch.randn(2, 3, 37, 8, generator=gen, dtype=torch.float64).to(device)
    V = torch.randn(2, 3, 37, 5, generator=gen, dtype=torch.float64).to(device)
    mask = causal_mask(20, 37, device=device) if causal else None
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    out = tiled_attention(Q, K, V, block_size=block_size, causal=causal)
    torch.testing.assert_close(out, ref)


def test_more_queries_than_keys_gives_zero_rows():
    Q = torch.randn(6, 4, dtype=torch.float64)
    K = torch.randn(3, 4, dtype=torch.float64)
    V = torch.randn(3, 2, dtype=torch.float64)
    out = tiled_attention(Q, K, V, block_size=2, causal=True)
    torch.testing.assert_close(out, attention(Q, K, V, causal=True, impl="explicit"))
    assert (out[:3] == 0).all()


@pytest.mark.parametrize("block_size", [1, 2, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_more_queries_than_keys_against_a_loop_forward_and_backward(block_size, causal, device):
    """9 queries over 4 keys: causal, the first 5 see no key; their gradients are zero too."""
    gen = torch.Generator().manual_seed(3)
    Q, K, V = (torch.randn(2, 3, n, 4, generator=gen, dtype=torch.float64).to(device)
               .requires_grad_() for n in (9, 4, 4))
    out = tiled_attention(Q, K, V, block_size=block_size, causal=causal)
    ref = attention_loop(Q, K, V, causal=causal)
    torch.testing.assert_close(out, ref)
    dO = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(device)
    for got, want in zip(torch.autograd.grad(out, (Q, K, V), dO),
                         torch.autograd.grad(ref, (Q, K, V), dO), strict=True):
        assert got.isfinite().all()
        torch.testing.assert_close(got, want)
    if causal:
        assert (out[..., :5, :] == 0).all()


def test_online_softmax_returns_the_log_sum_exp(device, gen):
    Q, K, V = (torch.randn(2, n, 4, generator=gen, dtype=torch.float64).to(device)
               for n in (6, 3, 3))
    Y, L = online_softmax(Q, K, V, scale=0.5, block_size=2)
    torch.testing.assert_close(L, torch.logsumexp(0.5 * Q @ K.mT, dim=-1))
    Y, L = online_softmax(Q, K, V, scale=0.5, block_size=2,
                          positions=query_positions(6, 3, device=device))
    S = (0.5 * Q @ K.mT).masked_fill(~causal_mask(6, 3, device=device), float("-inf"))
    torch.testing.assert_close(L, torch.logsumexp(S, dim=-1))  # -inf where a row sees nothing
    assert (L[:, :3] == float("-inf")).all() and (Y[:, :3] == 0).all()


def test_online_softmax_calls_on_tile_with_the_running_state(gen):
    Q, K, V = (torch.randn(n, 4, generator=gen, dtype=torch.float64) for n in (3, 5, 5))
    seen = []
    _, L = online_softmax(Q, K, V, scale=1.0, block_size=2,
                          on_tile=lambda j0, m, l, acc: seen.append((j0, m.clone(), l.clone())))
    assert [j0 for j0, _, _ in seen] == [0, 2, 4]
    S = Q @ K.T
    torch.testing.assert_close(seen[0][1], S[:, :2].amax(-1, keepdim=True))
    torch.testing.assert_close(seen[-1][1] + seen[-1][2].log(), L[:, None])


def test_non_contiguous_inputs(device, gen):
    """Heads cut from a (B, N, 3, d) tensor and the first 5 of its 8 columns: strided views."""
    X = torch.randn(2, 17, 3, 8, generator=gen, dtype=torch.float64).to(device)
    Q, K, V = (x.transpose(1, 2)[..., :5] for x in X.split([1, 1, 1], dim=2))
    assert not Q.is_contiguous()
    out = tiled_attention(Q, K, V, block_size=4, causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(Q, K, V, is_causal=True))


def test_huge_logits_and_float32(device):
    Q = torch.randn(1, 64, 16, device=device) * 100
    K = torch.randn(1, 64, 16, device=device) * 100
    V = torch.randn(1, 64, 16, device=device)
    out = tiled_attention(Q, K, V, block_size=8)
    assert torch.isfinite(out).all()
    ref = F.scaled_dot_product_attention(Q.double(), K.double(), V.double())
    torch.testing.assert_close(out.double(), ref, **tolerances(torch.float32))


def test_bfloat16(device, gen):
    Q, K, V = (torch.randn(1, 2, 33, 16, generator=gen).to(device) for _ in range(3))
    out = tiled_attention(Q.bfloat16(), K.bfloat16(), V.bfloat16(), block_size=8, causal=True)
    assert out.dtype == torch.bfloat16
    ref = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    torch.testing.assert_close(out.float(), ref, **tolerances(torch.bfloat16))
