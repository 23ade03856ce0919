"""What decoding costs: multiply-adds per pass, per generation and per MLA decoding path.

Counting the work of a forward pass is integer arithmetic on the model's shape, like the
byte counts of :mod:`attnlib.analysis.memory` beside it:

- :func:`decode_step_macs` counts the multiply-adds of the matrix products of one decoder
  pass, and :func:`generation_macs` those of every pass of a greedy generation, with and
  without a KV cache (lesson 05);
- :func:`mla_decode_cost` counts the multiply-adds and bytes of one MLA layer decoding one
  token along each of the paths in :data:`DECODE_PATHS` (lesson 07);
- :func:`layer_decode_macs` counts what one layer of each kind in
  :data:`attnlib.analysis.memory.LAYER_KINDS` (full, sliding, sparse, linear, compressed)
  multiplies to decode one token against ``N``, and :func:`decode_token_macs` adds them over
  a model's layer schedule (lesson 15);
- :func:`fit_exponent` reads the growth exponent ``k`` of a cost ``y ~ c x^k`` off a few
  measured or counted points (lessons 01 and 05);
- :class:`Chip` holds the two numbers of an accelerator that set a roofline, its peak
  arithmetic and its memory bandwidth, and :data:`H800` the chip DeepSeek's kernels report
  on (lessons 07 and 09).

Lessons: 01_attention_as_lookup, 05_kv_cache, 07_mla, 09_frontier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlib._checks import (
    check_bool,
    check_choice,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from attnlib.analysis.memory import LAYER_KINDS, ModelSpec

__all__ = [
    "DECODE_PATHS",
    "FFN_MATRICES",
    "H800",
    "MAC_PARTS",
    "Chip",
    "decode_step_macs",
    "decode_token_macs",
    "fit_exponent",
    "generation_macs",
    "layer_decode_macs",
    "mla_decode_cost",
]


FFN_MATRICES: dict[str, int] = {"swiglu": 3, "gelu": 2, "relu": 2}
"""Weight matrices of ``d x d_ff`` entries in each kind of feed-forward network."""


@dataclass(frozen=True)
class Chip:
    """An accelerator as a roofline sees it: peak arithmetic and memory bandwidth.

    A kernel that does ``macs`` multiply-adds and moves ``n_bytes`` to or from main memory
    takes at least ``max(n_bytes / bandwidth, macs / (peak_flops / 2))`` seconds (one
    multiply-add is two FLOPs). The two balance at the *break-even intensity*
    ``peak_flops / (2 · bandwidth)`` multiply-adds per byte: a kernel below it waits on
    memory (memory-bound), one above it on arithmetic (compute-bound).

    Args:
        name: what the chip is called.
        peak_flops: dense 16-bit FLOP/s.
        bandwidth: bytes per second from main memory.

    Example:
        >>> chip = Chip("toy", peak_flops=4e12, bandwidth=1e12)
        >>> chip.break_even, chip.bound(macs=1e9, n_bytes=1e9)
        (2.0, 'memory')
    """

    name: str
    peak_flops: float
    bandwidth: float

    def __post_init__(self) -> None:
        check_positive_float("peak_flops", self.peak_flops)
        check_positive_float("bandwidth", self.bandwidth)

    @property
    def macs_per_second(self) -> float:
        """Peak multiply-adds per second, ``peak_flops / 2``."""
        return self.peak_flops / 2

    @property
    def break_even(self) -> float:
        """Multiply-adds per byte at which memory and arithmetic take the same time."""
        return self.macs_per_second / self.bandwidth

    def seconds(self, macs: float, n_bytes: float) -> tuple[float, float]:
        """The least time to move ``n_bytes`` and the least to do ``macs`` multiply-adds."""
        check_positive_float("macs", macs)
        check_positive_float("n_bytes", n_bytes)
        return n_bytes / self.bandwidth, macs / self.macs_per_second

    def bound(self, macs: float, n_bytes: float) -> str:
        """``"memory"`` or ``"compute"``: which of the two times of :meth:`seconds` is longer."""
        t_memory, t_math = self.seconds(macs, n_bytes)
        return "memory" if t_memory > t_math else "compute"


H800 = Chip("H800 SXM5", peak_flops=990e12, bandwidth=3.35e12)
"""NVIDIA's H800 SXM5, on which FlashMLA and DeepSeek's papers report: 990 TFLOP/s dense in
16 bits and 3.35 TB/s of HBM3 bandwidth, a break-even of 147.8 multiply-adds per byte."""


def decode_step_macs(
    n_q: int,
    n_kv: int,
    *,
    n_layers: int,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    d_head: int,
    d_ff: int,
    vocab_size: int,
    ffn: str = "swiglu",
) -> dict[str, int]:
    """Multiply-adds of the matrix products of one decoder pass: ``N_Q`` rows, ``N_KV`` keys.

    Per layer, with ``m`` matrices in the feed-forward network (3 for SwiGLU)::

        attention   = 2 · H · N_Q · N_KV · d_head           # Q K^T, then P V (dense)
        projections = N_Q · d · (H + 2G) · d_head + N_Q · H · d_head · d   # W_Q W_K W_V, W_O
        ffn         = N_Q · m · d · d_ff

    and once at the end the output head, ``N_Q · d · N_T``. The attention term counts
    every (query, key) pair, masked or not, as a dense kernel computes them; elementwise
    work (norms, RoPE, softmax, activations) is not counted.

    Args:
        n_q: ``N_Q``, rows fed through the model in this pass.
        n_kv: ``N_KV``, keys each row is scored against (cached tokens plus new ones).
        n_layers: ``N_L``.
        d_model: ``d``.
        n_heads: ``H``.
        n_kv_heads: ``G``.
        d_head: width of one head.
        d_ff: hidden width of the feed-forward network.
        vocab_size: ``N_T``, columns of the output head.
        ffn: ``"swiglu"``, ``"gelu"`` or ``"relu"``.

    Returns:
        dict[str, int]: ``"attention"`` (all layers) and ``"other"`` (projections,
        feed-forward networks and output head).

    Example:
        One new token against 99 cached ones in a 2-layer model of width 32:

        >>> decode_step_macs(1, 100, n_layers=2, d_model=32, n_heads=4, n_kv_heads=4,
        ...                  d_head=8, d_ff=128, vocab_size=64)
        {'attention': 12800, 'other': 34816}

    Lesson: 05_kv_cache.
    """
    for name, value in (("n_q", n_q), ("n_kv", n_kv), ("n_layers", n_layers),
                        ("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads),
                        ("d_head", d_head), ("d_ff", d_ff), ("vocab_size", vocab_size)):
        check_positive_int(name, value)
    check_choice("ffn", ffn, list(FFN_MATRICES))
    attention = 2 * n_heads * n_q * n_kv * d_head  # logits and weighted average
    projections = n_q * d_model * (n_heads + 2 * n_kv_heads) * d_head  # W_Q, W_K, W_V
    projections += n_q * n_heads * d_head * d_model  # W_O
    feed_forward = n_q * FFN_MATRICES[ffn] * d_model * d_ff
    head = n_q * d_model * vocab_size
    return {"attention": n_layers * attention,
            "other": n_layers * (projections + feed_forward) + head}


def generation_macs(
    n_prompt: int, n_new: int, *, use_cache: bool, **shape: int | str
) -> list[dict[str, int]]:
    """:func:`decode_step_macs` of every pass of a greedy generation of ``n_new`` tokens.

    The schedule is :meth:`attnlib.TinyDecoder.generate`'s: pass ``t`` (``t = 0 ..
    n_new - 1``) produces token ``n_prompt + t``. Without a cache it feeds the whole
    sequence so far, ``N_Q = N_KV = n_prompt + t``; with a cache, pass 0 feeds the prompt
    (the prefill, ``N_Q = N_KV = n_prompt``) and pass ``t >= 1`` feeds one token against
    ``N_KV = n_prompt + t`` keys.

    Args:
        n_prompt: tokens in the prompt (>= 1).
        n_new: tokens generated (>= 0).
        use_cache: whether the passes reuse cached keys and values.
        **shape: the keyword arguments of :func:`decode_step_macs` but ``n_q`` and
            ``n_kv``.

    Returns:
        list[dict[str, int]]: one count per pass, in order.

    Example:
        >>> shape = dict(n_layers=1, d_model=8, n_heads=1, n_kv_heads=1, d_head=8,
        ...              d_ff=8, vocab_size=8)
        >>> [s["attention"] for s in generation_macs(2, 3, use_cache=False, **shape)]
        [64, 144, 256]
        >>> [s["attention"] for s in generation_macs(2, 3, use_cache=True, **shape)]
        [64, 48, 64]

    Lesson: 05_kv_cache.
    """
    check_positive_int("n_prompt", n_prompt)
    check_nonnegative_int("n_new", n_new)
    check_bool("use_cache", use_cache)
    steps = []
    for t in range(n_new):
        n_kv = n_prompt + t
        n_q = 1 if (use_cache and t > 0) else n_kv  # a cache feeds only the newest token
        steps.append(decode_step_macs(n_q, n_kv, **shape))
    return steps


DECODE_PATHS: tuple[str, ...] = ("expanded", "rebuilt", "absorbed")
"""The three ways :func:`mla_decode_cost` can decode one token of an MLA layer.

