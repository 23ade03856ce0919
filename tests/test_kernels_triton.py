"""The Triton FlashAttention-2 kernels against SDPA, a row-by-row loop and autograd.

On a machine without CUDA the kernels run in Triton's interpreter: the root ``conftest.py``
sets ``TRITON_INTERPRET=1`` for the test session (attnlib never sets it); shapes are small so
that this file runs in about a minute there. With CUDA the ``device`` fixture adds a compiled
run.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import attention_loop

triton_flash = pytest.importorskip("attnlib.kernels.triton_flash")
flash_attention = triton_flash.flash_attention

# (H, G, N, M, d): N a multiple of the block, N not (19, 40), GQA, more keys than queries,
# d < 16, more queries than keys (causal: the first N - M rows see no key)
SHAPES = [(2, 2, 32, 32, 16), (4, 2, 19, 19, 16), (2, 1, 40, 40, 8), (2, 2, 10, 24, 16),
          (4, 2, 37, 9, 16)]


def _runs_on(device: torch.device) -> bool:
    return device.type == "cuda" or triton_flash.interpreting()


def _qkv(shape, device, dtype=torch.float32, seed=0):
    H, G, N, M, d = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen).to(device, dtype)  # noqa: E731
    return (make(2, H, N, d).requires_grad_(), make(2, G, M, d).requires_grad_(),
            make(2, G, M, d).requires_grad_())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_output_and_gradients_match_the_reference(shape, causal, device):
    if not _runs_on(device):
        pytest.skip("the compiled kernels need CUDA; the interpreter runs on the CPU")
    Q, K, V = _qkv(shape, device)
    ref = _reference(Q, K, V, causal)
    dO = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)).to(device)
    want = torch.autograd.grad(ref, (Q, K, V), dO)
    O = flash_attention(Q, K, V, causal=causal)
    got = torch.autograd.grad(O, (Q, K, V), dO)
    tol = {"atol": 2e-5, "rtol": 2e-5} if device.type == "cpu" else {"atol": 2e-3, "rtol": 2e-3}
    torch.testing.assert_close(O, ref, **tol)
    for name, g, w in zip("QKV", got, want, strict=True):
        torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"d{n}: {m}")


def test_block_sizes_change_nothing_but_the_tiling(device):
    if not _runs_on(device):
        pytest.skip("needs CUDA or the interpreter")
    Q, K, V = _qkv((2, 2, 37, 37, 16), device)
    a = flash_attention(Q, K, V, causal=True, block_m=16, block_n=32)
    b = flash_attention(Q, K, V, causal=True, block_m=32, block_n=16)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _reference(Q, K, V, causal):
    """SDPA with the bottom-right mask where every row sees a key, else the row-by-row loop."""
    N, M = Q.shape[2], K.shape[2]
    if causal and N > M:
        return attention_loop(Q, K, V, causal=True)
    mask = torch.ones(N, M, dtype=torch.bool, device=Q.device).tril(M - N) if causal else None
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("blocks", [(16, 32), (32, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_at_unequal_blocks_with_more_keys_than_queries(blocks, causal, device):
    """The backward kernels at block_m != block_n, M > N (a decoding step with a cache) and
    lengths that are no multiple of either block: the causal bounds of both kernels, the
    bottom-right alignment, and the masks of every load and store meet here."""
    if not _runs_on(device):
        pytest.skip("needs CUDA or the interpreter")
    Q, K, V = _qkv((4, 2, 40, 57, 16), device, seed=3)
    ref = _reference(Q, K, V, causal)
    dO = torch.randn(ref.shape, generator=torch.Generator().manual_seed(4)).to(device)
    want = torch.autograd.grad(ref, (Q, K, V), dO)
    O = flash_attention(Q, K, V, causal=causal, block_m=blocks[0], block_n=blocks[1])
    got = torch.autograd.grad(O, (Q, K, V), dO)
    tol = {"atol": 2e-5, "rtol": 2e-5} if device.type == "cpu" else {"atol": 2e-3, "rtol": 2e-3}
    torch.testing.assert_close(O, ref, **tol)
    for name, g, w in zip("QKV", got, want, strict=True):
        torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"d{n}: {m}")


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 4e-3), (torch.bfloat16, 2e-2)])
def test_16_bit_tiles_accumulate_in_float32(dtype, tol, device):
    """16-bit inputs give 16-bit outputs within a few of their units in the last place of the
    float32 answer on the same (rounded) inputs: the products accumulate in float32."""
    if not _runs_on(device):
        pytest.skip("needs CUDA or the interpreter")
    Q, K, V = (x.detach().to(dtype).requires_grad_() for x in _qkv((4, 2, 37, 45, 16), device))
    O = flash_attention(Q, K, V, causal=True, block_m=16, block_n=32)
    assert O.dtype == dtype
    ref = _reference(*(x.detach().float().requires_grad_() for x in (Q, K, V)), True)
    torch.testing.assert_close(O.float(), ref, atol=tol, rtol=tol)
    dO = torch.randn(O.shape, generator=torch.Generator().manual_seed(5)).to(device)
    got = torch.autograd.grad(O, (Q, K, V), dO.to(dtype))
    assert all(g.dtype == dtype for g in got)


def test_float64_is_refused_by_name():
    Q = torch.randn(1, 2, 8, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"float16, bfloat16 or float32.*got torch.float64"):
        flash_attention(Q, Q, Q)


def test_bad_arguments_name_the_rule():
    Q, K = torch.randn(1, 3, 20, 16), torch.randn(1, 2, 20, 16)
    with pytest.raises(ValueError, match="H=3, G=2"):
        flash_attention(Q, K, K)
    with pytest.raises(ValueError, match=r"block_n must be a power of two of at least 16.*24"):
        flash_attention(Q, Q, Q, block_n=24)
    with pytest.raises(ValueError, match=r"Q must have 4 dimensions \(B, H, N, d\)"):
        flash_attention(Q[0], Q[0], Q[0])
    with pytest.raises(ValueError, match=r"scale must be a finite positive number \(> 0\); got -1"):
        flash_attention(Q, Q, Q, scale=-1.0)


def test_a_missing_triton_raises_one_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    monkeypatch.delitem(sys.modules, "attnlib.kernels.triton_flash", raising=False)
    with pytest.raises(ImportError, match=r"pip install triton.*Colab's torch brings it"):
        importlib.import_module("attnlib.kernels.triton_flash")
    monkeypatch.delitem(sys.modules, "attnlib.kernels.triton_flash", raising=False)


def test_importing_attnlib_kernels_imports_no_triton():
    code = ("import sys, attnlib.kernels\n"
            "assert 'triton' not in sys.modules, 'triton imported'\n"
            "assert 'attnlib.kernels.triton_flash' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("blocks", [(16, 16), (16, 32)])
def test_rows_with_no_key_give_zeros_and_zero_gradients(blocks, device):
    """Causal, 40 queries over 6 keys: queries 0 to 33 see no key, across three query tiles.
    Their O is 0, their L is -inf, their dQ is 0 and nothing is NaN; the interpreter warns of
    no invalid arithmetic (no -inf - -inf)."""
    if not _runs_on(device):
        pytest.skip("needs CUDA or the interpreter")
    Q, K, V = _qkv((2, 1, 40, 6, 16), device, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        O = flash_attention(Q, K, V, causal=True, block_m=blocks[0], block_n=blocks[1])
        dO = torch.ones_like(O)
        grads = torch.autograd.grad(O, (Q, K, V), dO)
        _, L = triton_flash.flash_forward(Q.detach(), K.detach(), V.detach(), True, 0.25,
                                          *blocks)
    assert (O[:, :, :34] == 0).all() and (L[:, :, :34] == float("-inf")).all()
    assert L[:, :, 34:].isfinite().all()
    assert all(g.isfinite().all() for g in grads) and (grads[0][:, :, :34] == 0).all()
    ref = attention_loop(Q, K, V, causal=True)
    want = torch.autograd.grad(ref, (Q, K, V), dO)
    torch.testing.assert_close(O, ref, atol=2e-5, rtol=2e-5)
    for g, w in zip(grads, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=2e-5)


def test_strided_views_are_read_in_place(device):
    """Q, K and V as views of one (B, N, H + 2G, 24) projection: heads split by a transpose,
    the first 16 of 24 columns, so that no stride is a row length. The forward launcher takes
    them as they are, and the gradients reach the projection through the views."""
    if not _runs_on(device):
        pytest.skip("needs CUDA or the interpreter")
    gen = torch.Generator().manual_seed(7)
    X = torch.randn(2, 21, 4 + 2 + 2, 24, generator=gen).to(device).requires_grad_()

    def views(X):
        return [x.transpose(1, 2)[..., :16] for x in X.split([4, 2, 2], dim=2)]

    Q, K, V = views(X.detach())
    assert Q.stride() == (21 * 8 * 24, 24, 8 * 24, 1) and not K.is_contiguous()
    O, _ = triton_flash.flash_forward(Q, K, V, True, 0.25, 16, 16)
    ref = F.scaled_dot_product_attention(*views(X), scale=0.25, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(O, ref.detach(), atol=2e-5, rtol=2e-5)
    got = torch.autograd.grad(flash_attention(*views(X), causal=True, scale=0.25).sum(), X)[0]
    want = torch.autograd.grad(ref.sum(), X)[0]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    assert (got[..., 16:] == 0).all()  # the columns past 16 are no input's


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python, with ``TRITON_INTERPRET`` unset unless given in ``env``."""
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=300, env={**clean, **env})


