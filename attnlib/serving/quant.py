"""A quantised KV cache: keys and values kept as small integers and a scale per group.

Symmetric ``b``-bit quantisation of a group ``x_1 .. x_g`` of numbers with one scale::

    q_max = 2^(b-1) - 1,   s = max_i |x_i| / q_max,   q_i = round(x_i / s) in [-q_max, q_max],
    dq(q)_i = s q_i,       |x_i - dq(q)_i| <= s / 2,

stores ``b`` bits per number and one scale per group (``q_max = 127`` for int8, ``7`` for
int4). Here the integers are held in ``int8`` tensors and the bytes are counted at ``b``
bits a number (int4 is simulated: two would share a byte), plus 4 bytes per float32
scale. A cached tensor ``(..., N, d)`` is grouped one of two ways:

* per token: each token's ``d`` channels in groups of ``group_size`` (``d`` by default):
  scales ``(..., N, d / group_size)``;
* per channel: each channel over ``group_size`` consecutive tokens: scales
  ``(..., N / group_size, d)``. A cache quantises a token group once it is full; the
  last ``N mod group_size`` tokens wait in float (KIVI's residual, Liu et al. 2024).
  A per-token cache may hold the same float residual (``residual=``), so that two layouts
  differ only in their scales.

A decoding query reads the cache as it stands after its own token: the unfinished group in
float. :func:`attention_error` and :func:`quantised_loss` score every query that way, token
for token what decoding through :class:`QuantKVCache` gives, in one pass per group rather
than one per token.

Keys and values are chosen separately. In large trained models keys carry a few
*outlier channels*, large in every token; one scale per token is then set by the
outliers and crushes every other channel, where one scale per channel fits each. Values
have no such channels, and their error enters the output as a weighted average, so a
per-token scale serves them (KIVI's finding on Llama-class models; whether a small model
shows it is a measurement, not a given).
:func:`attention_error` measures the error on the attention output, and
:func:`quantised_loss` the held-out loss of a model reading its cache quantised, against
the bytes held.

Lesson: 11_serving (05_kv_cache for the cache itself).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from attnlib._checks import check_choice, check_divisible, check_positive_int, check_tensor
from attnlib.core.sdpa import sdpa_attention
from attnlib.serving.cache import Cache

__all__ = ["AXES", "BITS", "QuantKVCache", "Quantised", "attention_error", "dequantise",
           "quantise", "quantised_loss", "quantised_window_losses"]

BITS = (4, 8)
"""The integer widths: int4 and int8."""
AXES = ("token", "channel")
"""How a tensor ``(..., N, d)`` is grouped for its scales."""


class Quantised(NamedTuple):
    """Integers ``q`` (int8, the shape of ``x``), scales, and how they were made."""

    q: torch.Tensor
    scale: torch.Tensor
    bits: int
    axis: str
    group_size: int

    @property
    def nbytes(self) -> int:
        """``bits / 8`` bytes per integer, plus the scales' bytes."""
        return math.ceil(self.q.numel() * self.bits / 8) + self.scale.numel() * \
            self.scale.element_size()


def _check_spec(bits: object, axis: object, group_size: object) -> None:
    if bits not in BITS:
        raise ValueError(f"bits must be one of {list(BITS)}; got {bits!r}")
    check_choice("axis", axis, AXES)
    if group_size is not None:
        check_positive_int("group_size", group_size)


