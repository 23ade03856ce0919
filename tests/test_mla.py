"""Tests for attnlib.layers.mla against references written out here.

The references are explicit per-head loops with ``torch.softmax`` (RoPE by complex
multiplication, RMSNorm by its formula), PyTorch's ``scaled_dot_product_attention`` on
explicitly formed ``K_h`` and ``V_h``, multi-head attention with the low-rank products
``W_K = W_L W_LK`` as weights, and PyTorch's SVD. The one comparison of attnlib's MLA with
itself is the contract's: the absorbed path equals the naive path.
"""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from attnlib_testing import tolerances
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

import attnlib
import attnlib.layers.mla as mla_module
from attnlib import (
    GroupedQueryAttention,
    KVCache,
    LatentCache,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    key_padding_mask,
    mla_absorbed,
    mla_from_mha,
    mla_naive,
)
from attnlib.analysis.memory import mla_cache_bytes
from attnlib.layers.mla import mla_merged_weights

F64 = torch.float64


# --- independent references ----------------------------------------------------------


def _cols(W: torch.Tensor, h: int, d: int) -> torch.Tensor:
    """Column block ``h`` of width ``d``: ``W^h``."""
    return W[:, h * d : (h + 1) * d]


def _rope_ref(x: torch.Tensor, pos: torch.Tensor, base: float, interleaved: bool) -> torch.Tensor:
    """RoPE as complex multiplication: pair ``i`` is ``re + i*im``, times ``e^{i m theta_i}``."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=F64, device=x.device) / d)  # base^(-2i/d)
    angle = pos.to(F64)[..., None] * theta  # (..., N, d/2)
    re, im = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : d // 2], x[..., d // 2 :])
    z = torch.complex(re.to(F64), im.to(F64)) * torch.polar(torch.ones_like(angle), angle)
    if interleaved:
        return torch.stack((z.real, z.imag), dim=-1).flatten(-2).to(x.dtype)
    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)


def _softmax_loop(Qs, Ks, Vs, W_O, scale, allowed=None) -> torch.Tensor:
    """``concat_col(softmax(scale Q_h K_h^T) V_h) W_O``, one head at a time; empty rows -> 0."""
    Ys = []
    for Q, K, V in zip(Qs, Ks, Vs, strict=True):
        S = scale * Q @ K.mT
        if allowed is not None:
            S = S.masked_fill(~allowed, -math.inf)
        P = torch.softmax(S, dim=-1)
        if allowed is not None:
            P = torch.where(allowed.any(dim=-1, keepdim=True), P, torch.zeros_like(P))
        Ys.append(P @ V)
    return torch.cat(Ys, dim=-1) @ W_O


def _tril(n: int, device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _low_rank_mha(X, W_Q, W_K, W_V, W_O, H, allowed=None) -> torch.Tensor:
    """Plain multi-head attention, per head, on whatever ``W_Q, W_K, W_V`` it is given."""
    d_head, d_v = W_Q.shape[1] // H, W_V.shape[1] // H
    Qs = [X @ _cols(W_Q, h, d_head) for h in range(H)]
    Ks = [X @ _cols(W_K, h, d_head) for h in range(H)]
    Vs = [X @ _cols(W_V, h, d_v) for h in range(H)]
    return _softmax_loop(Qs, Ks, Vs, W_O, 1 / math.sqrt(d_head), allowed)


def _params(mla: MultiHeadLatentAttention) -> dict[str, torch.Tensor]:
    return {name: p.detach().to(F64) for name, p in mla.named_parameters()}


def _rms(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return g * x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6)


def _mla_reference(mla, X, *, allowed=None, positions=None) -> torch.Tensor:
    """MLA from its definition in float64: per head ``[q_h | RoPE(q_R,h)] . [k_h | RoPE(k_R)]``."""
    p = _params(mla)
    X = X.to(F64)
    H, dh, dv, dr = mla.n_heads, mla.d_head, mla.d_v, mla.d_rope
    L = X @ p["W_L"]
    L_Q = X @ p["W_LQ"] if "W_LQ" in p else X
    if mla.latent_norm:
        L = _rms(L, p["g_L"])
        if "g_LQ" in p:
            L_Q = _rms(L_Q, p["g_LQ"])
    pos = torch.arange(X.shape[-2], device=X.device) if positions is None else positions
    Qs = [L_Q @ _cols(p["W_LQQ"], h, dh) for h in range(H)]
    Ks = [L @ _cols(p["W_LK"], h, dh) for h in range(H)]
    Vs = [L @ _cols(p["W_LV"], h, dv) for h in range(H)]
    if dr:
        rope = {"base": mla.rope_base, "interleaved": mla.rope_interleaved}
        k_R = _rope_ref(X @ p["W_KR"], pos, **rope)  # one rotated key for every head
        Qs = [torch.cat((q, _rope_ref(L_Q @ _cols(p["W_QR"], h, dr), pos, **rope)), -1)
              for h, q in enumerate(Qs)]
        Ks = [torch.cat((k, k_R), -1) for k in Ks]
    return _softmax_loop(Qs, Ks, Vs, p["W_O"], 1 / math.sqrt(dh + dr), allowed)


def _randomise_gains(mla: MultiHeadLatentAttention) -> None:
    """Gains start at 1; move them so a test would notice one being ignored."""
    with torch.no_grad():
        for g in (mla.g_L, mla.g_LQ):
            if g is not None:
                g.uniform_(0.5, 1.5)


# --- MLA without RoPE is low-rank multi-head attention ---------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("d_latent_q", [None, 5])
@pytest.mark.parametrize("absorbed", [False, True])
def test_equals_low_rank_multi_head_attention(device, dtype, d_latent_q, absorbed):
    H, d_in, d_head, d_L, B, N = 4, 12, 3, 6, 2, 7
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=d_latent_q, d_out=10, device=device, dtype=dtype
    )
    mha = MultiHeadAttention(d_in, H, d_head, d_out=10, device=device, dtype=dtype)
    with torch.no_grad():
        W_Q = mla.W_LQQ if d_latent_q is None else mla.W_LQ @ mla.W_LQQ
        mha.W_Q.copy_(W_Q)
        mha.W_K.copy_(mla.W_L @ mla.W_LK)
        mha.W_V.copy_(mla.W_L @ mla.W_LV)
        mha.W_O.copy_(mla.W_O)
    X = torch.randn(B, N, d_in, device=device, dtype=dtype)
    Y = mla(X, causal=True, absorbed=absorbed)
    torch.testing.assert_close(Y, mha(X, causal=True), **tolerances(dtype))
    p = _params(mla)
    W_Q64 = p["W_LQQ"] if d_latent_q is None else p["W_LQ"] @ p["W_LQQ"]
    ref = _low_rank_mha(
        X.to(F64), W_Q64, p["W_L"] @ p["W_LK"], p["W_L"] @ p["W_LV"], p["W_O"], H,
        allowed=_tril(N, device),
    )
    torch.testing.assert_close(Y, ref.to(dtype), **tolerances(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_equals_sdpa_on_explicit_heads(device, dtype):
    """d_v differs from d_head here, so no MHA module fits; SDPA takes the formed K_h, V_h."""
    H, d_in, d_head, d_v, d_L, B, N = 3, 10, 4, 5, 7, 2, 6
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=4, d_v=d_v, device=device, dtype=dtype
    )
    X = torch.randn(B, N, d_in, device=device, dtype=dtype)
    with torch.no_grad():
        L = X @ mla.W_L
        Q = (X @ mla.W_LQ @ mla.W_LQQ).reshape(B, N, H, d_head).transpose(1, 2)
        K = (L @ mla.W_LK).reshape(B, N, H, d_head).transpose(1, 2)
        V = (L @ mla.W_LV).reshape(B, N, H, d_v).transpose(1, 2)
        Y_h = F.scaled_dot_product_attention(Q, K, V, is_causal=True)  # (B, H, N, d_v)
        ref = Y_h.transpose(1, 2).reshape(B, N, H * d_v) @ mla.W_O
        for absorbed in (False, True):
            Y = mla(X, causal=True, absorbed=absorbed)
            torch.testing.assert_close(Y, ref, **tolerances(dtype))


# --- decoupled RoPE --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(("d_latent_q", "latent_norm"), [(None, False), (6, True), (None, True)])
@pytest.mark.parametrize("impl", ["auto", "explicit"])
def test_decoupled_rope_matches_explicit_loop(
    device, dtype, interleaved, d_latent_q, latent_norm, impl
):
    H, d_in, d_head, d_L, d_R, B, N = 3, 12, 4, 5, 6, 2, 7
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=d_latent_q, d_rope=d_R, latent_norm=latent_norm,
        rope_base=100.0, rope_interleaved=interleaved, device=device, dtype=dtype,
    )
    _randomise_gains(mla)
    X = torch.randn(B, N, d_in, device=device, dtype=dtype)
    pos = torch.arange(N, device=device) + torch.tensor([[0], [9]], device=device)  # (B, N)
    ref = _mla_reference(mla, X, allowed=_tril(N, device), positions=pos).to(dtype)
    for absorbed in (False, True):
        Y = mla(X, causal=True, positions=pos, absorbed=absorbed, impl=impl)
        torch.testing.assert_close(Y, ref, **tolerances(dtype))


def test_rope_logits_depend_on_offsets_only():
    """Shifting every position by the same amount leaves the output unchanged."""
    mla = MultiHeadLatentAttention(8, 2, 2, 3, d_rope=4, dtype=F64)
    X = torch.randn(1, 5, 8, dtype=F64)
    Y0 = mla(X, causal=True, positions=torch.arange(5))
    Y1 = mla(X, causal=True, positions=torch.arange(5) + 17, absorbed=True)
    torch.testing.assert_close(Y0, Y1, **tolerances(F64))
    Y2 = mla(X, causal=True, positions=torch.arange(5) * 2)  # different offsets: must change
    assert (Y0 - Y2).abs().max() > 1e-3


# --- absorbed == naive -----------------------------------------------------------------


@pytest.mark.parametrize("d_rope", [0, 4])
@pytest.mark.parametrize("with_cache", [False, True])
@pytest.mark.parametrize(("d_latent_q", "latent_norm"), [(None, False), (5, True), (5, False)])
@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_absorbed_equals_naive(d_rope, with_cache, d_latent_q, latent_norm, masking):
    H, d_in, d_head, d_L, B, N_old, N = 4, 10, 3, 6, 2, 3, 4
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=d_latent_q, d_rope=d_rope, d_v=2,
        latent_norm=latent_norm, d_out=7, dtype=F64,
    )
    _randomise_gains(mla)
    X_old, X = torch.randn(B, N_old, d_in, dtype=F64), torch.randn(B, N, d_in, dtype=F64)
    n_kv = N + N_old if with_cache else N
    kw = {
        "none": {},
        "causal": {"causal": True},
        "padding": {"mask": key_padding_mask([n_kv - 2, 0], n_kv)},  # sequence 1: no key
    }[masking]
    outputs = []
    for absorbed in (False, True):
        cache = None
        if with_cache:
            cache = LatentCache()
            mla(X_old, causal=True, cache=cache, absorbed=absorbed)
        outputs.append(mla(X, cache=cache, absorbed=absorbed, **kw))
    torch.testing.assert_close(outputs[1], outputs[0], **tolerances(F64))
    if masking == "padding":
        assert torch.equal(outputs[1][1], torch.zeros_like(outputs[1][1]))  # no key: zeros
        assert not outputs[1].isnan().any()
    if not with_cache:  # and both equal the definition
        allowed = {"none": None, "causal": _tril(N, "cpu"), "padding": kw.get("mask")}[masking]
        torch.testing.assert_close(
            outputs[0], _mla_reference(mla, X, allowed=allowed), **tolerances(F64)
        )


@pytest.mark.parametrize("impl", ["auto", "explicit"])
def test_functional_core_on_batched_latents(impl):
    """mla_absorbed and mla_naive on the same factors equal per-head MHA (4-D input)."""
    H, d_q, d_L, d_head, d_v, d_out = 3, 5, 4, 2, 3, 6
    W_LQQ, W_LK = torch.randn(d_q, H * d_head, dtype=F64), torch.randn(d_L, H * d_head, dtype=F64)
    W_LV, W_O = torch.randn(d_L, H * d_v, dtype=F64), torch.randn(H * d_v, d_out, dtype=F64)
    L_Q, L = torch.randn(2, 3, 4, d_q, dtype=F64), torch.randn(2, 3, 6, d_L, dtype=F64)
    Y_ref = _low_rank_mha_latent(L_Q, L, W_LQQ, W_LK, W_LV, W_O, H)
    for mla in (mla_absorbed, mla_naive):
        Y = mla(L_Q, L, W_LQQ, W_LK, W_LV, W_O, H, causal=True, impl=impl)
        torch.testing.assert_close(Y, Y_ref, **tolerances(F64))


def _low_rank_mha_latent(L_Q, L, W_LQQ, W_LK, W_LV, W_O, H):
    d_head, d_v = W_LK.shape[1] // H, W_LV.shape[1] // H
    Qs = [L_Q @ _cols(W_LQQ, h, d_head) for h in range(H)]
    Ks = [L @ _cols(W_LK, h, d_head) for h in range(H)]
    Vs = [L @ _cols(W_LV, h, d_v) for h in range(H)]
    n_q, n_kv = L_Q.shape[-2], L.shape[-2]
    allowed = torch.ones(n_q, n_kv, dtype=torch.bool).tril(n_kv - n_q)  # bottom-right causal
    return _softmax_loop(Qs, Ks, Vs, W_O, 1 / math.sqrt(d_head), allowed)


# --- the absorbed path never forms K_h or V_h --------------------------------------------


class _ShapeSpy(TorchFunctionMode):
    """Record the shape of every tensor a torch function or tensor method returns."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


