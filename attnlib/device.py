"""Where tensors live and what they compute in: the default device, the precision rule, seeds.

attnlib never moves a tensor behind your back. Modules take ``device`` and ``dtype`` when
they are built; functions compute wherever their inputs already are. Three rules are the
library's own, each written once here:

- :func:`default_device`: cuda, then mps, then cpu (``ATTNLIB_DEVICE`` overrides), used by
  the lessons' setup cell;
- :func:`work_dtype`: half-precision inputs are computed in float32 and the result is cast
  back (sums of many exponentials, squares and products need it);
- :func:`seeded`: random draws from a fixed seed that leave the caller's random state alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

__all__ = ["HALF", "default_device", "seeded", "work_dtype"]

HALF = (torch.float16, torch.bfloat16)
"""The half-precision dtypes, computed in float32 (see :func:`work_dtype`)."""

_ENV = "ATTNLIB_DEVICE"


def default_device() -> torch.device:
    """The device the lessons and tests run on: cuda, then mps, then cpu.

    The environment variable ``ATTNLIB_DEVICE`` (for example ``cpu`` or ``cuda:1``)
    overrides the choice. An override naming a device that this machine does not have
    raises ``ValueError`` instead of silently falling back.

    Returns:
        torch.device: the chosen device.

    Example:
        >>> default_device().type in ("cuda", "mps", "cpu")
        True

    Lesson: every lesson's setup cell.
    """
    wanted = os.environ.get(_ENV, "").strip()
    if wanted:
        try:
            device = torch.device(wanted)
        except RuntimeError as err:
            raise ValueError(
                f"{_ENV} must name a torch device such as 'cpu' or 'cuda:0'; got {wanted!r}"
            ) from err
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{_ENV}={wanted!r} asks for CUDA, but torch sees no CUDA device")
        if device.type == "mps" and not _mps_available():
            raise ValueError(f"{_ENV}={wanted!r} asks for MPS, but torch sees no MPS device")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in for inputs of ``dtype``: float32 for half precision, else itself.

    Example:
        >>> work_dtype(torch.bfloat16), work_dtype(torch.float64)
        (torch.float32, torch.float64)

    Lesson: 02_softmax_attention (why e^x needs the range).
    """
    return torch.float32 if dtype in HALF else dtype


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device | str | None = None) -> Iterator[None]:
    """``torch.manual_seed(seed)`` inside the block; the global random state is restored after.

    The state of the CPU generator is saved and restored, and that of ``device``'s
    generator too when it is an accelerator (``None`` means the default device).
    ``seed=None`` draws from the global state as it is, restoring nothing. Figures and
    modules that draw random weights use it, so that the same seed gives the same draw and
    a reader's own random numbers are left alone.

    Example:
        >>> with seeded(0):
        ...     a = torch.rand(2)
        >>> with seeded(0):
        ...     b = torch.rand(2)
        >>> torch.equal(a, b)
        True
    """
    if seed is None:
        yield
        return
    dev = torch.device(device) if device is not None else torch.get_default_device()
    if dev.type == "cpu":
        fork = torch.random.fork_rng(devices=[])
    else:
        fork = torch.random.fork_rng(device_type=dev.type)
    with fork:
        torch.manual_seed(seed)
        yield

