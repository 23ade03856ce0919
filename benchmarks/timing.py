"""Wall-clock timing shared by the benchmarks: medians of interleaved repeats."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def interleaved_seconds(
    fns: dict[str, Callable[[], object]], device: torch.device, *, repeats: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds of every call of each function, repeat by repeat, measured side by side.

    The functions take turns within every repeat (a, b, c, a, b, c, ...), so a change in
    machine load during the run affects all of them alike instead of favouring one, and the
    ratio of two functions can be taken within each repeat.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def median_seconds(
    fns: dict[str, Callable[[], object]], device: torch.device, *, repeats: int, warmup: int = 1
) -> dict[str, float]:
    """Median seconds per call of each function, measured side by side
    (:func:`interleaved_seconds`)."""
    times = interleaved_seconds(fns, device, repeats=repeats, warmup=warmup)
    return {name: statistics.median(ts) for name, ts in times.items()}