@pytest.mark.parametrize("d_rope", [0, 2])
@pytest.mark.parametrize("impl", ["auto", "explicit"])
def test_absorbed_path_never_forms_per_head_keys_or_values(d_rope, impl):
    """Every tensor made during a cached decode step is recorded; none has K_h's or V_h's shape.

    The sizes are all different, so a shape names what it holds: with N_KV = 6 keys, any
    tensor ending in (6, d_head), (6, d_v), (6, d_head + d_R), (6, H d_head) or (6, H d_v)
    would be keys or values per head. The naive path must show them (so the spy can fail),
    the absorbed path must not, and it must not build a merged (H, d_LQ, d_L) or
    (H d_L, d_out) matrix either.
    """
    H, d_in, d_head, d_v, d_L, d_LQ, B, N_old, N = 3, 9, 5, 7, 11, 8, 2, 4, 2
    mla = MultiHeadLatentAttention(d_in, H, d_head, d_L, d_latent_q=d_LQ, d_rope=d_rope, d_v=d_v,
                                   latent_norm=True, dtype=F64)
    prefilled = LatentCache()
    with torch.no_grad():
        mla(torch.randn(B, N_old, d_in, dtype=F64), causal=True, cache=prefilled)
    X = torch.randn(B, N, d_in, dtype=F64)
    n_kv = N_old + N
    per_head = {(n_kv, w) for w in (d_head, d_v, d_head + d_rope, H * d_head, H * d_v)}
    merged = {(H, d_LQ, d_L), (H * d_L, d_in)}
    seen, outputs = {}, {}
    for absorbed in (False, True):
        cache = copy.deepcopy(prefilled)
        with _ShapeSpy() as spy:
            outputs[absorbed] = mla(X, causal=True, cache=cache, absorbed=absorbed, impl=impl)
        seen[absorbed] = spy.shapes
    assert {s[-2:] for s in seen[False]} & per_head  # the naive path forms K_h and V_h
    assert not {s[-2:] for s in seen[True]} & per_head
    assert not set(seen[True]) & merged
    torch.testing.assert_close(outputs[True], outputs[False], **tolerances(F64))


