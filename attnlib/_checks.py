"""Input checks shared by every module, and the rule for when they run.

Each public function and module ``forward`` starts with ONE call to a check from this
module; the mathematics follows. A failed check raises ``ValueError`` or ``TypeError``
with a message that names the argument, states the rule and shows the value given.

Checks run once, on the user's arguments. Public functions and forwards are marked
with :func:`entry_point`; when attnlib calls its own public functions internally (a GQA
forward calling :func:`attnlib.core.attention`), the tensors were made or checked
already, and the composite checks (``check_*_inputs``) of those nested calls return at
once. The elementary checks (``check_tensor``, ``check_positive_int``, ...) always run;
they are the building blocks of the composite ones.

This is a private module with public names: any attnlib module may import from it.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import torch

_DEPTH = contextvars.ContextVar("attnlib_call_depth", default=0)
_F = TypeVar("_F", bound=Callable)


def entry_point(fn: _F) -> _F:
    """Mark a public function or ``forward``: its input checks run only when a user calls it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        token = _DEPTH.set(_DEPTH.get() + 1)
        try:
            return fn(*args, **kwargs)
        finally:
            _DEPTH.reset(token)

    return wrapper  # type: ignore[return-value]


def nested_call() -> bool:
    """True inside a public function that attnlib itself called (its inputs are trusted)."""
    return _DEPTH.get() > 1


# --- elementary checks ------------------------------------------------------------------


def check_tensor(name: str, x: object, *, min_dim: int = 1, floating: bool = True) -> torch.Tensor:
    """``x`` must be a tensor with at least ``min_dim`` dimensions (floating point by default)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() < min_dim:
        layout = {1: " (..., d)", 2: " (..., N, d)", 3: " (..., H, N, d)"}.get(min_dim, "")
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions{layout}; got shape {tuple(x.shape)}"
        )
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype; got {x.dtype}")
    return x


def check_last_dim(name: str, x: torch.Tensor, expected: int, rule: str) -> None:
    """The last dimension of ``x`` must equal ``expected``; ``rule`` says why."""
    if x.shape[-1] != expected:
        raise ValueError(
            f"{name} must have last dimension {expected} ({rule}); got shape {tuple(x.shape)}"
        )


def check_like(name: str, x: torch.Tensor, like: torch.Tensor) -> None:
    """``x`` must share the dtype and device of ``like`` (a module's parameters)."""
    if x.dtype != like.dtype:
        raise TypeError(f"{name} must have the parameters' dtype {like.dtype}; got {x.dtype}")
    if x.device != like.device:
        raise ValueError(
            f"{name} must live on the parameters' device {like.device}; got {x.device}"
        )


def check_bool(name: str, value: object) -> bool:
    """``value`` must be a bool (not an int or a string that looks like one)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool; got {value!r} ({type(value).__name__})")
    return value


def check_positive_int(name: str, value: object) -> int:
    """``value`` must be an integer >= 1 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int; got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1); got {value}")
    return value


def check_nonnegative_int(name: str, value: object) -> int:
    """``value`` must be an integer >= 0 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be a non-negative int; got {value!r} ({type(value).__name__})"
        )
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int (>= 0); got {value}")
    return value


def check_optional_positive_int(name: str, value: object) -> int | None:
    """``value`` must be None or an integer >= 1."""
    return None if value is None else check_positive_int(name, value)


def check_positive_float(name: str, value: object) -> float:
    """``value`` must be a real number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive number; got {value!r} ({type(value).__name__})")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite positive number (> 0); got {value}")
    return float(value)


def check_even(name: str, value: int, why: str) -> None:
    """``value`` must be even; ``why`` names the reason (for example RoPE's pairs)."""
    if value % 2 != 0:
        raise ValueError(f"{name} must be even ({why}); got {value}")


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}; got {value!r}")
    return value  # type: ignore[return-value]


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    """``value`` must be divisible by ``by``."""
    if value % by != 0:
        raise ValueError(f"{name} must be divisible by {by_name} ({by}); got {name}={value}")


