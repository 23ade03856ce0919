"""Where tensors live: one rule for picking a device, and nothing else.

attnlib never moves a tensor behind your back. Modules take ``device`` and ``dtype`` when
they are built; functions compute wherever their inputs already are. The only decision
the library makes for you is the default below, used by the lessons' setup cell.
"""

from __future__ import annotations

import os

import torch

__all__ = ["default_device"]

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