def test_absorbed_path_follows_weight_updates():
    """Nothing is cached between calls: after an optimiser step both paths still agree."""
    mla = MultiHeadLatentAttention(8, 2, 3, 4, d_latent_q=5, d_rope=2, dtype=F64)
    X = torch.randn(2, 5, 8, dtype=F64)
    before = mla(X, causal=True, absorbed=True)
    before.square().sum().backward()
    with torch.no_grad():
        for p in mla.parameters():
            p -= 0.5 * p.grad
    after = mla(X, causal=True, absorbed=True)
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, mla(X, causal=True), **tolerances(F64))
    torch.testing.assert_close(after, _mla_reference(mla, X, allowed=_tril(5, "cpu")),
                               **tolerances(F64))


# --- merged weights --------------------------------------------------------------------


@pytest.mark.parametrize("d_latent_q", [None, 5])
def test_merged_weights(d_latent_q):
    H, d_in, d_head, d_v, d_L, d_out, N = 3, 8, 4, 2, 6, 9, 5
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=d_latent_q, d_v=d_v, d_out=d_out, dtype=F64
    )
    W = mla.merged_weights()
    d_q = d_in if d_latent_q is None else d_latent_q
    assert set(W) == {"W_LQK", "W_LO"}
    assert W["W_LQK"].shape == (H, d_q, d_L)
    assert W["W_LO"].shape == (H * d_L, d_out)
    p = _params(mla)
    X = torch.randn(N, d_in, dtype=F64)
    L, L_Q = X @ p["W_L"], (X if d_latent_q is None else X @ p["W_LQ"])
    for h in range(H):
        Q_h, K_h = L_Q @ _cols(p["W_LQQ"], h, d_head), L @ _cols(p["W_LK"], h, d_head)
        torch.testing.assert_close(L_Q @ W["W_LQK"][h].detach() @ L.T, Q_h @ K_h.T)
    blockdiag = torch.block_diag(*[_cols(p["W_LV"], h, d_v) for h in range(H)])  # (H d_L, H d_v)
    torch.testing.assert_close(W["W_LO"].detach(), blockdiag @ p["W_O"])
    # concat_col(P_h L) W_LO == concat_col(P_h V_h) W_O for any row-stochastic P_h
    P = torch.softmax(torch.randn(H, N, N, dtype=F64), dim=-1)
    lhs = torch.cat([P[h] @ L for h in range(H)], dim=-1) @ W["W_LO"].detach()
    rhs = torch.cat([P[h] @ L @ _cols(p["W_LV"], h, d_v) for h in range(H)], dim=-1) @ p["W_O"]
    torch.testing.assert_close(lhs, rhs)


