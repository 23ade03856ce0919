"""Tests for attnlib.viz.kernels: the causal tiles against the explicit N x N mask, and the
backward's memory against what each path must keep (the N x N weights for the naive one;
Q, K, V, O and L for the tiled one)."""

from __future__ import annotations

import pytest
import torch

from attnlib.viz.kernels import backward_memory_table, causal_tiles, causal_tiles_figure


@pytest.mark.parametrize(("n", "bm", "bn"), [(64, 16, 16), (50, 16, 16), (40, 8, 16), (7, 4, 2)])
def test_causal_tiles_follow_the_explicit_mask(n, bm, bn):
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    fate = causal_tiles(n, bm, bn)
    for i in range(fate.shape[0]):
        for j in range(fate.shape[1]):
            tile = keep[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            expected = 0 if not tile.any() else 2 if tile.all() else 1
            assert fate[i, j] == expected, (i, j)


def test_causal_tiles_figure_counts_in_its_title():
    fig = causal_tiles_figure(128, 16, 16)
    fate = causal_tiles(128, 16, 16)
    assert fig.layout.title.text == (
        f"Causal tiles at N = 128: {int((fate == 0).sum())} skipped, "
        f"{int((fate == 1).sum())} masked, {int((fate == 2).sum())} whole")
    assert int((fate == 0).sum()) == 8 * 7 // 2  # the strict upper triangle of 8 x 8 tiles


def test_backward_memory_is_quadratic_for_the_naive_path_and_linear_for_the_tiled():
    d = 8
    table = backward_memory_table([64, 128], d=d, block=16)
    for n in (64, 128):
        row = table.loc[n]
        assert row["naive: largest in backward"] == n * n
        assert row["tiled: largest in backward"] < n * n // 4
        # Q, K, V, O (n x d each) and L (n), float32, rounded to 0.1 KB
        assert row["tiled: KB saved"] == pytest.approx((4 * n * d + n) * 4 / 1024, abs=0.1)
        assert row["naive: KB saved"] * 1024 >= n * n * 4  # at least the weights P


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="block_m"):
        causal_tiles(8, 0, 4)
    with pytest.raises(ValueError, match="block"):
        backward_memory_table([8], block=0)
