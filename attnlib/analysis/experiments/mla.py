"""The experiments of lesson 07 as tables: names, cache sizes, decode costs, conversion errors.

The conversions turn one fixed grouped-query layer (:data:`CONVERSION`: ``d_in = 32``,
``H = 8`` query heads, ``G = 2`` key/value heads of width ``d_head = 4``, no RoPE, float64
on the CPU) into MLA with :func:`attnlib.layers.mla.mla_from_mha` at every latent width
``d_L = 1 .. 2 G d_head``. The layer's weights come from ``torch.manual_seed(seed)`` (the
global random state is restored afterwards); its input, one sequence of ``n_tokens``
rows of i.i.d. standard normal entries, from ``torch.Generator().manual_seed(seed)``. The
figures of :mod:`attnlib.viz.mla` draw the same numbers.

Lesson: 07_mla (the names table: 08_rope).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import torch

from attnlib._checks import check_nonnegative_int, check_positive_int
from attnlib.analysis.costs import DECODE_PATHS, mla_decode_cost
from attnlib.analysis.memory import DEEPSEEK_V2, ModelSpec
from attnlib.device import seeded
from attnlib.layers.gqa import GroupedQueryAttention
from attnlib.layers.mla import MultiHeadLatentAttention, mla_from_mha

__all__ = [
    "CONTEXTS", "CONVERSION", "NAMES", "PATH_LABELS", "SEED", "cache_table", "conversion_errors",
    "conversion_table", "decode_cost_table", "names_table",
]


NAMES: tuple[tuple[str, str, str, str], ...] = (
    ("W_L", "W_L", "W^DKV", "kv_a_proj_with_mqa, first kv_lora_rank outputs"),
    ("W_LK", "W_LK", "W^UK", "kv_b_proj, first qk_nope_head_dim outputs of each head"),
    ("W_LV", "W_LV", "W^UV", "kv_b_proj, last v_head_dim outputs of each head"),
    ("W_LQ", "W_LQ", "W^DQ", "q_a_proj"),
    ("W_LQQ", "W_LQQ", "W^UQ", "q_b_proj, first qk_nope_head_dim outputs of each head"),
    ("W_QR", "W_QR", "W^QR", "q_b_proj, last qk_rope_head_dim outputs of each head"),
    ("W_KR", "W_KR", "W^KR", "kv_a_proj_with_mqa, last qk_rope_head_dim outputs"),
    ("W_O", "W_O", "W^O", "o_proj"),
    ("gains of the latent RMSNorm", "g_L", "(not in the MLA equations)", "kv_a_layernorm"),
    ("gains of the query-latent RMSNorm", "g_LQ", "(not in the MLA equations)",
     "q_a_layernorm"),
    ("W_LQK^h = W_LQQ^h (W_LK^h)^T", 'merged_weights()["W_LQK"]', "W^UQ with W^UK absorbed",
     "not stored"),
    ("W_LO = blockdiag(W_LV^h) W_O", 'merged_weights()["W_LO"]', "W^O with W^UV absorbed",
     "not stored"),
)
"""One row per matrix: ``(paper, attnlib, DeepSeek-V2, Hugging Face)``, as in book/notation.md.

attnlib multiplies from the right, so its matrices are the transposes of DeepSeek-V2's
(which multiplies column vectors from the left) and of Hugging Face's ``.weight``.
"""

PATH_LABELS: dict[str, str] = {
    "expanded": "expanded: K_h, V_h cached per head",
    "rebuilt": "rebuilt: latent cached, K_h, V_h formed every step",
    "absorbed": "absorbed: latent cached and attended to",
}
"""How the tables name the three decoding paths of :data:`attnlib.analysis.costs.DECODE_PATHS`."""

CONTEXTS: tuple[int, ...] = (1024, 4096, 32_768, 131_072)
"""Context lengths of :func:`decode_cost_table`."""

CONVERSION: dict[str, int] = {"d_in": 32, "n_heads": 8, "n_kv_heads": 2, "d_head": 4,
                              "n_tokens": 12}
"""The grouped-query layer the explorer converts, and the tokens it is run on."""

SEED = 12
"""Seed of the explorer's layer and input (see the module docstring)."""


def _mla_of(spec: ModelSpec) -> MultiHeadLatentAttention:
    """An MLA layer of ``spec``'s sizes on the ``meta`` device: shapes, no memory."""
    return MultiHeadLatentAttention(
        spec.d_model, spec.n_heads, spec.d_head, spec.d_latent, d_latent_q=spec.d_latent_q,
        d_rope=spec.d_rope, d_v=spec.d_v, latent_norm=True, device="meta",
    )