def test_parameter_names_and_shapes():
    H, d_in, d_head, d_L, d_LQ, d_R, d_v, d_out = 4, 16, 3, 5, 7, 2, 6, 11
    full = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=d_LQ, d_rope=d_R, d_v=d_v, d_out=d_out, latent_norm=True
    )
    assert {n: tuple(p.shape) for n, p in full.named_parameters()} == {
        "W_L": (d_in, d_L), "W_LK": (d_L, H * d_head), "W_LV": (d_L, H * d_v),
        "W_LQ": (d_in, d_LQ), "W_LQQ": (d_LQ, H * d_head), "W_O": (H * d_v, d_out),
        "W_QR": (d_LQ, H * d_R), "W_KR": (d_in, d_R), "g_L": (d_L,), "g_LQ": (d_LQ,),
    }
    bare = MultiHeadLatentAttention(d_in, H, d_head, d_L)
    assert {n: tuple(p.shape) for n, p in bare.named_parameters()} == {
        "W_L": (d_in, d_L), "W_LK": (d_L, H * d_head), "W_LV": (d_L, H * d_head),
        "W_LQQ": (d_in, H * d_head), "W_O": (H * d_head, d_in),
    }
    assert full.scale == 1 / math.sqrt(d_head + d_R)


# --- cache -----------------------------------------------------------------------------