def check_matrix(name: str, W: object, rows: int | None = None) -> torch.Tensor:
    """``W`` must be a floating 2-D tensor, with ``rows`` rows when that is given."""
    check_tensor(name, W, min_dim=2)
    if W.dim() != 2:
        raise ValueError(f"{name} must be a matrix (2-D); got shape {tuple(W.shape)}")
    if rows is not None and W.shape[0] != rows:
        raise ValueError(
            f"{name} must have {rows} rows to multiply what comes before it; "
            f"got shape {tuple(W.shape)}"
        )
    return W


# --- shapes -----------------------------------------------------------------------------


def broadcast_shape(*shapes: Iterable[int]) -> tuple[int, ...] | None:
    """The shape ``shapes`` broadcast to, or None when they do not broadcast."""
    out = []
    for sizes in itertools.zip_longest(*(reversed(tuple(s)) for s in shapes), fillvalue=1):
        other = {n for n in sizes if n != 1}
        if len(other) > 1:
            return None
        out.append(other.pop() if other else 1)
    return tuple(reversed(out))


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether a tensor of ``shape`` broadcasts to ``target`` without growing ``target``."""
    return len(shape) <= len(target) and all(
        s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False)
    )


def check_mask(mask: object, target: Sequence[int], device: torch.device, min_dim: int = 0) -> None:
    """``mask`` must be a bool tensor on ``device`` that broadcasts to ``target``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a bool torch.Tensor; got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must have dtype torch.bool (True = may attend); got {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask must live on the inputs' device {device}; got {mask.device}")
    if mask.dim() < min_dim:
        raise ValueError(
            f"mask must have shape (..., N_Q, N_KV) (at least {min_dim} dimensions); "
            f"got {tuple(mask.shape)}"
        )
    if not broadcasts_to(mask.shape, target):
        raise ValueError(
            f"mask must broadcast to the logits' shape (..., N_Q, N_KV) = {tuple(target)}; "
            f"got shape {tuple(mask.shape)}"
        )


# --- composite checks: one call at the top of a public function --------------------------


def check_attention_inputs(
    Q: object,
    K: object,
    V: object | None = None,
    *,
    kernel: object = "softmax",
    kernels: Iterable[str] = ("softmax",),
    mask: object = None,
    causal: object = False,
    scale: object = None,
    impl: object = "auto",
) -> None:
    """Everything :func:`attnlib.core.attention` and its relatives need of their arguments."""
    if nested_call():
        return
    tensors = {"Q": Q, "K": K} if V is None else {"Q": Q, "K": K, "V": V}
    for name, t in tensors.items():
        check_tensor(name, t, min_dim=2)
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            "Q and K must share the last dimension d_QK (scores are dot products q . k); "
            f"got Q {tuple(Q.shape)} and K {tuple(K.shape)}"
        )
    if V is not None and V.shape[-2] != K.shape[-2]:
        raise ValueError(
            "K and V must have the same number of rows N_KV (one value per key); "
            f"got K {tuple(K.shape)} and V {tuple(V.shape)}"
        )
    if len({t.dtype for t in tensors.values()}) > 1:
        dtypes = {n: t.dtype for n, t in tensors.items()}
        raise TypeError(f"Q, K and V must share one dtype; got {dtypes}")
    if len({t.device for t in tensors.values()}) > 1:
        devices = {n: str(t.device) for n, t in tensors.items()}
        raise ValueError(f"Q, K and V must live on one device; got {devices}")
    batch = broadcast_shape(*(t.shape[:-2] for t in tensors.values()))
    if batch is None:
        shapes = {n: tuple(t.shape) for n, t in tensors.items()}
        raise ValueError(
            "the batch dimensions (all but the last two) of Q, K and V must broadcast; "
            f"got {shapes}"
        )
    if isinstance(kernel, str):
        check_choice("kernel", kernel, list(kernels))
    elif not callable(kernel):
        raise TypeError(
            f"kernel must be a name in {list(kernels)} or a callable on the logits; "
            f"got {type(kernel).__name__}"
        )
    check_bool("causal", causal)
    if scale is not None:
        check_positive_float("scale", scale)
    check_choice("impl", impl, ["auto", "explicit"])
    if mask is not None:
        check_mask(mask, (*batch, Q.shape[-2], K.shape[-2]), Q.device)