def quantise(x: torch.Tensor, bits: int = 8, *, axis: str = "token",
             group_size: int | None = None) -> Quantised:
    """Symmetric ``bits``-bit quantisation of ``x (..., N, d)`` with a scale per group.

    Args:
        x: ``(..., N, d)``; per-token groups need ``d`` divisible by ``group_size``,
            per-channel groups ``N``.
        bits: 8 or 4.
        axis: ``"token"`` (groups of channels within a token) or ``"channel"`` (groups of
            tokens within a channel).
        group_size: the numbers sharing a scale (None: ``d`` per token, ``N`` per channel).

    Example:
        >>> qx = quantise(torch.tensor([[1.0, -2.0, 0.5, 4.0]]), 4)
        >>> qx.q, qx.scale   # s = 4 / 7
        (tensor([[ 2, -3,  1,  7]], dtype=torch.int8), tensor([[0.5714]]))
        >>> dequantise(qx)   # each within s / 2 = 0.2857 of x
        tensor([[ 1.1429, -1.7143,  0.5714,  4.0000]])
    """
    check_tensor("x", x, min_dim=2)
    _check_spec(bits, axis, group_size)
    N, d = x.shape[-2:]
    g = (d if axis == "token" else N) if group_size is None else group_size
    n = d if axis == "token" else N
    if n % g:
        where = "d (channels)" if axis == "token" else "N (tokens)"
        raise ValueError(f"group_size must divide {where}={n} for axis={axis!r}; got {g}")
    q_max = 2 ** (bits - 1) - 1
    if axis == "token":
        groups = x.reshape(*x.shape[:-1], d // g, g)  # (..., N, d/g, g)
        s = groups.abs().amax(dim=-1) / q_max  # (..., N, d/g)
        s_full = s.unsqueeze(-1)
    else:
        groups = x.reshape(*x.shape[:-2], N // g, g, d)  # (..., N/g, g, d)
        s = groups.abs().amax(dim=-2) / q_max  # (..., N/g, d)
        s_full = s.unsqueeze(-2)
    safe = torch.where(s_full > 0, s_full, torch.ones_like(s_full))  # an all-zero group: q = 0
    q = torch.round(groups / safe).clamp(-q_max, q_max).to(torch.int8).reshape(x.shape)
    return Quantised(q, s, bits, axis, g)


def dequantise(qx: Quantised) -> torch.Tensor:
    """``s q``: the float tensor a :class:`Quantised` stands for (float32)."""
    q, s, g = qx.q, qx.scale, qx.group_size
    N, d = q.shape[-2:]
    if qx.axis == "token":
        out = q.reshape(*q.shape[:-1], d // g, g).float() * s.unsqueeze(-1)
    else:
        out = q.reshape(*q.shape[:-2], N // g, g, d).float() * s.unsqueeze(-2)
    return out.reshape(q.shape)


class QuantKVCache(Cache):
    """A KV cache that keeps ``K`` and ``V`` quantised; every read dequantises them.

    ``append(K, V)`` quantises the new rows (per token at once; per channel a group of
    ``k_group`` (``v_group``) tokens once it is full, the rest held in float until then) and returns
    every held key and value dequantised, ``(..., G, N, d)`` float32. ``bits=None`` keeps
    that tensor in float. Usable as ``TinyDecoder.generate(ids, n, caches=[...])``, one
    per layer.

    Args:
        k_bits, v_bits: 8, 4, or None (float) for keys and values.
        k_axis, v_axis: ``"token"`` or ``"channel"``.
        k_group, v_group: numbers per scale for keys and values: channels per token-scale
            (None: all ``d``), tokens per channel-scale (required per channel).
        residual: per-token rows wait in float until ``residual`` of them are held and are
            then quantised together (None: at once), as per-channel rows wait for their group.
        max_tokens: accepted for the protocol of ``new_cache(max_tokens)`` and ignored.

    Example:
        >>> cache = QuantKVCache(k_bits=4, v_bits=8, k_axis="channel", k_group=2)
        >>> K, V = cache.append(torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4))
        >>> cache.nbytes   # K: 8 ints at 4 bits, 4 scales, 1 float token; V: 12 ints, 3 scales
        60

    Lesson: 11_serving.
    """

    fields = ("K", "V")

    def __init__(self, k_bits: int | None = 8, v_bits: int | None = 8, *,
                 k_axis: str = "token", v_axis: str = "token",
                 k_group: int | None = None, v_group: int | None = None,
                 residual: int | None = None, max_tokens: int | None = None) -> None:
        super().__init__(None)
        if residual is not None:
            check_positive_int("residual", residual)
        self.residual = residual
        for name, bits, axis, group in (("k", k_bits, k_axis, k_group),
                                        ("v", v_bits, v_axis, v_group)):
            if bits is not None and bits not in BITS:
                raise ValueError(f"{name}_bits must be one of {list(BITS)} or None; got {bits!r}")
            check_choice(f"{name}_axis", axis, AXES)
            if bits is not None and axis == "channel" and group is None:
                raise ValueError(f"{name}_group must be given for {name}_axis='channel' (tokens "
                                 "per scale); got None")
            if group is not None:
                check_positive_int(f"{name}_group", group)
        self.spec = {"K": (k_bits, k_axis, k_group), "V": (v_bits, v_axis, v_group)}
        self._q: dict[str, list[Quantised]] = {"K": [], "V": []}
        self._float: dict[str, torch.Tensor | None] = {"K": None, "V": None}

    def append(self, K: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantise the new keys and values ``(..., G, N_new, d)``; return all, dequantised."""
        self._check_new((K, V))
        self._n += K.shape[-2]
        for name, T in (("K", K), ("V", V)):
            bits, axis, group = self.spec[name]
            rest = self._float[name]
            rest = T if rest is None else torch.cat((rest, T), dim=-2)
            if bits is not None:
                d, N = rest.shape[-1], rest.shape[-2]
                wait = group if axis == "channel" else self.residual or 1
                n = N - N % wait  # the full groups of tokens (every token with no residual)
                if n:
                    self._q[name].append(quantise(rest[..., :n, :], bits, axis=axis,
                                                  group_size=group or d if axis == "token"
                                                  else group))
                    rest = rest[..., n:, :]
            self._float[name] = rest
        return self.held("K"), self.held("V")

    def _chunks(self, N: int) -> list[tuple[int, int]]:
        """Chunks ``[a, b)`` of ``N`` tokens that, appended in turn, give every query what it
        reads decoding token by token: a chunk quantises a group only at its first token.
        (Per-token rows with no residual are quantised alone, whenever they arrive.)"""
        waits = {group if axis == "channel" else self.residual
                 for bits, axis, group in self.spec.values() if bits is not None}
        starts = sorted({0} | {t for w in waits if w for t in range(w - 1, N, w)})
        return list(zip(starts, [*starts[1:], N], strict=True))

    def held(self, name: str) -> torch.Tensor | None:
        """Every held row of ``name`` dequantised (the float residual last)."""
        parts = [dequantise(qx) for qx in self._q[name]]
        rest = self._float[name]
        if rest is not None and rest.shape[-2]:
            parts.append(rest.float())
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)

    @property
    def nbytes(self) -> int:
        """Integers at their bit width, the scales, and any float residual."""
        total = sum(qx.nbytes for name in self.fields for qx in self._q[name])
        for rest in self._float.values():
            if rest is not None:
                total += rest.numel() * rest.element_size()
        return total

    @property
    def allocated_nbytes(self) -> int:
        return self.nbytes

    def _check_new(self, new: tuple) -> None:
        """Keys and values of one shape ``(..., G, N_new, d)``, matching what is held, whose
        ``d`` a per-token group divides."""
        K, V = new
        for name, rows in (("K", K), ("V", V)):
            if rows is None:
                raise ValueError(f"{name} must be given to a QuantKVCache; got None")
            check_tensor(name, rows, min_dim=2, floating=False)
            if not rows.dtype.is_floating_point:
                raise ValueError(f"{name} must be floating point; got {rows.dtype}")
            bits, axis, g = self.spec[name]
            d = rows.shape[-1]
            if bits is not None and axis == "token" and g is not None and d % g:
                raise ValueError(f"{name.lower()}_group must divide d={d} for "
                                 f"{name.lower()}_axis='token'; got {g}")
            held = self.held(name) if self._n else None
            if held is not None and (held.shape[:-2] != rows.shape[:-2]
                                     or held.shape[-1] != rows.shape[-1]):
                raise ValueError(
                    f"{name} must match the cached shape in every dimension but the token "
                    f"axis -2: cached {tuple(held.shape)}, got {tuple(rows.shape)}")
        if K.shape[:-1] != V.shape[:-1]:
            raise ValueError(f"K and V must have the same leading shape and token count; got "
                             f"{tuple(K.shape)} and {tuple(V.shape)}")

    def reset(self) -> None:
        self._n = 0
        self._q = {"K": [], "V": []}
        self._float = {"K": None, "V": None}

    def __repr__(self) -> str:
        return (f"QuantKVCache(K={self.spec['K']}, V={self.spec['V']}, "
                f"residual={self.residual}, n_tokens={self._n}, nbytes={self.nbytes})")


def attention_error(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *,
                    k_bits: int | None = 8, v_bits: int | None = 8, k_axis: str = "token",
                    v_axis: str = "token", k_group: int | None = None,
                    v_group: int | None = None, residual: int | None = None
                    ) -> tuple[float, int]:
    """``||Y_q - Y|| / ||Y||`` for causal attention over quantised ``K, V``, and their bytes.

    ``Q`` is ``(..., H, N, d)``, ``K, V`` are ``(..., G, N, d)``; the keys and values pass
    through a :class:`QuantKVCache` of the given choices, and query ``t`` reads them as the
    cache holds them after token ``t`` (its unfinished group in float), exactly as in
    decoding; the bytes are the cache's after all ``N``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> Q, K, V = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
        >>> err, nbytes = attention_error(Q, K, V)
        >>> err < 0.01, nbytes   # 2 * 32 tokens * (8 bytes + one 4-byte scale)
        (True, 768)
    """
    for name, T in (("Q", Q), ("K", K), ("V", V)):
        check_tensor(name, T, min_dim=3)
    check_divisible("Q's heads (Q.shape[-3])", Q.shape[-3], "K's heads (K.shape[-3])",
                    K.shape[-3])
    cache = QuantKVCache(k_bits, v_bits, k_axis=k_axis, v_axis=v_axis, k_group=k_group,
                         v_group=v_group, residual=residual)
    Y = sdpa_attention(Q, K, V, causal=True)  # G KV heads for H query heads
    Y_q = torch.cat([sdpa_attention(Q[..., a:b, :], *cache.append(K[..., a:b, :],
                                                                   V[..., a:b, :]),
                                    causal=True)  # bottom-right: the chunk's last keys
                     for a, b in cache._chunks(K.shape[-2])], dim=-2)
    return float((Y_q - Y).norm() / Y.norm()), cache.nbytes


@torch.no_grad()
def _quantised_nll(model, ids, targets, *, k_bits, v_bits, k_axis, v_axis, k_group, v_group,
                   residual) -> tuple[torch.Tensor, int]:
    """Each position's cross-entropy ``(B, N)`` (float32, 0 where the target is ``-100``)
    with every layer reading a :class:`QuantKVCache` as decoding reads it, and the caches'
    bytes after all ``N`` tokens."""
    check_tensor("ids", ids, min_dim=1, floating=False)
    caches = [QuantKVCache(k_bits, v_bits, k_axis=k_axis, v_axis=v_axis, k_group=k_group,
                           v_group=v_group, residual=residual) for _ in model.blocks]
    logits = torch.cat([model(ids[..., a:b], caches=caches)
                        for a, b in caches[0]._chunks(ids.shape[-1])], dim=-2)
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                            targets.reshape(-1), reduction="none")
    return nll.reshape(targets.shape), sum(c.nbytes for c in caches)


def quantised_loss(model, ids: torch.Tensor, targets: torch.Tensor, *,
                   k_bits: int | None = 8, v_bits: int | None = 8, k_axis: str = "token",
                   v_axis: str = "token", k_group: int | None = None,
                   v_group: int | None = None, residual: int | None = None
                   ) -> tuple[float, int]:
    """Mean cross-entropy (nats per token) of ``model`` reading its caches quantised, and
    the bytes of those caches (every layer, after all ``N`` tokens).

    ``ids (B, N)`` pass through a :class:`QuantKVCache` per layer, and the query at token
    ``t`` reads the dequantised keys and values the cache holds after token ``t``: the full
    groups quantised, the unfinished group (per channel, or per token with ``residual``) in
    float. That is what decoding token by token gives; the passes are cut where a group
    fills, one pass per group instead of one per token.
    """
    nll, nbytes = _quantised_nll(model, ids, targets, k_bits=k_bits, v_bits=v_bits,
                                 k_axis=k_axis, v_axis=v_axis, k_group=k_group,
                                 v_group=v_group, residual=residual)
    return float(nll.sum() / (targets != -100).sum()), nbytes


def quantised_window_losses(model, ids: torch.Tensor, targets: torch.Tensor, *,
                            k_bits: int | None = 8, v_bits: int | None = 8,
                            k_axis: str = "token", v_axis: str = "token",
                            k_group: int | None = None, v_group: int | None = None,
                            residual: int | None = None
                            ) -> tuple[torch.Tensor, int]:
    """:func:`quantised_loss` window by window: each row's mean loss ``(B,)`` float64 and
    the caches' bytes. Each row of ``ids`` has caches of its own (per-channel groups run
    along one row's tokens), so the rows are the paired windows that
    :func:`attnlib.analysis.intervals.paired_bootstrap` resamples.
    """
    nll, nbytes = _quantised_nll(model, ids, targets, k_bits=k_bits, v_bits=v_bits,
                                 k_axis=k_axis, v_axis=v_axis, k_group=k_group,
                                 v_group=v_group, residual=residual)
    counts = (targets != -100).sum(dim=1)
    return nll.double().sum(dim=1) / counts, nbytes
