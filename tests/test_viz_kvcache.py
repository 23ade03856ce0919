"""Tests for attnlib.viz.kvcache (lesson 05): tables against the cache formula written out,
operation counts against explicit sums, timings against TinyDecoder.generate, and the
explorer's figures (rounded data, trace types the site draws, a twin under 300 KB)."""

from __future__ import annotations

import json
import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import attnlib
import attnlib.viz as viz
from attnlib.memory import PRESETS
from attnlib.viz import kvcache as vk

SHAPE = dict(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, d_head=4, d_ff=40, vocab_size=30)


def test_decode_timings_generate_the_tokens_of_generate():
    model = attnlib.TinyDecoder(vocab_size=40, d_model=16, n_layers=2, n_heads=2, seed=0)
    ids = torch.tensor([[3, 1, 4]])
    for use_cache in (True, False):
        out, secs = vk.decode_timings(model, ids, 6, use_cache=use_cache, repeats=2)
        assert torch.equal(out, model.generate(ids, 6, use_cache=use_cache))
        assert len(secs) == 6 and all(s > 0 for s in secs)


def test_timing_figure_fits_through_block_minima():
    pos = np.arange(16, 80)
    cached = np.full(len(pos), 1e-3)
    recomputed = 1e-5 * pos.astype(float) ** 1.5
    recomputed[::7] *= 20  # interruptions: the block minima skip them
    fig = vk.timing_figure(pos, cached, recomputed)
    names = [t.name for t in fig.data]
    assert names == ["with the cache: exponent 0.00", "recomputing everything: exponent 1.50"]
    assert all(isinstance(t, go.Scatter) for t in fig.data)


def test_macs_table_is_the_closed_forms():
    table = vk.macs_table([5, 40], **SHAPE)
    width = SHAPE["n_layers"] * SHAPE["n_heads"] * SHAPE["d_head"]
    for N in (5, 40):
        assert table.loc[N, "attention, recomputing"] == sum(2 * width * n * n
                                                            for n in range(1, N + 1))
        assert table.loc[N, "attention, cached"] == sum(2 * width * n for n in range(1, N + 1))
    assert (table["total, recomputing"] > table["total, cached"]).all()


def test_preset_table_is_the_formula():
    table = vk.preset_table(1000)
    for name, spec in PRESETS.items():
        per_layer = (spec.d_latent + spec.d_rope if spec.d_latent
                     else 2 * spec.n_kv_heads * spec.d_head)
        per_token = spec.n_layers * per_layer * 2
        assert table.loc[name, "cache bytes per token"] == per_token
        assert table.loc[name, "cache GB at 1,000"] == round(per_token * 1000 / 1e9, 1)
        assert table.loc[name, "weights GB"] == round(2 * spec.n_params / 1e9, 1)
        assert table.loc[name, "tokens = weights"] == 2 * spec.n_params // per_token
    assert table.loc["Llama 3 70B", "cache bytes per token"] == 327_680


def test_memory_table_and_figure_agree_with_the_formula():
    table = vk.memory_table()
    assert len(table) == len(vk.MEMORY_SETTINGS)
    for model, context, batch, dtype in vk.MEMORY_SETTINGS:
        spec = PRESETS[model]
        n_b = {"fp32": 4, "bf16": 2, "fp8": 1}[dtype]
        cache = spec.kv_bytes_per_token(n_b) * context * batch
        weights = 2 * spec.n_params
        row = table.loc[(model, context, batch, dtype)]
        assert row["cache GB"] == round(cache / 1e9, 1)
        assert row["cache / weights"] == round(cache / weights, 2)
        assert row["N where equal"] == math.floor(weights / (cache / context))
        fig = vk.memory_figure(model=model, context=context, batch=batch, dtype=dtype)
        assert fig.data[2].y[0] == pytest.approx(cache / 1e9, abs=1e-3)
        assert fig.data[1].y[0] == pytest.approx(weights / 1e9, abs=1e-3)
        assert f"{cache / 1e9:.1f} GB of cache" in fig.layout.title.text


def test_llama3_70b_figure_numbers():
    fig = vk.memory_figure()
    assert "42.9 GB of cache, 141.1 GB of weights" in fig.layout.title.text
    assert "327,680 bytes per token" in fig.layout.title.text


def test_twin_is_small_and_draws_only_scatter():
    fig = viz.twin(vk.memory_figure, ("model", "context", "batch", "dtype"),
                   list(vk.MEMORY_SETTINGS))
    assert {t.type for t in fig.data} == {"scatter"}
    assert len(json.dumps(fig.to_plotly_json())) < 300_000
    assert len(fig.layout.sliders[0].steps) == len(vk.MEMORY_SETTINGS)


def test_reservation_table_counts_blocks():
    table = vk.reservation_table([1, 16, 17], max_tokens=64, block_tokens=16, bytes_per_token=10)
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
        (lambda: vk.reservation_table([9], max_tokens=8, block_tokens=4, bytes_per_token=1),
         ValueError, r"lengths must be at most max_tokens=8; got 9"),
        (lambda: vk.macs_table([0], **SHAPE), ValueError, r"n_passes.*got 0"),
    ],
)
def test_bad_input_names_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
