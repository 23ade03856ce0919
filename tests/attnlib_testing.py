"""Helpers shared by attnlib's tests (imported as a plain module, not a conftest)."""

from __future__ import annotations

import torch


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """``assert_close`` tolerances fitting each dtype's precision."""
    return {
        torch.float64: {"atol": 1e-10, "rtol": 1e-10},
        torch.float32: {"atol": 1e-5, "rtol": 1e-5},
        torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    }[dtype]


def assert_correct(label: str, answer: object, capsys) -> None:
    """``exercises.check(label, answer)`` accepts the answer and prints exactly that."""
    from attnlib import exercises

    result = exercises.check(label, answer)
    assert result.status == "correct" and result
    assert capsys.readouterr().out == f"{label}: correct.\n"


def assert_hint(label: str, answer: object, hint: str, capsys) -> None:
    """``exercises.check(label, answer)`` rejects the answer; its printed message holds ``hint``."""
    from attnlib import exercises

    result = exercises.check(label, answer)
    assert result.status == "incorrect" and not result
    out = capsys.readouterr().out
    assert out == result.message + "\n" and out.startswith(f"{label}: "), out
    assert hint in out, out


def randomise(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Replace every parameter with random numbers, so gains of 1 and biases of 0 hide nothing."""
    with torch.no_grad():
        for p in module.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device)
            p.copy_(0.5 * noise + (1.0 if p.dim() == 1 else 0.0))