@pytest.mark.parametrize("d_rope", [0, 4])
@pytest.mark.parametrize("absorbed", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 8, [3, 1, 4]])
def test_cache_decoding_equals_one_causal_call(d_rope, absorbed, chunks):
    H, d_in, d_head, d_L, B = 4, 12, 3, 5, 2
    N = sum(chunks)
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_L, d_latent_q=6, d_rope=d_rope, latent_norm=True, dtype=F64
    )
    _randomise_gains(mla)
    X = torch.randn(B, N, d_in, dtype=F64)
    cache, pieces, start = LatentCache(), [], 0
    for n in chunks:
        pieces.append(mla(X[:, start : start + n], causal=True, cache=cache, absorbed=absorbed))
        start += n
    ref = _mla_reference(mla, X, allowed=_tril(N, "cpu"))
    torch.testing.assert_close(torch.cat(pieces, dim=1), ref, **tolerances(F64))
    # what is cached: the normalised latent and the rotated shared key, nothing per head
    p = _params(mla)
    torch.testing.assert_close(cache.L, _rms(X @ p["W_L"], p["g_L"]))
    if d_rope:
        torch.testing.assert_close(cache.k_R, _rope_ref(X @ p["W_KR"], torch.arange(N), 1e4, False))
    else:
        assert cache.k_R is None
    assert cache.n_tokens == N


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16])
@pytest.mark.parametrize("d_rope", [0, 2, 8])
def test_cache_nbytes(dtype, d_rope):
    d_L, B, N = 6, 3, 5
    mla = MultiHeadLatentAttention(10, 2, 4, d_L, d_rope=d_rope, dtype=dtype)
    cache = LatentCache()
    mla(torch.randn(B, 2, 10, dtype=dtype), cache=cache)
    mla(torch.randn(B, N - 2, 10, dtype=dtype), cache=cache, absorbed=True)
    size = torch.empty(0, dtype=dtype).element_size()
    assert cache.nbytes == (d_L + d_rope) * N * B * size
    assert cache.nbytes == mla_cache_bytes(
        1, d_L, d_rope=d_rope, n_tokens=N, batch=B, bytes_per_elem=size
    )


# --- GQA / MHA -> MLA --------------------------------------------------------------------


