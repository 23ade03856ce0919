"""Sampling the next token: temperature, top-k, top-p (nucleus) and min-p, then a draw.

A decoder's last logits ``z in R^V`` define ``p = softmax(z)``. Greedy decoding takes
``argmax z``; sampling draws from a *warped* distribution. Each warper maps logits to
logits, setting the tokens it removes to ``filter_value`` (``-inf``, so that softmax gives
them probability 0):

* temperature ``T > 0``:  ``z -> z / T`` (``T < 1`` sharpens, ``T > 1`` flattens);
* top-k: keep ``z_i >= z_(k)``, the ``k``-th largest logit (ties with it are kept, so more
  than ``k`` tokens may stay);
* top-p (nucleus, Holtzman et al.): sort ``p`` ascending, ``c_j = p_(1) + ... + p_(j)``;
  remove the tokens with ``c_j <= 1 - top_p``: what stays is the smallest set of most
  probable tokens whose mass exceeds ``top_p`` (at least ``min_tokens_to_keep``);
* min-p (Nguyen et al.): remove ``p_i < min_p * max_j p_j``.

:func:`sample` applies them in Hugging Face's order (temperature, top-k, top-p, min-p) and
draws ``i ~ softmax(z')`` with a ``torch.Generator``, so a seeded draw is reproducible.
Each warper equals the Hugging Face logits processor of the same name
(``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``,
``MinPLogitsWarper``) on the same logits, ties included.

Lesson: 11_serving (05_kv_cache for the cache itself).
"""

from __future__ import annotations

import math

import torch

from attnlib._checks import check_positive_int, check_tensor

__all__ = ["min_p_filter", "sample", "temperature_scale", "top_k_filter",
           "top_p_filter", "warp"]

_NEG_INF = -math.inf


def _check_logits(logits: object) -> None:
    check_tensor("logits", logits, min_dim=1)


def _check_fraction(name: str, value: object, *, open_low: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1]; got {value!r} "
                        f"({type(value).__name__})")
    if not (0.0 <= value <= 1.0) or (open_low and value == 0.0):
        rule = "(0, 1]" if open_low else "[0, 1]"
        raise ValueError(f"{name} must lie in {rule}; got {value}")
    return float(value)


