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


# --- the tile walk -----------------------------------------------------------------------

from attnlib.kernels.backward import tiled_forward  # noqa: E402
from attnlib.viz.kernels import (  # noqa: E402
    MEMORY_LENGTHS,
    WALK_VIEWS,
    backward_memory_figure,
    tile_budget,
    tile_walk,
    tile_walk_figure,
)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("n", "bm", "bn"), [(64, 16, 16), (48, 16, 8), (40, 8, 16)])
def test_every_loop_visits_exactly_the_tiles_not_skipped(n, bm, bn, causal):
    fate = causal_tiles(n, bm, bn)
    expected = {(i, j) for i in range(fate.shape[0]) for j in range(fate.shape[1])
                if not causal or fate[i, j] > 0}
    for view in WALK_VIEWS:
        visited = [(s["i"], s["j"]) for s in tile_walk(n, bm, bn, causal, view)]
        assert len(visited) == len(set(visited)) and set(visited) == expected, view


def test_forward_walk_ends_each_query_tile_at_the_output_and_its_log_sum_exp():
    n, bm, bn = 48, 16, 8
    steps = tile_walk(n, bm, bn, True, "forward")
    gen = torch.Generator().manual_seed(0)  # tile_walk's inputs
    Q, K, V = (torch.randn(1, 1, n, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    O, L = tiled_forward(Q, K, V, causal=True, block_m=bm, block_n=bn)
    for k, s in enumerate(steps):
        last = k == len(steps) - 1 or steps[k + 1]["i"] != s["i"]
        if last:  # the tile's last key block: acc / l is the output, m + log l is L
            as_t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
            torch.testing.assert_close(as_t(s["output so far"]), O[0, 0, s["i"] * bm])
            lse = as_t(s["m"]) + as_t(s["l"]).log()
            torch.testing.assert_close(lse, L[0, 0, s["i"] * bm:(s["i"] + 1) * bm])
        if k and steps[k - 1]["i"] == s["i"]:  # the running max never falls
            assert all(b >= a for a, b in zip(steps[k - 1]["m"], s["m"], strict=True))


def test_backward_walks_follow_the_two_kernels_bounds_and_count_their_reads():
    n, bm, bn, d = 64, 16, 8, 8
    dkdv = tile_walk(n, bm, bn, True, "backward: dK, dV")
    dq = tile_walk(n, bm, bn, True, "backward: dQ")
    # the dK/dV kernel: key tile j from query block max(0, j * bn) // bm on, in order
    assert [(s["i"], s["j"]) for s in dkdv] == [
        (i, j) for j in range(n // bn) for i in range(j * bn // bm, n // bm)]
    # the dQ kernel: query tile i over the key tiles before min(n, (i + 1) * bm)
    assert [(s["i"], s["j"]) for s in dq] == [
        (i, j) for i in range(n // bm) for j in range(-(-min(n, (i + 1) * bm) // bn))]
    last_of_key_tile_0 = [s for s in dkdv if s["j"] == 0][-1]
    assert last_of_key_tile_0["read"] == {"Q": n * d, "dO": n * d, "L": n, "D": n,
                                          "K": bn * d, "V": bn * d}
    last_of_query_tile_3 = [s for s in dq if s["i"] == 3][-1]
    keys = 4 * bm
    assert last_of_query_tile_3["read"] == {"Q": bm * d, "dO": bm * d, "L": bm, "D": bm,
                                            "K": keys * d, "V": keys * d}


def test_tile_walk_figure_marks_one_tile_in_flight_and_the_visited_before_it():
    for view in WALK_VIEWS:
        steps = tile_walk(64, 16, 16, True, view)
        for k in (0, 4, len(steps) - 1, len(steps) + 5):
            z = [list(r) for r in tile_walk_figure(64, 16, 16, True, k, view).data[0].z]
            flat = [c for row in z for c in row]
            shown = min(k, len(steps) - 1)
            assert flat.count(3) == 1 and flat.count(2) == shown
            assert z[steps[shown]["i"]][steps[shown]["j"]] == 3
            assert flat.count(0) == 6  # the strict upper triangle of 4 x 4 tiles


def test_tile_budget_matches_the_lessons_count():
    assert tile_budget(16, 16, 64) == (7.0, 8.0)
    assert tile_budget(128, 128, 128) == (160.0, 128.0)
    assert tile_budget(64, 64, 64, in_bytes=4) == ((64 * 64 * 8 + 64 * 64 * 4) / 1024, 64.0)


def test_memory_figure_grows_quadratically_for_the_naive_path_and_linearly_for_the_tiled():
    fig = backward_memory_figure(2048, 32, 64)
    naive, tiled = (dict(zip(t.x, t.y, strict=True)) for t in fig.data[:2])
    assert tuple(fig.data[0].x) == MEMORY_LENGTHS
    assert 3.5 < naive[2048] / naive[1024] < 4.5
    assert 1.9 < tiled[2048] / tiled[1024] < 2.1
    registers, shared = fig.data[2], fig.data[3]
    assert (registers.y[0], shared.y[0]) == tile_budget(64, 64, 32)
    assert (registers.y[1], shared.y[1]) == tile_budget(64, 64, 32, in_bytes=4)


def test_walk_and_memory_arguments_name_themselves():
    with pytest.raises(ValueError, match="view must be one of"):
        tile_walk(32, 16, 16, True, "sideways")
    with pytest.raises(ValueError, match="n must be at least 128; got 64"):
        backward_memory_figure(64)
    with pytest.raises(ValueError, match="block_n"):
        tile_budget(16, 0, 64)
