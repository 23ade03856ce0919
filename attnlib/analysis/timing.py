"""Wall-clock timings a page may show: medians of interleaved repeats, with their range.

A timing printed by a lesson is the one number of a page that another machine, or the same
machine a minute later, does not reproduce. So attnlib times in one way only:

- the functions compared take turns within every repeat (a, b, a, b, ...), so a change in
  the machine's load during the run falls on all of them alike;
- each is reported as the median of its repeats with the lowest and highest beside it
  (:class:`Timing`), and a ratio as the median of the per-repeat ratios with their range
  (:class:`Ratio`), never as one run;
- :func:`machine` names what ran it (the processor or GPU, the threads, torch), so that a
  printed figure carries its provenance.

Example:
    >>> import torch
    >>> x = torch.randn(64, 64)
    >>> t = time_side_by_side({"mm": lambda: x @ x, "add": lambda: x + x}, repeats=3)
    >>> sorted(t), t["mm"].repeats
    (['add', 'mm'], 3)
    >>> r = ratio(t, "mm", "add")
    >>> r.low <= r.median <= r.high
    True

Lesson: the timing cells of 05, 13 and 14; ``benchmarks/`` times the same way.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

__all__ = ["Ratio", "Timing", "machine", "ratio", "time_side_by_side"]


class Timing(NamedTuple):
    """Seconds per call over ``repeats`` runs: the median, the lowest and the highest.

    ``seconds`` holds every repeat in the order run, for :func:`ratio`.
    """

    median: float
    low: float
    high: float
    repeats: int
    seconds: tuple[float, ...]

    def __str__(self) -> str:
        scale, unit = _unit(self.median)
        return (f"{self.median * scale:.3g} {unit} (range {self.low * scale:.3g}-"
                f"{self.high * scale:.3g}, median of {self.repeats})")


class Ratio(NamedTuple):
    """The per-repeat ratio ``a / b`` of two interleaved timings: median, lowest, highest."""

    median: float
    low: float
    high: float
    repeats: int

    def __str__(self) -> str:
        return (f"{self.median:.3g} (range {self.low:.3g}-{self.high:.3g} over "
                f"{self.repeats} interleaved repeats)")


def _unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _sync(device: torch.device | None) -> None:
    if device is None:
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_side_by_side(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: torch.device | str | None = None,
) -> dict[str, Timing]:
    """Time each function ``repeats`` times, taking turns, after ``warmup`` untimed rounds.

    Args:
        fns: name -> a function of no argument (the work to time).
        repeats: timed rounds, at least 1; within a round each function runs once.
        warmup: untimed rounds first (compilation, caches, lazy allocation).
        device: a CUDA or MPS device is synchronised around every call, so that the time
            is the work's and not the launch's; ``None`` or a CPU needs nothing.

    Returns:
        dict[str, Timing]: per name, the median, lowest and highest seconds per call.

    Raises:
        ValueError: ``fns`` is empty, or ``repeats`` < 1, or ``warmup`` < 0.
    """
    if not fns:
        raise ValueError("fns must name at least one function to time; got an empty dict")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1; got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0; got {warmup!r}")
    device = torch.device(device) if isinstance(device, str) else device
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            runs[name].append(time.perf_counter() - start)
    return {name: Timing(statistics.median(s), min(s), max(s), repeats, tuple(s))
            for name, s in runs.items()}


def ratio(timings: dict[str, Timing], a: str, b: str) -> Ratio:
    """``a / b`` repeat by repeat (the two ran in the same rounds), with its range.

    Raises:
        ValueError: ``a`` or ``b`` is not a key of ``timings``.
    """
    for name in (a, b):
        if name not in timings:
            raise ValueError(f"{name!r} must be one of the timed names {sorted(timings)}")
    r = [x / y for x, y in zip(timings[a].seconds, timings[b].seconds, strict=True)]
    return Ratio(statistics.median(r), min(r), max(r), len(r))


def machine(device: torch.device | str | None = None) -> str:
    """What ran a timing, in words: the GPU, or the processor and its threads, and torch.

    Example:
        >>> "torch" in machine("cpu")
        True
    """
    device = torch.device(device) if isinstance(device, str) else device
    if device is not None and device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    threads = torch.get_num_threads()
    cores = os.cpu_count()
    return (f"{cpu}, {threads} thread{'s' * (threads != 1)} of {cores} cores, "
            f"torch {torch.__version__}")
