"""Input checks shared by the public entry points, and the rule for when a module runs them.

A public function, and a module's ``forward``, checks its own arguments at its top, with one
call to a check of its own module built from the checks below; the mathematics follows, and
the functions it calls trust their caller. A failed check raises ``ValueError`` or
``TypeError`` with a message that names the argument, states the rule and shows the value
given. A function a user passes in (a kernel, a feature map) has its output checked where
attnlib uses it.

Modules nest: a decoder runs blocks, a block runs its attention, norms and feed-forward
network. A decoder's call (``TinyDecoder.forward`` and ``generate``) checks everything its
layers will receive, then runs them inside :class:`checked_call`; a module's ``forward``
that finds itself inside one (:func:`in_checked_call`) checks nothing again. Called on its
own, every module checks its arguments.

This is a private module with public names: any attnlib module may import from it.
"""

from __future__ import annotations

import contextvars
import itertools
import math
from collections.abc import Iterable, Sequence

import torch

# --- when the checks run -------------------------------------------------------------------

_CHECKED = contextvars.ContextVar("attnlib_checked_call", default=False)


def in_checked_call() -> bool:
    """Whether the code runs inside a decoder's call, whose arguments were checked already."""
    return _CHECKED.get()


class checked_call:  # noqa: N801  (a context manager, named like torch.no_grad)
    """``with checked_call():`` the modules run inside check nothing again: the caller (a
    decoder) checked what each of them receives."""

    def __enter__(self) -> None:
        self._token = _CHECKED.set(True)

    def __exit__(self, *exc: object) -> None:
        _CHECKED.reset(self._token)


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


def check_shape(name: str, x: torch.Tensor, trailing: Sequence[int | None], layout: str) -> None:
    """The last dimensions of ``x`` must be ``trailing`` (None: any size); ``layout`` names them."""
    n, tail = len(trailing), x.shape[x.dim() - len(trailing):]
    if len(tail) < n or any(t not in (None, s) for s, t in zip(tail, trailing, strict=True)):
        raise ValueError(f"{name} must have shape {layout}; got {tuple(x.shape)}")


def check_like(
    name: str, x: torch.Tensor, like: torch.Tensor, whose: str = "the parameters'"
) -> None:
    """``x`` must share the dtype and device of ``like`` (by default a module's parameters)."""
    if x.dtype != like.dtype:
        raise TypeError(f"{name} must have {whose} dtype {like.dtype}; got {x.dtype}")
    if x.device != like.device:
        raise ValueError(f"{name} must live on {whose} device {like.device}; got {x.device}")


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


def check_optional_positive_float(name: str, value: object) -> float | None:
    """``value`` must be None or a real number > 0."""
    return None if value is None else check_positive_float(name, value)


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


def check_padding_mask(name: str, mask: object) -> torch.Tensor:
    """``mask`` marks real tokens, True/1 (a pad: False/0): bools, or integers 0 and 1.

    Returns it as a bool tensor. Hugging Face's ``attention_mask`` follows the same rule.
    """
    rule = "bools or the integers 0 and 1 (True/1 = a real token, False/0 = a pad)"
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {rule}; got {type(mask).__name__}")
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"{name} must hold {rule}; got dtype {mask.dtype}")
    if mask.dim() < 1:
        raise ValueError(f"{name} must have shape (..., N), one entry per token; got a scalar")
    if mask.dtype != torch.bool:
        bad = (mask != 0) & (mask != 1)
        if bad.any():
            raise ValueError(f"{name} must hold {rule}; got the value {mask[bad][0].item()}")
    return mask.bool()


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


# --- arguments that several modules take --------------------------------------------------


def check_qkv(Q: object, K: object, V: object | None = None) -> tuple[int, ...]:
    """Queries, keys (and values) that fit together; returns their broadcast batch shape.

    ``Q (..., N_Q, d_QK)``, ``K (..., N_KV, d_QK)``, ``V (..., N_KV, d_V)``: floating
    tensors of one dtype on one device whose batch dimensions (all but the last two)
    broadcast.
    """
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
    return batch


def check_attention_options(
    mask: object,
    causal: object,
    scale: object,
    impl: object,
    *,
    logits: Sequence[int],
    device: torch.device,
) -> None:
    """The options every attention function takes: ``causal`` a bool, ``scale`` None or > 0,
    ``impl`` ``"auto"`` or ``"explicit"``, ``mask`` a bool tensor broadcasting to ``logits``
    (the shape ``(..., N_Q, N_KV)`` of the logits)."""
    check_bool("causal", causal)
    check_optional_positive_float("scale", scale)
    check_choice("impl", impl, ("auto", "explicit"))
    if mask is not None:
        check_mask(mask, logits, device)


def check_kernel(kernel: object, names: Iterable[str]) -> None:
    """``kernel`` must be one of the named kernels or a callable on the logits."""
    if isinstance(kernel, str):
        check_choice("kernel", kernel, list(names))
    elif not callable(kernel):
        raise TypeError(
            f"kernel must be a name in {list(names)} or a callable on the logits; "
            f"got {type(kernel).__name__}"
        )


def check_gain(name: str, g: object, width: int) -> None:
    """``g`` must be None or a ``(width,)`` tensor: one gain (or shift) per feature."""
    if g is not None and check_tensor(name, g).shape != (width,):
        raise ValueError(
            f"{name} must have shape (d,) = ({width},), one entry per feature of x; "
            f"got {tuple(g.shape)}"
        )


def check_input(name: str, X: object, width: int, like: torch.Tensor, rule: str) -> None:
    """A module's input ``X (..., N, width)`` with the dtype and device of its parameters."""
    check_tensor(name, X, min_dim=2)
    check_last_dim(name, X, width, rule)
    check_like(name, X, like)


def check_positions(positions: object, n: int, device: torch.device) -> None:
    """A module's ``positions``: ``(N,)`` or ``(B, N)`` with ``N`` the number of new tokens."""
    shape = tuple(as_positions(positions, device).shape)
    if shape[-1:] != (n,) or len(shape) > 2:
        raise ValueError(
            f"positions must have shape (N,) or (B, N) with N = {n} tokens; got {shape}"
        )


def check_attention_call(
    X: torch.Tensor, *, causal: object, mask: object, positions: object, n_kv: int,
    **flags: object,
) -> None:
    """What an attention module's ``forward`` takes besides its input ``X`` and its cache.

    ``causal`` and every keyword in ``flags`` a bool; ``positions`` ``(N_Q,)`` or
    ``(B, N_Q)``; ``mask`` a bool ``(..., N_Q, N_KV)`` shared by every head, with
    ``n_kv = N_KV`` counting the cached tokens.
    """
    for name, flag in {"causal": causal, **flags}.items():
        check_bool(name, flag)
    n_q = X.shape[-2]
    if positions is not None:
        check_positions(positions, n_q, X.device)
    if mask is not None:
        check_mask(mask, (*X.shape[:-2], n_q, n_kv), X.device, min_dim=2)


def check_token_batch(ids: object, targets: object) -> None:
    """``ids`` and ``targets`` integer tensors of one shape ``(B, N)`` (a batch to score)."""
    for name, t in (("ids", ids), ("targets", targets)):
        if not isinstance(t, torch.Tensor) or t.is_floating_point() or t.is_complex():
            got = f"a {t.dtype} tensor" if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be an integer tensor of token ids; got {got}")
    if ids.dim() != 2 or ids.shape != targets.shape:
        raise ValueError(f"ids and targets must both have shape (B, N); got {tuple(ids.shape)} "
                         f"and {tuple(targets.shape)}")
