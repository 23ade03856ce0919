"""attnlib.serving.streaming: the sink cache keeps the first and the last tokens; a window as
long as
the sequence is the full cache; the first layer's values equal a recomputation."""

from __future__ import annotations

import pytest
import torch

from attnlib.layers import TinyDecoder
from attnlib.layers.sliding import WindowCache
from attnlib.serving.streaming import (
    SinkCache,
    held_values,
    kept_positions,
    recomputed_logits,
    rolling_logits,
)


@pytest.fixture(scope="module")
def model():
    return TinyDecoder(vocab_size=11, d_model=16, n_layers=3, n_heads=2, seed=0,
                       dtype=torch.float64)


def _ids(B=2, N=14, seed=0):
    return torch.randint(0, 11, (B, N), generator=torch.Generator().manual_seed(seed))


def test_sink_cache_keeps_sinks_and_window_and_no_sinks_is_a_window_cache():
    sink, window = SinkCache(window=3, n_sink=2), WindowCache(window=3)
    plain = SinkCache(window=3, n_sink=0)
    for t in range(9):
        row = torch.full((1, 1, 2, 1), float(t))  # two tokens per call
        sink.append(row, row)
        window.append(row, row)
        plain.append(row, row)
    assert sink.K.flatten().tolist() == [0.0, 0.0, 7.0, 8.0, 8.0]
    assert torch.equal(plain.K, window.K) and plain.n_tokens == window.n_tokens == 18
    assert kept_positions(3, window=3, n_sink=2) == [0, 1, 2, 3]
    assert kept_positions(10, window=3, n_sink=0) == [8, 9, 10]


def test_a_long_window_is_the_full_cache(model):
    ids = _ids()
    full = model(ids)
    torch.testing.assert_close(rolling_logits(model, ids, window=None), full)
    torch.testing.assert_close(rolling_logits(model, ids, window=10, n_sink=4), full)
    torch.testing.assert_close(recomputed_logits(model, ids, window=10, n_sink=4), full)


def test_recomputed_logits_run_each_position_afresh(model):
    ids = _ids(N=12, seed=1)
    got = recomputed_logits(model, ids, window=3, n_sink=2, chunk=4)
    for p in range(12):
        kept = torch.tensor(kept_positions(p, 3, 2))
        torch.testing.assert_close(got[:, p], model(ids[:, kept])[:, -1])


def test_rolling_logits_read_only_the_kept_tokens_in_the_first_layer():
    # one layer: the cached values and keys depend on the token alone, so the rolling
    # cache and the recomputation differ only by the kept keys' positions; with no RoPE
    # they agree exactly
    one = TinyDecoder(vocab_size=11, d_model=16, n_layers=1, n_heads=2, seed=2,
                      rope_base=None, dtype=torch.float64)
    ids = _ids(N=13, seed=2)
    torch.testing.assert_close(rolling_logits(one, ids, window=4, n_sink=1),
                               recomputed_logits(one, ids, window=4, n_sink=1))


def test_held_values_agree_in_the_first_layer_only(model):
    ids = _ids(N=16, seed=3)
    rolled, fresh = held_values(model, ids, window=4, n_sink=2)
    assert rolled[0].shape[-2] == fresh[0].shape[-2] == 6
    torch.testing.assert_close(rolled[0], fresh[0])
    assert all(not torch.allclose(r, f, atol=1e-4) for r, f in zip(rolled[1:], fresh[1:],
                                                                    strict=True))


def test_errors():
    with pytest.raises(ValueError, match="n_sink"):
        SinkCache(window=3, n_sink=-1)
    with pytest.raises(ValueError, match="window"):
        SinkCache(window=0)
