"""Doctests of attnlib start from a known random state.

The docstring examples draw their tensors with ``torch.randn``; without a seed, an example
that compares two ways of computing the same thing could land, now and then, on a value
close enough to zero that the default relative tolerance of ``torch.allclose`` fails it.
"""

from __future__ import annotations

import pytest
import torch
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def _seed_doctests(request: pytest.FixtureRequest) -> None:
    if isinstance(request.node, DoctestItem):
        torch.manual_seed(0)
