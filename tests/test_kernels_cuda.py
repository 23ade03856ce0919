"""The Triton kernels and lesson 13's kernel checks, compiled on a CUDA GPU.

Skipped without one. On a GPU (``ATTNLIB_DEVICE=cuda pytest tests/test_kernels_cuda.py``)
the kernels are compiled rather than interpreted, the checks' cases are made on the GPU
(:func:`attnlib.default_device`), and the guard bands, not the interpreter's watch, catch
a stray store. Every shipped kernel is compared with SDPA and autograd in each dtype it
takes, and every exercise check accepts the right answers and refuses each catalogued
mistake with its hint, as on the CPU (where the catalogue holds a mistake only the
interpreter's watch sees, a compiled run leaves it out).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU: the compiled kernels are tested on a GPU only (the CPU runs "
                "the same kernels in the interpreter, in test_kernels_triton.py and "
                "test_exercises_13.py)", allow_module_level=True)

triton = pytest.importorskip("triton")

from attnlib_testing import assert_correct, assert_hint  # noqa: E402
from test_exercises_13 import LABELS, RIGHT, _catalogue  # noqa: E402

from attnlib.exercises import implement  # noqa: E402
from attnlib.kernels import triton_flash  # noqa: E402

# Float16 and bfloat16 tiles with float32 sums: the error against float64 grows with the
# dtype's rounding, not with the length.
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def test_the_kernels_are_compiled_not_interpreted():
    assert not triton_flash.interpreting()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("N", "M", "causal"), [(40, 40, False), (40, 40, True),
                                                 (24, 57, True), (130, 130, True)])
@pytest.mark.parametrize("blocks", [(16, 16), (64, 32), (32, 64)])
def test_flash_attention_matches_sdpa_and_autograd_on_the_gpu(dtype, N, M, causal, blocks):
    g = torch.Generator(device="cuda").manual_seed(N + M)
    Q, dO = (torch.randn(2, 4, N, 64, device="cuda", generator=g) for _ in range(2))
    K, V = (torch.randn(2, 2, M, 64, device="cuda", generator=g) for _ in range(2))
    keep = torch.ones(N, M, dtype=torch.bool, device="cuda").tril(M - N) if causal else None
    mine = [x.to(dtype).requires_grad_() for x in (Q, K, V)]
    ref = [x.double().requires_grad_() for x in (Q, K, V)]
    out = triton_flash.flash_attention(*mine, causal=causal, block_m=blocks[0],
                                       block_n=blocks[1])
    out_ref = F.scaled_dot_product_attention(*ref, attn_mask=keep, enable_gqa=True)
    got = (out, *torch.autograd.grad(out, mine, dO.to(dtype)))
    expected = (out_ref, *torch.autograd.grad(out_ref, ref, dO.double()))
    for name, a, b in zip(("O", "dQ", "dK", "dV"), got, expected, strict=True):
        assert a.dtype == dtype, name
        error = ((a.double() - b).abs().max() / b.abs().max()).item()
        assert error < TOL[dtype], (name, error)


@pytest.mark.parametrize("label", LABELS)
def test_the_right_answers_pass_on_the_gpu(label, capsys):
    assert_correct(label, RIGHT[label], capsys)


@pytest.mark.parametrize(("label", "k"), list(_catalogue()))
def test_every_catalogued_mistake_is_refused_on_the_gpu(label, k, capsys):
    mistake = implement.catalogue(label)[k]  # a compiled run's catalogue: no watch-only one
    assert_hint(label, mistake.fn, mistake.hint, capsys)