def check_kernel_output(A: object, S: torch.Tensor) -> None:
    """A kernel ``f`` must map the logits to non-negative values of the same shape."""
    if not isinstance(A, torch.Tensor) or A.shape != S.shape:
        got = tuple(A.shape) if isinstance(A, torch.Tensor) else type(A).__name__
        raise ValueError(
            f"kernel must map the logits of shape {tuple(S.shape)} to a tensor of the same "
            f"shape; got {got}"
        )
    if (A < 0).any():
        raise ValueError(
            "kernel must return non-negative values (similarities are weights); "
            f"got a minimum of {A.min().item():.4g}"
        )


def as_positions(positions: object, device: torch.device) -> torch.Tensor:
    """``positions`` as an integer or real tensor on ``device`` (sequences are converted)."""
    if not isinstance(positions, torch.Tensor):
        try:
            positions = torch.as_tensor(positions, device=device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                "positions must be a tensor or a sequence of numbers; "
                f"got {type(positions).__name__}"
            ) from err
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be integer or real; got dtype {positions.dtype}")
    if positions.device != device:
        raise ValueError(f"positions must live on X's device {device}; got {positions.device}")
    return positions


def check_module_inputs(
    X: object,
    *,
    d_in: int,
    like: torch.Tensor,
    X_KV: object = None,
    causal: object = False,
    mask: object = None,
    positions: object = None,
    cache: object = None,
    cache_type: type | None = None,
    impl: object = "auto",
    **flags: object,
) -> None:
    """The arguments of an attention module's ``forward`` (GQA, MLA, or a block around one).

    ``X (..., N_Q, d_in)`` with the parameters' dtype and device; ``X_KV`` likewise
    (cross-attention, no cache); ``mask`` a bool ``(..., N_Q, N_KV)`` shared by every head,
    with ``N_KV`` counting the cached tokens; ``positions`` ``(N_Q,)`` or ``(B, N_Q)``;
    every keyword in ``flags`` a bool.
    """
    if nested_call():
        return
    check_tensor("X", X, min_dim=2)
    check_last_dim("X", X, d_in, "d_in of this module")
    check_like("X", X, like)
    if X_KV is not None:
        check_tensor("X_KV", X_KV, min_dim=2)
        check_last_dim("X_KV", X_KV, d_in, "d_in of this module")
        check_like("X_KV", X_KV, like)
        if cache is not None:
            raise ValueError("cache must be None for cross-attention (X_KV given)")
    if cache is not None and not isinstance(cache, cache_type):
        raise TypeError(
            f"cache must be an attnlib.{cache_type.__name__}; got {type(cache).__name__}"
        )
    for name, flag in {"causal": causal, **flags}.items():
        check_bool(name, flag)
    check_choice("impl", impl, ["auto", "explicit"])
    n_q = X.shape[-2]
    if positions is not None:
        shape = tuple(as_positions(positions, X.device).shape)
        if shape[-1:] != (n_q,) or len(shape) > 2:
            raise ValueError(
                f"positions must have shape (N,) or (B, N) with N = {n_q} tokens; got {shape}"
            )
    if mask is not None:
        source = X if X_KV is None else X_KV
        n_kv = source.shape[-2] + (0 if cache is None else cache.n_tokens)
        check_mask(mask, (*X.shape[:-2], n_q, n_kv), X.device, min_dim=2)
