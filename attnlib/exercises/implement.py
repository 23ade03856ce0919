"""The implementation form of an exercise: the reader writes a function, the check runs it.

``check("02.5", my_function)`` runs ``my_function`` on a fixed list of small seeded
:class:`Case` s and compares what it returns with attnlib's reference on each. On a
mismatch the check runs the exercise's catalogue of *mistakes*, each a wrong reference
that makes one of the chapter's misconceptions; when the reader's answer does what a
mistake does on every case (the same outputs, or the same error), the hint names that
misconception. Otherwise the hint says which case failed first, its shapes, the largest
difference and where it is, and names no mistake.

An exception raised by the reader's code is reported as theirs: its type, its message and
the lines of the reader's own code it passed through, never the checker's frames. A stub
whose body is ``raise NotImplementedError`` gives "not implemented yet".

Registering an implementation exercise: decorate a function that takes no argument and
returns an :class:`Implementation` with ``@implementation("NN.k")``.

Example:
    >>> from attnlib.exercises import check
    >>> def attend(Q, K, V):
    ...     raise NotImplementedError
    >>> check("02.5", attend).status  # doctest: +ELLIPSIS
    02.5: not implemented yet. Replace the line `raise NotImplementedError` with your code ...
    'unanswered'
    >>> def attend(Q, K, V):  # the literal softmax
    ...     A = (Q @ K.mT / Q.shape[-1] ** 0.5).exp()
    ...     return A / A.sum(dim=-1, keepdim=True) @ V
    >>> check("02.5", attend).status  # doctest: +ELLIPSIS
    02.5: e^x overflows to inf for logits above about 88.7 in float32 ...
    'incorrect'

Lesson: the implementation exercises of lessons 01-10 (first used in
01_attention_as_lookup).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["Case", "Implementation", "Mistake", "catalogue", "exercise", "implementation",
           "implementation_labels", "run_implementation"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_ATTNLIB = os.path.dirname(_HERE)

# Tolerances per dtype: (rtol, atol), atol relative to the largest |expected| entry.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-9, 1e-11),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


@dataclass(frozen=True)
class Case:
    """One input on which the reader's function runs.

    Attributes:
        name: what the case tests, a few words ("float32 logits up to 200").
        run: ``run(fn)`` calls the reader's object ``fn`` on the case's inputs (fresh
            copies at every call) and returns a tensor or a tuple of tensors.
        shapes: the inputs' shapes as printed in a hint, ``"Q (2, 3, 4), K (2, 5, 4)"``.
        statistical: the outputs are ``R`` replicates of a random estimate along axis 0;
            two functions agree when the means of their replicates agree within
            ``z`` standard errors (see :func:`_close_statistical`).
    """

    name: str
    run: Callable[[object], object]
    shapes: str = ""
    statistical: bool = False


@dataclass(frozen=True)
class Mistake:
    """A wrong implementation that makes one misconception, and the hint that names it."""

    fn: object
    hint: str


@dataclass(frozen=True)
class Implementation:
    """What an implementation exercise checks.

    Attributes:
        what: what the reader writes, for the messages ("a function attend(Q, K, V)").
        reference: the right implementation (built on attnlib).
        cases: the cases, in the order they are tried.
        mistakes: the catalogued misconceptions, tried in order.
        z: for statistical cases, how many standard errors two means may differ by.
        outputs: the names of the outputs in the messages (``("dQ", "dK", "dV")``);
            "output 0", "output 1", ... when empty.
    """

    what: str
    reference: object
    cases: Sequence[Case]
    mistakes: Sequence[Mistake] = field(default_factory=tuple)
    z: float = 5.0
    outputs: Sequence[str] = ()


_IMPLEMENTATIONS: dict[str, Callable[[], Implementation]] = {}


def exercise(label: str) -> Implementation:
    """What implementation exercise ``label`` checks, built afresh: its reference, its cases
    and its catalogue of mistakes.

    Raises:
        ValueError: ``label`` is not an implementation exercise.
    """
    if label not in _IMPLEMENTATIONS:
        raise ValueError(f"label must name an implementation exercise, one of "
                         f"{implementation_labels()}; got {label!r}")
    return _IMPLEMENTATIONS[label]()


def catalogue(label: str) -> tuple[Mistake, ...]:
    """The catalogued mistakes of implementation exercise ``label``, in the order they are
    tried (each ``fn`` can be handed to ``check`` as a reader's answer)."""
    return tuple(exercise(label).mistakes)


def implementation_labels() -> list[str]:
    """The labels of the implementation exercises, sorted."""
    return sorted(_IMPLEMENTATIONS)


def implementation(label: str) -> Callable[[Callable[[], Implementation]], Callable]:
    """Register ``spec() -> Implementation`` as implementation exercise ``label``."""

    def add(spec: Callable[[], Implementation]) -> Callable[[], Implementation]:
        from attnlib.exercises import checker  # the package imports this module first

        def check_implementation(answer: object) -> str | None:
            return run_implementation(spec(), answer)

        def mistakes() -> list[tuple[object, str]]:
            return [(m.fn, m.hint) for m in spec().mistakes]

        check_implementation.__module__ = spec.__module__  # the lesson's module
        checker(label, mistakes=mistakes)(check_implementation)
        _IMPLEMENTATIONS[label] = spec
        return spec

    return add


class _ReaderError(Exception):
    """The reader's code raised; ``text`` is the message to show."""

    def __init__(self, text: str, not_implemented: bool = False):
        super().__init__(text)
        self.text = text
        self.not_implemented = not_implemented


class NotImplementedYetError(Exception):
    """Raised by :func:`run_implementation` when the reader's stub is still a stub."""


class CheckFailedError(Exception):
    """Raised by a case's ``run`` when the reader's code broke a rule the outputs alone do
    not show (a store outside a tensor, an element never written, a tile that should have
    been skipped); the message says which and where."""


def _theirs(exc: BaseException) -> str:
    """The reader's exception, with the frames of their own code only (no file paths)."""
    hidden = [_ATTNLIB, os.path.dirname(torch.__file__)]
    if "triton" in sys.modules:  # Triton's launcher and interpreter, around a reader's kernel
        hidden.append(os.path.dirname(sys.modules["triton"].__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(tuple(hidden))]
    lines = [f"  in {f.name}, line {f.lineno}: {(f.line or '').strip()}" for f in frames[-3:]]
    detail = str(exc).strip().splitlines()
    head = f"{type(exc).__name__}: {detail[0]}" if detail else type(exc).__name__
    return "\n".join([*lines, f"  {head}"])


def _outputs(out: object) -> tuple[object, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _run(case: Case, fn: object, *, reader: bool) -> tuple[object, ...]:
    """The outputs of ``fn`` on ``case``; the reader's exceptions become :class:`_ReaderError`."""
    if not reader:
        return _outputs(case.run(fn))
    try:
        return _outputs(case.run(fn))
    except NotImplementedError as exc:
        raise _ReaderError("", not_implemented=True) from exc
    except CheckFailedError as exc:
        raise _ReaderError(f"case '{case.name}'"
                           f"{' (' + case.shapes + ')' if case.shapes else ''} fails: "
                           f"{exc}.") from exc
    except Exception as exc:
        raise _ReaderError(f"your code raised an error on case '{case.name}'"
                      f"{' (' + case.shapes + ')' if case.shapes else ''}:\n"
                      f"{_theirs(exc)}") from exc


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for n in reversed(shape):
        index.append(flat % n)
        flat //= n
    return tuple(reversed(index))


_FLOAT32_ONLY = "is right only to float32's precision"


def differ(got: object, expected: torch.Tensor, name: str) -> str | None:
    """Why one output differs from the expected tensor, or None when it agrees."""
    if not isinstance(got, torch.Tensor):
        return f"{name} is a {type(got).__name__}, expected a tensor"
    if got.shape != expected.shape:
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        if got.dtype != expected.dtype:
            return f"{name} has dtype {got.dtype}, expected {expected.dtype}"
        wrong = (got != expected).nonzero()
        if len(wrong):
            where = tuple(int(i) for i in wrong[0])
            return (f"{name} differs in {len(wrong)} entries, first at {where} "
                    f"(expected {expected[where].item()}, got {got[where].item()})")
        return None
    if got.dtype != expected.dtype:
        return (f"{name} has dtype {got.dtype}, expected {expected.dtype}: compute in the "
                "inputs' dtype")
    rtol, atol = TOLERANCES.get(expected.dtype, (1e-3, 1e-3))
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    finite = e.abs().nan_to_num(nan=0.0, posinf=0.0)
    largest = max(float(finite.max()) if e.numel() else 0.0, 1.0)
    if torch.allclose(g, e, rtol=rtol, atol=atol * largest, equal_nan=True):
        return None
    f32_rtol, f32_atol = TOLERANCES[torch.float32]
    if expected.dtype == torch.float64 and torch.allclose(
            g, e, rtol=f32_rtol, atol=f32_atol * largest, equal_nan=True) and \
            torch.equal(g.float().double().nan_to_num(), g.nan_to_num()):
        # close to float32's precision and every entry a float32 number: computed in float32
        off = (g - e).abs().nan_to_num(nan=0.0).max().item()
        return (f"{name} {_FLOAT32_ONLY} (off by up to {off:.2g}): "
                "compute in the input's dtype, float64 here, with no .float() or float32 "
                "tensor of your own on the way")
    bad = ~torch.isfinite(g) & torch.isfinite(e)
    if bool(bad.any()):
        where = _index(int(bad.flatten().nonzero()[0]), g.shape)
        return f"{name} holds {g[where].item()} at {where}, where {e[where].item():.4g} is expected"
    diff = (g - e).abs().nan_to_num(nan=0.0)
    where = _index(int(diff.flatten().argmax()), g.shape)
    x, y = e[where].item(), g[where].item()
    digits = next((k for k in range(4, 17) if f"{x:.{k}g}" != f"{y:.{k}g}"), 17)
    return (f"{name} is off by up to {diff[where].item():.3g} at {where} "
            f"(expected {x:.{digits}g}, got {y:.{digits}g})")


def _close_statistical(got: object, expected: torch.Tensor, name: str, z: float) -> str | None:
    """Replicate means within ``z`` combined standard errors, or why not."""
    if not isinstance(got, torch.Tensor):
        return f"{name} is a {type(got).__name__}, expected a tensor"
    if got.shape != expected.shape:
        return f"{name} has shape {tuple(got.shape[1:])}, expected {tuple(expected.shape[1:])}"
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    if not bool(torch.isfinite(g).all()):
        return f"{name} holds nan or inf"
    R = g.shape[0]
    se = ((g.var(dim=0) + e.var(dim=0)) / R).sqrt() + 1e-12
    score = ((g.mean(dim=0) - e.mean(dim=0)).abs() / se)
    if bool((score <= z).all()):
        return None
    where = _index(int(score.flatten().argmax()), score.shape)
    return (f"the mean of {name} over {R} seeds is {g.mean(dim=0)[where].item():.4g} at "
            f"{where}, expected {e.mean(dim=0)[where].item():.4g} "
            f"({score[where].item():.0f} standard errors away)")


def _mismatch(got: tuple, expected: tuple, case: Case, z: float,
              names: Sequence[str] = ()) -> str | None:
    if len(got) != len(expected):
        return f"returned {len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        name = names[k] if k < len(names) else \
            "the output" if len(expected) == 1 else f"output {k}"
        why = _close_statistical(g, e, name, z) if case.statistical else differ(g, e, name)
        if why:
            return why
    return None


@dataclass(frozen=True)
class _Raised:
    """A case on which the code raised: the exception's type and text, and for the reader's
    code the message to show."""

    kind: type
    text: str
    shown: str = ""


def _outcome(case: Case, fn: object, *, reader: bool) -> tuple[object, ...] | _Raised:
    """The outputs of ``fn`` on ``case``, or what it raised."""
    try:
        return _run(case, fn, reader=reader)
    except _ReaderError as raised:
        if raised.not_implemented:
            raise NotImplementedYetError from None
        cause = raised.__cause__
        return _Raised(type(cause), str(cause), raised.text)
    except Exception as exc:
        return _Raised(type(exc), str(exc))


def _same(a: object, b: object, case: Case, z: float) -> bool:
    """Two outcomes of one case agree: the same error, or outputs within tolerance."""
    if isinstance(a, _Raised) or isinstance(b, _Raised):
        return isinstance(a, _Raised) and isinstance(b, _Raised) and \
            (a.kind, a.text) == (b.kind, b.text)
    return _mismatch(a, b, case, z) is None


def _matching_mistake(spec: Implementation, got: list) -> str | None:
    """The hint of the first mistake that does what the reader's code did on every case."""
    for mistake in spec.mistakes:
        if all(_same(g, _outcome(case, mistake.fn, reader=False), case, spec.z)
               for g, case in zip(got, spec.cases, strict=True)):  # stops at a disagreement
            return mistake.hint
    return None


def run_implementation(spec: Implementation, answer: object) -> str | None:
    """Run the reader's ``answer`` on every case; a hint, or None when it is right.

    The message for a wrong answer is the first case it raised on (its error, as the
    reader's), or else the first case whose outputs differ, with where; a catalogued
    mistake that does the same on every case puts its hint first (an error) or in its
    place (outputs).

    Raises:
        NotImplementedYetError: the reader's code raised ``NotImplementedError``.
    """
    if not callable(answer):
        return f"expected {spec.what}; got a {type(answer).__name__}."
    # the reader's outcomes first: a stub costs no reference run
    got = [_outcome(case, answer, reader=True) for case in spec.cases]
    raised = [g for g in got if isinstance(g, _Raised)]
    if raised:
        hint = _matching_mistake(spec, got)
        return raised[0].shown if hint is None else f"{hint}\n{raised[0].shown}"
    expected = [_run(case, spec.reference, reader=False) for case in spec.cases]
    failures = [(i, _mismatch(g, e, spec.cases[i], spec.z, spec.outputs))
                for i, (g, e) in enumerate(zip(got, expected, strict=True))]
    failures = [(i, why) for i, why in failures if why]
    if not failures:
        return None
    hint = _matching_mistake(spec, got)
    if hint is not None:
        return hint
    # a case that fails by more than float32's rounding says more than one that fails only
    # by it (a small term misplaced elsewhere also looks like float32 there)
    coarse = [(i, why) for i, why in failures if _FLOAT32_ONLY not in why]
    i, why = (coarse or failures)[0]
    case = spec.cases[i]
    shapes = f"; inputs {case.shapes}" if case.shapes else ""
    return f"case {i + 1} of {len(spec.cases)} ('{case.name}'{shapes}) fails: {why}."


def generator(seed: int) -> torch.Generator:
    """A CPU generator with ``seed``, for building a case's inputs."""
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64,
          scale: float = 1.0) -> torch.Tensor:
    """Seeded standard normal entries (drawn in float64, then cast: the same on every CPU)."""
    return (scale * torch.randn(*shape, generator=generator(seed), dtype=torch.float64)).to(dtype)


def shapes(**tensors: torch.Tensor) -> str:
    """``"Q (2, 3, 4), K (2, 5, 4)"``, the shapes a hint prints."""
    return ", ".join(f"{k} {tuple(v.shape)}" for k, v in tensors.items())


def function_case(name: str, inputs: dict[str, object], **kwargs: object) -> Case:
    """A case that calls ``fn(*inputs.values(), **kwargs)`` on fresh copies of the tensors."""

    def run(fn: Callable) -> object:
        args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs.values()]
        return fn(*args, **kwargs)

    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    return Case(name, run, shapes(**tensors))
