"""Running a reader's Triton kernel where its mistakes show: guard bands, unwritten outputs,
and, in Triton's interpreter, every address it touches.

A kernel that is wrong in its memory accesses often still returns the right numbers on the
interpreter: programs run one after another, so a stray store is overwritten by the program
that owns that element, or lands in memory nobody checks, or, past the end of an allocation,
corrupts the Python process itself. The checks of lesson 13 therefore run a reader's kernel
on tensors laid out to make each of those visible:

- every tensor lives inside a larger buffer (:class:`Guarded`): guard bands before and after
  it, a gap between its heads and padding at the end of each row, so that its strides differ
  from its row length and a small overrun lands in memory the check owns;
- outputs start filled with a NaN of a payload no arithmetic produces (:data:`UNWRITTEN`), so
  an element no program wrote is told apart from a NaN the kernel computed;
- after the launch, a guard band that changed is a store outside the tensor, an input that
  changed is a store into an input, and a payload NaN left in an output is an element never
  written;
- in the interpreter, :func:`launch` also watches each ``tl.load`` and ``tl.store`` before
  it happens: an address outside the tensor's elements (in a guard band, or outside every
  tensor the kernel was given) stops the kernel with :class:`CheckFailedError` before any byte
  is read or written there, so a store past the end cannot crash the kernel of Jupyter. The
  watch also records which rows of each tensor every program loaded, which is how a check
  sees that a causal kernel visits tiles it could skip.

On a GPU the kernel is compiled and runs unwatched; the guard bands and the payload NaNs
still catch a store that overruns by less than a tile, after the launch.

Lesson: 13_attention_as_a_kernel.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import triton
import triton.language as tl

import attnlib.kernels.triton_flash as _flash
from attnlib.exercises.implement import CheckFailedError

__all__ = ["GUARD", "UNWRITTEN", "CheckFailedError", "DotCount", "Guarded", "counted_dots",
           "far_head", "launch", "to_tf32", "watched"]

GUARD = 50.0
"""What the guard bands and the padding hold: a load that strays there reads 50s, which a
softmax cannot hide, and a store that strays there changes them."""

UNWRITTEN: dict[torch.dtype, tuple[torch.dtype, int]] = {
    torch.float32: (torch.int32, 0x7FC0DEAD),
    torch.float16: (torch.int16, 0x7D5A),
    torch.bfloat16: (torch.int16, 0x7FA5),
}
"""Per dtype, the bits of the NaN an output starts as (an integer view and its value); the
NaNs that arithmetic makes have other bits."""


class Guarded:
    """A tensor of ``shape`` inside a larger buffer, with guard bands, padded rows and a gap
    between heads.

    ``shape`` is ``(heads, rows, cols)``, ``(rows, cols)`` or ``(n,)``; element
    ``(h, r, c)`` lies at ``h * stride_h + r * stride_r + c`` from :attr:`view`'s first
    element, with ``stride_r = cols + pad_cols`` and ``stride_h = rows * stride_r +
    pad_rows * stride_r``. Everything that is not an element holds :data:`GUARD`.

    Args:
        name: the tensor's name in messages ("O", "dK").
        shape: its shape.
        dtype, device: where it lives.
        data: the input's values; ``None`` makes an output, filled with :data:`UNWRITTEN`.
        pad_cols: numbers of padding after each row (the row stride exceeds the row by it).
        pad_rows: rows of padding between heads.
        guard: rows of guard band before the first head and after the last.
    """

    def __init__(self, name: str, shape: Sequence[int], *, dtype: torch.dtype,
                 device: torch.device | str, data: torch.Tensor | None = None,
                 pad_cols: int = 0, pad_rows: int = 0, guard: int = 64) -> None:
        self.name, self.shape, self.dtype = name, tuple(shape), dtype
        self.output = data is None
        full = (1,) * (3 - len(self.shape)) + self.shape
        self.heads, self.rows, self.cols = full
        self.stride_r = self.cols + pad_cols
        self.stride_h = (self.rows + pad_rows) * self.stride_r
        self.before = guard * self.stride_r + 64
        size = self.before + self.heads * self.stride_h + self.before
        self.buffer = torch.full((size,), GUARD, dtype=dtype, device=device)
        self._view3 = self.buffer.as_strided(full, (self.stride_h, self.stride_r, 1),
                                             self.before)
        if self.output:
            int_dtype, bits = UNWRITTEN[dtype]
            self._view3.view(int_dtype).fill_(bits)
        else:
            self._view3.copy_(data.reshape(full))
        inside = torch.zeros(size, dtype=torch.bool)
        inside.as_strided(full, (self.stride_h, self.stride_r, 1), self.before).fill_(True)
        self.inside = inside.numpy()
        self.before_launch = self.buffer.clone()

    @property
    def view(self) -> torch.Tensor:
        """The tensor the kernel is given: ``shape``, inside the buffer."""
        return self._view3.reshape(self.shape) if len(self.shape) < 3 else self._view3

    @property
    def strides(self) -> tuple[int, ...]:
        """The strides of :attr:`view`, in elements: (``stride_h``,) ``stride_r``, 1."""
        return tuple(self.view.stride())

    def where(self, element: int) -> str:
        """Element ``element`` of the buffer, in words: which (head,) row and column, or which
        band of guard or padding."""
        off = element - self.before
        if off < 0:
            return f"{-off} numbers before {self.name}'s first element"
        h, rest = divmod(off, self.stride_h)
        r, c = divmod(rest, self.stride_r)
        if h >= self.heads:
            if len(self.shape) == 1:
                return f"{off - self.heads * self.stride_h + 1} numbers past {self.name}'s end"
            h = self.heads - 1  # counted in rows of the last head, into the guard band
            r, c = divmod(off - h * self.stride_h, self.stride_r)
            head = f"head {h}, " if len(self.shape) == 3 else ""
            return (f"{head}row {r}, column {c}, past its {self.rows} rows (the guard band "
                    f"after {self.name})")
        head = f"head {h}, " if len(self.shape) == 3 else ""
        if len(self.shape) == 1:
            return f"index {off}, past its {self.cols} elements" if c >= self.cols else \
                f"index {off}"
        if r >= self.rows:
            return (f"{head}row {r} of a tensor with {self.rows} rows (the gap between "
                    "heads)" if h < self.heads - 1 else f"{head}row {r}, past its {self.rows} rows")
        if c >= self.cols:
            return (f"{head}row {r}, column {c}, past the row's {self.cols} numbers (the "
                    f"padding before the next row: the row stride is {self.stride_r})")
        return f"{head}row {r}, column {c}"

    def rows_of(self, elements: np.ndarray) -> np.ndarray:
        """The (head-local) row of each element of the buffer given, for the watch's record."""
        return ((elements - self.before) % self.stride_h) // self.stride_r

    def heads_of(self, elements: np.ndarray) -> np.ndarray:
        """The head of each element of the buffer given."""
        return (elements - self.before) // self.stride_h

    def result(self) -> torch.Tensor:
        """A copy of the output, after the checks of :func:`launch`."""
        return self.view.clone()

    def check_after(self) -> None:
        """Raise :class:`CheckFailedError` if the kernel wrote outside this tensor, into it while
        it is an input, or left an element of it unwritten."""
        now, then = self.buffer.cpu(), self.before_launch.cpu()
        changed = (now.view(UNWRITTEN[self.dtype][0]) != then.view(UNWRITTEN[self.dtype][0]))
        changed = changed.numpy()
        if not self.output and changed.any():
            first = int(np.flatnonzero(changed)[0])
            raise CheckFailedError(f"the kernel stored into {self.name}, one of its inputs "
                               f"({self.where(first)}): only the outputs are written")
        outside = changed & ~self.inside
        if outside.any():
            first = int(np.flatnonzero(outside)[0])
            raise CheckFailedError(f"the kernel stored outside {self.name}, at "
                                   f"{self.where(first)}: a store needs the same mask as "
                                   "the load, so that the lanes past the end of the tensor "
                                   "write nothing")
        if self.output:
            int_dtype, bits = UNWRITTEN[self.dtype]
            left = (now.view(int_dtype) == bits).numpy() & self.inside
            if left.any():
                first = int(np.flatnonzero(left)[0])
                count = int(left.sum())
                raise CheckFailedError(f"{count} elements of {self.name} were never written, the "
                                   f"first at {self.where(first)}: every element needs a "
                                   "program that stores it (the grid, or a mask that is too "
                                   "strict?)")