def temperature_scale(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``z / T``: temperature ``T > 0`` on logits ``(..., V)``.

    Example:
        >>> temperature_scale(torch.tensor([1.0, 2.0]), 0.5)
        tensor([2., 4.])
    """
    _check_logits(logits)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a positive number; got {temperature!r}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0 (use do_sample=False "
                         f"for greedy decoding); got {temperature}")
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int, *, filter_value: float = _NEG_INF,
                 min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Keep the logits ``>= z_(k)``, the ``k``-th largest, and set the others to ``filter_value``.

    ``k`` is raised to ``min_tokens_to_keep`` and capped at ``V``; a tie with ``z_(k)``
    stays (Hugging Face's ``TopKLogitsWarper``).

    Example:
        >>> top_k_filter(torch.tensor([1.0, 3.0, 2.0, 3.0]), 1)   # the tie stays
        tensor([-inf, 3., -inf, 3.])
    """
    _check_logits(logits)
    check_positive_int("k", k)
    check_positive_int("min_tokens_to_keep", min_tokens_to_keep)
    k = min(max(k, min_tokens_to_keep), logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
    return logits.masked_fill(logits < kth, filter_value)


def top_p_filter(logits: torch.Tensor, p: float, *, filter_value: float = _NEG_INF,
                 min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Nucleus filtering: remove the tokens whose ascending cumulative mass is ``<= 1 - p``.

    With ``p`` sorted ascending and ``c_j`` its cumulative sum, token ``(j)`` is removed
    when ``c_j <= 1 - p``; the ``min_tokens_to_keep`` most probable always stay
    (Hugging Face's ``TopPLogitsWarper``, whose ascending sort decides between ties).

    Example:
        >>> top_p_filter(torch.tensor([0.0, 1.0, 2.0, 3.0]).log(), 0.7)   # p = 0, 1/6, 1/3, 1/2
        tensor([  -inf,   -inf, 0.6931, 1.0986])
    """
    _check_logits(logits)
    _check_fraction("p", p, open_low=False)
    check_positive_int("min_tokens_to_keep", min_tokens_to_keep)
    sorted_z, order = torch.sort(logits, dim=-1, descending=False)  # (..., V) ascending
    c = sorted_z.softmax(dim=-1).cumsum(dim=-1)  # c_j = p_(1) + ... + p_(j)
    remove_sorted = c <= (1 - p)
    remove_sorted[..., -min_tokens_to_keep:] = False  # the most probable stay
    remove = remove_sorted.scatter(-1, order, remove_sorted)  # back to vocabulary order
    return logits.masked_fill(remove, filter_value)


def min_p_filter(logits: torch.Tensor, p: float, *, filter_value: float = _NEG_INF,
                 min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Remove the tokens with ``p_i < p * max_j p_j`` (``p = softmax(z)``).

    The ``min_tokens_to_keep`` most probable always stay (Hugging Face's
    ``MinPLogitsWarper``).

    Example:
        >>> min_p_filter(torch.tensor([1.0, 2.0, 4.0]).log(), 0.3)   # keep p_i >= 0.3 * 4/7
        tensor([  -inf, 0.6931, 1.3863])
    """
    _check_logits(logits)
    _check_fraction("p", p, open_low=False)
    check_positive_int("min_tokens_to_keep", min_tokens_to_keep)
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    remove = probs < p * probs.amax(dim=-1, keepdim=True)
    k = min(min_tokens_to_keep, probs.shape[-1])
    remove.scatter_(-1, torch.topk(probs, k, dim=-1).indices, False)
    return logits.masked_fill(remove, filter_value)


def check_options(temperature: object, top_k: object, top_p: object, min_p: object,
                  generator: object = None) -> None:
    """Raise unless the sampling options are valid: ``temperature > 0`` finite, ``top_k`` a
    positive int, ``top_p`` in ``(0, 1]``, ``min_p`` in ``[0, 1]`` (None is off), and
    ``generator`` a ``torch.Generator`` or None."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a positive number; got {temperature!r}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0 (use do_sample=False for "
                         f"greedy decoding); got {temperature}")
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if top_p is not None:
        _check_fraction("top_p", top_p, open_low=True)
    if min_p is not None:
        _check_fraction("min_p", min_p, open_low=False)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None; got "
                        f"{type(generator).__name__}")


def warp(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
         top_p: float | None = None, min_p: float | None = None) -> torch.Tensor:
    """The warped logits ``z'``: temperature, then top-k, top-p and min-p (those not None).

    The order is Hugging Face's ``generate``; ``temperature=1`` and ``top_p=1`` change
    nothing (Hugging Face skips them too).

    Example:
        >>> warp(torch.tensor([1.0, 2.0, 3.0, 4.0]), temperature=0.5, top_k=2)
        tensor([-inf, -inf, 6., 8.])
    """
    _check_logits(logits)
    check_options(temperature, top_k, top_p, min_p)
    return _warp(logits, temperature, top_k, top_p, min_p)


def _warp(z: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
          min_p: float | None) -> torch.Tensor:
    if temperature != 1.0:
        z = temperature_scale(z, temperature)
    if top_k is not None:
        z = top_k_filter(z, top_k)
    if top_p is not None and top_p < 1.0:
        z = top_p_filter(z, top_p)
    if min_p is not None:
        z = min_p_filter(z, min_p)
    return z


def sample(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, min_p: float | None = None,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row: ``i ~ softmax(warp(z))``; returns ``(..., 1)`` int64 ids.

    Args:
        logits: ``(..., V)`` the next-token logits.
        temperature, top_k, top_p, min_p: the warpers (see :func:`warp`); None is off.
        generator: a seeded ``torch.Generator`` for a reproducible draw (None: the global
            one).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> sample(torch.tensor([[0.0, 0.0, 9.0]]), top_k=1, generator=g)
        tensor([[2]])
    """
    _check_logits(logits)
    check_options(temperature, top_k, top_p, min_p, generator)
    z = _warp(logits, temperature, top_k, top_p, min_p)
    P = torch.softmax(z.float(), dim=-1)  # (..., V)
    flat = P.reshape(-1, P.shape[-1])
    ids = torch.multinomial(flat, 1, generator=generator)  # (rows, 1)
    return ids.reshape(*P.shape[:-1], 1)
