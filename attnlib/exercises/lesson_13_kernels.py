"""The Triton kernels behind exercise 13.2 (a fused row softmax): the right one and the
catalogued mistakes. Imported on first use of the check, since it imports triton (through
attnlib.kernels.triton_flash, which switches the interpreter on when no CUDA is present)."""

from __future__ import annotations

import triton
import triton.language as tl

import attnlib.kernels.triton_flash  # noqa: F401  (sets TRITON_INTERPRET before triton loads)


@triton.jit
def softmax_reference(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=ok, other=float("-inf"))
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=ok)


@triton.jit
def softmax_no_mask(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols)
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=cols < n_cols)


@triton.jit
def softmax_zero_padding(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=ok, other=0.0)
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=ok)


@triton.jit
def softmax_no_max(X, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=ok, other=float("-inf"))
    z = tl.exp(x)
    tl.store(Y + row * stride + cols, z / tl.sum(z, axis=0), mask=ok)


def launch(kernel, x):
    """Run ``kernel`` with one program per row of ``x`` (rows, n_cols), BLOCK the next power
    of two. ``x`` lies in a buffer one row longer, filled with 50s, so a load past a row's end
    reads the next row (or that extra row), the same on every run.

    An error inside the reader's kernel is raised as itself (the interpreter wraps it in an
    ``InterpreterError``), so that the check shows the reader's line and a kernel whose body
    is ``raise NotImplementedError`` counts as not implemented yet.
    """
    import torch

    if not isinstance(kernel, triton.runtime.KernelInterface):
        raise TypeError(f"{getattr(kernel, '__name__', 'the answer')} is a plain Python "
                        "function, not a Triton kernel: put @triton.jit on the line above "
                        "its def")
    rows, n = x.shape
    buf = torch.full((rows + 1, n), 50.0, dtype=x.dtype, device=x.device)
    buf[:rows] = x
    out = torch.zeros_like(buf)
    try:
        kernel[(rows,)](buf, out, n, n, BLOCK=triton.next_power_of_2(n))
    except Exception as exc:
        inner = exc.__cause__
        if type(exc).__name__ == "InterpreterError" and isinstance(inner, Exception):
            raise inner.with_traceback(inner.__traceback__) from None
        if type(exc).__name__ == "CompilationError" and "NotImplementedError" in str(exc):
            raise NotImplementedError from None  # a compiled stub (on a GPU)
        raise
    return out[:rows]