def _spec_check(spec: object) -> ModelSpec:
    if not isinstance(spec, ModelSpec):
        raise TypeError("spec must be an attnlib.analysis.memory.ModelSpec; "
                        f"got {type(spec).__name__}")
    if spec.d_latent is None:
        raise ValueError(f"spec must be an MLA model (d_latent set); got {spec.name!r}")
    return spec


def names_table(spec: ModelSpec = DEEPSEEK_V2) -> pd.DataFrame:
    """The matrices of MLA under the paper's, attnlib's, DeepSeek-V2's and Hugging Face's names.

    The shapes are those of :class:`attnlib.MultiHeadLatentAttention` built at ``spec``'s
    sizes (on the ``meta`` device), for the parameters and for ``merged_weights()``.

    Args:
        spec: an MLA model with a query latent and decoupled RoPE.

    Returns:
        pd.DataFrame: columns "attnlib", "shape at <spec.name>", "DeepSeek-V2",
        "Hugging Face", indexed by the paper's name.
    """
    spec = _spec_check(spec)
    if spec.d_latent_q is None or not spec.d_rope:
        raise ValueError(f"spec must have a query latent and a RoPE part; got {spec.name!r}")
    mla = _mla_of(spec)
    shapes = {name: tuple(p.shape) for name, p in mla.named_parameters()}
    merged = mla.merged_weights()
    shapes['merged_weights()["W_LQK"]'] = tuple(merged["W_LQK"].shape)
    shapes['merged_weights()["W_LO"]'] = tuple(merged["W_LO"].shape)
    rows = {paper: {"attnlib": ours, f"shape at {spec.name}": str(shapes[ours]),
                    "DeepSeek-V2": deepseek, "Hugging Face": hf}
            for paper, ours, deepseek, hf in NAMES}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("paper")


def cache_table(spec: ModelSpec = DEEPSEEK_V2, bytes_per_elem: int = 2) -> pd.DataFrame:
    """What one token costs in the cache of ``spec`` under MHA and under MLA.

    Rows: multi-head attention over ``spec``'s heads (``2 H d_head``), the latent alone
    (``d_L``, the count without RoPE) and the latent with the rotary key (``d_L + d_R``).

    Args:
        spec: an MLA model.
        bytes_per_elem: bytes per stored number (2 for bf16).

    Returns:
        pd.DataFrame: numbers per token and layer, bytes per token over all layers, the
        factor by which MHA's cache is larger (2 decimals) and the number of GQA groups
        ``G`` whose cache ``2 G d_head`` would be as large (2 decimals).
    """
    spec = _spec_check(spec)
    check_positive_int("bytes_per_elem", bytes_per_elem)
    counts = {
        f"MHA, {spec.n_heads} heads x {spec.d_head}": spec.values_per_token_per_layer("mha"),
        "MLA, latent only (d_L)": spec.values_per_token_per_layer("mla", rope=False),
        "MLA, latent + RoPE key (d_L + d_R)": spec.values_per_token_per_layer("mla"),
    }
    mha = counts[next(iter(counts))]
    rows = {name: {"numbers / token / layer": v,
                   "bytes / token, all layers": v * spec.n_layers * bytes_per_elem,
                   "MHA / this": round(mha / v, 2),
                   "same as GQA with G =": round(v / (spec.d_head + spec.d_value), 2)}
            for name, v in counts.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(f"{spec.name} cache")


def decode_cost_table(
    spec: ModelSpec = DEEPSEEK_V2, contexts: Sequence[int] = CONTEXTS, bytes_per_elem: int = 2
) -> pd.DataFrame:
    """One decoded token of one layer, one sequence: cache read and multiply-adds per path.

    Every entry comes from :func:`attnlib.analysis.costs.mla_decode_cost`. MB means 10^6 bytes.

    Args:
        spec: an MLA model.
        contexts: context lengths ``n`` (keys the new token attends to).
        bytes_per_elem: bytes per stored number (2 for bf16).

    Returns:
        pd.DataFrame: indexed by (context, path); columns "cache read, MB" (1 decimal),
        "multiply-adds, millions" (1 decimal) and "attention multiply-adds per cache
        byte" (2 decimals).
    """
    spec = _spec_check(spec)
    rows = {}
    for n in contexts:
        for path in DECODE_PATHS:
            cost = mla_decode_cost(spec, n, path=path, bytes_per_elem=bytes_per_elem)
            rows[(n, PATH_LABELS[path])] = {
                "cache read, MB": round(cost["cache_bytes"] / 1e6, 1),
                "multiply-adds, millions": round(cost["macs"] / 1e6, 1),
                "attention multiply-adds per cache byte":
                    round(cost["macs_attention"] / cost["cache_bytes"], 2),
            }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["context n", "path"])
    return table