@pytest.mark.parametrize(("d_in", "H", "G", "d_head"), [
    (24, 4, 4, 3),  # MHA, full rank 2 * G * d_head = 24
    (24, 4, 2, 3),  # GQA, full rank 12
    (24, 4, 1, 3),  # MQA, full rank 6
    (8, 4, 4, 3),   # d_in < 2 G d_head: full rank d_in = 8
])
def test_mla_from_mha_exact_at_full_rank(d_in, H, G, d_head):
    src = GroupedQueryAttention(d_in, H, G, d_head, d_out=5, dtype=F64)
    r_max = min(d_in, 2 * G * d_head)
    mla = mla_from_mha(src, r_max)
    assert isinstance(mla, MultiHeadLatentAttention)
    assert (mla.d_latent, mla.d_rope, mla.W_LQ, mla.d_out) == (r_max, 0, None, 5)
    X = torch.randn(2, 6, d_in, dtype=F64)
    mask = key_padding_mask([6, 4], 6)
    for kw in ({"causal": True}, {"mask": mask}):
        torch.testing.assert_close(mla(X, **kw), src(X, **kw), **tolerances(F64))
        torch.testing.assert_close(mla(X, absorbed=True, **kw), src(X, **kw), **tolerances(F64))
    # head h reads KV head h // (H // G): its key and value weights are the source's
    s, p = H // G, _params(mla)
    for h in range(H):
        g = h // s
        for W_latent, W_src in (("W_LK", src.W_K), ("W_LV", src.W_V)):
            torch.testing.assert_close(
                p["W_L"] @ _cols(p[W_latent], h, d_head), _cols(W_src.detach(), g, d_head)
            )


