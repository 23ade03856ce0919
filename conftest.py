"""Every pytest session of the repository: Triton's interpreter without a GPU, and doctests
of attnlib from a known random state.

Triton decides whether a kernel is compiled or interpreted when ``@triton.jit`` decorates it,
from ``TRITON_INTERPRET`` in the environment at that moment. attnlib never sets it; without
CUDA this file does, for the session, before any test or docstring imports a kernel (attnlib's,
lesson 13's exercises', a test's own), as lessons 13 and 14 do in their second cell.

The docstring examples draw their tensors with ``torch.randn``; without a seed, an example
that compares two ways of computing the same thing could land, now and then, on a value
close enough to zero that the default relative tolerance of ``torch.allclose`` fails it.
"""

from __future__ import annotations

import os

import pytest
import torch
from _pytest.doctest import DoctestItem

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed_doctests(request: pytest.FixtureRequest) -> None:
    if isinstance(request.node, DoctestItem):
        torch.manual_seed(0)