class _Watch:
    """The addresses a launch may touch, the rows each program loaded and addressed, and the
    float32 products it asked at TF32."""

    def __init__(self, tensors: Sequence[Guarded]) -> None:
        self.tensors = list(tensors)
        self.loads: dict[str, dict[tuple[int, int, int], set[int]]] = {
            g.name: {} for g in self.tensors}
        self.addressed: dict[str, dict[tuple[int, int, int], set[tuple[int, int]]]] = {
            g.name: {} for g in self.tensors}
        self.tf32_dots = 0

    def check(self, ptrs: np.ndarray, mask: np.ndarray, store: bool, program) -> None:
        if not store:
            self._address(ptrs, program)
        active = ptrs[np.broadcast_to(mask, ptrs.shape)].astype(np.uint64).ravel()
        if active.size == 0:
            return
        verb = "stores to" if store else "loads from"
        claimed = np.zeros(active.shape, dtype=bool)
        for g in self.tensors:
            lo = g.buffer.data_ptr()
            size = g.buffer.element_size()
            mine = (active >= lo) & (active < lo + g.buffer.numel() * size)
            if not mine.any():
                continue
            claimed |= mine
            elements = ((active[mine] - lo) // size).astype(np.int64)
            stray = ~g.inside[elements]
            if stray.any():
                first = int(elements[stray][0])
                where = g.where(first)
                count = int(stray.sum())
                rule = ("a store needs a mask that turns off the lanes outside the tensor"
                        if store else "a load needs a mask (and other=) for the lanes outside "
                        "the tensor, and each row starts at the row stride, not the row length")
                if first < g.before:  # an offset below zero: no mask past the end helps
                    rule = (f"the offsets start before {g.name}'s first element: a tile's "
                            "first row or column is below zero there")
                raise CheckFailedError(f"the kernel {verb} {g.name} outside its elements, at "
                                       f"{where} ({count} of the {active.size} active lanes "
                                       f"of this {'store' if store else 'load'} do): {rule}")
            if store and not g.output:
                raise CheckFailedError(f"the kernel stores into {g.name}, one of its inputs "
                                   f"({g.where(int(elements[0]))}): only the outputs are "
                                   "written")
            if not store:
                rows = self.loads[g.name].setdefault(program, set())
                rows.update(int(r) for r in np.unique(g.rows_of(elements)))
        if not claimed.all():
            raise CheckFailedError(f"the kernel {verb} an address outside every tensor it was "
                               "given (a pointer offset far off: the strides, the program's "
                               "base offset?); the check stopped it before it touched memory")

    def _address(self, ptrs: np.ndarray, program) -> None:
        """Record the (head, row) pairs a load addresses, every lane counted, masked or not:
        a tile whose loads are all masked off was still visited. (A masked lane past a head's
        last row may address the next head's first rows; the record keeps the head.)"""
        lanes = np.asarray(ptrs).astype(np.uint64).ravel()
        for g in self.tensors:
            lo = g.buffer.data_ptr()
            size = g.buffer.element_size()
            mine = (lanes >= lo) & (lanes < lo + g.buffer.numel() * size)
            if mine.any():
                elements = ((lanes[mine] - lo) // size).astype(np.int64)
                elements = elements[g.inside[elements]]
                if elements.size:
                    rows = self.addressed[g.name].setdefault(program, set())
                    pairs = np.unique(np.stack((g.heads_of(elements), g.rows_of(elements))),
                                      axis=1)
                    rows.update(zip(pairs[0].tolist(), pairs[1].tolist(), strict=True))


def to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 numbers rounded to TF32's 10 bits of mantissa (to nearest, ties away from
    zero), as a GPU's tensor cores read float32 inputs at Triton's default precision."""
    bits = np.asarray(x, dtype=np.float32).view(np.int32)
    return ((bits + 0x1000) & -0x2000).view(np.float32)


@contextlib.contextmanager
def _replaced(obj: object, name: str, value: object) -> Iterator[None]:
    """``obj.name`` set to ``value`` while inside, then what it was (patches nest)."""
    missing = object()
    before = obj.__dict__.get(name, missing)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if before is missing:
            delattr(obj, name)
        else:
            setattr(obj, name, before)


@contextlib.contextmanager
def watched(tensors: Sequence[Guarded], *, tf32: bool = True) -> Iterator[_Watch]:
    """Check every load and store of the interpreter against ``tensors`` while inside, and
    (``tf32``) round the inputs of each float32 ``tl.dot`` that asks for TF32 as a GPU does."""
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    watch = _Watch(tensors)
    load, store, dot = builder.create_masked_load, builder.create_masked_store, \
        builder.create_dot

    def program():
        return tuple(int(i) for i in builder.grid_idx)

    def checked_load(ptrs, mask, other, cache_policy, is_volatile):
        watch.check(ptrs.data, mask.data, False, program())
        return load(ptrs, mask, other, cache_policy, is_volatile)

    def checked_store(ptrs, value, mask, cache_policy):
        watch.check(ptrs.data, mask.data, True, program())
        return store(ptrs, value, mask, cache_policy)

    def gpu_dot(a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype == tl.float32 and b.dtype == tl.float32 and \
                getattr(input_precision, "name", "") == "TF32":
            watch.tf32_dots += 1
            if tf32:
                a = interpreter.TensorHandle(to_tf32(a.data), a.dtype)
                b = interpreter.TensorHandle(to_tf32(b.data), b.dtype)
        return dot(a, b, d, input_precision, max_num_imprecise_acc)

    with _replaced(builder, "create_masked_load", checked_load), \
            _replaced(builder, "create_masked_store", checked_store), \
            _replaced(builder, "create_dot", gpu_dot):
        yield watch


def far_head(tensors: Sequence[Guarded]) -> int:
    """The head index that ``launch(..., far_heads=True)`` adds to grid axis 1: the least
    for which ``h * stride_h`` passes ``2**31`` for every tensor with heads (3-D), while a
    per-row tensor's ``h * N`` (``L`` and ``D``, 2-D) stays below it."""
    heads3 = [g for g in tensors if len(g.shape) == 3]
    if not heads3:
        raise ValueError("far_heads needs tensors with a head axis, (heads, rows, cols)")
    h0 = 2**31 // min(g.view.stride(0) for g in heads3) + 1
    for g in tensors:
        if len(g.shape) == 2 and (h0 + g.shape[0]) * g.view.stride(0) >= 2**31:
            raise ValueError(f"far_heads: {g.name}'s rows of {g.view.stride(0)} would pass "
                             "2**31 too; use tensors with more elements per head")
    return h0


@contextlib.contextmanager
def _far_heads(tensors: Sequence[Guarded]) -> Iterator[int]:
    """Inside: program_id(1) returns ``h + h0``, and each tensor of ``tensors`` reaches the
    kernel as a pointer ``h0`` heads before its first element."""
    from triton.runtime import interpreter

    h0 = far_head(tensors)
    shift = {g.view.data_ptr(): h0 * g.view.stride(0) * g.buffer.element_size()
             for g in tensors}
    builder = interpreter.interpreter_builder
    program_id, convert = builder.create_get_program_id, interpreter._implicit_cvt

    def far_program_id(axis):
        handle = program_id(axis)
        if axis == 1:
            handle = interpreter.TensorHandle(handle.data + np.int32(h0), handle.dtype)
        return handle

    def lowered(arg):
        out = convert(arg)
        if hasattr(arg, "data_ptr") and arg.data_ptr() in shift:
            out.handle.data = out.handle.data - np.uint64(shift[arg.data_ptr()])
        return out

    with _replaced(builder, "create_get_program_id", far_program_id), \
            _replaced(interpreter, "_implicit_cvt", lowered):
        yield h0


class DotCount:
    """The tile products (``tl.dot``) a launch made in the interpreter: ``shapes`` lists
    ``(m, n, k)`` of each, ``products`` counts them, ``flops`` adds ``2 m n k`` over them."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int, int]] = []

    @property
    def products(self) -> int:
        return len(self.shapes)

    @property
    def flops(self) -> int:
        return sum(2 * m * n * k for m, n, k in self.shapes)


@contextlib.contextmanager
def counted_dots() -> Iterator[DotCount]:
    """Count every ``tl.dot`` the interpreter computes while inside (the products of a
    kernel, measured on the kernel that runs rather than read off its source).

    Raises:
        RuntimeError: Triton is not interpreting (a compiled kernel's products cannot be
            seen from Python).

    Example:
        >>> import torch
        >>> from attnlib.kernels.triton_flash import flash_attention
        >>> q = torch.randn(1, 1, 32, 16)
        >>> with counted_dots() as count:
        ...     _ = flash_attention(q, q, q, block_m=16, block_n=16)
        >>> count.products  # 2 query tiles x 2 key tiles x (Q K^T, then P V)
        8
    """
    from triton.runtime import interpreter

    if not _flash.interpreting():
        raise RuntimeError("counted_dots needs Triton's interpreter (TRITON_INTERPRET=1, the "
                           "default without a GPU): a compiled kernel's products are not "
                           "visible from Python")
    builder = interpreter.interpreter_builder
    count = DotCount()
    dot = builder.create_dot

    def counting_dot(a, b, d, input_precision, max_num_imprecise_acc):
        m, k = a.data.shape[-2:]
        count.shapes.append((int(m), int(b.data.shape[-1]), int(k)))
        return dot(a, b, d, input_precision, max_num_imprecise_acc)

    with _replaced(builder, "create_dot", counting_dot):
        yield count


def is_kernel(fn: object) -> bool:
    """Whether ``fn`` is a Triton kernel (a function under ``@triton.jit``)."""
    return isinstance(fn, triton.runtime.KernelInterface)


def launch(kernel, grid: tuple[int, ...], args: Sequence[object], meta: dict,
           tensors: Sequence[Guarded] = (), *, tf32: bool = True,
           far_heads: bool = False) -> _Watch | None:
    """Run ``kernel[grid](*args, **meta)``, with every tensor of ``tensors`` checked.

    In the interpreter the loads and stores are watched as they happen, and a float32
    ``tl.dot`` left at TF32 computes as a GPU's would (``tf32=False`` turns that off); with
    ``far_heads`` the head index of grid axis 1 is raised past ``2**31 / stride_h``
    (:func:`far_head`), every tensor of ``tensors`` being indexed by head along its first
    axis. Compiled, the guard bands are checked afterwards, and neither emulation runs. An
    error inside the kernel is raised as itself (the interpreter wraps it), so a check shows
    the reader's own line, and a stub whose body is ``raise NotImplementedError`` counts as
    not implemented yet.

    Returns:
        The watch (its ``loads`` and ``addressed`` record which rows each program read and
        addressed, its ``tf32_dots`` the float32 products asked at TF32) in the
        interpreter, else None.

    Raises:
        TypeError: ``kernel`` is a plain Python function.
        CheckFailedError: a rule of memory broken, with where.
    """
    if not is_kernel(kernel):
        raise TypeError(f"{getattr(kernel, '__name__', 'the answer')} is a plain Python "
                        "function, not a Triton kernel: put @triton.jit on the line above "
                        "its def")
    watch = None
    try:
        if _flash.interpreting() and tensors:
            with contextlib.ExitStack() as stack:
                if far_heads:
                    stack.enter_context(_far_heads(tensors))
                watch = stack.enter_context(watched(tensors, tf32=tf32))
                kernel[grid](*args, **meta)
        else:
            kernel[grid](*args, **meta)
    except Exception as exc:
        inner = exc.__cause__
        if type(exc).__name__ == "InterpreterError" and isinstance(inner, Exception):
            raise inner.with_traceback(inner.__traceback__) from None
        if type(exc).__name__ == "CompilationError" and "NotImplementedError" in str(exc):
            raise NotImplementedError from None  # a compiled stub (on a GPU)
        raise
    for g in tensors:
        g.check_after()
    return watch


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)``, the number of blocks of ``b`` that cover ``a``."""
    return math.ceil(a / b)