- ``"expanded"``: each token's ``K_h`` and ``V_h`` are formed once, when it arrives, and
  cached per head (with the one shared ``k_R``): the cache of multi-head attention;
- ``"rebuilt"``: the latent cache of MLA, with ``K_h`` and ``V_h`` formed again from every
  cached row at every step (attnlib's ``absorbed=False`` path over a ``LatentCache``, and
  Hugging Face's ``DeepseekV3Attention``);
- ``"absorbed"``: the latent cache, attended to directly (``absorbed=True``).
"""


def mla_decode_cost(
    spec: ModelSpec, n_ctx: int, *, path: str = "absorbed", bytes_per_elem: int = 2
) -> dict[str, int]:
    """Multiply-adds and bytes of one MLA layer decoding one token against ``n_ctx`` keys.

    With ``d = d_in = d_out``, ``d_Q = d_LQ`` (``d`` without a query latent), ``n = n_ctx``
    (the cached tokens plus the new one) and one sequence, the matrix products are::

        projections, every path:  d d_LQ + d_Q H (d_head + d_R) + d (d_L + d_R) + H d_v d
        expanded:  + d_L H (d_head + d_v)          the new token's K_h and V_h, once
                   + n H (d_head + d_R + d_v)      logits and weighted sum, per head
        rebuilt:   + n d_L H (d_head + d_v)        K_h and V_h of every cached row, again
                   + n H (d_head + d_R + d_v)
        absorbed:  + H d_head d_L + H d_L d_v      Q_h (W_LK^h)^T and (P_h L) W_LV^h
                   + n H (2 d_L + d_R)             logits and weighted sum over the latent

    and the cache holds ``H (d_head + d_v) + d_R`` numbers per token (expanded) or
    ``d_L + d_R`` (rebuilt, absorbed). Elementwise work (softmax, RoPE, RMSNorm) is not
    counted; it is linear in ``n`` with a small constant. The weights read are the same
    for every path (the absorbed path applies the factors, it does not merge them).

    Args:
        spec: an MLA model (``spec.d_latent`` set), e.g.
            :data:`attnlib.analysis.memory.DEEPSEEK_V2`.
        n_ctx: ``n >= 1``, the keys the new token attends to, itself included.
        path: one of :data:`DECODE_PATHS`.
        bytes_per_elem: ``b``, bytes per stored number (2 for bf16).

    Returns:
        dict[str, int]: ``"cache_values_per_token"``, ``"cache_bytes"`` (read this step:
        ``n`` tokens), ``"weight_bytes"`` (every weight of the layer, once),
        ``"macs_projections"`` (independent of ``n``), ``"macs_attention"`` (proportional
        to ``n``) and ``"macs"`` (their sum).

    Example:
        >>> from attnlib.analysis.memory import DEEPSEEK_V2
        >>> a = mla_decode_cost(DEEPSEEK_V2, 4096, path="absorbed")
        >>> e = mla_decode_cost(DEEPSEEK_V2, 4096, path="expanded")
        >>> e["cache_bytes"] // a["cache_bytes"], a["cache_values_per_token"]
        (57, 576)
        >>> round(a["macs_attention"] / e["macs_attention"], 2)   # (2 * 512 + 64) / 320
        3.4

    Lesson: 07_mla.
    """
    _check_cost(spec, n_ctx, path, bytes_per_elem)
    d, H, d_head, d_v = spec.d_model, spec.n_heads, spec.d_head, spec.d_value
    d_L, d_R, d_LQ = spec.d_latent, spec.d_rope, spec.d_latent_q
    d_Q = d if d_LQ is None else d_LQ
    n = n_ctx
    projections = (
        (0 if d_LQ is None else d * d_LQ)  # L_Q = X W_LQ
        + d_Q * H * (d_head + d_R)  # Q_h = L_Q W_LQQ^h and q_R,h = L_Q W_QR^h
        + d * (d_L + d_R)  # L = X W_L and k_R = X W_KR
        + H * d_v * d  # Y W_O
    )
    per_pair = H * (d_head + d_R + d_v)  # one query against one key: logit and weighted value
    if path == "expanded":
        values = H * (d_head + d_v) + d_R
        projections += d_L * H * (d_head + d_v)  # the new token's K_h, V_h
        attention = n * per_pair
    elif path == "rebuilt":
        values = d_L + d_R
        attention = n * (d_L * H * (d_head + d_v) + per_pair)
    else:
        values = d_L + d_R
        projections += H * d_head * d_L + H * d_L * d_v
        attention = n * H * (2 * d_L + d_R)
    weights = (
        (0 if d_LQ is None else d * d_LQ) + d_Q * H * (d_head + d_R) + d * (d_L + d_R)
        + d_L * H * (d_head + d_v) + H * d_v * d
    )
    return {
        "cache_values_per_token": values,
        "cache_bytes": n * values * bytes_per_elem,
        "weight_bytes": weights * bytes_per_elem,
        "macs_projections": projections,
        "macs_attention": attention,
        "macs": projections + attention,
    }



MAC_PARTS: tuple[str, ...] = ("scores", "values", "indexer", "state", "conv", "compressor")
"""The parts of one layer's decoding work that :func:`layer_decode_macs` counts.

- ``"scores"``: the query against every key it reads (``Q K^T``; with MLA, against the latent
  and the RoPE key);
- ``"values"``: the weighted sum of the values read (``P V``; with MLA, of the latent);
- ``"indexer"``: the lightning indexer scoring every candidate before the top-``k`` choice;
- ``"state"``: a linear layer's state, decayed, read with the key, written with the rank-one
  correction, and read with the query;
- ``"conv"``: the linear layer's short convolution on the new token;
- ``"compressor"``: DeepSeek-V4's pooling of a full window into one compressed row, spread
  over the tokens that fill it.
"""


def layer_decode_macs(spec: ModelSpec, kind: str, n_ctx: int) -> dict[str, int]:
    """Multiply-adds one layer of ``kind`` does to decode one token against ``n_ctx`` tokens.

    Attention only: the products that read the cache or the state. The projections
    (``W_Q, W_K, W_V, W_O``, MLA's absorbed ``W_LK`` and ``W_LV``, gates, the indexer's own
    projections), the experts, norms, softmax, RoPE and top-``k`` selection are not counted.
    With ``H`` query heads, ``N = n_ctx`` (the new token included), ``w`` the window, ``a``
    and ``c`` the widths a key and a value have where the query meets them (``d_head`` and
    ``d_v``; for MLA, read in its absorbed form, ``d_L + d_R`` and ``d_L``)::

        full      scores = H N a            values = H N c
        sliding   keys read n = min(N, w):  H n a,  H n c
        sparse    indexer = N H_I (d_I + 1);  keys read n = min(N, k):  H n a,  H n c
        linear    state = 4 H_v d_k d_v     conv = K_c (2 H_k d_k + H_v d_v)
        csa       indexer = floor(N/m) H_I (d_I + 1)
                  keys read n = min(N, w) + min(floor(N/m), k):  H n a,  H n c
                  compressor = 2 r + 2 d_I
        hca       keys read n = min(N, w) + floor(N/m'):  H n a,  H n c
                  compressor = r

    The indexer scores a candidate ``s`` as ``sum_h w_h ReLU(q_h . k_s)``: ``d_I``
    multiply-adds per head and one more to weight it. The gated delta rule
    ``S <- a S + k (b (v - (a S)^T k))^T``, ``o = S^T q`` touches the ``d_k x d_v`` state of
    each value head four times: the decay (one product per entry; per key channel for KDA),
    the read with ``k``, the rank-one write and the read with ``q``. Closing a compressed
    window pools ``2m`` rows of width ``r`` (CSA's overlapping windows; ``2m`` of ``d_I`` for
    its indexer) or ``m'`` rows (HCA), once every ``m`` tokens. A learned sink adds one logit
    per head and no product.

    Args:
        spec: the model (:class:`~attnlib.analysis.memory.ModelSpec`) with that kind's shapes.
        kind: one of :data:`~attnlib.analysis.memory.LAYER_KINDS`.
        n_ctx: ``N >= 1``, the tokens the new one attends over, itself included.

    Returns:
        dict[str, int]: multiply-adds for every part in :data:`MAC_PARTS`.

    Example:
        >>> from attnlib.analysis.memory import DEEPSEEK_V32
        >>> m = layer_decode_macs(DEEPSEEK_V32, "sparse", 131_072)
        >>> m["indexer"], m["scores"] + m["values"]  # 131,072 · 64 · 129; 2048 · 128 · 1088
        (1082130432, 285212672)
    """
    _check_macs(spec, n_ctx)
    check_choice("kind", kind, LAYER_KINDS)
    spec.layer_values(kind, 0)  # raises unless the model has the shapes of this kind
    n = n_ctx
    parts = dict.fromkeys(MAC_PARTS, 0)
    if kind == "linear":
        h_v = spec.n_linear_heads
        h_k = spec.n_linear_key_heads or h_v
        d_k = spec.d_linear_key
        d_v = spec.d_linear_value or d_k
        parts["state"] = 4 * h_v * d_k * d_v  # decay, read with k, rank-one write, read with q
        parts["conv"] = spec.conv_kernel * (2 * h_k * d_k + h_v * d_v)
        return parts
    if spec.d_latent is not None:  # MLA read in its absorbed form
        key_width, value_width = spec.d_latent + spec.d_rope, spec.d_latent
    else:
        key_width, value_width = spec.d_head, spec.d_value
    indexer = spec.n_index_heads * (spec.d_index + 1) if spec.n_index_heads else 0
    row = spec.values_per_token_per_layer("mla" if spec.d_latent is not None else "gqa")
    if kind == "full":
        read = n
    elif kind == "sliding":
        read = min(n, spec.window)
    elif kind == "sparse":
        parts["indexer"] = n * indexer
        read = min(n, spec.index_topk)
    elif kind == "csa":
        rows = n // spec.csa_rate
        parts["indexer"] = rows * indexer
        read = min(n, spec.window) + min(rows, spec.index_topk)
        parts["compressor"] = 2 * row + 2 * spec.d_index  # 2m rows pooled every m tokens
    else:  # hca
        read = min(n, spec.window) + n // spec.hca_rate
        parts["compressor"] = row  # m' rows pooled every m' tokens
    parts["scores"] = spec.n_heads * read * key_width
    parts["values"] = spec.n_heads * read * value_width
    return parts


def decode_token_macs(spec: ModelSpec, n_ctx: int) -> dict[str, int]:
    """Multiply-adds of every layer of ``spec`` decoding one token against ``n_ctx`` tokens.

    :func:`layer_decode_macs` summed over ``spec.schedule``, by part, with ``"total"``
    (attention only: see :func:`layer_decode_macs` for what is and is not counted). For a
    model of full GQA layers the total is :func:`decode_step_macs`'s ``"attention"`` for one
    query; for MLA it is :func:`mla_decode_cost`'s absorbed ``"macs_attention"`` per layer.

    Args:
        spec: the model.
        n_ctx: ``N >= 1``, tokens attended over, the new one included.

    Returns:
        dict[str, int]: every part in :data:`MAC_PARTS`, then ``"total"``.

    Example:
        >>> from attnlib.analysis.memory import GPT_OSS_120B
        >>> decode_token_macs(GPT_OSS_120B, 4096)["total"]  # 18 · 8192 · (4096 + 128)
        622854144
    """
    _check_macs(spec, n_ctx)
    schedule = spec.schedule
    total = dict.fromkeys(MAC_PARTS, 0)
    for kind in dict.fromkeys(schedule):  # each kind once, times its number of layers
        count = schedule.count(kind)
        for part, macs in layer_decode_macs(spec, kind, n_ctx).items():
            total[part] += count * macs
    total["total"] = sum(total.values())
    return total


def _check_macs(spec: object, n_ctx: object) -> None:
    if not isinstance(spec, ModelSpec):
        raise TypeError("spec must be an attnlib.analysis.memory.ModelSpec; "
                        f"got {type(spec).__name__}")
    check_positive_int("n_ctx", n_ctx)


def fit_exponent(x: Sequence[float], y: Sequence[float]) -> float:
    """The exponent ``k`` of ``y ~ c x^k``: the least-squares slope of ``log y`` on ``log x``.

    Args:
        x: sizes (positive), at least two.
        y: the cost at each size (positive): a count or a measured time.

    Returns:
        float: ``k``.

    Raises:
        ValueError: ``x`` and ``y`` are not two sequences of the same length >= 2.

    Example:
        >>> round(fit_exponent([1, 2, 4, 8], [3, 12, 48, 192]), 6)
        2.0

    Lesson: 01_attention_as_lookup (the cost of attention), 05_kv_cache (with and without
    a cache).
    """
    lx = np.log(np.asarray(x, dtype=np.float64))
    ly = np.log(np.asarray(y, dtype=np.float64))
    if lx.ndim != 1 or lx.shape != ly.shape or lx.size < 2:
        raise ValueError(f"x and y must be two sequences of the same length >= 2; got "
                         f"{lx.shape} and {ly.shape}")
    dx = lx - lx.mean()
    return float((dx * (ly - ly.mean())).sum() / (dx * dx).sum())


def _check_cost(spec: object, n_ctx: object, path: object, bytes_per_elem: object) -> None:
    if not isinstance(spec, ModelSpec):
        raise TypeError("spec must be an attnlib.analysis.memory.ModelSpec; "
                        f"got {type(spec).__name__}")
    if spec.d_latent is None:
        raise ValueError(
            f"spec must describe an MLA model (d_latent set); {spec.name!r} has d_latent=None"
        )
    check_positive_int("n_ctx", n_ctx)
    check_choice("path", path, DECODE_PATHS)
    check_positive_int("bytes_per_elem", bytes_per_elem)
