"""Shared fixtures: every test runs on the default device, and on CUDA too when present.

``ATTNLIB_DEVICE`` picks the default device (see :func:`attnlib.default_device`); with a
GPU, ``ATTNLIB_DEVICE=cuda pytest`` runs the whole suite there.
"""

from __future__ import annotations

import pytest
import torch

import attnlib


def _devices() -> list[torch.device]:
    devices = [attnlib.default_device()]
    if torch.cuda.is_available() and all(d.type != "cuda" for d in devices):
        devices.append(torch.device("cuda"))
    return devices


DEVICES = _devices()


@pytest.fixture(params=DEVICES, ids=[str(d) for d in DEVICES])
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device the suite runs on: the default one, plus CUDA when available."""
    return request.param


@pytest.fixture
def one_thread():
    """One torch thread for the test: small models train fastest so, on a busy machine by far."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """attnlib.viz returns figures and never shows them: a ``.show()`` fails the test."""
    import plotly.graph_objects as go

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("viz functions must return figures, never call .show()")

    monkeypatch.setattr(go.Figure, "show", refuse)
    monkeypatch.setattr("plotly.io.show", refuse)


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator, for tests that draw their own data."""
    return torch.Generator().manual_seed(1234)