def _source(seed: int) -> tuple[GroupedQueryAttention, torch.Tensor]:
    """The explorer's grouped-query layer and its input ``(1, n_tokens, d_in)``."""
    c = CONVERSION
    with seeded(seed):
        gqa = GroupedQueryAttention(c["d_in"], c["n_heads"], c["n_kv_heads"], c["d_head"],
                                    dtype=torch.float64)
    X = torch.randn(1, c["n_tokens"], c["d_in"], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed))
    return gqa, X


@lru_cache(maxsize=64)
def _errors(seed: int) -> tuple[tuple[float, ...], ...]:
    gqa, X = _source(seed)
    r_max = min(gqa.d_in, 2 * gqa.n_kv_heads * gqa.d_head)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small run faster without a thread pool
    try:  # mla_from_mha draws initial weights before copying: keep the global state intact
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            return tuple(_errors_at(gqa, X, r) for r in range(1, r_max + 1))
    finally:
        torch.set_num_threads(threads)


def _errors_at(gqa: GroupedQueryAttention, X: torch.Tensor, r: int) -> tuple[float, ...]:
    """Weight, Eckart-Young, [K | V] and output errors (relative), and the largest output error."""
    H, G, d_head = gqa.n_heads, gqa.n_kv_heads, gqa.d_head
    W_KV = torch.cat((gqa.W_K, gqa.W_V), dim=1)  # (d_in, 2 G d_head)
    s = torch.linalg.svdvals(W_KV)
    mla = mla_from_mha(gqa, r)
    first = range(0, H, H // G)  # one query head of each group reads each KV head
    blocks = [mla.W_L @ mla.W_LK[:, h * d_head:(h + 1) * d_head] for h in first]
    blocks += [mla.W_L @ mla.W_LV[:, h * d_head:(h + 1) * d_head] for h in first]
    W_hat = torch.cat(blocks, dim=1)  # the rank-r [W_K | W_V] the latent carries
    Y, Y_r = gqa(X, causal=True), mla(X, causal=True)
    return (
        float(torch.linalg.matrix_norm(W_KV - W_hat) / torch.linalg.matrix_norm(W_KV)),
        float(s[r:].square().sum().sqrt() / s.square().sum().sqrt()),
        float((X @ (W_KV - W_hat)).norm() / (X @ W_KV).norm()),
        float((Y_r - Y).norm() / Y.norm()),
        float((Y_r - Y).abs().max()),
    )


def conversion_errors(*, seed: int = SEED) -> list[dict[str, float]]:
    """Relative errors of ``mla_from_mha`` on the explorer's layer, for ``d_L = 1 .. 16``.

    For each latent width ``r``: the weight error ``||W_KV - W_hat||_F / ||W_KV||_F`` with
    ``W_KV = [W_K | W_V]`` and ``W_hat`` the product ``W_L [W_LK | W_LV]`` read back from
    the converted layer (one block per key/value head); the Eckart-Young value
    ``sqrt(sum_{i >= r} s_i^2) / ||W_KV||_F`` (0-based singular values); the error of
    ``[K | V] = X W_KV`` on the input; and the output error
    ``||Y_MLA - Y_GQA|| / ||Y_GQA||`` with its largest entry, both causal.

    Args:
        seed: seed of the layer and the input.

    Returns:
        list[dict[str, float]]: one dict per ``r`` with keys ``"d_L"``, ``"weight"``,
        ``"eckart_young"``, ``"kv"``, ``"output"``, ``"output_max"``.
    """
    check_nonnegative_int("seed", seed)
    keys = ("weight", "eckart_young", "kv", "output", "output_max")
    return [{"d_L": r, **dict(zip(keys, e, strict=True))}
            for r, e in enumerate(_errors(seed), start=1)]


def conversion_table(*, seed: int = SEED) -> pd.DataFrame:
    """:func:`conversion_errors` as a table (4 decimals), with a flag where the output error rose.

    Args:
        seed: seed of the layer and the input.

    Returns:
        pd.DataFrame: indexed by ``d_L``; columns "weight error", "K, V error",
        "output error" and "output error rose" (against ``d_L - 1``).
    """
    errors = conversion_errors(seed=seed)
    rows = {}
    for k, e in enumerate(errors):
        rows[e["d_L"]] = {
            "weight error": round(e["weight"], 4),
            "K, V error": round(e["kv"], 4),
            "output error": round(e["output"], 4),
            "output error rose": bool(k and e["output"] > errors[k - 1]["output"]),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("d_L")
