"""Tests for attnlib.viz.kvcache (lesson 05): tables against the cache formula written out,
operation counts against explicit sums, timings against TinyDecoder.generate, and the
explorer's figures (rounded data, trace types the site draws, a twin under 300 KB)."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib
import attnlib.viz as viz
from attnlib.analysis.experiments import kvcache as ek
from attnlib.analysis.memory import PRESETS
from attnlib.viz import kvcache as vk

SHAPE = dict(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, d_head=4, d_ff=40, vocab_size=30)


def test_decode_timings_generate_the_tokens_of_generate():
    model = attnlib.TinyDecoder(vocab_size=40, d_model=16, n_layers=2, n_heads=2, seed=0)
    ids = torch.tensor([[3, 1, 4]])
    for use_cache in (True, False):
        out, secs = ek.decode_timings(model, ids, 6, use_cache=use_cache, repeats=2)
        assert torch.equal(out, model.generate(ids, 6, use_cache=use_cache))
        assert len(secs) == 6 and all(s > 0 for s in secs)


def test_timing_figure_gives_tokens_per_second_and_the_speed_up():
    pos = np.arange(16, 80)
    cached = np.full(len(pos), 1e-3)  # 64 passes of 1 ms: 1,000 tokens/s
    recomputed = np.full(len(pos), 4e-3)  # 250 tokens/s
    fig = vk.timing_figure(pos, cached, recomputed)
    names = [t.name for t in fig.data]
    assert names == ["with the cache: 1,000 tokens/s", "recomputing everything: 250 tokens/s"]
    assert "64 new tokens" in fig.layout.title.text and "(4.0× faster)" in fig.layout.title.text
    assert all(isinstance(t, go.Scatter) for t in fig.data)
    with pytest.raises(ValueError, match="same, nonzero length"):
        vk.timing_figure(pos, cached[:3], recomputed)


def test_macs_table_is_the_closed_forms():
    table = ek.macs_table([5, 40], **SHAPE)
    width = SHAPE["n_layers"] * SHAPE["n_heads"] * SHAPE["d_head"]
    for N in (5, 40):
        assert table.loc[N, "attention, recomputing"] == sum(2 * width * n * n
                                                            for n in range(1, N + 1))
        assert table.loc[N, "attention, cached"] == sum(2 * width * n for n in range(1, N + 1))
    assert (table["total, recomputing"] > table["total, cached"]).all()


def _held_tokens(spec, n_tokens):
    """Tokens the cache holds, counted layer by layer: a window layer keeps at most w."""
    return sum(min(n_tokens, spec.window) if layer < spec.n_window_layers else n_tokens
               for layer in range(spec.n_layers))


def _cache_by_layers(spec, n_tokens, batch=1, n_b=2):
    per_layer = (spec.d_latent + spec.d_rope if spec.d_latent
                 else 2 * spec.n_kv_heads * spec.d_head)
    return per_layer * n_b * _held_tokens(spec, n_tokens) * batch


def _first_n_past(spec, weights, batch=1, n_b=2):
    """The largest N whose cache is at most the weights, by bisection on the layer count
    (None when even 2^40 tokens stay below them)."""
    if _cache_by_layers(spec, 2**40, batch, n_b) <= weights:
        return None
    lo, hi = 0, 2**40
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _cache_by_layers(spec, mid, batch, n_b) <= weights else (lo, mid)
    return lo


def test_preset_table_is_the_formula_with_windows_counted_layer_by_layer():
    table = ek.preset_table(131_072)
    for name, spec in PRESETS.items():
        per_layer = (spec.d_latent + spec.d_rope if spec.d_latent
                     else 2 * spec.n_kv_heads * spec.d_head)
        per_token = spec.n_layers * per_layer * 2
        assert table.loc[name, "cache bytes per token"] == per_token
        cache = _cache_by_layers(spec, 131_072)
        assert table.loc[name, "cache GB at 131,072"] == round(cache / 1e9, 1)
        assert table.loc[name, "weights GB"] == round(2 * spec.n_params / 1e9, 1)
        equal = _first_n_past(spec, 2 * spec.n_params)
        assert table.loc[name, "tokens = weights"] == ("never" if equal is None else equal)
    assert table.loc["Llama 3 70B", "cache bytes per token"] == 327_680
    assert table.loc["Gemma 3 27B", "cache GB at 131,072"] == 11.2  # not 66.6: 52 local layers
    assert table.loc["Gemma 3 27B", "window (layers)"] == "1,024 (52)"
    assert table.loc["Mistral 7B", "tokens = weights"] == "never"


def test_memory_table_and_figure_agree_with_the_formula():
    table = ek.memory_table()
    assert len(table) == len(ek.MEMORY_SETTINGS)
    for model, context, batch, dtype in ek.MEMORY_SETTINGS:
        spec = PRESETS[model]
        n_b = {"fp32": 4, "bf16": 2, "fp8": 1}[dtype]
        cache = _cache_by_layers(spec, context, batch, n_b)
        weights = 2 * spec.n_params
        row = table.loc[(model, context, batch, dtype)]
        assert row["cache GB"] == round(cache / 1e9, 1)
        assert row["cache / weights"] == round(cache / weights, 2)
        assert row["N where equal"] == _first_n_past(spec, weights, batch, n_b)
        fig = vk.memory_figure(model=model, context=context, batch=batch, dtype=dtype)
        assert fig.data[2].y[0] == pytest.approx(cache / 1e9, abs=1e-3)
        assert fig.data[1].y[0] == pytest.approx(weights / 1e9, abs=1e-3)
        assert f"{cache / 1e9:.1f} GB of cache" in fig.layout.title.text


def test_mistral_figure_says_its_windows_cap_the_cache():
    fig = vk.memory_figure(model="Mistral 7B", context=1_048_576)
    assert "windows keep the cache below the weights" in fig.layout.title.text
    assert fig.data[0].y[-1] == fig.data[0].y[2]  # flat from 4,096 tokens on


def test_llama3_70b_figure_numbers():
    fig = vk.memory_figure()
    assert "42.9 GB of cache, 141.1 GB of weights" in fig.layout.title.text
    assert "327,680 bytes per token" in fig.layout.title.text


def test_twin_is_small_and_draws_only_scatter():
    fig = viz.twin(vk.memory_figure, ("model", "context", "batch", "dtype"),
                   list(ek.MEMORY_SETTINGS))
    assert {t.type for t in fig.data} == {"scatter"}
    assert len(json.dumps(fig.to_plotly_json())) < 300_000
    assert len(fig.layout.sliders[0].steps) == len(ek.MEMORY_SETTINGS)


def test_reservation_table_counts_blocks():
    table = ek.reservation_table([1, 16, 17], max_tokens=64, block_tokens=16, bytes_per_token=10)
    assert table.loc["preallocated", "tokens reserved"] == 3 * 64
    assert table.loc["paged", "tokens reserved"] == 16 + 16 + 32
    assert table.loc["exact", "tokens reserved"] == 34
    assert table.loc["exact", "used %"] == 100.0


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: vk.memory_figure(model="GPT-5"), ValueError, r"model must be one of"),
        (lambda: vk.memory_figure(dtype="int4"), ValueError, r"dtype must be one of"),
        (lambda: vk.memory_figure(batch=0), ValueError, r"batch .*got 0"),
        (lambda: ek.reservation_table([9], max_tokens=8, block_tokens=4, bytes_per_token=1),
         ValueError, r"lengths must be at most max_tokens=8; got 9"),
        (lambda: ek.macs_table([0], **SHAPE), ValueError, r"n_passes.*got 0"),
    ],
)
def test_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
