"""attnlib.core.heads: heads are column blocks, and the group map h -> h // (H // G)."""

from __future__ import annotations

import pytest
import torch

from attnlib import merge_heads, repeat_kv, split_heads
from attnlib.core.heads import kv_head_index


def test_split_heads_takes_column_blocks(gen):
    X = torch.randn(2, 5, 12, generator=gen)
    Xh = split_heads(X, 3)
    assert Xh.shape == (2, 3, 5, 4)
    for h in range(3):
        torch.testing.assert_close(Xh[:, h], X[..., 4 * h : 4 * (h + 1)])
    torch.testing.assert_close(merge_heads(Xh), X)


def test_heads_never_partition_the_input(gen):
    """Head h of X @ W_Q is X @ (column block h of W_Q): every head reads all of X."""
    X = torch.randn(3, 6, dtype=torch.float64, generator=gen)
    W_Q = torch.randn(6, 8, dtype=torch.float64, generator=gen)
    Qh = split_heads(X @ W_Q, 2)
    for h in range(2):
        torch.testing.assert_close(Qh[h], X @ W_Q[:, 4 * h : 4 * (h + 1)])


@pytest.mark.parametrize("H,G", [(8, 8), (8, 4), (8, 2), (8, 1), (6, 3)])
def test_group_map_matches_paper_one_based_formula(H, G):
    s = H // G
    paper = [(h1 - 1) // s + 1 for h1 in range(1, H + 1)]  # g(h) = floor((h-1)/s) + 1
    assert (kv_head_index(H, G) + 1).tolist() == paper


@pytest.mark.parametrize("H,G", [(4, 4), (4, 2), (4, 1), (6, 2)])
def test_repeat_kv_equals_index_select_and_repeat_interleave(H, G, gen):
    KV = torch.randn(2, G, 5, 3, generator=gen)
    out = repeat_kv(KV, H)
    assert out.shape == (2, H, 5, 3)
    torch.testing.assert_close(out, KV.index_select(1, kv_head_index(H, G)))
    torch.testing.assert_close(out, KV.repeat_interleave(H // G, dim=1))
    for h in range(H):
        torch.testing.assert_close(out[:, h], KV[:, h // (H // G)])
