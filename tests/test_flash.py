"""tiled_attention: the online softmax equals attention exactly, block size notwithstanding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import tolerances

from attnlib import attention, causal_mask, tiled_attention


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
