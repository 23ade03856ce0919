"""Tests for attnlib.examples: the lessons' fixed data is what the lessons print, and the toy
layer is the documented seeded draw."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlib import examples


def _draw(d_in: int, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """The module's documented draw: X, then W_Q, W_K, W_V (d_in, 128), then W_O (128, d_in)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d_in, generator=gen, dtype=torch.float64)
    Ws = [torch.randn(d_in, 128, generator=gen, dtype=torch.float64) / math.sqrt(d_in)
          for _ in range(3)]
    W_O = torch.randn(128, d_in, generator=gen, dtype=torch.float64) / math.sqrt(128)
    return X.numpy(), *(W.numpy() for W in Ws), W_O.numpy()


def test_toy_database_is_the_lessons():
    assert examples.KEYS.tolist() == [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0],
                                      [1.0, 1.0]]
    assert examples.VALUES.tolist() == [[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [1.0, 4.0],
                                        [3.0, 1.0]]


def test_draw_layer_is_the_documented_draw_and_heads_are_column_blocks():
    X, W_Q, W_K, W_V, W_O = examples.draw_layer(3, 4, d_in=8, n_tokens=5, seed=2)
    ref = _draw(8, 5, 2)
    np.testing.assert_allclose(X.numpy(), ref[0])
    for got, full in zip((W_Q, W_K, W_V), ref[1:4], strict=True):
        np.testing.assert_allclose(got.numpy(), full[:, :12])
    np.testing.assert_allclose(W_O.numpy(), ref[4][:12])
    # at a fixed d_head, more heads keep the old ones
    assert torch.equal(examples.draw_layer(2, 4, d_in=8, n_tokens=5, seed=2)[1], W_Q[:, :8])
    # the defaults: the explorer's width and its six tokens
    assert examples.draw_layer(1, 2)[0].shape == (len(examples.TOKENS), examples.D_IN) == (6, 16)