@pytest.mark.parametrize("G", [4, 2, 1])
def test_mla_from_mha_error_falls_with_d_latent(G):
    H, d_in, d_head = 4, 24, 3
    src = GroupedQueryAttention(d_in, H, G, d_head, dtype=F64)
    X = torch.randn(2, 9, d_in, dtype=F64)
    W_KV = torch.cat((src.W_K, src.W_V), dim=1).detach()
    KV = X @ W_KV
    s_vals = torch.linalg.svdvals(W_KV)
    r_max = min(d_in, 2 * G * d_head)
    weight_err, kv_err, out_err = [], [], []
    for r in range(1, r_max + 1):
        p = _params(mla_from_mha(src, r))
        kv_heads = range(0, H, H // G)  # one query head per KV head
        W_hat = torch.cat(
            [p["W_L"] @ _cols(p["W_LK"], h, d_head) for h in kv_heads]
            + [p["W_L"] @ _cols(p["W_LV"], h, d_head) for h in kv_heads], dim=1
        )
        weight_err.append(torch.linalg.matrix_norm(W_KV - W_hat).item())
        kv_err.append((KV - X @ W_hat).norm().item())
        Y = _low_rank_mha(X, src.W_Q.detach(), *(
            torch.cat([p["W_L"] @ _cols(p[name], h, d_head) for h in range(H)], dim=1)
            for name in ("W_LK", "W_LV")), src.W_O.detach(), H)
        out_err.append((Y - src(X)).norm().item())
        # Eckart-Young: the rank-r error is the tail of the singular values
        assert weight_err[-1] == pytest.approx(s_vals[r:].square().sum().sqrt().item(), abs=1e-9)
    # the [K | V] error on a fixed input is sum_{i>r} s_i^2 ||X u_i||^2: non-increasing in r
    for errors in (kv_err, weight_err):
        assert all(b <= a * (1 + 1e-9) + 1e-12 for a, b in itertools.pairwise(errors))
    # through the softmax the output error need not be monotone in r; its ends are fixed
    assert out_err[-1] < 1e-9 < out_err[0]


def test_mla_from_mha_refuses_rope_source():
    src = GroupedQueryAttention(8, 2, 2, 4, rope_base=10000.0)
    with pytest.raises(ValueError, match="rope_base"):
        mla_from_mha(src, 4)


# --- devices and dtypes ------------------------------------------------------------------


def test_bfloat16_smoke(device):
    mla64 = MultiHeadLatentAttention(16, 4, 4, 8, d_latent_q=8, d_rope=4, latent_norm=True,
                                     device=device, dtype=F64)
    mla = MultiHeadLatentAttention(16, 4, 4, 8, d_latent_q=8, d_rope=4, latent_norm=True,
                                   device=device, dtype=torch.bfloat16)
    mla.load_state_dict({k: v.to(torch.bfloat16) for k, v in mla64.state_dict().items()})
    X = torch.randn(2, 6, 16, device=device).to(torch.bfloat16)
    ref = _mla_reference(mla, X, allowed=_tril(6, device))  # float64 on the bf16 weights
    for absorbed in (False, True):
        Y = mla(X, causal=True, absorbed=absorbed)
        assert Y.dtype == torch.bfloat16
        torch.testing.assert_close(Y.to(F64), ref, atol=5e-2, rtol=5e-2)


def test_parameters_follow_device_and_dtype(device):
    mla = MultiHeadLatentAttention(8, 2, 2, 3, d_latent_q=4, d_rope=2, latent_norm=True,
                                   device=device, dtype=torch.float32)
    for p in mla.parameters():
        assert p.device.type == device.type
        assert p.dtype == torch.float32
    src = GroupedQueryAttention(8, 2, 1, 2, device=device, dtype=torch.float32)
    for p in mla_from_mha(src, 3).parameters():
        assert p.device.type == device.type
        assert p.dtype == torch.float32


# --- bad input ---------------------------------------------------------------------------


_GOOD = {"d_in": 8, "n_heads": 2, "d_head": 4, "d_latent": 3}


@pytest.mark.parametrize(("overrides", "error", "name"), [
    ({"d_rope": 3}, ValueError, "d_rope"),
    ({"d_rope": -2}, ValueError, "d_rope"),
    ({"d_in": 0}, ValueError, "d_in"),
    ({"n_heads": 0}, ValueError, "n_heads"),
    ({"n_heads": 2.0}, TypeError, "n_heads"),
    ({"d_head": -1}, ValueError, "d_head"),
    ({"d_latent": 0}, ValueError, "d_latent"),
    ({"d_latent_q": 0}, ValueError, "d_latent_q"),
    ({"d_v": 0}, ValueError, "d_v"),
    ({"d_out": 0}, ValueError, "d_out"),
    ({"latent_norm": 1}, TypeError, "latent_norm"),
    ({"rope_interleaved": "yes"}, TypeError, "rope_interleaved"),
    ({"d_rope": 2, "rope_base": 0.0}, ValueError, "rope_base"),
    ({"d_rope": 2, "rope_base": None}, TypeError, "rope_base"),
])
def test_constructor_rejects(overrides, error, name):
    with pytest.raises(error, match=name):
        MultiHeadLatentAttention(**{**_GOOD, **overrides})


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda m: m(torch.randn(2, 5, 7)), ValueError, "X"),
    (lambda m: m(torch.randn(5)), ValueError, "X"),
    (lambda m: m(torch.ones(2, 5, 8, dtype=torch.long)), TypeError, "X"),
    (lambda m: m(torch.randn(2, 5, 8, dtype=F64)), TypeError, "X"),
    (lambda m: m([[0.0] * 8]), TypeError, "X"),
    (lambda m: m(torch.randn(2, 5, 8), cache=KVCache()), TypeError, "cache"),
    (lambda m: m(torch.randn(2, 5, 8), absorbed="yes"), TypeError, "absorbed"),
    (lambda m: m(torch.randn(2, 5, 8), mask=torch.ones(5, 5)), TypeError, "mask"),
    (lambda m: m(torch.randn(2, 5, 8), mask=torch.ones(4, 4, dtype=torch.bool)), ValueError,
     "mask"),
    (lambda m: m(torch.randn(2, 5, 8), positions=torch.arange(4)), ValueError, "positions"),
    (lambda m: m(torch.randn(2, 5, 8), impl="fast", absorbed=True), ValueError, "impl"),
    (lambda m: m(torch.randn(2, 5, 8), causal=1), TypeError, "causal"),
])
def test_forward_rejects(call, error, name):
    mla = MultiHeadLatentAttention(8, 2, 4, 3, d_rope=2)
    with pytest.raises(error, match=name):
        call(mla)


def test_cache_with_and_without_rope_part_do_not_mix():
    cache = LatentCache()
    MultiHeadLatentAttention(8, 2, 4, 3, d_rope=2)(torch.randn(1, 2, 8), cache=cache)
    with pytest.raises(ValueError, match="k_R"):
        MultiHeadLatentAttention(8, 2, 4, 3)(torch.randn(1, 2, 8), cache=cache)


