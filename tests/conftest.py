"""Shared fixtures: every test runs on the default device, and on CUDA too when present.

``ATTNLIB_DEVICE`` picks the default device (see :func:`attnlib.default_device`); with a
GPU, ``ATTNLIB_DEVICE=cuda pytest`` runs the whole suite there.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

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


# ---------------------------------------------------------------------------------------
# make test's footprint (tests/footprint.py): the peak resident memory of each test file
# ---------------------------------------------------------------------------------------

_FOOTPRINT_DIR = os.environ.get("ATTNLIB_FOOTPRINT_DIR")
_CLEAR_REFS = Path("/proc/self/clear_refs")


class _PerFile:
    """The file running now, when it started; its peak is the process's VmHWM, reset at its
    start (writing 5 to clear_refs resets the high-water mark to the current size)."""

    file: str | None = None
    started = 0.0


def _vm_hwm_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


def _close_file() -> None:
    if _PerFile.file is None:
        return
    part = os.environ.get("ATTNLIB_FOOTPRINT_PART", "pytest")
    row = {"file": _PerFile.file, "peak_rss_mib": _vm_hwm_mib(),
           "wall_s": round(time.perf_counter() - _PerFile.started, 1)}
    with open(Path(_FOOTPRINT_DIR) / f"{part}.files.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")
    _PerFile.file = None


if _FOOTPRINT_DIR and _CLEAR_REFS.exists():

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item: pytest.Item) -> None:
        file = item.nodeid.split("::")[0]
        if file != _PerFile.file:
            _close_file()
            _CLEAR_REFS.write_text("5")
            _PerFile.file, _PerFile.started = file, time.perf_counter()

    def pytest_sessionfinish(session: pytest.Session) -> None:
        _close_file()