def test_attnlib_leaves_the_environment_alone():
    """Importing attnlib, its kernels and lesson 13's exercise kernels sets no variable: with
    TRITON_INTERPRET unset the kernels are compiled, and on a CPU tensor they say what to do."""
    done = _run(
        "import os, torch\n"
        "before = dict(os.environ)\n"
        "import attnlib, attnlib.kernels\n"
        "from attnlib.kernels import triton_flash\n"
        "from attnlib.exercises import lesson_13_kernels\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "assert not triton_flash.interpreting()\n"
        "q = torch.randn(1, 1, 16, 16)\n"
        "try:\n"
        "    triton_flash.flash_attention(q, q, q)\n"
        "except ValueError as e:\n"
        "    assert \"os.environ['TRITON_INTERPRET'] = '1'\" in str(e), e\n"
        "else:\n"
        "    raise AssertionError('a CPU tensor reached a compiled kernel')\n")
    assert done.returncode == 0, done.stderr


def test_the_interpreter_is_what_the_environment_said_at_import():
    done = _run(
        "import os\n"
        "from attnlib.kernels import triton_flash\n"
        "assert triton_flash.interpreting()\n"
        "os.environ['TRITON_INTERPRET'] = '0'  # too late: the kernels were made\n"
        "assert triton_flash.interpreting()\n", TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr


# A code cell that makes a Triton kernel or imports attnlib's or the exercises' kernels.
KERNEL_CELL = re.compile(r"@triton\.jit|triton_flash|lesson_13_kernels|exercises\.lesson_13 import")


def test_lessons_that_run_kernels_turn_the_interpreter_on_first():
    """attnlib sets nothing, so a lesson that makes or imports a Triton kernel sets
    TRITON_INTERPRET itself, without a GPU, in a code cell before the first such cell."""
    lessons = sorted((Path(__file__).resolve().parents[1] / "lessons").glob("[0-9][0-9]_*.ipynb"))
    found = []
    for path in lessons:
        code = [re.sub(r"#.*", "", c.source) for c in nbformat.read(path, as_version=4).cells
                if c.cell_type == "code"]  # without comments
        first = next((i for i, src in enumerate(code) if KERNEL_CELL.search(src)), None)
        if first is None:
            continue
        found.append(path.stem[:2])
        sets = [i for i, src in enumerate(code) if 'device.type != "cuda"' in src
                and 'os.environ["TRITON_INTERPRET"] = "1"' in src]
        assert sets and sets[0] < first, f"{path.name}: no interpreter cell before cell {first}"
    assert found == ["13", "14"], found