@pytest.mark.parametrize(("attn", "d_latent", "error", "name"), [
    (GroupedQueryAttention(8, 2, 1, 2), 0, ValueError, "d_latent"),
    (GroupedQueryAttention(8, 2, 1, 2), 5, ValueError, "d_latent"),  # > min(8, 2*1*2) = 4
    (GroupedQueryAttention(3, 2, 2, 2), 4, ValueError, "d_latent"),  # > min(3, 8) = 3
    (GroupedQueryAttention(8, 2, 1, 2), 2.0, TypeError, "d_latent"),
    (torch.nn.Linear(8, 8), 2, TypeError, "attn"),
    (GroupedQueryAttention(8, 2, 1, 2, rope_base=500.0), 2, ValueError, "rope_base"),
])
def test_mla_from_mha_rejects(attn, d_latent, error, name):
    with pytest.raises(error, match=name):
        mla_from_mha(attn, d_latent)


def _latents():
    return torch.randn(1, 3, 4), torch.randn(1, 5, 6)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda L_Q, L: mla_absorbed(L_Q, L, torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                                 torch.randn(5, 3), 2), ValueError, "W_O"),
    (lambda L_Q, L: mla_absorbed(L_Q, L, torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                                 torch.randn(4, 3), 2, scale=0.0), ValueError, "scale"),
    (lambda L_Q, L: mla_absorbed(L_Q, L, torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                                 torch.randn(4, 3), 2, mask=torch.ones(3, 4, dtype=torch.bool)),
     ValueError, "mask"),
    (lambda L_Q, L: mla_naive(L_Q, L, torch.randn(4, 4), torch.randn(5, 4), torch.randn(6, 4),
                              torch.randn(4, 3), 2), ValueError, "W_LK"),
    (lambda L_Q, L: mla_naive(L_Q, L, torch.randn(4, 4), torch.randn(6, 6), torch.randn(6, 4),
                              torch.randn(4, 3), 2), ValueError, "W_LQQ"),
    (lambda L_Q, L: mla_naive(L_Q, L, torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                              torch.randn(4, 3), 2, q_R=torch.randn(1, 2, 3, 2)),
     ValueError, "q_R"),
    (lambda L_Q, L: mla_naive(L_Q, L, torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                              torch.randn(4, 3), 2, q_R=torch.randn(1, 3, 3, 2),
                              k_R=torch.randn(1, 5, 2)), ValueError, "q_R"),
    (lambda L_Q, L: mla_naive(L_Q, L, torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                              torch.randn(4, 3), 2, q_R=torch.randn(1, 2, 3, 2),
                              k_R=torch.randn(1, 4, 2)), ValueError, "k_R"),
    (lambda L_Q, L: mla_merged_weights(torch.randn(4, 4), torch.randn(6, 4), torch.randn(6, 4),
                                       torch.randn(4, 3), 3), ValueError, "n_heads"),
])
def test_functional_core_rejects(call, error, name):
    with pytest.raises(error, match=name):
        call(*_latents())


# --- property test -----------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    H=st.integers(1, 4),
    d_head=st.integers(1, 5),
    d_latent=st.integers(1, 6),
    d_rope=st.sampled_from([0, 2, 4]),
    d_latent_q=st.one_of(st.none(), st.integers(1, 5)),
    N=st.integers(1, 6),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_absorbed_naive_and_low_rank_mha(
    H, d_head, d_latent, d_rope, d_latent_q, N, causal, seed
):
    torch.manual_seed(seed)
    d_in = 7
    mla = MultiHeadLatentAttention(
        d_in, H, d_head, d_latent, d_latent_q=d_latent_q, d_rope=d_rope, dtype=F64
    )
    X = torch.randn(2, N, d_in, dtype=F64)
    Y = mla(X, causal=causal)
    torch.testing.assert_close(mla(X, causal=causal, absorbed=True), Y, **tolerances(F64))
    allowed = _tril(N, "cpu") if causal else None
    if d_rope == 0:  # low-rank MHA with the product weights
        p = _params(mla)
        W_Q = p["W_LQQ"] if d_latent_q is None else p["W_LQ"] @ p["W_LQQ"]
        ref = _low_rank_mha(X, W_Q, p["W_L"] @ p["W_LK"], p["W_L"] @ p["W_LV"], p["W_O"], H,
                            allowed=allowed)
    else:
        ref = _mla_reference(mla, X, allowed=allowed)
    torch.testing.assert_close(Y, ref, **tolerances(F64))


def test_exported():
    for name in ("MultiHeadLatentAttention", "mla_from_mha", "mla_naive", "mla_absorbed"):
        assert name in attnlib.__all__
        assert getattr(attnlib, name) is getattr(mla_module, name)
    assert "mla_merged_weights" not in attnlib.__all__  # reachable as attnlib.layers.mla.<name>
