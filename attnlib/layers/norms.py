"""Normalisation layers: LayerNorm and RMSNorm, as functions and as modules.

Both rescale each row of the residual stream to a fixed size before (or after) a
sublayer; LayerNorm also recentres it:

* LayerNorm (Ba, Kiros and Hinton 2016): ``y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta``;
* RMSNorm (Zhang and Sennrich 2019): ``y = x / sqrt(mean(x^2) + eps) * g``, cheaper, and the
  norm of Llama, Gemma and DeepSeek (MLA normalises its latents with it too).

Half-precision inputs are normalised in float32 and cast back.

Lesson: 04_masks_and_layers.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlib._checks import (
    check_gain,
    check_last_dim,
    check_positive_float,
    check_positive_int,
    check_tensor,
    in_checked_call,
)
from attnlib.device import work_dtype

__all__ = ["LayerNorm", "RMSNorm", "layer_norm", "rms_norm"]


def layer_norm(
    x: torch.Tensor,
    gamma: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``y = (x - mu) / sqrt(sigma^2 + eps) * gamma + beta``, over the last dimension.

    ``mu`` and ``sigma^2`` are the mean and the biased variance (divide by ``d``, not
    ``d - 1``) of each row: the norm recentres and rescales every token on its own.
    Half-precision inputs are normalised in float32 and cast back.

    Args:
        x: ``(..., d)``.
        gamma: ``(d,)`` gains; ``None`` means ones.
        beta: ``(d,)`` shifts; ``None`` means zeros.
        eps: added to the variance (> 0).

    Returns:
        ``(..., d)``, dtype of ``x``.

    Equivalent to ``F.layer_norm(x, (d,), gamma, beta, eps)``.

    Example:
        >>> layer_norm(torch.tensor([[1.0, 2.0, 3.0]]))
        tensor([[-1.2247,  0.0000,  1.2247]])

    Lesson: 04_masks_and_layers.
    """
    _check_norm_inputs(x, eps, gamma=gamma, beta=beta)
    return _layer_norm(x, gamma, beta, eps)


def _layer_norm(x: torch.Tensor, gamma: torch.Tensor | None, beta: torch.Tensor | None,
                eps: float) -> torch.Tensor:
    work = work_dtype(x.dtype)  # half precision: work in float32
    xw = x.to(work)
    mu = xw.mean(dim=-1, keepdim=True)  # (..., 1)
    var = (xw - mu).square().mean(dim=-1, keepdim=True)  # (..., 1), biased like torch
    y = (xw - mu) / torch.sqrt(var + eps)  # (..., d)
    if gamma is not None:
        y = y * gamma.to(work)
    if beta is not None:
        y = y + beta.to(work)
    return y.to(x.dtype)


def rms_norm(x: torch.Tensor, g: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """``y = x / sqrt(mean(x^2) + eps) * g``, over the last dimension.

    Zhang and Sennrich's RMSNorm: divide each row by its root mean square. Unlike
    :func:`layer_norm` it does not subtract the mean and has no shift ``beta``, which
    saves work; Llama, Gemma and DeepSeek use it. Half-precision inputs are normalised
    in float32 and cast back.

    Args:
        x: ``(..., d)``.
        g: ``(d,)`` gains; ``None`` means ones.
        eps: added to the mean square (> 0).

    Returns:
        ``(..., d)``, dtype of ``x``.

    Equivalent to ``torch.nn.functional.rms_norm(x, (d,), g, eps)``.

    Example:
        >>> rms_norm(torch.tensor([[3.0, 4.0]]), eps=1e-12)   # RMS = sqrt(12.5)
        tensor([[0.8485, 1.1314]])

    Lesson: 04_masks_and_layers.
    """
    _check_norm_inputs(x, eps, g=g)
    return _rms_norm(x, g, eps)


def _rms_norm(x: torch.Tensor, g: torch.Tensor | None, eps: float) -> torch.Tensor:
    work = work_dtype(x.dtype)  # half precision: work in float32
    xw = x if x.dtype == work else x.to(work)
    y = xw * torch.rsqrt(xw.square().mean(dim=-1, keepdim=True) + eps)  # (..., d)
    if g is not None:
        y = y * g
    return y if y.dtype == x.dtype else y.to(x.dtype)


class LayerNorm(nn.Module):
    """Layer normalisation with gains ``gamma`` (ones) and shifts ``beta`` (zeros).

    Args:
        d: feature width (the last dimension it normalises).
        eps: added to the variance.
        device: where the parameters live.
        dtype: their dtype.

    Lesson: 04_masks_and_layers.
    """

    def __init__(
        self,
        d: int,
        eps: float = 1e-5,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d = check_positive_int("d", d)
        self.eps = check_positive_float("eps", eps)
        self.gamma = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        self.beta = nn.Parameter(torch.zeros(d, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """See :func:`layer_norm`; ``x`` is ``(..., d)``."""
        if not in_checked_call():
            check_last_dim("x", check_tensor("x", x), self.d, "d of this norm")
        return _layer_norm(x, self.gamma, self.beta, self.eps)

    def extra_repr(self) -> str:
        return f"d={self.d}, eps={self.eps:g}"


# torch.nn.functional.rms_norm arrived in PyTorch 2.4; half precision keeps attnlib's float32
# working copy (rms_norm), which PyTorch's kernel need not make.
_FUSED_RMS_NORM = hasattr(torch.nn.functional, "rms_norm")
_FUSED_DTYPES = (torch.float32, torch.float64)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with gains ``g`` (ones); no recentring, no bias.

    Args:
        d: feature width (the last dimension it normalises).
        eps: added to the mean square.
        device: where the parameters live.
        dtype: their dtype.

    Lesson: 04_masks_and_layers.
    """

    def __init__(
        self,
        d: int,
        eps: float = 1e-6,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d = check_positive_int("d", d)
        self.eps = check_positive_float("eps", eps)
        self.g = nn.Parameter(torch.ones(d, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """See :func:`rms_norm`; ``x`` is ``(..., d)``."""
        if not in_checked_call():
            check_last_dim("x", check_tensor("x", x), self.d, "d of this norm")
        g = self.g
        if _FUSED_RMS_NORM and x.dtype == g.dtype and x.dtype in _FUSED_DTYPES:
            # PyTorch's one-call form of the same formula: one dispatch instead of six, which
            # is most of a decoding step's norm time (tests/test_norms.py holds it to
            # rms_norm, bit for bit on the CPU).
            return torch.nn.functional.rms_norm(x, (self.d,), g, self.eps)
        return _rms_norm(x, g, self.eps)

    def extra_repr(self) -> str:
        return f"d={self.d}, eps={self.eps:g}"


def _check_norm_inputs(x: object, eps: object, **gains: object) -> None:
    """``x (..., d)``, ``eps > 0``, and each gain ``None`` or a ``(d,)`` tensor."""
    check_tensor("x", x)
    check_positive_float("eps", eps)
    for name, g in gains.items():
        check_gain(name, g, x.shape[-1])
